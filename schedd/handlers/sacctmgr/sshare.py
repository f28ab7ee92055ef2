"""sshare: the fair-share tree with the numbers the priority uses, as far as the caller may
see it (PrivateData=usage). The figures are the reports' (``schedd/reports/shares.py``)."""

from __future__ import annotations

from typing import Any

from kiln.identity import Caller
from schedd.handlers.selection import sees_all
from schedd.lifecycle.context import Context
from schedd.reports.shares import share_rows


def sshare(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """Every association in tree order: raw and normalised shares, raw and effective usage,
    the fair-share factor (``scheduler/fairshare.py``), LevelFS."""
    state = ctx.state
    state.accrue_usage(ctx.now())
    accounts = state.accounts
    rows = share_rows(accounts, state.usage.fairshare.views())
    if not sees_all(ctx, caller, "usage"):  # PrivateData=usage: own usage, own accounts
        mine = accounts.accounts_of(caller.user)
        rows = [r for r in rows if r["user"] == caller.user
                or (not r["user"] and r["account"] in mine)]
    return {"rows": rows, "me": caller.user}
