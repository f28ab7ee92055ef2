"""``scontrol reboot`` and ``cancel_reboot``: a node is rebooted by its agent's
``[agent] reboot_program`` (Slurm's RebootProgram) once nothing runs on it, and comes back in
the state asked (``nextstate=resume``, the default, or ``down``).

The steps, as Slurm's: ``request`` marks the node REBOOT_REQUESTED (with ASAP it is drained
too, so that it takes no new job and is rebooted As Soon As Possible; without, it keeps taking
jobs and is rebooted when it happens to be idle). ``tick`` issues the reboot of each requested
node that is idle and heard: REBOOT_ISSUED, no job is placed on it, its agent is told to run
the program. The node has returned when its agent registers again: after a real reboot the
agent starts afresh and registers; a program that does not end the machine (a site's script
that reboots something else, a test's fake) ends and the agent registers once it has. Then
``returned`` puts it in its next state.

What a reboot is doing is kept in memory only (``Node.reboot*``): a schedd that restarts has
forgotten it, and the node stays as the ledger holds it (an ASAP one drained, for an admin to
resume). A reboot issued and never returned leaves the node REBOOT_ISSUED (not DOWN for its
silence) until its agent registers or an admin sets it DOWN or RESUME.
"""

from __future__ import annotations

import dataclasses
import logging

from kiln.model import Node, NodeState
from schedd.lifecycle.context import Context

log = logging.getLogger("schedd.reboot")

REQUESTED, ISSUED = "requested", "issued"
ASAP_REASON = "Reboot ASAP"  # Slurm's reason of an ASAP drain given no reason=
ISSUED_SUFFIX = " : reboot issued"  # appended to the ASAP drain's reason, as slurmctld does
COMPLETE_REASON = "reboot complete"  # a nextstate=down node's reason when none was given
NEXT_STATES = ("resume", "down")


def request(ctx: Context, node: Node, asap: bool, next_state: str, reason: str,
            uid: int, now: float) -> None:
    """Mark the node for a reboot (again: the latest request's options win)."""
    changed = dataclasses.replace(node, reboot=node.reboot or REQUESTED,
                                  reboot_asap=asap or node.reboot_asap,
                                  reboot_next=next_state or "resume", reboot_reason=reason)
    if asap and changed.state != NodeState.DOWN:
        if changed.state != NodeState.DRAIN:  # an admin's drain keeps its reason
            changed.state = NodeState.DRAIN
            changed.reason = reason or ASAP_REASON
            changed.reason_time, changed.reason_uid = now, uid
    ctx.state.save_node(changed)
    ctx.state.audit(uid, "reboot_node", f"node {node.name}",
                    f"asap={asap} nextstate={changed.reboot_next} reason={reason}", now)
    log.warning("node %s: reboot requested%s (nextstate=%s)", node.name,
                " ASAP" if asap else "", changed.reboot_next)


def cancel(ctx: Context, node: Node, uid: int, now: float) -> bool:
    """Forget a requested reboot (an ASAP drain of it is undrained); False when it has been
    issued already (Slurm's "Reboot already in progress")."""
    if node.reboot == ISSUED:
        return False
    if not node.reboot:
        return True
    changed = dataclasses.replace(node, reboot="", reboot_asap=False, reboot_next="",
                                  reboot_reason="")
    if node.reboot_asap and node.state == NodeState.DRAIN and \
            node.reason == (node.reboot_reason or ASAP_REASON):
        changed.state, changed.reason = NodeState.IDLE, ""
        changed.reason_time, changed.reason_uid = 0.0, None
    ctx.state.save_node(changed)
    ctx.state.audit(uid, "cancel_reboot", f"node {node.name}", "", now)
    log.warning("node %s: reboot cancelled", node.name)
    ctx.wake_scheduler()
    return True


def tick(ctx: Context, now: float) -> None:
    """Issue the reboot of every requested node that is idle (no job, no prolog, no epilog
    left on it) and whose agent is heard."""
    requested = [n for n in ctx.state.nodes.values() if n.reboot == REQUESTED]
    if not requested:
        return
    use = ctx.state.node_use()
    for node in requested:
        if use[node.name].jobs or not ctx.state.node_alive(node, now):
            continue
        issued = dataclasses.replace(node, reboot=ISSUED)
        if node.reboot_asap and node.state == NodeState.DRAIN and \
                not node.reason.endswith(ISSUED_SUFFIX):
            issued.reason = node.reason + ISSUED_SUFFIX
        ctx.state.save_node(issued)
        ctx.agents.reboot(node.name)
        log.warning("node %s: reboot issued", node.name)


def returned(node: Node, now: float) -> Node:
    """The node's agent registered after its reboot: the node in its next state (RESUME:
    back in service, drain and reason gone; DOWN: down with the reason given)."""
    if node.reboot != ISSUED:
        return node
    back = dataclasses.replace(node, reboot="", reboot_asap=False, reboot_next="",
                               reboot_reason="")
    if node.reboot_next == "down":
        back.state, back.reason = NodeState.DOWN, node.reboot_reason or COMPLETE_REASON
        back.reason_time, back.reason_uid = now, 0
    else:
        back.state, back.reason = NodeState.IDLE, ""
        back.reason_time, back.reason_uid = 0.0, None
    log.warning("node %s: back from its reboot, %s", node.name, back.state.value)
    return back


def carry(known: Node, node: Node) -> None:
    """A registration builds the node afresh: what its reboot is doing is kept."""
    node.reboot, node.reboot_asap = known.reboot, known.reboot_asap
    node.reboot_next, node.reboot_reason = known.reboot_next, known.reboot_reason


def display_flag(node: Node) -> str:
    """scontrol's state flag (``IDLE+REBOOT_REQUESTED``), '' when no reboot is asked."""
    return {REQUESTED: "+REBOOT_REQUESTED", ISSUED: "+REBOOT_ISSUED"}.get(node.reboot, "")
