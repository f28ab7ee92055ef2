"""``update_job``, ``requeue``, ``update_node``: scontrol's job and node control.

Who may do what, as in Slurm: the owner may lower a job's time limit, set a nice value of 0 or
more, rename it, and change what a pending job asks for; only operators may raise a time limit,
set a negative nice or a priority, or change nodes. A running job being requeued is first
stopped by its agent (state COMPLETING); when the agent reports its end it goes back to the
queue with the same id and one more restart (``after_end``).

A running job's time limit is enforced by its agent with the limit it was launched with, so a
running job's limit may be lowered (schedd ends it at the new limit, ``enforce_limits``) but not
raised.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kiln.identity import Caller, is_operator
from kiln.model import Job, JobState, NodeState
from kiln.slurm import dependency
from kiln.wire import protocol
from schedd.domain.accounts import AccountsError
from schedd.domain.reservation import ACCESS_DENIED, INVALID_RESERVATION
from schedd.handlers.selection import DENIED, INVALID_JOB_ID, select_jobs_reporting
from schedd.ledger.records import JobEvent
from schedd.lifecycle import gpuhealth, transitions
from schedd.lifecycle.admission import (
    INVALID_NODE,
    INVALID_PARTITION,
    INVALID_TIME,
    check_dependency_change,
    check_shape,
    check_text,
    resolve_nodes,
)
from schedd.lifecycle.context import Context, RequestError

log = logging.getLogger("schedd.jobcontrol")

NOT_PENDING = "Job is no longer pending execution"
PENDING = "Job is pending execution"
FINISHED = "Job/step already completing or completed"
DISABLED = "Requested operation is presently disabled"
RUNNING_LIMIT = ("the time limit of a running job can only be lowered in kiln "
                 "(its agent enforces the limit it was launched with)")
INVALID_NODE_STATE = "Invalid node state specified"

# fields only a pending job may change (what it asks for, where and under whom it runs)
PENDING_ONLY = frozenset({
    "account", "qos", "partition", "begin_time", "dependency", "num_nodes", "num_tasks",
    "cpus_per_task", "mem_per_node_mb", "nodelist", "exclude", "constraint", "reservation",
    "time_min",
})
ANY_STATE = frozenset({"time_limit", "nice", "priority", "name", "comment", "requeue"})
SHAPE = frozenset({"num_nodes", "num_tasks", "cpus_per_task", "mem_per_node_mb", "nodelist",
                   "exclude", "constraint"})


# --- update job ------------------------------------------------------------------------------


def update_job(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    changes = body["changes"]
    for key in changes:
        if key not in PENDING_ONLY | ANY_STATE:
            raise RequestError(f"Update of this parameter is not supported: {key}")
    typed = dict(changes)  # typed and bounded by operations.UPDATE_JOB_SCHEMA
    jobs, unmatched = select_jobs_reporting(ctx, {"job_ids": body["job_ids"]})
    if not jobs:
        raise RequestError(INVALID_JOB_ID, protocol.E_INVALID_JOB)
    if typed.get("dependency"):  # the bounds on what it expands to, for all the jobs at once
        check_dependency_change(ctx, jobs, typed["dependency"])
    now = ctx.now()
    errors = [{"job_id": t, "message": INVALID_JOB_ID} for t in unmatched]
    commits, events = [], []
    for job in jobs:
        try:
            fields = job_changes(ctx, caller, job, typed)
        except RequestError as exc:
            errors.append({"job_id": job.display_id, "message": exc.message})
            continue
        commits.append((job, fields))
        detail = "update " + " ".join(f"{k}={v}" for k, v in sorted(changes.items()))
        events.append(JobEvent(job.id, now, job.state.value, reason=job.reason,
                               actor_uid=caller.uid, detail=detail[:1000]))
    ctx.state.commit(commits, events)
    if commits:
        ctx.wake_scheduler()
    return {"errors": errors}


def job_changes(ctx: Context, caller: Caller, job: Job, changes: dict[str, Any]) -> dict[str, Any]:
    """The fields to commit for one job, or RequestError with Slurm's message."""
    operator = is_operator(caller)
    if job.uid != caller.uid and not operator:
        raise RequestError(DENIED)
    if job.state.finished or job.state == JobState.COMPLETING:
        raise RequestError(FINISHED)
    if job.state != JobState.PENDING and PENDING_ONLY & changes.keys():
        raise RequestError(NOT_PENDING)
    check_text(changes)  # Name=, Comment=, ...: no control characters, as at submit
    fields: dict[str, Any] = {}
    for key, value in changes.items():
        if key == "time_limit":
            # a running job's agent keeps the limit it was launched with (launched_limit);
            # a lowered one is enforced by schedd (lifecycle/enforcement.py)
            fields[key] = _time_limit(ctx, job, value, operator)
        elif key == "nice":
            if value < 0 and not operator:
                raise RequestError(DENIED)
            fields[key] = value
        elif key == "priority":
            if not operator:
                raise RequestError(DENIED)
            fields["admin_priority"] = value
        elif key in ("account", "qos"):
            fields.update(_association(ctx, job, changes))
        elif key == "partition":
            fields[key] = _partition(ctx, job, value, changes.get("time_limit", job.time_limit),
                                     operator)
        elif key == "dependency":
            _dependency(value)
            fields[key] = value
        elif key == "reservation":
            _reservation(ctx, job, value, changes.get("account", job.account))
            fields[key] = value
        elif key in ("nodelist", "exclude"):
            fields[key] = resolve_nodes(ctx, value)
        else:
            fields[key] = value
    if "begin_time" in fields:
        fields["begin_time"] = float(fields["begin_time"])
    if SHAPE & changes.keys():
        check_shape(ctx, dataclasses.replace(job, **{k: fields[k] for k in SHAPE & fields.keys()}))
    return fields


