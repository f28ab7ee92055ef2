"""Node health: an agent silent for longer than SlurmdTimeout marks its node DOWN, and the runs
it held end NODE_FAIL (``transitions.end_run``: requeued when the job allows it).

Running a job twice at once is prevented by launch generations, not by this module: a requeued
job's next launch has a new generation, and when the silent agent comes back and reports the old
one, schedd fences it (``handlers/agent.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import os

from kiln.model import Job, JobState, Node, NodeState
from schedd.lifecycle.context import Context
from schedd.lifecycle.transitions import RunEnd, end_run

log = logging.getLogger("schedd.health")

NOT_RESPONDING = "Not responding"


def check_nodes(ctx: Context, now: float) -> None:
    """Mark newly silent nodes DOWN and end what ran on them."""
    for node in list(ctx.state.nodes.values()):
        silent = node.last_heartbeat > 0 and not ctx.state.node_alive(node, now)
        if not silent or node.state == NodeState.DOWN or node.reboot == "issued":
            # a node being rebooted is silent for that (lifecycle/reboot.py)
            continue
        log.warning("node %s is not responding (last heartbeat %.0f s ago): DOWN", node.name,
                    now - node.last_heartbeat)
        ctx.state.save_node(dataclasses.replace(node, state=NodeState.DOWN,
                                                reason=NOT_RESPONDING, reason_time=now,
                                                reason_uid=os.geteuid()))  # schedd's own
        for job in [j for j in ctx.state.running() if node.name in _nodes_of(j)]:
            fail_run(ctx, job, now, f"node {node.name} not responding")
        ctx.wake_scheduler()


def fail_run(ctx: Context, job: Job, now: float, why: str) -> None:
    """The run was lost with its node: NODE_FAIL (nobody can report how it ended)."""
    end_run(ctx, job, RunEnd(job.generation, JobState.NODE_FAIL.value, now, detail=why))


def node_heard(ctx: Context, node: Node, now: float) -> None:
    """A heartbeat or registration: a node DOWN only for silence is back in service (a DOWN or
    DRAIN an administrator set stays)."""
    node.last_heartbeat = now  # memory only: heartbeats are not history
    if node.state == NodeState.DOWN and node.reason in ("", NOT_RESPONDING):
        log.info("node %s is responding again", node.name)
        ctx.state.save_node(dataclasses.replace(node, state=NodeState.IDLE, reason="",
                                                reason_time=0.0, reason_uid=None))
        ctx.wake_scheduler()


def _nodes_of(job: Job) -> set[str]:
    return {a.node for a in job.allocation}
