"""Multifactor priority, Slurm's way: a weighted sum of factors in [0, 1], minus nice.

``priority = w_age*age + w_fairshare*fairshare + w_job_size*size + w_partition*partition
+ w_qos*qos + w_assoc*assoc - nice``, where

- age: time since submit over PriorityMaxAge, capped at 1;
- fairshare: the association's classic factor (``fairshare.factors``); 1 for every job when
  there is no association tree, 0 for a job outside the tree;
- job size: the job's share of the cluster (GPUs when it asks for GPUs, else CPUs); with
  PriorityFavorSmall, 1 minus that; with SMALL_RELATIVE_TO_TIME, the share per hour of time
  limit, so short narrow jobs come first (``favor_small`` then reads as "small and short");
- partition, QOS, association: their priority over the largest among the pending jobs.

``PendingJob.admin_priority`` (scontrol update Priority=) replaces the sum. The float is the
order; the int (at least 1 unless admin-set to 0) is what squeue %Q and scontrol show.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add, attrgetter, mul, sub

from kiln.config import SchedulerConfig
from schedd.scheduler.fairshare import job_factor
from schedd.scheduler.snapshot import AssocKey, NodeView, PendingJob


@dataclass(slots=True, frozen=True)
class ClusterSize:
    """Totals the job-size factor is measured against."""

    cpus: int
    gpus: int

    @classmethod
    def of(cls, nodes: Sequence[NodeView]) -> ClusterSize:
        return cls(sum(n.cpus for n in nodes), sum(len(n.gpus) for n in nodes))


def size_factor(job: PendingJob, cluster: ClusterSize, config: SchedulerConfig) -> float:
    if job.gpus_per_node and cluster.gpus:
        share = job.total_gpus / cluster.gpus
    else:
        share = job.cpus_per_node * job.num_nodes / max(cluster.cpus, 1)
    share = min(share, 1.0)
    if config.size_relative_to_time:
        # share per hour of limit, squashed into [0, 1]: 1 hour of the whole cluster = 0.5
        hours = max(job.time_limit, 1) / 3600.0
        x = share * hours
        share = x / (1.0 + x)
    return 1.0 - share if config.favor_small else share


def priorities(
    pending: Sequence[PendingJob],
    now: float,
    config: SchedulerConfig,
    cluster: ClusterSize,
    fairshare: Mapping[AssocKey, float] | None,
) -> dict[int, float]:
    """The priority of every pending job, as a float (order) ready to be rounded for display."""
    max_part = max(map(_partition_priority, pending), default=1) or 1
    max_qos = max(map(_qos_priority, pending), default=0) if config.weight_qos else 0
    max_assoc = max(map(_assoc_priority, pending), default=0) if config.weight_assoc else 0
    w_age, w_fs, w_size = config.weight_age, config.weight_fairshare, config.weight_job_size
    w_part = config.weight_partition / max_part
    w_qos = config.weight_qos / max_qos if max_qos > 0 else 0.0
    w_assoc = config.weight_assoc / max_assoc if max_assoc > 0 else 0.0
    age_rate = w_age / config.max_age if config.max_age > 0 else 0.0
    oldest = now - config.max_age  # submitted before this: age factor 1
    # with no association tree every job's fair-share factor is 1: a constant
    constant_fs = w_fs if fairshare is None else 0.0
    out: dict[int, float] = {}
    for job in pending:
        if job.admin_priority is not None:
            out[job.job_id] = float(job.admin_priority)
            continue
        submit = job.submit_time
        if submit <= oldest or age_rate == 0.0:
            p = float(w_age) if submit <= now else 0.0
        else:
            p = age_rate * (now - submit) if submit < now else 0.0
        p += constant_fs + w_part * job.partition_priority - job.nice
        if fairshare is not None and w_fs:
            p += w_fs * job_factor(fairshare, job.account, job.user)
        if w_size:
            p += w_size * size_factor(job, cluster, config)
        if w_qos and job.qos_priority > 0:
            p += w_qos * job.qos_priority
        if w_assoc and job.assoc_priority > 0:
            p += w_assoc * job.assoc_priority
        out[job.job_id] = p
    return out


def submit_ordered(pending: Sequence[PendingJob], config: SchedulerConfig,
                   fairshare: Mapping[AssocKey, float] | None,
                   plain_arrivals: bool = False) -> bool:
    """Whether priority order is (nice, submit time, job id) for this queue, so the cycle can
    skip ranking (``cycle.by_submit``).

    True when no job has an admin-set priority and every factor but age and nice weighs nothing
    or is the same for every job: the sum is then a constant plus the age term minus nice. Age
    never grows with a later submit (and saturates into a tie at PriorityMaxAge, broken by
    submit time anyway); float addition and multiplication by a non-negative weight are
    monotone, so the floats ``priorities`` computes order the jobs as submit time does. With
    age weighing, nice must be the same for every job too (age minus nice is not an order of
    either); without, lower nice simply comes first. The textbook policies (every weight 0) and
    kiln without an association tree take this path.

    ``plain_arrivals``: the caller vouches that no job has an admin-set priority and every job
    the same nice and the same partition, QOS and association priority
    (``Snapshot.plain_arrivals``), so those passes over the queue, run every cycle, are skipped.
    """
    if config.weight_age < 0 or config.weight_job_size:
        return False
    if fairshare is not None and config.weight_fairshare:
        return False
    if plain_arrivals:
        return True
    if list(map(_ADMIN, pending)).count(None) != len(pending):
        return False
    if config.weight_age and not _same(pending, _NICE):
        return False
    if config.weight_partition and not _same(pending, _PARTITION):
        return False
    if config.weight_qos and not _same(pending, _QOS):
        return False
    return not config.weight_assoc or _same(pending, _ASSOC)


def constant(config: SchedulerConfig) -> bool:
    """Whether, on a ``submit_ordered`` queue of one nice value, every job has the same
    priority (age does not weigh): then one job's priority is every job's."""
    return config.weight_age == 0


def displayed_by_age(ranked: Sequence[PendingJob], now: float, config: SchedulerConfig,
                     cluster: ClusterSize,
                     fairshare: Mapping[AssocKey, float] | None) -> dict[int, int]:
    """``displayed(priorities(...))`` for a ``submit_ordered`` queue of one nice value, given in
    submit order: the same integers, computed in C-level passes.

    Every job's sum is its age term plus the one constant rest (partition, fair share without a
    tree, nice), as ``priorities`` adds them, so each float is bit for bit the same; a queue
    whose jobs also add a QOS or association term is not ``plain`` and goes the general way.
    Jobs submitted at or before ``now - max_age`` (a prefix of the queue) have age
    ``weight_age``, jobs submitted at ``now`` or later (a suffix) 0, the others
    ``rate * (now - submit)``.
    """
    head = ranked[0]
    rest = priorities([dataclasses.replace(head, submit_time=now + 1.0)], now, config, cluster,
                      fairshare)[head.job_id]  # submitted after now: age 0.0, the rest alone
    submits = list(map(_SUBMIT, ranked))
    w_age = float(config.weight_age)
    if config.max_age > 0 and config.weight_age:
        rate = config.weight_age / config.max_age
        capped = bisect_right(submits, now - config.max_age)
    else:  # no ramp: every job already submitted has the whole weight
        rate = 0.0
        capped = bisect_right(submits, now)
    young = max(bisect_left(submits, now), capped)
    ages = [w_age] * capped
    ages += map(mul, repeat(rate), map(sub, repeat(now), submits[capped:young]))
    ages += [0.0] * (len(submits) - young)
    rounded = map(int, map(add, map(add, ages, repeat(rest)), repeat(0.5)))
    return dict(zip(map(_JOB_ID, ranked), map(max, rounded, repeat(1)), strict=True))


def plain(job: PendingJob, config: SchedulerConfig) -> bool:
    """Whether the job's sum adds no QOS or association term (``displayed_by_age``)."""
    return not ((config.weight_qos and job.qos_priority > 0)
                or (config.weight_assoc and job.assoc_priority > 0))