def _time_limit(ctx: Context, job: Job, value: int | None, operator: bool) -> int | None:
    if value is not None and value <= 0:
        raise RequestError(INVALID_TIME)
    current = job.time_limit
    raised = current is not None and (value is None or value > current)
    if raised and job.state != JobState.PENDING:
        raise RequestError(RUNNING_LIMIT)
    if raised and not operator:
        raise RequestError(DENIED)
    part = ctx.state.partitions.get(job.partition)
    if (not operator and part is not None and part.max_time is not None
            and (value is None or value > part.max_time)):
        raise RequestError(INVALID_TIME)
    return value


def _association(ctx: Context, job: Job, changes: dict[str, Any]) -> dict[str, Any]:
    try:
        account, qos, change = ctx.state.accounts.resolve(
            job.user, changes.get("account", job.account), changes.get("qos", ""))
    except AccountsError as exc:
        raise RequestError(str(exc)) from None
    if "qos" not in changes and qos != job.qos:
        qos = job.qos if job.qos in ctx.state.accounts.allowed_qos(account, job.user) else qos
    if change is not None:
        ctx.state.write_accounting(change)
        ctx.state.usage.sync(ctx.state.accounts)
    return {"account": account, "qos": qos}


def _partition(ctx: Context, job: Job, name: str, limit: int | None, operator: bool) -> str:
    part = ctx.state.partitions.get(name)
    if part is None:
        raise RequestError(INVALID_PARTITION)
    limit = limit if limit is not None else part.default_time
    if not operator and part.max_time is not None and (limit is None or limit > part.max_time):
        raise RequestError(INVALID_TIME)
    return name


def _dependency(value: str) -> None:
    if value:
        try:
            dependency.parse(value)
        except dependency.DependencyError as exc:
            raise RequestError(str(exc)) from None


def _reservation(ctx: Context, job: Job, name: str, account: str) -> None:
    if not name:
        return
    resv = ctx.state.reservations.get(name)
    if resv is None:
        raise RequestError(INVALID_RESERVATION)
    if not resv.admits(job.user, account):
        raise RequestError(ACCESS_DENIED)


# --- requeue ---------------------------------------------------------------------------------


