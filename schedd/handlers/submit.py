"""``submit``: turn what sbatch parsed into Job rows, committed before the id is given out."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kiln.identity import Caller
from kiln.model import Job
from kiln.slurm.hostlist import compress
from schedd import offload
from schedd.ledger.records import JobEvent
from schedd.lifecycle.admission import admit
from schedd.lifecycle.context import Context
from schedd.reports import advisor


def submit(ctx: Context, caller: Caller,
           body: dict[str, Any]) -> dict[str, Any] | Generator[Any, None, dict[str, Any]]:
    now = ctx.now()
    jobs = admit(ctx, caller, body, now)  # the whole validation, top to bottom
    if body.get("test_only"):
        return test_only(ctx, caller, jobs[0], now)
    template = jobs[0]  # its tasks share the submission's fields (held, array_spec)
    events = [JobEvent(job_id=j.id, time=now, state="PENDING", actor_uid=caller.uid,
                       detail="submitted") for j in jobs]
    ctx.state.add_jobs(jobs, events)
    if not template.held:
        # a held job cannot start, so no cycle is owed to it (build_job set its reason): a
        # burst of held submissions would otherwise pay a cycle over the whole queue each
        ctx.wake_scheduler()
    first = jobs[0].array_job_id if template.array_spec else jobs[0].id
    return {"job_id": first, "array_task_ids": [j.array_task_id for j in jobs
                                                if j.array_task_id is not None]}


def test_only(ctx: Context, caller: Caller, job: Job,
              now: float) -> Generator[Any, None, dict[str, Any]]:
    """sbatch --test-only: where and when the job would start, without submitting it. The
    snapshot is the cycle's own (``planner``), promises included: the answer never offers a
    slot already promised to a waiting job. Beside Slurm's answer: the p50 and p90 start
    under predicted run times, and the nearby shapes that start sooner (``reports/advisor``).

    A long request (a generator): the snapshot and the shapes are taken on the loop, the
    plans (one cycle's, then the advisor's several) are made off it, in turn with other
    users' (schedd/offload.py), so a user repeating it stalls no one else."""
    job.id = ctx.state.next_job_id
    view = ctx.state.pending_view(job)
    snapshot, _ = ctx.planner.snapshot(now, probes=[view])
    shapes = advisor.nearby(job, view, ctx.state.partitions)
    plan = ctx.planner.frozen(snapshot)
    resolution = ctx.cfg.scheduler.bf_resolution

    def planned() -> tuple[Any, dict[str, Any]]:
        return plan.decide(snapshot), advisor.outlook(plan, snapshot, view, shapes, resolution)

    decisions, outlook = yield from offload.wait(ctx.offload.submit(caller.uid, planned))
    start = next((s for s in decisions.starts if s.job_id == job.id), None)
    if start is not None:
        when, nodes = now, [a.node for a in start.allocation]
        cpus = sum(a.cpus for a in start.allocation)
    else:
        when = decisions.expected_start.get(job.id, 0.0)
        nodes = decisions.reserved_nodes.get(job.id, [])
        cpus = view.cpus_per_node * max(job.num_nodes, 1)
    reply = {"job_id": job.id, "start_time": when, "nodes": compress(nodes),
             "partition": job.partition, "cpus": cpus, "now": now}
    reply.update(outlook)
    return reply
