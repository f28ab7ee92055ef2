"""The scheduling cycle, applied: the pure core's decisions turned into state and launches.

``run_cycle`` (from the daemon's loop, when ``Pace`` says one is due): 1. charge usage;
2. the snapshot (``planner``); 3. the pure core; 4. apply its decisions — reasons, priorities,
published starts, reserved nodes, then the preemptions' marks (``preemption.choose``) and the
starts, committed together by ``transitions.start_runs``, which sends the launches and the
victims' notices through ``agents``. A core that raises
sets its culprits aside (``set_aside_culprits``) and the next cycle runs.

``publish_quantiles`` (a timer of the loop): each waiting job's p50/p90 start, planned off the
loop (``schedd/offload.py``) and published here once done.
"""

from __future__ import annotations

import logging
import time

from kiln.slurm.hostlist import compress
from schedd import offload
from schedd.domain.steps import placed
from schedd.lifecycle import preemption, transitions
from schedd.lifecycle.context import Context, RequestError
from schedd.reports import forecast
from schedd.scheduler.snapshot import Decisions, Snapshot

log = logging.getLogger("schedd")


def run_cycle(ctx: Context, now: float) -> Decisions:
    """One scheduling cycle: 1. charge usage; 2. the snapshot (``planner``); 3. the pure
    core; 4. apply its decisions (reasons, priorities, forecasts, starts, preemptions)."""
    pace = ctx.pace
    pace.due = False
    pace.last = now
    cycle_started = time.perf_counter()
    ctx.state.accrue_usage(now)
    snapshot, blocked = ctx.planner.snapshot(now)
    started = time.perf_counter()
    try:
        decisions = ctx.planner.decide(snapshot)
    except Exception:  # noqa: BLE001 - a job the core cannot take must not stop the loop
        log.exception("scheduling cycle failed: finding the job(s) it cannot take")
        set_aside_culprits(ctx, snapshot, now)
        return Decisions()
    ctx.planner.remember(decisions, now)
    pace.last_seconds = time.perf_counter() - cycle_started
    elapsed = time.perf_counter() - started
    ctx.diag.cycle_done(now, pace.last_seconds, decisions.depth,
                        len(snapshot.pending), decisions.backfilled)
    if ctx.metrics is not None:
        ctx.metrics.cycle_done(elapsed)
    if decisions.starts or elapsed > 0.1:
        log.info("cycle: %d pending, %d running, %d started in %.3f s", len(snapshot.pending),
                 len(snapshot.running), len(decisions.starts), elapsed)
    apply(ctx, decisions, blocked, now)
    return decisions


def apply(ctx: Context, decisions: Decisions, blocked: dict[int, str], now: float) -> None:
    """The cycle's decisions into state: reasons, priorities, published starts, reserved
    nodes; then the preemptions' marks (``preemption.choose``) and the starts, each placed
    (batch host first, its node list compressed once: ``steps.placed``), committed together
    and sent to the agents by ``transitions.start_runs``."""
    jobs = ctx.state.jobs
    for job_id, reason in blocked.items():
        jobs[job_id].reason = reason
    for job_id, reason in decisions.reasons.items():
        if job_id in jobs:
            jobs[job_id].reason = reason
    for job_id, prio in decisions.priorities.items():
        if job_id in jobs:
            jobs[job_id].priority = prio
    for job_id, when in decisions.expected_start.items():
        if job_id in jobs:
            forecast.publish(jobs[job_id], when, now)  # squeue --start; kiln stats
    for job_id, nodes in decisions.reserved_nodes.items():
        if job_id in jobs:
            jobs[job_id].sched_nodes = compress(nodes)
    marks = preemption.choose(ctx, ctx.preemption, decisions.preemptions, now)
    starts = [(jobs[s.job_id], *placed(s.allocation)) for s in decisions.starts]
    for job in transitions.start_runs(ctx, starts, now, marks):
        if ctx.metrics is not None:
            ctx.metrics.job_started(job, now)


def set_aside_culprits(ctx: Context, snapshot: Snapshot, now: float) -> None:
    """The core raised: schedule each pending job alone to find those it cannot take, and
    set them aside (held for an administrator, with the error), so the next cycle runs."""
    pending = list(snapshot.pending)
    for view in pending:
        snapshot.pending = [view]
        try:
            ctx.planner.decide(snapshot)
        except Exception as exc:  # noqa: BLE001
            job = ctx.state.jobs.get(view.job_id)
            if job is not None:
                ctx.state.set_aside(job, f"the scheduler cannot take it: "
                                         f"{type(exc).__name__}: {exc}", now)
    ctx.pace.due = True


def publish_quantiles(ctx: Context, now: float) -> None:
    """Every ``forecast_interval``: each waiting job's p50 and p90 start under predicted
    run times, kept as its first published band until it starts (``kiln stats``). The
    snapshot is taken here; the plans are made off the loop (``offload``, as the
    "schedd" owner, in turn with the users' requests) and published here when done."""
    pace = ctx.pace
    if pace.forecast is not None and not pace.forecast.done:
        return  # the last one is still being planned
    snapshot, _ = ctx.planner.snapshot(now)
    jobs = ctx.state.jobs
    # Only the first publication is checked: plan only as deep as the jobs that have none
    # (a queue whose jobs all have theirs costs nothing; the loop is not held for them).
    wanted = [p.job_id for p in snapshot.pending
              if (job := jobs.get(p.job_id)) is not None and job.forecast_band is None]
    if not wanted:
        return
    plan = ctx.planner.frozen(snapshot)
    try:
        pace.forecast = ctx.offload.submit(
            "schedd", lambda: plan.quantiles(snapshot, wanted),
            then=lambda ticket: _publish_bands(ctx, ticket, now))
    except RequestError:  # the queue is full of users' requests: at the next interval
        log.debug("start forecast deferred: the planning queue is full")


def _publish_bands(ctx: Context, ticket: offload.Ticket, now: float) -> None:
    """The timer's forecast, planned: each band published (on the loop)."""
    if ticket.error is not None:
        log.error("start forecast failed", exc_info=ticket.error)
        return
    jobs = ctx.state.jobs
    for job_id, q in ticket.result.items():
        job = jobs.get(job_id)
        if job is None or job.forecast_band is not None:
            continue  # the first publication is the one checked
        plan_p50, plan_p90 = q.plan.p50 or q.p50, q.plan.p90 or q.p90
        forecast.publish_band(job, q.p50, q.p90, plan_p50, plan_p90, now)
        ctx.state.leads.published(job_id, now, plan_p50, plan_p90, q.p90)
