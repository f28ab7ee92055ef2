"""kiln restd's requests (``act_for``): who restd may say it acts for.

restd (restd/) is a client of the local socket like any command; it has no other way in. Its
HTTP callers are named one of two ways, and schedd takes an identity from ``act_for`` only so:

- a token (``X-SLURM-USER-TOKEN``, with ``X-SLURM-USER-NAME``): schedd verifies the HS256
  signature under its own key (kiln/tokens.py), the expiry, and that the token's user is the
  user named; the inner request is then the token's user's, whoever relayed it. restd holds no
  key: anyone may send ``act_for`` with a token, which gives them nothing a token does not.
- restd's local auth (a peer of restd's unix socket, its uid from restd's ``SO_PEERCRED``):
  taken only when the caller of ``act_for`` (restd, by schedd's own ``SO_PEERCRED``) runs as
  a user listed in ``[schedd] rest_relays``; anyone else naming a uid is refused.

The inner request is then dispatched as a local one (the same ops, schemas and handlers); it
may not be ``act_for`` again.
"""

from __future__ import annotations

import pwd
from typing import Any

from kiln import tokens
from kiln.config import Config
from kiln.identity import Caller, user_name
from kiln.wire import protocol


class ActForError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def caller(cfg: Config, relay: Caller, body: dict[str, Any], now: float) -> Caller:
    """The identity an ``act_for`` carries, or ActForError saying why it is refused."""
    token = body.get("token") or ""
    if token:
        if "uid" in body or "gid" in body:
            raise ActForError(protocol.E_BAD_REQUEST, "act_for: a token or a uid, not both")
        try:
            user = tokens.verify(tokens.load_key(cfg.keys_path), token, now)
        except tokens.TokenError as exc:
            raise ActForError(protocol.E_AUTH, str(exc)) from None
        named = body.get("user") or user
        if named != user:
            raise ActForError(protocol.E_AUTH,
                              f"token of user {user} may not act as user {named}")
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            raise ActForError(protocol.E_AUTH, f"invalid token: unknown user {user}") from None
        return Caller(uid=entry.pw_uid, gid=entry.pw_gid)
    if "uid" not in body or "gid" not in body:
        raise ActForError(protocol.E_AUTH, "act_for: no token and no local identity")
    if user_name(relay.uid) not in cfg.rest_relays:
        raise ActForError(protocol.E_PERMISSION,
                          f"user {user_name(relay.uid)} is not a REST relay "
                          "([schedd] rest_relays): local identities refused")
    return Caller(uid=body["uid"], gid=body["gid"])
