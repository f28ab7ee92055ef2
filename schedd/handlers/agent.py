"""Requests from agents: register, heartbeat, job_started, job_ended.

``caller`` here is the agent's ZeroMQ identity, which is its node name; a message about
another node is refused.
"""

from __future__ import annotations

from typing import Any

from schedd.context import Context, RequestError
from schedd.handlers import jobcontrol
from schedd.handlers import srun as job_steps
from schedd.ledger.records import JobEvent
from schedd.lifecycle import health, preemption
from schedd.model import GPU, Job, JobState, Node, NodeState
from schedd.state import RUNNING_STATES

_FINAL = {s.value for s in (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED,
                            JobState.TIMEOUT, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL,
                            JobState.PREEMPTED)}


# Slurm's Reason= of a job that ended badly (scontrol show job, squeue %r)
_END_REASONS = {JobState.TIMEOUT.value: "TimeLimit", JobState.FAILED.value: "NonZeroExitCode",
                JobState.OUT_OF_MEMORY.value: "OutOfMemory", JobState.NODE_FAIL.value: "NodeDown"}


def _same_node(caller: str, name: Any) -> str:
    if name != caller:
        raise RequestError(f"agent {caller!r} cannot speak for node {name!r}")
    return caller


def register(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    d = body["node"]
    name = _same_node(caller, d.get("name"))
    try:
        gpus = [GPU(**g) for g in d.get("gpus", [])]
        node = Node(name=name, cpus=int(d["cpus"]), memory_mb=int(d["memory_mb"]), gpus=gpus,
                    features=[str(f) for f in d.get("features", [])],
                    address=str(d.get("address", "")), boot_time=float(d.get("boot_time", 0)))
    except (KeyError, TypeError, ValueError) as exc:
        raise RequestError(f"bad node description: {exc}") from None
    now = ctx.now()
    known = ctx.state.nodes.get(name)
    if known is not None:  # an admin's DRAIN/DOWN outlives agent restarts
        node.state, node.reason = known.state, known.reason
        if node.state == NodeState.DOWN and known.reason in ("", health.NOT_RESPONDING):
            node.state, node.reason = NodeState.IDLE, ""
    node.partitions = ctx.state.partitions_of(name)
    node.last_heartbeat = now
    ctx.state.store.upsert_node(node)
    ctx.state.nodes[name] = node
    for report in body.get("finished") or []:
        if isinstance(report, dict):
            _finish(ctx, name, report)
    _reconcile(ctx, name, body["running"], now, fresh=True)
    ctx.wake_scheduler()
    return {"heartbeat_interval": ctx.cfg.heartbeat_interval, "kill_wait": ctx.cfg.kill_wait}


def heartbeat(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    name = _same_node(caller, body["node"])
    node = ctx.state.nodes.get(name)
    if node is None:
        return {"register": True}  # schedd does not know this node (yet): register first
    now = ctx.now()
    if not ctx.state.node_alive(node, now):
        ctx.wake_scheduler()
    health.node_heard(ctx, node, now)
    _reconcile(ctx, name, body.get("running") or [], now, fresh=False)
    job_steps.reconcile(ctx, name, body.get("steps") or [])
    return {}


def _reconcile(ctx: Context, node: str, running: list[Any], now: float, fresh: bool) -> None:
    """Fence what the agent runs but should not; resend launches it never confirmed."""
    reported: set[tuple[int, int]] = set()
    for item in running:
        if not isinstance(item, dict):
            continue
        job_id, gen = item.get("job_id"), item.get("generation")
        if not isinstance(job_id, int) or not isinstance(gen, int):
            continue
        reported.add((job_id, gen))
        job = ctx.state.jobs.get(job_id)
        ours = (job is not None and job.generation == gen and job.state in RUNNING_STATES
                and job.batch_host == node)
        if not ours:
            ctx.agents.fence(node, job_id, gen)
            continue
        ctx.agents.confirmed.add((job_id, gen))
        age = item.get("checkpoint_age")
        if isinstance(age, (int, float)) and not isinstance(age, bool):
            ctx.agents.checkpoints[job_id] = now - max(float(age), 0.0)
        if job.state == JobState.COMPLETING:
            ctx.agents.terminate(job, "CANCELLED")
    grace = 2 * ctx.cfg.heartbeat_interval
    for job in list(ctx.state.running()):
        key = (job.id, job.generation)
        if job.batch_host != node or key in reported:
            continue
        if key in ctx.agents.confirmed and not fresh:
            continue  # ended just now; its job_ended report is on its way
        if now - job.start_time >= grace or fresh:
            ctx.agents.launch(job, _array_ids(ctx, job))


def _array_ids(ctx: Context, job: Job) -> tuple[int, ...]:
    return ctx.state.array_task_ids(job.array_job_id) if job.array_job_id is not None else ()


def job_started(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    _same_node(caller, body["node"])
    ctx.agents.confirmed.add((body["job_id"], body["generation"]))
    return {}


def job_ended(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    _same_node(caller, body["node"])
    _finish(ctx, caller, body)
    return {}


def _finish(ctx: Context, node: str, report: dict[str, Any]) -> None:
    """Record a job's end as its agent saw it; stale reports (old generation) are dropped."""
    job = ctx.state.jobs.get(report.get("job_id"))  # type: ignore[arg-type]
    if job is None or job.generation != report.get("generation") or job.batch_host != node:
        return
    if job.state not in RUNNING_STATES:
        return
    state = str(report.get("state", "FAILED"))
    if state not in _FINAL:
        state = JobState.FAILED.value
    if job.cancelled_by is not None:
        state = JobState.CANCELLED.value
    state = preemption.ended_state(job, state)  # a preemption victim ends PREEMPTED
    state = jobcontrol.ended_state(job, state)  # a run stopped by scontrol requeue
    end = report.get("end_time")
    end = float(end) if isinstance(end, (int, float)) else ctx.now()
    fields = {
        "state": JobState(state), "reason": _END_REASONS.get(state, "None"),
        "end_time": max(end, job.start_time),
        "exit_code": int(report.get("exit_code") or 0),
        "exit_signal": int(report.get("exit_signal") or 0),
    }
    stats = report.get("stats")
    if isinstance(stats, dict) and stats:
        fields["extra"] = {**job.extra, "stats": stats}
    ctx.state.commit([(job, fields)], [JobEvent(job.id, end, state, detail=f"on {node}")])
    job_steps.job_finished(ctx, job)
    ctx.agents.confirmed.discard((job.id, job.generation))
    ctx.agents.checkpoints.pop(job.id, None)
    preemption.after_end(ctx, job, ctx.now())  # requeue a victim (PreemptMode REQUEUE)
    jobcontrol.after_end(ctx, job, ctx.now())  # scontrol requeue: back to the queue
    ctx.wake_scheduler()
