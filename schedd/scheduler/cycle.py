"""One scheduling cycle over a snapshot (first version: priority order, first fit).

Phases:
1. order the pending jobs (priority, then submit time, then id)
2. compute what each node has free from the running jobs
3. walk the jobs in order; start each that fits now, mark the rest Priority/Resources
"""

from __future__ import annotations

from schedd.config import SchedulerConfig
from schedd.model import NodeAllocation
from schedd.scheduler.snapshot import Decisions, NodeView, PendingJob, Snapshot, Start


def schedule(snapshot: Snapshot, config: SchedulerConfig) -> Decisions:
    decisions = Decisions()
    order = sorted(snapshot.pending, key=lambda j: (j.submit_time, j.job_id))
    free = _free_resources(snapshot)
    blocked = False
    for job in order:
        if blocked:
            decisions.reasons[job.job_id] = "Priority"
            continue
        alloc = _first_fit(job, snapshot.nodes, free)
        if alloc is None:
            decisions.reasons[job.job_id] = "Resources"
            blocked = True
            continue
        for a in alloc:
            cpus, mem, gpus = free[a.node]
            free[a.node] = (cpus - a.cpus, mem - a.memory_mb, [g for g in gpus if g not in a.gpus])
        decisions.starts.append(Start(job.job_id, alloc))
    return decisions


def _free_resources(snapshot: Snapshot) -> dict[str, tuple[int, int, list[int]]]:
    free = {n.name: (n.cpus, n.memory_mb, [g.index for g in n.gpus]) for n in snapshot.nodes}
    for run in snapshot.running:
        for a in run.allocation:
            if a.node in free:
                cpus, mem, gpus = free[a.node]
                free[a.node] = (cpus - a.cpus, mem - a.memory_mb, [g for g in gpus if g not in a.gpus])
    return free


def _first_fit(job: PendingJob, nodes: list[NodeView], free) -> list[NodeAllocation] | None:
    chosen: list[NodeAllocation] = []
    for node in nodes:
        if not node.available or (job.partition and job.partition not in node.partitions):
            continue
        cpus, mem, gpus = free[node.name]
        if cpus >= job.cpus_per_node and mem >= job.mem_per_node_mb and len(gpus) >= job.gpus_per_node:
            chosen.append(NodeAllocation(node.name, job.cpus_per_node, job.mem_per_node_mb,
                                         gpus[: job.gpus_per_node]))
            if len(chosen) == job.num_nodes:
                return chosen
    return None
