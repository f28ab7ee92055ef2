"""sacctmgr's accounts: add, modify, delete and show ``account``."""

from __future__ import annotations

from typing import Any

from kiln.identity import Caller, is_operator
from schedd.domain.accounts import ROOT, Accounts, AccountsError, Association, account_row
from schedd.handlers.sacctmgr.common import (
    ASSOC_FIELDS,
    LIMIT_NAMES,
    Outcome,
    add_request,
    apply_assoc,
    assoc_record,
    commit,
    fields_of,
    modify_associations,
    names_in,
    nothing_deleted,
)
from schedd.ledger.records import AccountingChange
from schedd.lifecycle.context import Context

ACCOUNT_FIELDS = {"parent": "parent", "description": "description",
                  "organization": "organization",
                  # kiln: the account's guaranteed TRES (docs/preemption.md)
                  "guarantee": "guarantee", "grptresguarantee": "guarantee"}


def add_accounts(ctx: Context, caller: Caller, names: list[str],
                 settings: dict[str, str]) -> Outcome:
    accounts, fields, names = add_request(ctx, names, settings, ACCOUNT_FIELDS, "account")
    parent = fields.pop("parent", ROOT)
    cluster = ctx.cfg.cluster_name
    out = Outcome()
    new = [n for n in dict.fromkeys(names) if (n, "") not in accounts.assocs]
    if not new:
        out.out.append(" Nothing new added.")
        out.rc = 1
        return out
    if (parent, "") not in accounts.assocs:
        raise AccountsError(f"Parent account '{parent}' doesn't exist.")
    out.out += [" Adding Account(s)", *(f"  {n}" for n in new), " Settings",
                f"  {'Description':<15} = {fields.get('description', 'Account Name')}",
                f"  {'Organization':<15} = {fields.get('organization', 'Parent/Account Name')}",
                " Associations", *(f"  A = {n:<10} C = {cluster:<10}" for n in new)]
    assoc_settings = [k for k in fields if k not in ("description", "organization")]
    if assoc_settings:
        out.out.append(" Settings")
        out.out += [f"  {LIMIT_NAMES.get(k, k):<13} = {fields[k]}" for k in assoc_settings]
        out.out.append(f"  {'Parent':<13} = {parent}")
    if not is_operator(caller):
        out.err.append(" Problem adding accounts: Access/permission denied")
        out.rc = 1
        return out
    change = AccountingChange()
    for name in new:
        a = Association(name, parent=parent, description=name,
                        organization=parent if parent != ROOT else name)
        apply_assoc(a, fields, accounts)
        accounts.assocs[a.key] = a
        change.accounts.append(account_row(a))
    commit(ctx, caller, change, "sacctmgr add account", ",".join(new), accounts)
    return out


def modify_accounts(ctx: Context, caller: Caller, accounts: Accounts, names: list[str],
                    where: dict[str, str], settings: dict[str, str]) -> Outcome:
    fields = fields_of(settings, {**ASSOC_FIELDS, **ACCOUNT_FIELDS}, "account")
    targets = [accounts.assocs[(n, "")] for n in names + names_in(where, "name", "names",
                                                                   "account", "accounts")
               if (n, "") in accounts.assocs]
    return modify_associations(ctx, caller, "account", accounts, targets, fields,
                               " Modified account associations...", settings)


def delete_accounts(accounts: Accounts, names: list[str], where: dict[str, str],
                    change: AccountingChange, out: Outcome) -> Outcome | None:
    """Delete the named accounts (and their user associations) in ``accounts``; the outcome
    when nothing is deleted, else None (the caller commits)."""
    doomed = [n for n in names + names_in(where, "name", "names", "account", "accounts")
              if (n, "") in accounts.assocs and n != ROOT]
    if not doomed:
        return nothing_deleted(out)
    for name in doomed:
        users, subs = accounts.children(name)
        if subs or any(u.default_account == name for u in accounts.users.values()):
            raise AccountsError(f"Can't delete account {name}: it has sub-accounts or is "
                                "a user's default account")
        for a in users:
            del accounts.assocs[a.key]
            change.delete_associations.append(a.key)
        del accounts.assocs[(name, "")]
        change.delete_accounts.append(name)
    out.out += [" Deleting accounts...", *(f"  {n}" for n in doomed)]
    return None


def show_accounts(accounts: Accounts, cluster: str, names: list[str], where: dict[str, str],
                  with_assoc: bool) -> list[dict[str, Any]]:
    wanted = names + names_in(where, "name", "names", "account", "accounts")
    rows = []
    for depth, a in accounts.tree_order():
        if wanted and a.account not in wanted:
            continue
        if a.user and not with_assoc:
            continue
        rows.append({**assoc_record(accounts, a, depth, cluster),
                     "description": accounts.assocs[(a.account, "")].description,
                     "organization": accounts.assocs[(a.account, "")].organization})
    if not with_assoc:
        rows.sort(key=lambda r: r["account"])
    return rows
