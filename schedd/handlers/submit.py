"""``submit``: turn what sbatch parsed into Job rows, committed before the id is given out."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kiln.identity import Caller
from kiln.model import Job
from kiln.slurm.hostlist import compress
from schedd import offload, slicing
from schedd.ledger.records import JobEvent
from schedd.lifecycle.admission import ArrayTasks, admit
from schedd.lifecycle.context import Context
from schedd.reports import advisor

SUBMIT_SLICE = 200  # an array's tasks made and bound per slice of a big submission


def submit(ctx: Context, caller: Caller,
           body: dict[str, Any]) -> dict[str, Any] | Generator[Any, None, dict[str, Any]]:
    """sbatch. An array of more than ``SUBMIT_SLICE`` tasks is a long request
    (``_in_slices``)."""
    now = ctx.now()
    admitted = admit(ctx, caller, body, now, slice_above=SUBMIT_SLICE)  # top to bottom
    if body.get("test_only"):
        return test_only(ctx, caller, admitted.template, now)
    template, jobs = admitted.template, admitted.jobs
    if admitted.tasks is not None:  # validated, its ids and limits reserved
        return _in_slices(ctx, caller, template, admitted.tasks, now)
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


@slicing.light
def _in_slices(ctx: Context, caller: Caller, template: Job, tasks: ArrayTasks,
               now: float) -> Generator[None, None, dict[str, Any]]:
    """A big array's submission, so that it does not hold schedd's loop for the whole of it
    (62-114 ms under load for 1,000 tasks): its tasks made, with their events and ledger rows
    bound (``Store.prepare_insert``), ``SUBMIT_SLICE`` at a time, the loop serving others
    between slices; then one transaction stores them all and they are kept in memory, so the
    array is stored whole or not at all, and committed before its id is given out. Until then
    the task ids are taken and what the tasks add is counted against the limits
    (``State.submitting``); the cycle and other users' requests see none of the tasks. If the
    client goes away (or schedd stops) before the last slice, nothing is stored: a submission
    is accepted with its reply."""
    state = ctx.state
    try:
        jobs: list[Job] = []
        parts = []
        for start in range(0, tasks.count, SUBMIT_SLICE):
            if start:
                yield
            chunk = tasks.make(start, start + SUBMIT_SLICE)
            events = [JobEvent(job_id=j.id, time=now, state="PENDING", actor_uid=caller.uid,
                               detail="submitted") for j in chunk]
            parts.append(state.store.prepare_insert(chunk, events))
            jobs += chunk
        yield
        _unreserve(state, tasks)
        state.add_jobs(jobs, [], prepared=parts)
    finally:
        _unreserve(state, tasks)
    if not template.held:
        ctx.wake_scheduler()
    return {"job_id": tasks.base, "array_task_ids": [j.array_task_id for j in jobs]}


def _unreserve(state: Any, tasks: ArrayTasks) -> None:
    if tasks.reservation in state.submitting:
        state.submitting.remove(tasks.reservation)


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
