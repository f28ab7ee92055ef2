"""When a run ends, its srun steps end with it: every step still running is told to stop on
every node, and its row is closed with the job's fate (TIMEOUT and NODE_FAIL pass to the
steps; anything else ends them CANCELLED). The ``.batch`` row was written with the end itself
(``transitions.end_run``)."""

from __future__ import annotations

from kiln.model import Job, JobState
from schedd.lifecycle.context import Context
from schedd.lifecycle.transitions import Verdict


def stop_steps(ctx: Context, job: Job, verdict: Verdict, now: float) -> None:
    if not ctx.steps.known(job.id):
        return
    fate = verdict.state.value if verdict.state in (JobState.TIMEOUT, JobState.NODE_FAIL) \
        else JobState.CANCELLED.value
    stragglers = [s for s in ctx.steps.of_job(job.id) if not s.done]
    nodes = {n for s in stragglers for n in s.waiting}
    end = verdict.end_time or now
    for live in stragglers:
        live.abandon(fate, end)
        ctx.state.end_step(live)
    for node in sorted(nodes):
        ctx.agents.terminate_steps(node, job.id, None, fate)
    ctx.steps.forget(job.id)
