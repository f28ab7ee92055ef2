"""sacctmgr's associations: ``show association`` (they are added with their account or user,
and changed by ``modify user``: schedd/handlers/sacctmgr/user.py)."""

from __future__ import annotations

from typing import Any

from schedd.domain.accounts import Accounts
from schedd.handlers.sacctmgr.common import assoc_record, names_in


def show_assocs(accounts: Accounts, cluster: str, where: dict[str, str]) -> list[dict[str, Any]]:
    accts = names_in(where, "account", "accounts")
    users = names_in(where, "user", "users")
    parents = names_in(where, "parent", "parents")
    return [assoc_record(accounts, a, d, cluster) for d, a in accounts.tree_order()
            if (not accts or a.account in accts) and (not users or a.user in users)
            and (not parents or (not a.user and a.parent in parents))]
