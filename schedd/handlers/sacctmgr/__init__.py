"""sacctmgr and sshare requests, one module per entity (account, user, qos, assoc) and
sshare's (the figures are ``schedd/reports/shares.py``'s), what they share in ``common``.

``sacctmgr`` carries what the command line said (verb, entity, names, where, set); the answer
to ``show`` is rows of fields, the answer to a change is the exact lines Slurm prints (stdout,
stderr, exit code), because those depend on what was changed. Everyone may read; only
Operators and Administrators (and root) change anything. Every change is committed to the
ledger (with an audit line) before it is applied in memory and answered.
"""

from __future__ import annotations

import copy
from typing import Any

from kiln.identity import Caller, is_operator
from schedd.domain.accounts import AccountsError
from schedd.handlers.sacctmgr import account, assoc, qos, user
from schedd.handlers.sacctmgr.common import Outcome, commit, denied, names_in
from schedd.handlers.sacctmgr.sshare import sshare
from schedd.handlers.selection import sees_all
from schedd.ledger.records import AccountingChange
from schedd.lifecycle.context import Context, RequestError

__all__ = ["sacctmgr", "sshare"]

ENTITIES = {"account": "account", "accounts": "account", "user": "user", "users": "user",
            "qos": "qos", "association": "assoc", "associations": "assoc", "assoc": "assoc"}


def sacctmgr(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    verb, entity = body.get("verb", ""), ENTITIES.get(body.get("entity", "").lower())
    if entity is None:
        raise RequestError(f"unknown entity {body.get('entity')!r}")
    names = [str(n) for n in body.get("names", [])]
    where = {str(k).lower(): str(v) for k, v in body.get("where", {}).items()}
    settings = {str(k): str(v) for k, v in body.get("set", {}).items()}
    if verb == "show":
        rows = show(ctx, entity, names, where, bool(body.get("with_assoc")))
        return {"rows": private_rows(ctx, caller, entity, rows)}
    handler = {"add": add, "modify": modify, "delete": delete}.get(verb)
    if handler is None:
        raise RequestError(f"unknown verb {verb!r}")
    try:
        outcome = handler(ctx, caller, entity, names, where, settings)
    except AccountsError as exc:
        outcome = Outcome()
        outcome.err.append(f" {exc}")
        outcome.rc = 1
    return outcome.body()


def add(ctx: Context, caller: Caller, entity: str, names: list[str], where: dict[str, str],
        settings: dict[str, str]) -> Outcome:
    settings = {**where, **settings}  # add takes key=value without set/where
    if entity == "account":
        return account.add_accounts(ctx, caller, names, settings)
    if entity == "user":
        return user.add_users(ctx, caller, names, settings)
    if entity == "qos":
        return qos.add_qos(ctx, caller, names, settings)
    raise AccountsError("Associations are added with add account or add user.")


def modify(ctx: Context, caller: Caller, entity: str, names: list[str], where: dict[str, str],
           settings: dict[str, str]) -> Outcome:
    out = Outcome()
    if not settings:
        raise AccountsError("You didn't give me anything to set")
    if not is_operator(caller):
        if entity == "user":
            out.out.append(" Nothing modified")
            out.err.append("sacctmgr: accounting_storage/slurmdbd: acct_storage_p_modify_assocs:"
                           " Request didn't affect anything or your user doesn't have privilege"
                           " to perform this action")
            out.rc = 1
            return out
        return denied(out)
    accounts = copy.deepcopy(ctx.state.accounts)
    if entity == "qos":
        return qos.modify_qos(ctx, caller, accounts, names + names_in(where, "name", "names"),
                              settings)
    if entity == "account":
        return account.modify_accounts(ctx, caller, accounts, names, where, settings)
    return user.modify_user_associations(ctx, caller, entity, accounts, names, where, settings)


def delete(ctx: Context, caller: Caller, entity: str, names: list[str], where: dict[str, str],
           settings: dict[str, str]) -> Outcome:
    out = Outcome()
    if not is_operator(caller):
        return denied(out)
    accounts = copy.deepcopy(ctx.state.accounts)
    change = AccountingChange()
    if entity == "qos":
        nothing = qos.delete_qos(accounts, names, where, change, out)
        if nothing is not None:
            return nothing
    elif entity == "account":
        nothing = account.delete_accounts(accounts, names, where, change, out)
        if nothing is not None:
            return nothing
    else:
        user.delete_users(accounts, names + names_in(where, "name", "names", "user", "users"),
                          names_in(where, "account", "accounts"), change, out,
                          ctx.cfg.cluster_name)
        if out.rc:
            return out
    commit(ctx, caller, change, f"sacctmgr delete {entity}", ",".join(names), accounts)
    return out


def show(ctx: Context, entity: str, names: list[str], where: dict[str, str],
         with_assoc: bool) -> list[dict[str, Any]]:
    accounts = ctx.state.accounts
    cluster = ctx.cfg.cluster_name
    if entity == "qos":
        return qos.show_qos(accounts, names, where)
    if entity == "user":
        return user.show_users(accounts, cluster, names, where, with_assoc)
    if entity == "account":
        return account.show_accounts(accounts, cluster, names, where, with_assoc)
    return assoc.show_assocs(accounts, cluster, where)


def private_rows(ctx: Context, caller: Caller, entity: str,
                 rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PrivateData: with ``users`` a user sees only their own user record (and association
    rows); with ``accounts`` only the accounts they belong to. Operators see everything."""
    me = caller.user
    if entity in ("user", "assoc", "account") and not sees_all(ctx, caller, "users"):
        rows = [r for r in rows if r.get("user") in ("", me)]
        if entity == "user":
            rows = [r for r in rows if r.get("user") == me]
    if entity in ("account", "assoc", "user") and not sees_all(ctx, caller, "accounts"):
        mine = ctx.state.accounts.accounts_of(me)
        rows = [r for r in rows if "account" not in r or r["account"] in mine]
    return rows
