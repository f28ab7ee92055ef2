"""sacctmgr's users and their associations: add, modify, delete and show ``user`` (and
``modify association``, which changes user associations)."""

from __future__ import annotations

from typing import Any

from kiln.identity import Caller, is_operator
from schedd.domain.accounts import (
    ADMIN_LEVELS,
    Accounts,
    AccountsError,
    Association,
    User,
    association_row,
    uid_of,
    user_row,
)
from schedd.handlers.sacctmgr.common import (
    ASSOC_FIELDS,
    LIMIT_NAMES,
    Outcome,
    add_request,
    apply_assoc,
    assoc_line,
    assoc_record,
    commit,
    fields_of,
    modify_associations,
    names_in,
    nothing_deleted,
)
from schedd.ledger.records import AccountingChange
from schedd.lifecycle.context import Context

USER_FIELDS = {"account": "accounts", "accounts": "accounts",
               "defaultaccount": "default_account", "adminlevel": "admin_level"}


def add_users(ctx: Context, caller: Caller, names: list[str],
              settings: dict[str, str]) -> Outcome:
    accounts, fields, names = add_request(ctx, names, settings, USER_FIELDS, "user")
    wanted = [a for a in fields.pop("accounts", "").split(",") if a]
    default = fields.pop("default_account", "")
    level = fields.pop("admin_level", "")
    if default and default not in wanted:
        wanted.append(default)
    out = Outcome()
    if not names or not wanted:
        raise AccountsError("Need name of user and an account to add user.")
    missing = [a for a in wanted if (a, "") not in accounts.assocs]
    if missing:
        out.out.append(" Nothing new added.")
        out.err += [f" This account '{missing[0]}' doesn't exist.",
                    "        Contact your admin to add this account."]
        out.rc = 1
        return out
    new_users = [n for n in dict.fromkeys(names) if n not in accounts.users]
    new_assocs = [(a, n) for n in dict.fromkeys(names) for a in wanted
                  if (a, n) not in accounts.assocs]
    if not new_assocs and not new_users or not is_operator(caller):
        out.out.append(" Nothing new added.")
        out.rc = 1
        if is_operator(caller):  # Account=root still makes an automatic one the admin's
            kept = AccountingChange()
            for name in dict.fromkeys(names):
                accounts.join(name, wanted, default, kept)
            if kept.associations or kept.delete_associations:
                commit(ctx, caller, kept, "sacctmgr add user", ",".join(names), accounts)
        return out
    change = AccountingChange()
    cluster = ctx.cfg.cluster_name
    if new_users:
        out.out += [" Adding User(s)", *(f"  {n}" for n in new_users)]
        if default or level:
            out.out.append(" Settings =")
            if default:
                out.out.append(f"  Default Account = {default}")
            if level:
                out.out.append(f"  Admin Level     = {ADMIN_LEVELS.get(level.lower(), level)}")
    for name in new_users:
        taken = [u.uid for u in accounts.users.values()]
        user = User(name, uid_of(name, taken), default or wanted[0],
                    admin_level_name(level) if level else "None")
        accounts.users[name] = user
        change.users.append(user_row(user))
    for name in dict.fromkeys(names):
        # an automatic root association (a first submission's) goes, or is kept when root
        # is named; a DefaultAccount of root moves to the real account (Accounts.join)
        accounts.join(name, wanted, default, change)
    out.out.append(" Associations =")
    for account, name in new_assocs:
        a = Association(account, name)
        apply_assoc(a, fields, accounts)
        accounts.assocs[a.key] = a
        change.associations.append(association_row(a))
        out.out.append(f"  U = {name[:9]:<9} A = {account:<10} C = {cluster:<10}")
    out.out.append(" Non Default Settings")
    out.out += [f"  {LIMIT_NAMES.get(k, k):<13} = {v}" for k, v in fields.items()]
    commit(ctx, caller, change, "sacctmgr add user", ",".join(names), accounts)
    return out


def admin_level_name(text: str) -> str:
    level = ADMIN_LEVELS.get(text.lower())
    if level is None:
        raise AccountsError(f"Bad AdminLevel value: {text} (None, Operator, Administrator)")
    return level