def _same(pending: Sequence[PendingJob], get: attrgetter) -> bool:
    """Every job has the same value of the attribute (a set built in C: cheap per job)."""
    return len(set(map(get, pending))) <= 1


_NICE = attrgetter("nice")
_SUBMIT = attrgetter("submit_time")
_JOB_ID = attrgetter("job_id")
_ADMIN = attrgetter("admin_priority")
_PARTITION = attrgetter("partition_priority")
_QOS = attrgetter("qos_priority")
_ASSOC = attrgetter("assoc_priority")


def _partition_priority(job: PendingJob) -> int:
    return job.partition_priority


def _qos_priority(job: PendingJob) -> int:
    return job.qos_priority


def _assoc_priority(job: PendingJob) -> int:
    return job.assoc_priority


def display(value: float, admin: bool) -> int:
    """The integer squeue shows: Slurm keeps computed priorities at 1 or more."""
    if admin:
        return int(value)
    return max(int(round(value)), 1)


def displayed(pending: Sequence[PendingJob], prio: Mapping[int, float]) -> dict[int, int]:
    """``display`` for every pending job."""
    out = {}
    for j in pending:
        v = prio[j.job_id]
        if j.admin_priority is not None:
            out[j.job_id] = int(v)
        else:
            r = int(v + 0.5)
            out[j.job_id] = r if r > 1 else 1
    return out
