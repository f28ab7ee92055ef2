"""What schedd enforces on running jobs itself, every second from the daemon's loop:

- a **time limit lowered** by scontrol below the one the run was launched with (its agent
  enforces ``Job.launched_limit``): at the new limit the run is stopped as TIMEOUT;
- a **spent GrpTRESMins budget**: the running jobs below it that hold its TRES are stopped as
  TIMEOUT, as Slurm's ``acct_policy_job_time_out`` does (``limits.spent_budgets``);
- a **stalled stop**: a run told to stop whose node has gone silent will never be reported;
  its end is recorded now (the agent's stale report is fenced by generation later).
"""

from __future__ import annotations

import logging

from kiln.model import JobState
from schedd import snapshots
from schedd.lifecycle.context import Context
from schedd.lifecycle.health import fail_run
from schedd.lifecycle.transitions import request_stop
from schedd.scheduler import limits

log = logging.getLogger("schedd.enforcement")


def lowered_limits(ctx: Context, now: float) -> None:
    due = [job for job in ctx.state.running()
           if job.state == JobState.RUNNING and job.stop is None and job.time_limit is not None
           and (job.launched_limit is None or job.time_limit < job.launched_limit)
           and now >= job.start_time + job.time_limit]
    request_stop(ctx, due, "time_limit", JobState.TIMEOUT, now,
                 detail="time limit lowered by scontrol")


def spent_budgets(ctx: Context, now: float) -> None:
    state = ctx.state
    if not any(a.limits.grp_tres_mins for a in state.accounts.assocs.values()):
        return  # no budget anywhere: nothing to spend (the usual case, checked every second)
    table = state.accounts.limit_table(state.usage.tres_mins)
    spent = limits.spent_budgets(table, snapshots.running_views(state, now), state.gpu_types())
    for job_id, why in spent.items():
        job = state.jobs[job_id]
        if job.state != JobState.RUNNING:
            continue  # already ending
        log.info("job %d timed out: %s", job.id, why)
        request_stop(ctx, [job], "budget", JobState.TIMEOUT, now, detail=why)


def stalled_stops(ctx: Context, now: float) -> None:
    for job in list(ctx.state.running()):
        if job.state != JobState.COMPLETING or job.stop is None:
            continue
        node = ctx.state.nodes.get(job.batch_host)
        if node is not None and ctx.state.node_alive(node, now):
            continue
        fail_run(ctx, job, now, "node not responding")


def tick(ctx: Context, now: float) -> None:
    lowered_limits(ctx, now)
    spent_budgets(ctx, now)
    stalled_stops(ctx, now)