def modify_user_associations(ctx: Context, caller: Caller, entity: str, accounts: Accounts,
                             names: list[str], where: dict[str, str],
                             settings: dict[str, str]) -> Outcome:
    """``modify user`` (its DefaultAccount, AdminLevel and associations) and ``modify
    association`` (the user associations named)."""
    fields = fields_of(settings, {**ASSOC_FIELDS, **USER_FIELDS}, entity)
    user_fields = {k: fields.pop(k) for k in ("default_account", "admin_level") if k in fields}
    users = names + names_in(where, "name", "names", "user", "users")
    restrict = names_in(where, "account", "accounts")
    targets = [a for a in accounts.assocs.values() if a.user
               and (not users or a.user in users) and (not restrict or a.account in restrict)]
    if user_fields:
        return modify_users(ctx, caller, accounts, users, user_fields, fields, targets)
    return modify_associations(ctx, caller, entity, accounts, targets, fields,
                               " Modified user associations...", settings)


def modify_users(ctx: Context, caller: Caller, accounts: Accounts, users: list[str],
                 user_fields: dict[str, str], assoc_fields: dict[str, str],
                 targets: list[Association]) -> Outcome:
    out = Outcome()
    found = [accounts.users[u] for u in users if u in accounts.users]
    if not found:
        out.out.append(" Nothing modified")
        out.rc = 1
        return out
    change = AccountingChange()
    for user in found:
        if "default_account" in user_fields:
            account = user_fields["default_account"]
            if (account, user.name) not in accounts.assocs:
                raise AccountsError(f"User {user.name} has no association with account "
                                    f"{account}.")
            user.default_account = account
        if "admin_level" in user_fields:
            user.admin_level = admin_level_name(user_fields["admin_level"])
        change.users.append(user_row(user))
    out.out += [" Modified users...", *(f"  {u.name}" for u in found)]
    if assoc_fields:
        for a in targets:
            apply_assoc(a, assoc_fields, accounts)
            change.associations.append(association_row(a))
        out.out.append(" Modified user associations...")
        out.out += [assoc_line(ctx.cfg.cluster_name, a) for a in targets]
    commit(ctx, caller, change, "sacctmgr modify user", ",".join(u.name for u in found),
           accounts)
    return out


def delete_users(accounts: Accounts, names: list[str], restrict: list[str],
                 change: AccountingChange, out: Outcome, cluster: str) -> None:
    users = [n for n in dict.fromkeys(names) if n in accounts.users]
    if not users:
        nothing_deleted(out)
        return
    if restrict:  # only these associations; the user stays
        gone = [a for a in accounts.assocs.values() if a.user in users and a.account in restrict]
        if not gone:
            nothing_deleted(out)
            return
        for a in gone:
            del accounts.assocs[a.key]
            change.delete_associations.append(a.key)
        out.out += [" Deleting user associations...", *(assoc_line(cluster, a) for a in gone)]
        return
    for name in users:
        for a in [a for a in accounts.assocs.values() if a.user == name]:
            del accounts.assocs[a.key]
            change.delete_associations.append(a.key)
        del accounts.users[name]
    change.delete_users = users
    out.out += [" Deleting users...", *(f"  {n}" for n in users)]


def show_users(accounts: Accounts, cluster: str, names: list[str], where: dict[str, str],
               with_assoc: bool) -> list[dict[str, Any]]:
    wanted = names + names_in(where, "name", "names", "user", "users")
    users = [u for n, u in sorted(accounts.users.items()) if not wanted or n in wanted]
    if not with_assoc:
        return [user_record(u) for u in users]
    restrict = names_in(where, "account", "accounts")
    return [{**user_record(u), **assoc_record(accounts, a, d, cluster)}
            for u in users for d, a in accounts.tree_order()
            if a.user == u.name and (not restrict or a.account in restrict)]


def user_record(u: User) -> dict[str, Any]:
    return {"user": u.name, "default_account": u.default_account, "admin_level": u.admin_level}
