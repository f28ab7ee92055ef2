"""Why a job waits, in plain words: what ``kiln why`` prints.

Slurm answers "why is my job pending" with a reason code (``Priority``, ``AssocGrpGRES``) and
leaves the rest to ``sprio`` and guesswork. kiln puts the pieces together: the reason in a
sentence, the job's place in its partition's queue, the priority factors of the jobs ahead of
it (each factor's weighted contribution, computed by the scheduler core's own
``priority.priorities`` with one weight switched on at a time, so the figures cannot drift
from what the cycle uses), and the expected start of the last backfill plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kiln.config import SchedulerConfig
from kiln.model import Job
from kiln.slurm.topology import Topology
from schedd.scheduler import priority
from schedd.scheduler.snapshot import AssocKey, NodeView, PendingJob

# Slurm's pending reasons, said plainly. Anything not listed is shown as its code.
REASONS: dict[str, str] = {
    "Priority": "jobs of higher priority are ahead of it in the queue",
    "Resources": "it is at the front, waiting for enough nodes, CPUs, memory or GPUs to free up",
    "Dependency": "it waits for the jobs it depends on (--dependency)",
    "DependencyNeverSatisfied": "its dependency can never be satisfied; it will not start "
                                "(cancel it, or change it with scontrol update)",
    "JobHeldUser": "you held it (scontrol hold / sbatch -H); scontrol release starts it",
    "JobHeldAdmin": "an administrator held it; only an administrator can release it",
    "launch failed requeued held": "the prolog failed on the node it was started on (the "
                                   "node is drained); nothing of it ran; scontrol release "
                                   "queues it again",
    "BeginTime": "its --begin time has not come yet",
    "JobArrayTaskLimit": "its array already runs as many tasks as its %N throttle allows",
    "Reservation": "it waits for its reservation to begin",
    "ReqNodeNotAvail": "a node it requires (-w) is down, drained or reserved",
    "PartitionTimeLimit": "its time limit is above the partition's MaxTime",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "AssocGrpGRES": "its account's GPU limit (GrpTRES=gres/gpu) is in use by other jobs",
    "AssocGrpCpuLimit": "its account's CPU limit (GrpTRES=cpu) is in use by other jobs",
    "AssocGrpMemLimit": "its account's memory limit (GrpTRES=mem) is in use by other jobs",
    "AssocGrpNodeLimit": "its account's node limit (GrpTRES=node) is in use by other jobs",
    "AssocGrpGRESMinutes": "its account has used up its GPU-minutes (GrpTRESMins=gres/gpu)",
    "AssocGrpCPUMinutesLimit": "its account has used up its CPU-minutes (GrpTRESMins=cpu)",
    "AssocGrpJobsLimit": "its account runs as many jobs as GrpJobs allows",
    "AssocMaxJobsLimit": "you run as many jobs in this account as MaxJobs allows",
    "AssocMaxWallDurationPerJobLimit": "its time limit is above the association's MaxWall",
    "QOSMaxJobsPerUserLimit": "you run as many jobs as its QOS's MaxJobsPerUser allows",
    "QOSGrpGRES": "its QOS's GPU limit is in use by other jobs",
    "QOSMaxGRESPerUser": "your GPUs in this QOS are at its MaxTRESPerUser",
    "QOSMaxWallDurationPerJobLimit": "its time limit is above its QOS's MaxWall",
    "None": "nothing holds it back; it should start at the next scheduling cycle",
}

_WEIGHTS = {"age": "weight_age", "fairshare": "weight_fairshare", "job_size": "weight_job_size",
            "partition": "weight_partition", "qos": "weight_qos", "assoc": "weight_assoc"}


def topology_text(job: Job, topology: Topology | None, now: float,
                  max_switch_wait: int) -> str:
    """What a pending job waits for in the network ([topology], scheduler/topology.py), in
    words; "" for a one-node job or a cluster without a topology."""
    if topology is None or not (job.num_nodes > 1 or job.exclusive_topo or job.segment):
        return ""
    group = "blocks" if topology.plugin == "block" else "leaf switches"
    one = "block" if topology.plugin == "block" else "leaf switch"
    parts = []
    if job.switches:
        wait = min(job.switch_wait if job.switch_wait is not None else max_switch_wait,
                   max_switch_wait)
        left = job.submit_time + wait - now
        if left > 0:
            parts.append(f"at most {job.switches} {one if job.switches == 1 else group} "
                         f"(--switches={job.switches}), waited for {int(left + 0.999)} s more; "
                         f"then it takes the nodes there are")
        else:
            parts.append(f"its wait for {job.switches} {one if job.switches == 1 else group} "
                         f"(--switches) is over: it takes the nodes there are")
    if job.segment:
        parts.append(f"{job.num_nodes // job.segment} segment(s) of {job.segment} nodes "
                     f"(--segment={job.segment}), each inside one {one}")
    if job.exclusive_topo:
        parts.append(f"whole {group} to itself (--exclusive=topo)")
    if not parts:
        parts.append(f"its {job.num_nodes} nodes in as few {group} as hold them")
    return "; ".join(parts)


def reason_text(reason: str) -> str:
    return REASONS.get(reason, f"Slurm reason {reason}")


def factor_breakdown(pending: Sequence[PendingJob], now: float, config: SchedulerConfig,
                     nodes: Sequence[NodeView],
                     shares: Mapping[AssocKey, float] | None) -> dict[int, dict[str, float]]:
    """Each pending job's weighted priority factors (what sprio shows), plus ``nice``.

    ``shares``: the association tree's fair-share factors as the cycle uses them
    (``FairShareTree.cycle_factors``: None without a tree, every job's factor then 1).

    Every factor is the core's own sum with all weights but that one set to zero; a job with
    an administrator's fixed priority has only ``admin``.
    """
    cluster = priority.ClusterSize.of(list(nodes))
    zero = {name: 0 for name in _WEIGHTS.values()}
    out: dict[int, dict[str, float]] = {j.job_id: {} for j in pending}
    for factor, weight in _WEIGHTS.items():
        if not getattr(config, weight):
            continue
        one = dataclasses.replace(config, **{**zero, weight: getattr(config, weight)})
        values = priority.priorities(pending, now, one, cluster,
                                     shares if factor == "fairshare" else {})
        for job in pending:
            if job.admin_priority is None:
                out[job.job_id][factor] = values[job.job_id] + job.nice
    for job in pending:
        if job.admin_priority is not None:
            out[job.job_id] = {"admin": float(job.admin_priority)}
        elif job.nice:
            out[job.job_id]["nice"] = -float(job.nice)
    return out
