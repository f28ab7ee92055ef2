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

from schedd import protocol
from schedd.context import Context, RequestError
from schedd.domain.accounts import AccountsError
from schedd.domain.reservation import ACCESS_DENIED, INVALID_RESERVATION
from schedd.handlers import srun as job_steps
from schedd.handlers.control import DENIED
from schedd.handlers.query import INVALID_JOB_ID, select_jobs_reporting
from schedd.handlers.submit import INVALID_PARTITION, INVALID_TIME, _check_shape, _checked
from schedd.identity import Caller, is_operator
from schedd.ledger.records import JobEvent
from schedd.lifecycle import health
from schedd.model import Job, JobState, NodeState
from schedd.scheduler import limits
from schedd.slurm import dependency
from schedd.slurm.hostlist import HostlistError, expand

log = logging.getLogger("schedd.jobcontrol")

NOT_PENDING = "Job is no longer pending execution"
PENDING = "Job is pending execution"
FINISHED = "Job/step already completing or completed"
DISABLED = "Requested operation is presently disabled"
RUNNING_LIMIT = ("the time limit of a running job can only be lowered in kiln "
                 "(its agent enforces the limit it was launched with)")
INVALID_NODE = "Invalid node name specified"
INVALID_NODE_STATE = "Invalid node state specified"
REQUEUE_KEY = "requeue_on_end"  # Job.extra: the run is being stopped for a requeue
LAUNCHED_KEY = "launched_limit"  # Job.extra: the limit the agent runs a job under, if lowered

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
    typed = {k: _checked(k, v) for k, v in changes.items()}
    jobs, unmatched = select_jobs_reporting(ctx, {"job_ids": body["job_ids"]})
    if not jobs:
        raise RequestError(INVALID_JOB_ID, protocol.E_INVALID_JOB)
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
    fields: dict[str, Any] = {}
    extra = dict(job.extra)
    for key, value in changes.items():
        if key == "time_limit":
            fields[key] = _time_limit(ctx, job, value, operator)
            if job.state == JobState.RUNNING:
                extra.setdefault(LAUNCHED_KEY, job.time_limit)
        elif key == "nice":
            if value < 0 and not operator:
                raise RequestError(DENIED)
            fields[key] = value
        elif key == "priority":
            if not operator:
                raise RequestError(DENIED)
            extra["admin_priority"] = value
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
            try:
                expand(value)
            except HostlistError:
                raise RequestError(INVALID_NODE) from None
            fields[key] = value
        else:
            fields[key] = value
    if extra != job.extra:
        fields["extra"] = extra
    if SHAPE & changes.keys():
        _check_shape(ctx, dataclasses.replace(job, **{k: fields[k] for k in SHAPE & fields.keys()}))
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
        ctx.state.store.write_accounting(change)
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


def enforce_limits(ctx: Context, now: float) -> None:
    """End running jobs whose lowered time limit has passed (their agent still holds the old
    one): TIMEOUT, as the agent would have done."""
    for job in list(ctx.state.running()):
        if (job.state != JobState.RUNNING or job.time_limit is None
                or LAUNCHED_KEY not in job.extra):
            continue
        if now >= job.start_time + job.time_limit:
            ctx.state.commit([(job, {"state": JobState.COMPLETING})],
                             [JobEvent(job.id, now, JobState.COMPLETING.value,
                                       detail="time limit lowered by scontrol")])
            ctx.agents.terminate(job, JobState.TIMEOUT.value)


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
        stop_for_requeue(ctx, job, now, caller.uid, hold, JobState.REQUEUED,
                         "scontrol requeuehold" if hold else "scontrol requeue")
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


def stop_for_requeue(ctx: Context, job: Job, now: float, actor: int | None, hold: bool,
                     ended: JobState, detail: str) -> None:
    """Have the agent stop a running job; ``after_end`` queues it again once it has ended, so
    its next run never overlaps the old one on the node. ``ended``: the state the stopped run
    is recorded with (REQUEUED, or NODE_FAIL for a node set DOWN)."""
    ctx.state.commit([(job, {"state": JobState.COMPLETING, "extra": {
                         **job.extra, REQUEUE_KEY: {"hold": hold, "state": ended.value}}})],
                     [JobEvent(job.id, now, JobState.COMPLETING.value, actor_uid=actor,
                               detail=detail)])
    ctx.agents.terminate(job, ended.value)


