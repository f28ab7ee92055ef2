"""``job_why`` (kiln why) and ``forecast_stats`` (kiln stats): the answers to "why does my job
wait" and "how much can I trust squeue --start".

``job_why`` is answered from memory: the job, its place among the pending jobs of its
partition (in the order the scheduler considers them: priority, then submit time), the
weighted priority factors of the jobs ahead (``schedd.explain``), and the last plan's
expected start. ``forecast_stats`` reads the ledger, a page at a time (a long request): every job
that started in the window with a published forecast (``schedd.forecast``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any

from kiln.identity import Caller
from kiln.model import Job, JobState
from schedd import offload
from schedd.eligibility import ineligible_reason
from schedd.handlers.selection import (
    INVALID_JOB_ID,
    sees_all,
    select_jobs,
    select_jobs_reporting,
    visible_jobs,
)
from schedd.lifecycle.context import Context, RequestError
from schedd.reports import advisor, explain, forecast
from schedd.scheduler import limits
from schedd.scheduler.snapshot import NodeView, PendingJob
from schedd.snapshots import running_views
from schedd.state import RUNNING_STATES

AHEAD_SHOWN = 5  # jobs ahead whose factors are listed
ENDING_SHOWN = 3  # running jobs on the partition listed by their end
DEFAULT_WINDOW = 7 * 86400  # kiln stats looks this far back unless told otherwise
MAX_JOBS = 5000  # ... at the most recent this many started jobs
STATS_PAGE = 200  # started jobs read from the ledger per slice (about 3 ms)


def _target(ctx: Context, text: str) -> Job:
    jobs = select_jobs(ctx, {"job_ids": [text], "all_states": True})
    pending = [j for j in jobs if j.state == JobState.PENDING]
    if pending:
        return pending[0]
    if not jobs:
        raise RequestError(INVALID_JOB_ID, "invalid_job_id")
    return jobs[0]


def _summary(job: Job) -> dict[str, Any]:
    return {"job_id": job.display_id, "user": job.user, "account": job.account,
            "partition": job.partition, "priority": job.priority, "state": str(job.state),
            "reason": job.reason or "None", "submit_time": job.submit_time,
            "expected_start": job.expected_start or None, "set_aside": job.set_aside}


def job_why(ctx: Context, caller: Caller,
            body: dict[str, Any]) -> dict[str, Any] | Generator[Any, None, dict[str, Any]]:
    now = ctx.now()
    job = _target(ctx, body["job_id"])
    if not visible_jobs(ctx, caller, [job]):  # PrivateData=jobs: not even that it exists
        raise RequestError(INVALID_JOB_ID, "invalid_job_id")
    reply: dict[str, Any] = {"now": now, "job": _summary(job)}
    if job.restart_count:  # why it was last requeued (a failed GPU, a node DOWN, scontrol)
        last = next((e for e in reversed(ctx.state.store.job_events(job.id))
                     if e.state == JobState.REQUEUED.value), None)
        if last is not None:
            reply["requeued"] = {"count": job.restart_count, "time": last.time,
                                 "why": last.detail}
    if job.state != JobState.PENDING:
        reply["job"].update(start_time=job.start_time, end_time=job.end_time,
                            node_list=job.node_list)
        if job.idle_since and job.state == JobState.RUNNING:  # [scheduler.idle_gpu]
            reply["idle_gpu"] = {"since": job.idle_since, "gpus": job.total_gpus,
                                 "below_util": ctx.cfg.scheduler.idle_gpu.below_util,
                                 "gpu_seconds": ctx.agents.idle_gpu.total(job)}
        return reply
    state = ctx.state
    reason = job.reason or "None"
    reply["reason_text"] = explain.reason_text(reason)
    reply["topology"] = explain.topology_text(job, ctx.cfg.topology, now,
                                              ctx.cfg.scheduler.max_switch_wait)
    reply["limit"] = _limit(ctx, job, now)
    running_per_array: dict[int, int] = {}
    for r in state.running():
        if r.array_job_id is not None:
            running_per_array[r.array_job_id] = running_per_array.get(r.array_job_id, 0) + 1
    considered = [j for j in state.pending()
                  if not ineligible_reason(state, j, now, running_per_array)]
    order = sorted((j for j in considered if j.partition == job.partition),
                   key=lambda j: (-j.priority, j.submit_time, j.id))
    ids = [j.id for j in order]
    reply["eligible"] = job.id in ids
    reply["position"] = ids.index(job.id) + 1 if job.id in ids else None
    reply["queue_length"] = len(order)
    ahead = order[:ids.index(job.id)] if job.id in ids else []
    shown = ahead[-AHEAD_SHOWN:] + [job] if job.id in ids else []
    reply["ahead"] = [_summary(j) for j in ahead[-AHEAD_SHOWN:]]
    reply["factors"] = _factors(ctx, shown, considered, now)
    reply["ending"] = _ending(ctx, job, now)
    if not sees_all(ctx, caller, "jobs"):  # the place in the queue, but no one else's jobs
        others = {j.display_id for j in ahead if j.uid != caller.uid}
        reply["ahead"] = [a for a in reply["ahead"] if a["job_id"] not in others]
        reply["factors"] = {k: v for k, v in reply["factors"].items() if k not in others}
        reply["ending"] = [e for e in reply["ending"] if e["user"] == caller.user]
    return _outlook(ctx, caller, job, now, reply)


def _outlook(ctx: Context, caller: Caller, job: Job, now: float,
             reply: dict[str, Any]) -> dict[str, Any] | Generator[Any, None, dict[str, Any]]:
    """The reply with the job's p50/p90 start and the nearby shapes that start sooner
    (``advisor``), from the plan of the current snapshot; nothing for a job the scheduler
    does not consider. The plans are made off the loop (schedd/offload.py): the reply is
    then a long request, finished when they are."""
    snapshot, _ = ctx.planner.snapshot(now)
    view = next((p for p in snapshot.pending if p.job_id == job.id), None)
    if view is None:
        return {**reply, "forecast": None, "advice": []}
    shapes = advisor.nearby(job, view, ctx.state.partitions)
    plan = ctx.planner.frozen(snapshot)
    resolution = ctx.cfg.scheduler.bf_resolution
    ticket = ctx.offload.submit(
        caller.uid, lambda: advisor.outlook(plan, snapshot, view, shapes, resolution))
    return _finished(reply, ticket)


def _finished(reply: dict[str, Any], ticket: offload.Ticket) -> Generator[Any, None,
                                                                          dict[str, Any]]:
    reply.update((yield from offload.wait(ticket)))
    return reply


def _factors(ctx: Context, shown: list[Job], considered: list[Job],
             now: float) -> dict[str, dict[str, float]]:
    """Weighted factors of the ``shown`` jobs. The partition and QOS factors are normalised by
    the largest tier and QOS priority among every job the cycle considers; a reference job
    carrying those maxima stands in for the rest, so this costs the shown jobs, not the queue."""
    if not shown:
        return {}
    state = ctx.state
    sched = ctx.cfg.scheduler
    shares = state.usage.fairshare.cycle_factors() if sched.weight_fairshare else {}
    views = [state.pending_view(j) for j in shown]
    views.append(PendingJob(job_id=-1, partition_priority=max(
        (p.priority_tier for p in _partitions_of(ctx, considered)), default=1),
        qos_priority=max((q.priority for q in _qos_of(ctx, considered)), default=0),
        submit_time=now + 1))
    table = explain.factor_breakdown(views, now, sched, _node_views(ctx), shares)
    return {j.display_id: table.get(j.id, {}) for j in shown}


def _partitions_of(ctx: Context, jobs: list[Job]) -> list[Any]:
    names = {j.partition for j in jobs}
    return [p for name, p in ctx.state.partitions.items() if name in names]


def _qos_of(ctx: Context, jobs: list[Job]) -> list[Any]:
    names = {j.qos for j in jobs}
    return [q for name, q in ctx.state.accounts.qos.items() if name in names]


def _node_views(ctx: Context) -> list[NodeView]:
    return [NodeView(name=n.name, cpus=n.cpus, memory_mb=n.memory_mb, gpus=n.healthy_gpus,
                     gpu_type=n.gpu_model)
            for n in ctx.state.nodes.values()]


def _limit(ctx: Context, job: Job, now: float) -> dict[str, Any] | None:
    """The association or QOS limit that holds the job now, as the scheduler's own check sees
    it (``limits.Enforcer.verdict`` over the running jobs): which limit, where it is set, what
    uses it, and whether the job can ever start under it."""
    state = ctx.state
    if not state.accounts.has_limits():
        return None
    table = state.accounts.limit_table(state.usage.tres_mins)
    enforcer = limits.Enforcer(table, running_views(state, now), _node_views(ctx), now)
    verdict = enforcer.verdict(state.pending_view(job))
    return dataclasses.asdict(verdict) if verdict is not None else None


def _ending(ctx: Context, job: Job, now: float) -> list[dict[str, Any]]:
    """The running jobs of the job's partition that end first (at their time limit)."""
    ends = []
    for r in ctx.state.running():
        if r.partition != job.partition:
            continue
        limit = ctx.state.time_limit(r)
        ends.append((r.start_time + limit if limit is not None else float("inf"), r))
    ends.sort(key=lambda e: (e[0], e[1].id))
    return [{"job_id": r.display_id, "user": r.user, "node_list": r.node_list,
             "gpus": sum(len(a.gpus) for a in r.allocation),
             "ends_by": None if end == float("inf") else end}
            for end, r in ends[:ENDING_SHOWN]]


