"""sacctmgr's QOS: add, modify, delete and show ``qos``."""

from __future__ import annotations

import copy
from typing import Any

from kiln.identity import Caller, is_operator
from kiln.slurm import tres
from schedd.domain.accounts import QOS, Accounts, AccountsError, qos_row
from schedd.handlers.sacctmgr.common import (
    Outcome,
    apply_limit,
    commit,
    count,
    fields_of,
    names_in,
    nothing_deleted,
    opt,
    updated_list,
)
from schedd.ledger.records import AccountingChange
from schedd.lifecycle.context import Context

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


def apply_qos(q: QOS, fields: dict[str, str], accounts: Accounts) -> None:
    for name, value in fields.items():
        if name == "description":
            q.description = value
        elif name in ("priority", "grace_time"):
            setattr(q, name, count(value, name) or 0)
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


def delete_qos(accounts: Accounts, names: list[str], where: dict[str, str],
               change: AccountingChange, out: Outcome) -> Outcome | None:
    """Delete the named QOS in ``accounts``; the outcome when nothing is deleted, else None."""
    doomed = [n for n in names + names_in(where, "name", "names") if n in accounts.qos]
    if not doomed:
        return nothing_deleted(out)
    for name in doomed:
        del accounts.qos[name]
    change.delete_qos = doomed
    out.out += [" Deleting QOS(s)...", *(f"  {n}" for n in doomed)]
    return None


def show_qos(accounts: Accounts, names: list[str], where: dict[str, str]) -> list[dict[str, Any]]:
    wanted = names + names_in(where, "name", "names")
    return [qos_record(q) for n, q in sorted(accounts.qos.items()) if not wanted or n in wanted]


def qos_record(q: QOS) -> dict[str, Any]:
    lim = q.limits
    return {
        "name": q.name, "description": q.description, "priority": str(q.priority),
        "grace_time": q.grace_time, "preempt": ",".join(q.preempt),
        "preempt_exempt_time": "", "preempt_mode": q.preempt_mode, "flags": ",".join(q.flags),
        "usage_thres": "", "usage_factor": f"{q.usage_factor:.6f}",
        "grp_tres": tres.to_string(lim.grp_tres), "grp_tres_mins": tres.to_string(
            lim.grp_tres_mins), "grp_tres_run_mins": "", "grp_jobs": opt(lim.grp_jobs),
        "grp_submit_jobs": opt(lim.grp_submit_jobs), "grp_wall": "",
        "max_tres_per_job": tres.to_string(lim.max_tres_per_job), "max_tres_per_node": "",
        "max_tres_mins": "", "max_wall": lim.max_wall,
        "max_tres_per_user": tres.to_string(lim.max_tres_per_user),
        "max_jobs_per_user": opt(lim.max_jobs_per_user),
        "max_submit_per_user": opt(lim.max_submit_per_user), "max_tres_per_account": "",
        "max_jobs_per_account": "", "max_submit_per_account": "", "min_tres": "",
    }