def ended_state(job: Job, state: str) -> str:
    """The state a run stopped for a requeue ends in, whatever the agent reported."""
    asked = job.extra.get(REQUEUE_KEY)
    if asked is not None and job.cancelled_by is None:
        return str(asked.get("state") or JobState.REQUEUED.value)
    return state


def after_end(ctx: Context, job: Job, now: float) -> None:
    """Once a run stopped for a requeue has ended: back to PENDING, same id, restarts + 1
    (a NODE_FAIL run of a --no-requeue job stays ended)."""
    asked = job.extra.get(REQUEUE_KEY)
    if asked is None:
        return
    extra = {k: v for k, v in job.extra.items() if k != REQUEUE_KEY}
    failed = asked.get("state") == JobState.NODE_FAIL.value
    if job.cancelled_by is not None or (failed and not job.requeue):
        ctx.state.commit([(job, {"extra": extra})])
        return
    fields = health.requeue_fields(job, now, bool(asked.get("hold")))
    fields["extra"] = extra
    why = "node set DOWN" if failed else "scontrol requeue"
    ctx.state.commit([(job, fields)],
                     [JobEvent(job.id, now, JobState.REQUEUED.value, detail=why)])
    ctx.wake_scheduler()


def settle_stalled(ctx: Context, now: float) -> None:
    """A job being stopped for a requeue whose node has gone silent will never be reported:
    record its end now (the agent's stale report is fenced by generation later)."""
    for job in list(ctx.state.running()):
        if job.state != JobState.COMPLETING or REQUEUE_KEY not in job.extra:
            continue
        node = ctx.state.nodes.get(job.batch_host)
        if node is not None and ctx.state.node_alive(node, now):
            continue
        state = JobState(ended_state(job, JobState.REQUEUED.value))
        ctx.state.commit([(job, {"state": state, "end_time": now})],
                         [JobEvent(job.id, now, state.value, detail="node not responding")])
        job_steps.job_finished(ctx, job)
        after_end(ctx, job, now)


def enforce_budgets(ctx: Context, now: float) -> None:
    """End running jobs under a spent GrpTRESMins budget: TIMEOUT, as Slurm's
    acct_policy_job_time_out does (``limits.spent_budgets`` says which and why)."""
    state = ctx.state
    if not any(a.limits.grp_tres_mins for a in state.accounts.assocs.values()):
        return  # no budget anywhere: nothing to spend (the usual case, checked every second)
    table = state.accounts.limit_table(state.usage.tres_mins)
    spent = limits.spent_budgets(table, state.running_views(now), state.gpu_types())
    for job_id, why in spent.items():
        job = state.jobs[job_id]
        if job.state != JobState.RUNNING:
            continue  # already ending
        log.info("job %d timed out: %s", job.id, why)
        state.commit([(job, {"state": JobState.COMPLETING})],
                     [JobEvent(job.id, now, JobState.COMPLETING.value, detail=why)])
        ctx.agents.terminate(job, JobState.TIMEOUT.value)


def tick(ctx: Context, now: float) -> None:
    """Every second from the daemon's loop: lowered limits, spent budgets, stalled requeues."""
    enforce_limits(ctx, now)
    enforce_budgets(ctx, now)
    settle_stalled(ctx, now)


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
    node = ctx.state.nodes[name]
    if target is not None:
        node.state = target
        node.reason = "" if target == NodeState.IDLE else reason
    elif reason:
        node.reason = reason
    ctx.state.store.upsert_node(node)
    ctx.state.store.audit(caller.uid, "update_node", f"node {name}",
                          f"state={node.state.value} reason={node.reason}", now)
    if target == NodeState.DOWN:
        for job in [j for j in ctx.state.running() if name in {a.node for a in j.allocation}
                    and j.state == JobState.RUNNING]:
            stop_for_requeue(ctx, job, now, caller.uid, False, JobState.NODE_FAIL,
                             f"node {name} set DOWN by scontrol")