def forecast_stats(ctx: Context, caller: Caller,
                   body: dict[str, Any]) -> Generator[None, None, dict[str, Any]]:
    """kiln stats, and the calibration line of kiln why: how the published starts of the jobs
    that started in the window held up. A long request (schedd/slicing.py): the ledger is read
    a page at a time, and the loop answers others between pages."""
    now = ctx.now()
    since = float(body["since"]) if "since" in body else now - DEFAULT_WINDOW
    if since > now:
        raise RequestError("the window starts in the future")
    jobs: list[Job] = []
    for page in ctx.state.store.iter_started_since(since, MAX_JOBS, STATS_PAGE):
        jobs.extend(page)
        yield
    errors = forecast.errors_of(jobs)
    yield
    tolerance = float(ctx.cfg.scheduler.bf_resolution)
    waiting = [j for j in ctx.state.pending() if j.expected_start]
    return {
        "now": now, "since": since, "started": len(jobs), "tolerance": tolerance,
        "capped": len(jobs) >= MAX_JOBS,
        "first": forecast.summarise([e.first for e in errors], tolerance).to_wire(),
        "last": forecast.summarise([e.last for e in errors], tolerance).to_wire(),
        "lead_median": forecast.quantile([e.lead for e in errors], 0.5),
        "pending_with_forecast": len(waiting),
        "pending_with_band": sum(1 for j in ctx.state.pending() if j.forecast_band),
        "quantiles": forecast.calibration(jobs, tolerance).to_wire(),
        "running": sum(1 for j in ctx.state.jobs.values() if j.state in RUNNING_STATES),
    }


