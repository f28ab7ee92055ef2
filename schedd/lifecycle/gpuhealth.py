"""GPU health, schedd's side: a fatal fault drains that GPU only.

An agent reports each NVML fault it sees (agentd/gpuhealth.py, in its heartbeat). ``record``
writes every one to the node's audit history (``kiln events``); a fatal one
(``kiln.slurm.gpufaults.is_fatal``) marks the GPU failed (``GPU.fault``, in the ledger) and
gives the node a Reason naming it (``sinfo -R``, ``scontrol show node``). The node stays in
service: placement sees only its healthy GPUs (``snapshots.build``), so its other GPUs keep
being scheduled, and a job wanting more GPUs than are left pends.

The job running on a failed GPU (``tick``, every loop turn):

1. gets its ``--signal`` at once (else SIGTERM; ``B:`` the batch shell alone), as a
   preemption victim does, so it can checkpoint;
2. after ``gpu_fault_grace`` seconds is stopped as NODE_FAIL (SIGTERM, SIGKILL after
   KillWait), and requeued when it may be (``--requeue``, the default; as for a node set DOWN,
   ``transitions._stopped``). Its reason says which GPU failed and why.

``tick`` works from the GPUs' faults in memory (rebuilt from the ledger at start), so a schedd
restarted in the middle notices the job again. The GPU returns only with ``scontrol update
NodeName=X State=RESUME`` (``resume``), which also tells the agent to watch it afresh.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from kiln.model import Job, JobState, Node
from kiln.slurm.gpufaults import describe, is_fatal
from kiln.slurm.signals import notice_signal
from schedd.lifecycle.context import Context
from schedd.lifecycle.transitions import request_stop

log = logging.getLogger("schedd.gpuhealth")

REASON_PREFIX = "GPU "

def gpu_reason(node: Node) -> str:
    """The node's Reason for its failed GPUs: ``GPU 1: Xid 79 (...); GPU 3: ...``."""
    return "; ".join(f"GPU {g.index}: {g.fault}" for g in node.gpus if g.fault)[:256]


def record(ctx: Context, name: str, faults: list[dict[str, Any]], now: float) -> None:
    """An agent's reported faults (typed by operations.AGENT_OPS): audited; fatal ones fail
    their GPU."""
    node = ctx.state.nodes.get(name)
    if node is None:
        return
    failed: dict[int, str] = {}
    by_index = {g.index: g for g in node.gpus}
    for f in faults:
        gpu = by_index.get(f["index"])
        if gpu is None:
            continue
        text = describe(f["kind"], f.get("xid") or 0)
        fatal = is_fatal(f["kind"], f.get("xid") or 0)
        ctx.state.audit(os.geteuid(), "gpu_fault" if fatal else "gpu_event", f"node {name}",
                        f"gpu={gpu.index} uuid={gpu.uuid} {text}"
                        + ("" if fatal else " (the application's; GPU stays in service)"),
                        now)
        if fatal and not gpu.fault and gpu.index not in failed:
            failed[gpu.index] = text
            log.error("node %s GPU %d failed: %s: out of service until scontrol update "
                      "NodeName=%s State=RESUME", name, gpu.index, text, name)
        elif not fatal:
            log.warning("node %s GPU %d: %s (the application's)", name, gpu.index, text)
    if not failed:
        return
    gpus = [dataclasses.replace(g, fault=failed[g.index]) if g.index in failed else g
            for g in node.gpus]
    changed = dataclasses.replace(node, gpus=gpus)
    if not node.reason or node.reason.startswith(REASON_PREFIX):
        changed.reason = gpu_reason(changed)
        changed.reason_time, changed.reason_uid = now, os.geteuid()
    ctx.state.save_node(changed)
    tick(ctx, now)
    ctx.wake_scheduler()


def on_failed_gpu(ctx: Context) -> list[tuple[Job, str]]:
    """Running jobs holding a failed GPU, with what failed (the first such GPU)."""
    failed = {(n.name, g.index): g.fault for n in ctx.state.nodes.values() for g in n.gpus
              if g.fault}
    if not failed:
        return []
    out = []
    for job in ctx.state.running():
        for a in job.allocation:
            hit = next((i for i in a.devices if (a.node, i) in failed), None)
            if hit is not None:
                out.append((job, f"GPU {hit} of {a.node} failed: {failed[(a.node, hit)]}"))
                break
    return out


def tick(ctx: Context, now: float) -> None:
    """Notify, then after the grace stop, each job on a failed GPU (see the module)."""
    noticed: dict[int, tuple[int, float]] = ctx.agents.gpu_noticed
    grace = float(ctx.cfg.gpu_fault_grace)
    alive = set()
    for job, why in on_failed_gpu(ctx):
        alive.add(job.id)
        seen = noticed.get(job.id)
        if seen is None or seen[0] != job.generation:
            if job.state != JobState.RUNNING:
                continue  # already stopping for another cause
            signum, batch_only = notice_signal(job.signal)
            ctx.agents.signal(job, signum, batch_only, full=not batch_only)
            noticed[job.id] = (job.generation, now + grace)
            ctx.state.commit([(job, {"reason": why[:256]})])
            log.warning("JobId=%d: %s: signalled %d, stopped in %.0f s", job.id, why, signum,
                        grace)
            continue
        if now >= seen[1] and job.state == JobState.RUNNING:
            request_stop(ctx, [job], "gpu_fail", JobState.NODE_FAIL, now, requeue=True,
                         detail=why)
    for job_id in set(noticed) - alive:
        del noticed[job_id]


def resume(ctx: Context, node: Node) -> Node:
    """scontrol update State=RESUME: the node's GPUs back in service (its agent watches them
    afresh); returns the node with its faults cleared, for the caller to save."""
    failed = [g.index for g in node.gpus if g.fault]
    if not failed:
        return node
    ctx.agents.gpu_reset(node.name, failed)
    log.info("node %s GPUs %s resumed", node.name, failed)
    return dataclasses.replace(node, gpus=[dataclasses.replace(g, fault="") for g in node.gpus])
