"""Node health: an agent silent for longer than SlurmdTimeout marks its node DOWN, and the jobs
it ran end NODE_FAIL — and go back to the queue when they may be requeued.

Running a job twice at once is prevented by launch generations, not by this module: a requeued
job's next launch has a new generation, and when the silent agent comes back and reports the old
one, schedd fences it (``handlers/agent.py``).
"""

from __future__ import annotations

import logging
from typing import Any

from schedd.context import Context
from schedd.handlers import srun as job_steps
from schedd.ledger.records import JobEvent
from schedd.model import Job, JobState, Node, NodeState

log = logging.getLogger("schedd.lifecycle.health")

NOT_RESPONDING = "Not responding"


def check_nodes(ctx: Context, now: float) -> None:
    """Mark newly silent nodes DOWN and fail (or requeue) what ran on them."""
    for node in ctx.state.nodes.values():
        silent = node.last_heartbeat > 0 and not ctx.state.node_alive(node, now)
        if not silent or node.state == NodeState.DOWN:
            continue
        log.warning("node %s is not responding (last heartbeat %.0f s ago): DOWN", node.name,
                    now - node.last_heartbeat)
        node.state, node.reason = NodeState.DOWN, NOT_RESPONDING
        ctx.state.store.upsert_node(node)
        for job in [j for j in ctx.state.running() if node.name in _nodes_of(j)]:
            fail_job(ctx, job, now, f"node {node.name} not responding")
        ctx.wake_scheduler()


def node_heard(ctx: Context, node: Node, now: float) -> None:
    """A heartbeat or registration: a node DOWN only for silence is back in service (a DOWN or
    DRAIN an administrator set stays)."""
    node.last_heartbeat = now
    if node.state == NodeState.DOWN and node.reason in ("", NOT_RESPONDING):
        log.info("node %s is responding again", node.name)
        node.state, node.reason = NodeState.IDLE, ""
        ctx.state.store.upsert_node(node)
        ctx.wake_scheduler()


def _nodes_of(job: Job) -> set[str]:
    return {a.node for a in job.allocation}


def fail_job(ctx: Context, job: Job, now: float, why: str) -> None:
    """End a job's run as NODE_FAIL; requeue it (same id, restart count + 1) when allowed."""
    ctx.state.commit([(job, {"state": JobState.NODE_FAIL, "reason": "NodeFail",
                             "end_time": now})],
                     [JobEvent(job.id, now, JobState.NODE_FAIL.value, detail=why)])
    job_steps.job_finished(ctx, job)  # stops its srun steps on the nodes still alive
    if job.requeue and job.cancelled_by is None:
        requeue(ctx, job, now, why)


def requeue_fields(job: Job, now: float, hold: bool = False) -> dict[str, Any]:
    """A job back to PENDING for another run: its id and submit time stay (age keeps counting)."""
    return {
        "state": JobState.PENDING, "reason": "JobHeldUser" if hold else "None",
        "held": "user" if hold else job.held, "restart_count": job.restart_count + 1,
        "start_time": 0.0, "end_time": 0.0, "allocation": [], "node_list": "",
        "batch_host": "", "exit_code": 0, "exit_signal": 0, "eligible_time": now,
    }


def requeue(ctx: Context, job: Job, now: float, why: str, hold: bool = False) -> None:
    ctx.state.commit([(job, requeue_fields(job, now, hold))],
                     [JobEvent(job.id, now, JobState.REQUEUED.value, detail=why)])
    ctx.wake_scheduler()
