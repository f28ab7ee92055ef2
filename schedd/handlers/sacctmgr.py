"""sacctmgr and sshare requests, and the account checks of a submission.

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
from kiln.slurm import tres
from schedd.context import Context, RequestError
from schedd.domain.accounts import (
    ADMIN_LEVELS,
    QOS,
    ROOT,
    Accounts,
    AccountsError,
    Association,
    User,
    account_row,
    association_row,
    qos_row,
    uid_of,
    user_row,
)
from schedd.handlers.selection import sees_all
from schedd.ledger.records import AccountingChange, AuditRecord

# --- settings -----------------------------------------------------------------------------

ASSOC_FIELDS = {
    "fairshare": "shares", "share": "shares", "shares": "shares",
    "grptres": "grp_tres", "grptresmins": "grp_tres_mins", "grpjobs": "grp_jobs",
    "grpsubmitjobs": "grp_submit_jobs", "grpsubmit": "grp_submit_jobs",
    "maxjobs": "max_jobs", "maxsubmitjobs": "max_submit_jobs", "maxsubmit": "max_submit_jobs",
    "maxtresperjob": "max_tres_per_job", "maxtres": "max_tres_per_job",
    "maxwall": "max_wall", "maxwalldurationperjob": "max_wall",
    "qos": "qos", "qoslevel": "qos", "defaultqos": "default_qos", "priority": "priority",
    "rawusage": "raw_usage",
}
ACCOUNT_FIELDS = {"parent": "parent", "description": "description",
                  "organization": "organization",
                  # kiln: the account's guaranteed TRES (docs/preemption.md)
                  "guarantee": "guarantee", "grptresguarantee": "guarantee"}
USER_FIELDS = {"account": "accounts", "accounts": "accounts",
               "defaultaccount": "default_account", "adminlevel": "admin_level"}
QOS_FIELDS = {
    "description": "description", "priority": "priority", "preempt": "preempt",
    "preemptmode": "preempt_mode", "gracetime": "grace_time", "usagefactor": "usage_factor",
    "flags": "flags", "grptres": "grp_tres", "grptresmins": "grp_tres_mins",
    "grpjobs": "grp_jobs", "grpsubmitjobs": "grp_submit_jobs", "grpsubmit": "grp_submit_jobs",
    "maxtresperjob": "max_tres_per_job", "maxtres": "max_tres_per_job", "maxwall": "max_wall",
    "maxwalldurationperjob": "max_wall", "maxjobsperuser": "max_jobs_per_user",
    "maxjobspu": "max_jobs_per_user", "maxsubmitjobsperuser": "max_submit_per_user",
    "maxsubmitpu": "max_submit_per_user", "maxtresperuser": "max_tres_per_user",
    "maxtrespu": "max_tres_per_user",
}
LIMIT_NAMES = {"grp_tres": "GrpTRES", "grp_tres_mins": "GrpTRESMins", "grp_jobs": "GrpJobs",
               "grp_submit_jobs": "GrpSubmitJobs", "max_jobs": "MaxJobs",
               "max_submit_jobs": "MaxSubmitJobs", "max_tres_per_job": "MaxTRESPerJob",
               "max_wall": "MaxWall", "shares": "Fairshare", "priority": "Priority",
               "qos": "QOS", "default_qos": "DefaultQOS", "parent": "Parent",
               "guarantee": "Guarantee"}


# The list settings Slurm lets ``+=`` and ``-=`` change (``QOS+=low,high``, ``Preempt-=low``,
# ``Flags+=DenyOnLimit``): the value travels as Slurm's own item form, ``+low,+high``.
LIST_FIELDS = {"qos", "preempt", "flags"}


def fields_of(settings: dict[str, str], table: dict[str, str], where: str) -> dict[str, str]:
    out = {}
    for key, value in settings.items():
        op = key[-1] if key[-1:] in "+-" else ""
        name = table.get(key[:-1].lower() if op else key.lower())
        if name is None or (op and name not in LIST_FIELDS):
            raise AccountsError(f"Unknown option: {key}={value} for {where}")
        out[name] = ",".join(op + item for item in value.split(",") if item) if op else value
    return out


def updated_list(current: list[str], value: str) -> list[str]:
    """``low,high`` replaces the list; ``+low,+high`` adds to it and ``-low`` takes away
    (Slurm's sacctmgr list syntax: ``QOS+=low`` and ``QOS=+low`` alike)."""
    items = [i for i in value.split(",") if i and i != "-1"]
    if not any(i[0] in "+-" for i in items):
        return items
    out = list(current)
    for item in items:
        name = item.lstrip("+-")
        if item.startswith("-"):
            out = [q for q in out if q != name]
        elif name not in out:
            out.append(name)
    return out


def _count(value: str, name: str) -> int | None:
    try:
        n = int(value)
    except ValueError:
        raise AccountsError(f"Bad {name} value: {value}") from None
    if n < -1:
        raise AccountsError(f"Bad {name} value: {value}")
    return None if n == -1 else n


def apply_limit(lim: Any, name: str, value: str) -> None:
    if name in ("grp_tres", "grp_tres_mins", "max_tres_per_job", "max_tres_per_user"):
        try:
            setattr(lim, name, tres.merge_limit(getattr(lim, name), tres.parse(value)))
        except tres.TresError as exc:
            raise AccountsError(str(exc)) from None
    else:
        setattr(lim, name, _count(value, name))


def apply_assoc(a: Association, fields: dict[str, str], accounts: Accounts) -> None:
    for name, value in fields.items():
        if name == "shares":
            a.shares = _count(value, "Fairshare") or 0 if value != "-1" else 1
        elif name == "priority":
            a.priority = _count(value, "Priority")
        elif name == "qos":
            names = updated_list(accounts.allowed_qos(a.account, a.user), value)
            unknown = [q for q in names if q not in accounts.qos]
            if unknown:
                raise AccountsError(f"Unknown QOS: {unknown[0]}")
            a.qos = names
        elif name == "default_qos":
            if value not in ("", "-1") and value not in accounts.qos:
                raise AccountsError(f"Unknown QOS: {value}")
            a.default_qos = "" if value == "-1" else value
        elif name == "description":
            a.description = value
        elif name == "organization":
            a.organization = value
        elif name == "guarantee":
            try:
                a.guarantee = tres.merge_limit(a.guarantee, tres.parse(value))
            except tres.TresError as exc:
                raise AccountsError(str(exc)) from None
        elif name == "parent":
            if (value, "") not in accounts.assocs:
                raise AccountsError(f"Parent account '{value}' doesn't exist.")
            a.parent = value
        elif name != "raw_usage":
            apply_limit(a.limits, name, value)


def apply_qos(q: QOS, fields: dict[str, str], accounts: Accounts) -> None:
    for name, value in fields.items():
        if name == "description":
            q.description = value
        elif name in ("priority", "grace_time"):
            setattr(q, name, _count(value, name) or 0)
        elif name == "usage_factor":
            try:
                q.usage_factor = float(value)
            except ValueError:
                raise AccountsError(f"Bad UsageFactor value: {value}") from None
        elif name == "preempt":
            names = updated_list(q.preempt, value)
            if any(p not in accounts.qos for p in names):
                raise AccountsError(f"Unknown QOS in Preempt: {value}")
            q.preempt = names
        elif name == "preempt_mode":
            if value.lower() not in ("cluster", "off", "cancel", "requeue", "suspend"):
                raise AccountsError(f"Bad PreemptMode value: {value}")
            q.preempt_mode = value.lower()
        elif name == "flags":
            q.flags = updated_list(q.flags, value)
        else:
            apply_limit(q.limits, name, value)


# --- sacctmgr -----------------------------------------------------------------------------


class Outcome:
    """What sacctmgr prints for a change: stdout lines, stderr lines, exit code."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.rc = 0

    def body(self) -> dict[str, Any]:
        return {"stdout": self.out, "stderr": self.err, "rc": self.rc}


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


def commit(ctx: Context, caller: Caller, change: AccountingChange, action: str,
           target: str, accounts: Accounts) -> None:
    """Ledger first, then memory: ``accounts`` is the changed copy that replaces the live one."""
    change.audit.append(AuditRecord(ctx.now(), caller.uid, action, target[:200]))
    ctx.state.write_accounting(change)
    ctx.state.accounts = accounts
    ctx.state.usage.sync(accounts)
    ctx.wake_scheduler()


def _names(where: dict[str, str], *keys: str) -> list[str]:
    for key in keys:
        if key in where:
            return [v for v in where[key].split(",") if v]
    return []


def _assoc_line(cluster: str, a: Association) -> str:
    if a.user:
        return f"  C = {cluster:<10} A = {a.account:<20} U = {a.user}"
    return f"  C = {cluster:<10} A = {a.account} of {a.parent or ''}".rstrip()


# add -------------------------------------------------------------------------------------


def add(ctx: Context, caller: Caller, entity: str, names: list[str], where: dict[str, str],
        settings: dict[str, str]) -> Outcome:
    settings = {**where, **settings}  # add takes key=value without set/where
    if entity == "account":
        return add_accounts(ctx, caller, names, settings)
    if entity == "user":
        return add_users(ctx, caller, names, settings)
    if entity == "qos":
        return add_qos(ctx, caller, names, settings)
    raise AccountsError("Associations are added with add account or add user.")


def add_accounts(ctx: Context, caller: Caller, names: list[str],
                 settings: dict[str, str]) -> Outcome:
    accounts = copy.deepcopy(ctx.state.accounts)
    fields = fields_of(settings, {**ASSOC_FIELDS, **ACCOUNT_FIELDS, "name": "name",
                                  "names": "name", "cluster": "cluster"}, "account")
    names = names + [n for n in fields.pop("name", "").split(",") if n]
    fields.pop("cluster", None)
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


def add_users(ctx: Context, caller: Caller, names: list[str],
              settings: dict[str, str]) -> Outcome:
    accounts = copy.deepcopy(ctx.state.accounts)
    fields = fields_of(settings, {**ASSOC_FIELDS, **USER_FIELDS, "name": "name",
                                  "names": "name", "cluster": "cluster"}, "user")
    names = names + [n for n in fields.pop("name", "").split(",") if n]
    fields.pop("cluster", None)
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


def add_qos(ctx: Context, caller: Caller, names: list[str], settings: dict[str, str]) -> Outcome:
    accounts = copy.deepcopy(ctx.state.accounts)
    fields = fields_of(settings, {**QOS_FIELDS, "name": "name", "names": "name"}, "qos")
    names = names + [n for n in fields.pop("name", "").split(",") if n]
    out = Outcome()
    new = [n for n in dict.fromkeys(names) if n not in accounts.qos]
    if not new:
        out.out.append(" Nothing new added.")
        out.rc = 1
        return out
    out.out += [" Adding QOS(s)", *(f"  {n}" for n in new), " Settings",
                f"  {'Description':<14} = {fields.get('description', new[0])}"]
    if not is_operator(caller):
        out.err.append(" Problem adding QOS: Access/permission denied")
        out.rc = 1
        return out
    change = AccountingChange()
    for name in new:
        q = QOS(name, description=name)
        apply_qos(q, fields, accounts)
        accounts.qos[name] = q
        change.qos.append(qos_row(q))
    commit(ctx, caller, change, "sacctmgr add qos", ",".join(new), accounts)
    return out


# modify ----------------------------------------------------------------------------------


def denied(out: Outcome) -> Outcome:
    out.err += ["sacctmgr: error: Your user doesn't have privilege to perform this action",
                " Error with request: Access/permission denied"]
    out.rc = 1
    return out


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
        return modify_qos(ctx, caller, accounts, names + _names(where, "name", "names"),
                          settings)
    if entity == "account":
        fields = fields_of(settings, {**ASSOC_FIELDS, **ACCOUNT_FIELDS}, "account")
        targets = [accounts.assocs[(n, "")] for n in names + _names(where, "name", "names",
                                                                     "account", "accounts")
                   if (n, "") in accounts.assocs]
        user_fields: dict[str, str] = {}
        title = " Modified account associations..."
    else:
        fields = fields_of(settings, {**ASSOC_FIELDS, **USER_FIELDS}, entity)
        user_fields = {k: fields.pop(k) for k in ("default_account", "admin_level")
                       if k in fields}
        users = names + _names(where, "name", "names", "user", "users")
        restrict = _names(where, "account", "accounts")
        targets = [a for a in accounts.assocs.values() if a.user
                   and (not users or a.user in users) and (not restrict or a.account in restrict)]
        title = " Modified user associations..."
        if user_fields:
            return modify_users(ctx, caller, accounts, users, user_fields, fields, targets)
    if not targets:
        out.out.append(" Nothing modified")
        out.rc = 1
        return out
    change = AccountingChange()
    for a in targets:
        apply_assoc(a, fields, accounts)
        (change.accounts if not a.user else change.associations).append(
            account_row(a) if not a.user else association_row(a))
    if "raw_usage" in fields:
        ctx.state.usage.reset(subtree_keys(accounts, targets))
    out.out.append(title)
    out.out += [_assoc_line(ctx.cfg.cluster_name, a) for a in targets]
    commit(ctx, caller, change, f"sacctmgr modify {entity}",
           ",".join(f"{a.account}/{a.user}" for a in targets) + " " + str(settings), accounts)
    return out


def subtree_keys(accounts: Accounts, targets: list[Association]) -> list[tuple[str, str]]:
    """The associations below the targets (RawUsage=0 on an account resets its users too)."""
    keys = {a.key for a in targets}
    changed = True
    while changed:
        changed = False
        for key in list(accounts.assocs):
            parent = accounts.parent_key(key)
            if key not in keys and parent in keys:
                keys.add(key)
                changed = True
    return sorted(keys)


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
        out.out += [_assoc_line(ctx.cfg.cluster_name, a) for a in targets]
    commit(ctx, caller, change, "sacctmgr modify user", ",".join(u.name for u in found),
           accounts)
    return out


def modify_qos(ctx: Context, caller: Caller, accounts: Accounts, names: list[str],
               settings: dict[str, str]) -> Outcome:
    out = Outcome()
    fields = fields_of(settings, QOS_FIELDS, "qos")
    targets = [accounts.qos[n] for n in dict.fromkeys(names) if n in accounts.qos]
    if not targets:
        out.out.append(" Nothing modified")
        out.rc = 1
        return out
    change = AccountingChange()
    for q in targets:
        apply_qos(q, fields, accounts)
        change.qos.append(qos_row(q))
    out.out += [" Modified qos...", *(f"  {q.name}" for q in targets)]
    commit(ctx, caller, change, "sacctmgr modify qos", ",".join(q.name for q in targets),
           accounts)
    return out


# delete ----------------------------------------------------------------------------------


def delete(ctx: Context, caller: Caller, entity: str, names: list[str], where: dict[str, str],
           settings: dict[str, str]) -> Outcome:
    out = Outcome()
    if not is_operator(caller):
        return denied(out)
    accounts = copy.deepcopy(ctx.state.accounts)
    change = AccountingChange()
    if entity == "qos":
        doomed = [n for n in names + _names(where, "name", "names") if n in accounts.qos]
        if not doomed:
            return nothing_deleted(out)
        for name in doomed:
            del accounts.qos[name]
        change.delete_qos = doomed
        out.out += [" Deleting QOS(s)...", *(f"  {n}" for n in doomed)]
    elif entity == "account":
        doomed = [n for n in names + _names(where, "name", "names", "account", "accounts")
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
    else:
        delete_users(accounts, names + _names(where, "name", "names", "user", "users"),
                     _names(where, "account", "accounts"), change, out, ctx.cfg.cluster_name)
        if out.rc:
            return out
    commit(ctx, caller, change, f"sacctmgr delete {entity}", ",".join(names), accounts)
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
        out.out += [" Deleting user associations...", *(_assoc_line(cluster, a) for a in gone)]
        return
    for name in users:
        for a in [a for a in accounts.assocs.values() if a.user == name]:
            del accounts.assocs[a.key]
            change.delete_associations.append(a.key)
        del accounts.users[name]
    change.delete_users = users
    out.out += [" Deleting users...", *(f"  {n}" for n in users)]


def nothing_deleted(out: Outcome) -> Outcome:
    out.out.append(" Nothing deleted")
    out.rc = 1
    return out


# show ------------------------------------------------------------------------------------


def show(ctx: Context, entity: str, names: list[str], where: dict[str, str],
         with_assoc: bool) -> list[dict[str, Any]]:
    accounts = ctx.state.accounts
    cluster = ctx.cfg.cluster_name
    if entity == "qos":
        wanted = names + _names(where, "name", "names")
        return [qos_record(q) for n, q in sorted(accounts.qos.items())
                if not wanted or n in wanted]
    if entity == "user":
        wanted = names + _names(where, "name", "names", "user", "users")
        users = [u for n, u in sorted(accounts.users.items()) if not wanted or n in wanted]
        if not with_assoc:
            return [user_record(u) for u in users]
        restrict = _names(where, "account", "accounts")
        return [{**user_record(u), **assoc_record(accounts, a, d, cluster)}
                for u in users for d, a in accounts.tree_order()
                if a.user == u.name and (not restrict or a.account in restrict)]
    if entity == "account":
        wanted = names + _names(where, "name", "names", "account", "accounts")
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
    accts = _names(where, "account", "accounts")
    users = _names(where, "user", "users")
    parents = _names(where, "parent", "parents")
    return [assoc_record(accounts, a, d, cluster) for d, a in accounts.tree_order()
            if (not accts or a.account in accts) and (not users or a.user in users)
            and (not parents or (not a.user and a.parent in parents))]


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


def user_record(u: User) -> dict[str, Any]:
    return {"user": u.name, "default_account": u.default_account, "admin_level": u.admin_level}


def assoc_record(accounts: Accounts, a: Association, depth: int,
                 cluster: str) -> dict[str, Any]:
    lim = a.limits
    return {
        "cluster": cluster, "account": a.account, "user": a.user, "partition": "",
        "share": str(a.shares), "priority": "" if a.priority is None else str(a.priority),
        "grp_jobs": _opt(lim.grp_jobs), "grp_tres": tres.to_string(lim.grp_tres),
        "grp_submit_jobs": _opt(lim.grp_submit_jobs), "grp_wall": "",
        "grp_tres_mins": tres.to_string(lim.grp_tres_mins), "max_jobs": _opt(lim.max_jobs),
        "max_tres_per_job": tres.to_string(lim.max_tres_per_job), "max_tres_per_node": "",
        "max_submit_jobs": _opt(lim.max_submit_jobs), "max_wall": lim.max_wall,
        "max_tres_mins": "", "qos": ",".join(sorted(accounts.allowed_qos(a.account, a.user))),
        "default_qos": a.default_qos, "grp_tres_run_mins": "",
        "parent_name": (a.parent or "") if not a.user else "", "depth": depth,
        "guarantee": tres.to_string(a.guarantee),
    }


def qos_record(q: QOS) -> dict[str, Any]:
    lim = q.limits
    return {
        "name": q.name, "description": q.description, "priority": str(q.priority),
        "grace_time": q.grace_time, "preempt": ",".join(q.preempt),
        "preempt_exempt_time": "", "preempt_mode": q.preempt_mode, "flags": ",".join(q.flags),
        "usage_thres": "", "usage_factor": f"{q.usage_factor:.6f}",
        "grp_tres": tres.to_string(lim.grp_tres), "grp_tres_mins": tres.to_string(
            lim.grp_tres_mins), "grp_tres_run_mins": "", "grp_jobs": _opt(lim.grp_jobs),
        "grp_submit_jobs": _opt(lim.grp_submit_jobs), "grp_wall": "",
        "max_tres_per_job": tres.to_string(lim.max_tres_per_job), "max_tres_per_node": "",
        "max_tres_mins": "", "max_wall": lim.max_wall,
        "max_tres_per_user": tres.to_string(lim.max_tres_per_user),
        "max_jobs_per_user": _opt(lim.max_jobs_per_user),
        "max_submit_per_user": _opt(lim.max_submit_per_user), "max_tres_per_account": "",
        "max_jobs_per_account": "", "max_submit_per_account": "", "min_tres": "",
    }


def _opt(value: int | None) -> str:
    return "" if value is None else str(value)


# --- sshare -------------------------------------------------------------------------------


def sshare(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """Every association in tree order with the numbers the priority uses: raw shares,
    normalised shares, raw and effective usage, the fair-share factor (fairshare.py)."""
    from schedd.scheduler import fairshare as fs

    state = ctx.state
    state.accrue_usage(ctx.now())
    accounts = state.accounts
    views = state.usage.fairshare.views()
    by_key = {(v.account, v.user): v for v in views}
    factors = fs.factors(views)
    subtree: dict[tuple[str, str], float] = {}
    order = accounts.tree_order()
    for _depth, a in reversed(order):
        own = by_key[a.key].usage if a.key in by_key else 0.0
        kids = [k.key for k in accounts.children(a.account)[0] + accounts.children(
            a.account)[1]] if not a.user else []
        subtree[a.key] = own + sum(subtree.get(k, 0.0) for k in kids)
    total = subtree.get((ROOT, ""), 0.0)
    norm = normalised_shares(accounts)
    rows = []
    for depth, a in order:
        raw = subtree[a.key]
        rows.append({
            "account": a.account, "user": a.user, "depth": depth,
            "raw_shares": a.shares if a.key != (ROOT, "") else None,
            "norm_shares": norm.get(a.key, 0.0), "raw_usage": raw,
            "norm_usage": raw / total if total > 0 else 0.0,
            "effective_usage": effective_usage(a, accounts, subtree, total),
            "fairshare": factors.get(a.key) if a.user else None,
            "level_fs": level_fs(a, accounts, subtree, norm),
            "grp_tres_mins": tres.to_string(a.limits.grp_tres_mins),
            "uid_user": a.user,
        })
    if not sees_all(ctx, caller, "usage"):  # PrivateData=usage: own usage, own accounts
        mine = accounts.accounts_of(caller.user)
        rows = [r for r in rows if r["user"] == caller.user
                or (not r["user"] and r["account"] in mine)]
    return {"rows": rows, "me": caller.user}


def normalised_shares(accounts: Accounts) -> dict[tuple[str, str], float]:
    """Shares over the siblings' shares (Slurm's NormShares: the level's, not the path's)."""
    out: dict[tuple[str, str], float] = {}
    for _d, a in accounts.tree_order():
        if a.key == (ROOT, ""):
            continue
        parent = accounts.parent_key(a.key)
        if parent is None:
            continue
        users, subs = accounts.children(parent[0])
        total = sum(s.shares for s in users + subs) or 1
        out[a.key] = a.shares / total
    return out


def effective_usage(a: Association, accounts: Accounts, subtree: dict, total: float) -> float:
    """Slurm's EffectvUsage: the association's usage over its parent's (1 for root)."""
    if a.key == (ROOT, ""):
        return 1.0
    parent = accounts.parent_key(a.key)
    base = subtree.get(parent, 0.0) if parent else total
    return subtree[a.key] / base if base > 0 else 0.0


def level_fs(a: Association, accounts: Accounts, subtree: dict, norm: dict) -> float | str:
    """Fair Tree's LevelFS: NormShares / EffectvUsage ("inf" without usage, "" for root)."""
    if a.key == (ROOT, ""):
        return ""
    eff = effective_usage(a, accounts, subtree, subtree.get((ROOT, ""), 0.0))
    return norm.get(a.key, 0.0) / eff if eff > 0 else "inf"

