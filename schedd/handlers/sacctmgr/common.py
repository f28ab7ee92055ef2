"""What sacctmgr's changes of every entity share: the settings' names, applying them to an
association, the lines a change prints, and committing it (ledger first, then memory)."""

from __future__ import annotations

import copy
from typing import Any

from kiln.identity import Caller
from kiln.slurm import tres
from schedd.domain.accounts import (
    Accounts,
    AccountsError,
    Association,
    account_row,
    association_row,
)
from schedd.ledger.records import AccountingChange, AuditRecord
from schedd.lifecycle.context import Context

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


def add_request(ctx: Context, names: list[str], settings: dict[str, str],
                own: dict[str, str], entity: str) -> tuple[Accounts, dict[str, str], list[str]]:
    """What ``sacctmgr add account|user NAME... key=value...`` asks: a copy of the tree to
    change, the entity's settings (``ASSOC_FIELDS`` and its own ``own``), and every name given,
    on the line and as ``Name=a,b`` (``Cluster=`` accepted and dropped: one cluster)."""
    accounts = copy.deepcopy(ctx.state.accounts)
    fields = fields_of(settings, {**ASSOC_FIELDS, **own, "name": "name", "names": "name",
                                  "cluster": "cluster"}, entity)
    names = names + [n for n in fields.pop("name", "").split(",") if n]
    fields.pop("cluster", None)
    return accounts, fields, names


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


def count(value: str, name: str) -> int | None:
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
        setattr(lim, name, count(value, name))


def apply_assoc(a: Association, fields: dict[str, str], accounts: Accounts) -> None:
    for name, value in fields.items():
        if name == "shares":
            a.shares = count(value, "Fairshare") or 0 if value != "-1" else 1
        elif name == "priority":
            a.priority = count(value, "Priority")
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


# --- a change -----------------------------------------------------------------------------


class Outcome:
    """What sacctmgr prints for a change: stdout lines, stderr lines, exit code."""

    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.rc = 0

    def body(self) -> dict[str, Any]:
        return {"stdout": self.out, "stderr": self.err, "rc": self.rc}


def commit(ctx: Context, caller: Caller, change: AccountingChange, action: str,
           target: str, accounts: Accounts) -> None:
    """Ledger first, then memory: ``accounts`` is the changed copy that replaces the live one."""
    change.audit.append(AuditRecord(ctx.now(), caller.uid, action, target[:200]))
    ctx.state.write_accounting(change)
    ctx.state.accounts = accounts
    ctx.state.usage.sync(accounts)
    ctx.wake_scheduler()


def names_in(where: dict[str, str], *keys: str) -> list[str]:
    for key in keys:
        if key in where:
            return [v for v in where[key].split(",") if v]
    return []


def assoc_line(cluster: str, a: Association) -> str:
    if a.user:
        return f"  C = {cluster:<10} A = {a.account:<20} U = {a.user}"
    return f"  C = {cluster:<10} A = {a.account} of {a.parent or ''}".rstrip()


def denied(out: Outcome) -> Outcome:
    out.err += ["sacctmgr: error: Your user doesn't have privilege to perform this action",
                " Error with request: Access/permission denied"]
    out.rc = 1
    return out


def nothing_deleted(out: Outcome) -> Outcome:
    out.out.append(" Nothing deleted")
    out.rc = 1
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


def modify_associations(ctx: Context, caller: Caller, entity: str, accounts: Accounts,
                        targets: list[Association], fields: dict[str, str], title: str,
                        settings: dict[str, str]) -> Outcome:
    """``modify account`` and ``modify user``'s association settings on ``targets``."""
    out = Outcome()
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
    out.out += [assoc_line(ctx.cfg.cluster_name, a) for a in targets]
    commit(ctx, caller, change, f"sacctmgr modify {entity}",
           ",".join(f"{a.account}/{a.user}" for a in targets) + " " + str(settings), accounts)
    return out


# --- show ---------------------------------------------------------------------------------


def assoc_record(accounts: Accounts, a: Association, depth: int,
                 cluster: str) -> dict[str, Any]:
    lim = a.limits
    return {
        "cluster": cluster, "account": a.account, "user": a.user, "partition": "",
        "share": str(a.shares), "priority": "" if a.priority is None else str(a.priority),
        "grp_jobs": opt(lim.grp_jobs), "grp_tres": tres.to_string(lim.grp_tres),
        "grp_submit_jobs": opt(lim.grp_submit_jobs), "grp_wall": "",
        "grp_tres_mins": tres.to_string(lim.grp_tres_mins), "max_jobs": opt(lim.max_jobs),
        "max_tres_per_job": tres.to_string(lim.max_tres_per_job), "max_tres_per_node": "",
        "max_submit_jobs": opt(lim.max_submit_jobs), "max_wall": lim.max_wall,
        "max_tres_mins": "", "qos": ",".join(sorted(accounts.allowed_qos(a.account, a.user))),
        "default_qos": a.default_qos, "grp_tres_run_mins": "",
        "parent_name": (a.parent or "") if not a.user else "", "depth": depth,
        "guarantee": tres.to_string(a.guarantee),
    }


def opt(value: int | None) -> str:
    return "" if value is None else str(value)
