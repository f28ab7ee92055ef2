"""Requests from agents: register, heartbeat, job_started, job_ended.

``caller`` here is the agent's ZeroMQ identity, which is its node name; a message about
another node is refused.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kiln.model import GPU, JobState, Node, NodeState
from kiln.slurm.stats import clean_stats, clean_usage
from schedd.lifecycle import gpuhealth, health, idlegpu, reboot, transitions
from schedd.lifecycle.context import Context, RequestError
from schedd.state import RUNNING_STATES

log = logging.getLogger("schedd.agent")


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
                    address=str(d.get("address", "")), boot_time=float(d.get("boot_time", 0)),
                    cgroup=str(d.get("cgroup", "")),
                    # an agent that does not say (an older one): it started about now
                    slurmd_start_time=float(d.get("slurmd_start_time") or ctx.now()),
                    fake_gpus=bool(d.get("fake_gpus")),
                    shards_per_gpu=int(d.get("shards_per_gpu") or 0),
                    mps_per_gpu=int(d.get("mps_per_gpu") or 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise RequestError(f"bad node description: {exc}") from None
    now = ctx.now()
    known = ctx.state.nodes.get(name)
    if known is not None:  # an admin's DRAIN/DOWN outlives agent restarts
        node.state, node.reason = known.state, known.reason
        node.reason_time, node.reason_uid = known.reason_time, known.reason_uid
        # a failed GPU stays failed across agent restarts (the same device: its UUID)
        faults = {(g.index, g.uuid): g.fault for g in known.gpus if g.fault}
        for g in node.gpus:
            g.fault = faults.get((g.index, g.uuid), "")
        if node.state == NodeState.DOWN and known.reason in ("", health.NOT_RESPONDING):
            node.state, node.reason = NodeState.IDLE, ""
        reboot.carry(known, node)  # scontrol reboot: issued, the node is back
        node = reboot.returned(node, now)
    node.reason = _containment_reason(node.reason, str(d.get("cgroup_reason", "")))
    node.partitions = ctx.state.partitions_of(name)
    node.last_heartbeat = now
    ctx.state.save_node(node)
    for report in body.get("finished") or []:
        _finish(ctx, name, report)
    _reconcile(ctx, name, body["running"], now, fresh=True)
    ctx.wake_scheduler()
    return {"heartbeat_interval": ctx.cfg.heartbeat_interval, "kill_wait": ctx.cfg.kill_wait}


def _drain(ctx: Context, node: Node, reason: str, now: float = 0.0) -> None:
    """Slurm's UnkillableStepTimeout (the agent could not empty a job's cgroup), a failed
    prolog or epilog: the node takes no new jobs until an admin resumes it (a DOWN or DRAIN
    node keeps its state). ``now``: when, for sinfo -R (set by root, as slurmd's own)."""
    if node.state in (NodeState.DRAIN, NodeState.DOWN):
        return
    drained = dataclasses.replace(node, state=NodeState.DRAIN, reason=reason)
    if now:
        drained.reason_time, drained.reason_uid = now, 0
    ctx.state.save_node(drained)
    log.error("node %s drained: %s", node.name, reason)


def _health(ctx: Context, node: Node, verdict: str, now: float) -> None:
    """The node's health check said ``verdict`` ("" passed, else the Reason): a failure drains
    a node that is not drained or down already; with ``[agent] health_check_resume`` a pass
    resumes a node only the check drained (an admin's drain or a later admin update of the
    reason sets reason_uid, and such a node is never resumed here)."""
    if verdict:
        if node.state in (NodeState.DRAIN, NodeState.DOWN):
            return
        ctx.state.save_node(dataclasses.replace(node, state=NodeState.DRAIN, reason=verdict,
                                                reason_time=now, reason_uid=None))
        ctx.agents.health_drained[node.name] = verdict
        log.error("node %s drained by its health check: %s", node.name, verdict)
        return
    reason = ctx.agents.health_drained.pop(node.name, None)
    if reason is None or not ctx.cfg.agent.health_check_resume:
        return
    if node.state == NodeState.DRAIN and node.reason == reason and node.reason_uid is None:
        ctx.state.save_node(dataclasses.replace(node, state=NodeState.IDLE, reason="",
                                                reason_time=0.0, reason_uid=None))
        log.warning("node %s resumed: its health check passes again", node.name)
        ctx.wake_scheduler()


def _containment_reason(reason: str, cgroup_reason: str) -> str:
    """The node's reason with what its agent cannot enforce (``cgroups: not enforced: ...``):
    set while the node has no other reason, cleared once the agent enforces everything; an
    admin's or the health checks' reason is left alone."""
    if reason and not reason.startswith(CGROUP_REASON_PREFIX):
        return reason
    return cgroup_reason if cgroup_reason.startswith(CGROUP_REASON_PREFIX) else ""


CGROUP_REASON_PREFIX = "cgroups: "


def heartbeat(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    name = _same_node(caller, body["node"])
    node = ctx.state.nodes.get(name)
    if node is None or not node.slurmd_start_time:
        # schedd does not know this node (yet), or knows it only from the ledger (a restart):
        # register first, which also says when the agent started (SlurmdStartTime)
        return {"register": True}
    now = ctx.now()
    if not ctx.state.node_alive(node, now):
        ctx.wake_scheduler()
    health.node_heard(ctx, node, now)
    if body.get("drain"):
        _drain(ctx, node, str(body["drain"]), now)
    if body.get("gpu_faults"):  # NVML's faults (agentd/gpuhealth.py): fatal ones fail the GPU
        gpuhealth.record(ctx, name, body["gpu_faults"], now)
    if body.get("health") is not None:
        _health(ctx, ctx.state.nodes[name], str(body["health"]), now)
    usage = _reconcile(ctx, name, body.get("running") or [], now, fresh=False)
    _reconcile_steps(ctx, name, body.get("steps") or [])
    for item in body.get("step_usage") or []:
        job = ctx.state.jobs.get(item["job_id"])
        if job is not None and job.state in RUNNING_STATES and \
                any(a.node == name for a in job.allocation):
            usage[(job.id, str(item["step_id"]))] = clean_usage(item.get("usage"))
    ctx.agents.usage[name] = usage  # what sstat shows: this node's latest word
    idlegpu.observe(ctx, name, body.get("running") or [], now)  # [scheduler.idle_gpu]
    reply: dict[str, Any] = {}
    if body.get("want_state"):  # its health check runs only in some states (agentd/health.py)
        node = ctx.state.nodes[name]
        reply.update(alloc=ctx.state.node_alloc_state(node, ctx.state.use_of(name)),
                     drained=node.state in (NodeState.DRAIN, NodeState.DOWN))
    if body.get("want_jobs"):  # the jobs whose private /tmp stays there (agentd/jobtmp.py)
        reply["jobs"] = sorted({job.id for job in ctx.state.running()
                                if any(a.node == name for a in job.allocation)})
    return reply


def _reconcile(ctx: Context, node: str, running: list[Any], now: float,
               fresh: bool) -> dict[tuple[int, str], dict[str, float]]:
    """Fence what the agent runs but should not; resend launches it never confirmed. Returns
    the live usage of the batch steps that are schedd's, for sstat."""
    reported: set[tuple[int, int]] = set()
    usage: dict[tuple[int, str], dict[str, float]] = {}
    for item in running:  # typed by operations.AGENT_OPS
        job_id, gen = item["job_id"], item["generation"]
        reported.add((job_id, gen))
        job = ctx.state.jobs.get(job_id)
        current = job is not None and job.generation == gen and job.state in RUNNING_STATES
        if current and item.get("configuring") and \
                any(a.node == node for a in job.allocation):  # type: ignore[union-attr]
            continue  # its prolog runs on one of its nodes (the batch host's or another's)
        ours = current and job.batch_host == node  # type: ignore[union-attr]
        if not ours:
            ctx.agents.fence(node, job_id, gen)
            continue
        ctx.agents.confirmed.add((job_id, gen))
        if item.get("usage"):
            usage[(job_id, "batch")] = clean_usage(item["usage"])
        age = item.get("checkpoint_age")
        if age is not None:
            ctx.agents.checkpoints[job_id] = now - float(age)
        if job.state == JobState.COMPLETING:  # told to stop: say it again (it may be lost)
            ctx.agents.terminate(job, job.stop.ended if job.stop is not None else
                                 JobState.CANCELLED.value)
    grace = 2 * ctx.cfg.heartbeat_interval
    for job in list(ctx.state.running()):
        key = (job.id, job.generation)
        if job.batch_host != node or key in reported:
            continue
        if key in ctx.agents.confirmed and not fresh:
            continue  # ended just now; its job_ended report is on its way
        if now - job.start_time >= grace or fresh:
            transitions.relaunch(ctx, job)
    return usage


def _reconcile_steps(ctx: Context, node: str, job_ids: list[int]) -> None:
    """Fence step tasks an agent runs for jobs schedd no longer runs (from its heartbeat)."""
    for job_id in job_ids:
        job = ctx.state.jobs.get(job_id)
        if job is None or job.state not in RUNNING_STATES:
            ctx.agents.terminate_steps(node, job_id, None, JobState.CANCELLED.value)


def job_started(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    _same_node(caller, body["node"])
    ctx.agents.confirmed.add((body["job_id"], body["generation"]))
    return {}


def prolog_done(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    """A node of a multi-node job, not its batch host, ran its prolog: passed, the batch
    script may go once every node's has; failed, the node is drained and the run ends as a
    failed prolog (requeued held), before any process of the job started anywhere."""
    name = _same_node(caller, body["node"])
    job = ctx.state.jobs.get(body["job_id"])
    if job is None or job.generation != body["generation"] or \
            job.state not in RUNNING_STATES or all(a.node != name for a in job.allocation):
        return {}  # an older run's, or a job ended meanwhile
    if body["ok"]:
        ctx.agents.prolog_passed(job, name)
        return {}
    node = ctx.state.nodes.get(name)
    if node is not None:
        _drain(ctx, node, "Prolog error", ctx.now())
    error = str(body.get("error") or "prolog failed")
    transitions.end_run(ctx, job, transitions.RunEnd(
        generation=job.generation, state=JobState.FAILED.value, end_time=ctx.now(),
        exit_code=1, detail=f"on {name}: {error}", reason=error, prolog_failed=True))
    return {}


def job_ended(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    _same_node(caller, body["node"])
    _finish(ctx, caller, body)
    return {}


def _finish(ctx: Context, node: str, report: dict[str, Any]) -> None:
    """A run's end as its agent saw it, to the lifecycle's one door; a report about another
    node's job or an older run (generation) is dropped there or here."""
    if report.get("drain"):  # its prolog or epilog failed: no new job here (agentd/prolog.py)
        known = ctx.state.nodes.get(node)
        if known is not None:
            _drain(ctx, known, str(report["drain"]), ctx.now())
    job = ctx.state.jobs.get(report["job_id"])
    if job is None or job.batch_host != node:
        return
    transitions.end_run(ctx, job, transitions.RunEnd(
        generation=report["generation"], state=report["state"],
        end_time=float(report["end_time"]), exit_code=report["exit_code"],
        exit_signal=report["exit_signal"], stats=clean_stats(report.get("stats")),
        detail=f"on {node}: {report['error']}" if report.get("error") else f"on {node}",
        reason=report.get("error") or "", prolog_failed=bool(report.get("prolog_failed"))))