def job_priority(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """sprio: the weighted priority factors of pending jobs (held ones have none), as the
    scheduler's own sum computes them (``explain.factor_breakdown``, over the whole queue so
    the partition and QOS factors are normalised as the cycle does), and the weights. ``job_ids``
    and ``users`` narrow the jobs shown; PrivateData=jobs shows a user only their own."""
    state, sched, now = ctx.state, ctx.cfg.scheduler, ctx.now()
    queue = [j for j in state.pending() if not j.held]
    shares = state.usage.fairshare.cycle_factors() if sched.weight_fairshare else {}
    table = explain.factor_breakdown([state.pending_view(j) for j in queue], now, sched,
                                     _node_views(ctx), shares) if queue else {}
    shown = visible_jobs(ctx, caller, queue)
    if body.get("job_ids"):
        wanted = {j.id for j in select_jobs_reporting(ctx, {"job_ids": body["job_ids"]})[0]}
        shown = [j for j in shown if j.id in wanted]
    if body.get("users"):
        users = set(body["users"])
        shown = [j for j in shown if j.user in users]
    weights = {"age": sched.weight_age, "assoc": sched.weight_assoc,
               "fairshare": sched.weight_fairshare, "job_size": sched.weight_job_size,
               "partition": sched.weight_partition, "qos": sched.weight_qos}
    return {"weights": weights, "jobs": [
        {"job_id": j.id, "partition": j.partition, "user": j.user, "account": j.account,
         "nice": j.nice, "factors": table.get(j.id, {})}
        for j in sorted(shown, key=lambda j: j.id)]}


def sched_diag(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """sdiag: the scheduling cycles' figures since schedd started (``reports.diag``)."""
    state = ctx.state
    pending = sum(1 for _ in state.pending())
    running = sum(1 for _ in state.running())
    return ctx.diag.to_wire(ctx.now(), pending, running, state.state_counts)