def requeue(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """scontrol requeue / requeuehold: a running job is stopped, then queued again."""
    jobs, unmatched = select_jobs_reporting(ctx, {"job_ids": body["job_ids"]})
    if not jobs:
        raise RequestError(INVALID_JOB_ID, protocol.E_INVALID_JOB)
    hold = bool(body.get("hold"))
    now = ctx.now()
    errors = [{"job_id": t, "message": INVALID_JOB_ID} for t in unmatched]
    for job in jobs:
        problem = _requeue_problem(caller, job)
        if problem:
            errors.append({"job_id": job.display_id, "message": problem})
            continue
        transitions.request_stop(ctx, [job], "requeue", JobState.REQUEUED, now, requeue=True,
                                 hold=hold, actor=caller.uid,
                                 detail="scontrol requeuehold" if hold else "scontrol requeue")
    return {"errors": errors}


def _requeue_problem(caller: Caller, job: Job) -> str:
    if job.uid != caller.uid and not is_operator(caller):
        return DENIED
    if job.state == JobState.PENDING:
        return PENDING
    if job.state != JobState.RUNNING:
        return FINISHED
    if not job.requeue:
        return DISABLED
    return ""


# --- update node -----------------------------------------------------------------------------

NODE_STATES = {"DRAIN": NodeState.DRAIN, "DOWN": NodeState.DOWN, "RESUME": NodeState.IDLE,
               "UNDRAIN": NodeState.IDLE, "IDLE": NodeState.IDLE}


def update_node(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """scontrol update NodeName= State=DRAIN|DOWN|RESUME Reason=: operators only. A drained
    node finishes what it runs and takes nothing new; DOWN ends its jobs (NODE_FAIL, requeued
    when allowed)."""
    if not is_operator(caller):
        raise RequestError(DENIED, protocol.E_PERMISSION)
    changes = body["changes"]
    unknown = [k for k in changes if k not in ("state", "reason")]
    if unknown:
        raise RequestError(f"Update of this parameter is not supported: {unknown[0]}")
    state_name = str(changes.get("state", "")).upper()
    if state_name and state_name not in NODE_STATES:
        raise RequestError(INVALID_NODE_STATE)
    reason = str(changes.get("reason", ""))
    target = NODE_STATES.get(state_name)
    if target in (NodeState.DRAIN, NodeState.DOWN) and not reason:
        raise RequestError("You must specify a reason when DOWNING or DRAINING a node")
    names = [str(n) for n in body["names"]]
    missing = [n for n in names if n not in ctx.state.nodes]
    if missing or not names:
        raise RequestError(INVALID_NODE)
    now = ctx.now()
    for name in names:
        _set_node(ctx, caller, name, target, reason, now)
    ctx.wake_scheduler()
    return {"nodes": names}


def _set_node(ctx: Context, caller: Caller, name: str, target: NodeState | None, reason: str,
              now: float) -> None:
    node = dataclasses.replace(ctx.state.nodes[name])  # memory changes once the ledger has it
    if target == NodeState.IDLE:  # RESUME: its failed GPUs too (lifecycle/gpuhealth.py)
        node = gpuhealth.resume(ctx, node)
    if target in (NodeState.IDLE, NodeState.DOWN) and node.reboot == "issued":
        node.reboot, node.reboot_asap = "", False  # a reboot that never came back: given up
    if target is not None:
        node.state = target
        node.reason = "" if target == NodeState.IDLE else reason
    elif reason:
        node.reason = reason
    node.reason_time, node.reason_uid = (now, caller.uid) if node.reason else (0.0, None)
    ctx.state.save_node(node)
    ctx.state.audit(caller.uid, "update_node", f"node {name}",
                    f"state={node.state.value} reason={node.reason}", now)
    if target == NodeState.DOWN:
        doomed = [j for j in ctx.state.running() if name in {a.node for a in j.allocation}
                  and j.state == JobState.RUNNING]
        transitions.request_stop(ctx, doomed, "node_down", JobState.NODE_FAIL, now,
                                 requeue=True, actor=caller.uid,
                                 detail=f"node {name} set DOWN by scontrol")
