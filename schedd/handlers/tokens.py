"""``scontrol token``: an auth/jwt token for the caller, or for another user (operators only),
as Slurm's slurmctld answers REQUEST_AUTH_TOKEN (kiln/tokens.py; docs/rest.md)."""

from __future__ import annotations

import pwd
from typing import Any

from kiln import tokens
from kiln.identity import Caller, is_operator
from kiln.wire import protocol
from schedd.lifecycle.context import Context
from schedd.requesterror import RequestError


def auth_token(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    user = body.get("username") or caller.user
    if user != caller.user and not is_operator(caller):
        # slurmctld: "Access denied: Only SlurmUser or operators may request tokens for
        # another user" -> scontrol's ESLURM_USER_ID_MISSING / access denied line
        raise RequestError("Access/permission denied", protocol.E_PERMISSION)
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise RequestError(f"Invalid user id: {user}") from None
    lifespan = int(body.get("lifespan") or ctx.cfg.restd.token_lifespan)
    try:
        key = tokens.load_key(ctx.cfg.keys_path)
    except tokens.TokenError as exc:
        raise RequestError(str(exc)) from None
    return {"token": tokens.mint(key, user, lifespan, ctx.now()), "user": user,
            "lifespan": lifespan}
