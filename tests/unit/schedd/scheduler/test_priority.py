"""Multifactor priority: age (capped), fair share, job size, partition, QOS, association,
nice, and the admin override."""

from __future__ import annotations

from kiln.config import SchedulerConfig
from schedd.scheduler.cycle import schedule
from schedd.scheduler.priority import ClusterSize, priorities
from schedd.scheduler.snapshot import NodeView, PendingJob, Snapshot

NOW = 10_000_000.0
DAY = 86400
ONLY_AGE = dict(weight_fairshare=0, weight_partition=0, weight_qos=0, weight_job_size=0)
CLUSTER = ClusterSize(cpus=256, gpus=32)


def prio(jobs: list[PendingJob], **knobs) -> dict[int, float]:
    return priorities(jobs, NOW, SchedulerConfig(**knobs), CLUSTER, {})


def test_age_is_capped_at_max_age() -> None:
    jobs = [PendingJob(1, submit_time=NOW - 14 * DAY), PendingJob(2, submit_time=NOW - 7 * DAY),
            PendingJob(3, submit_time=NOW - 3.5 * DAY), PendingJob(4, submit_time=NOW + 10)]
    p = prio(jobs, **ONLY_AGE)
    assert p[1] == p[2] == 1000
    assert p[3] == 500
    assert p[4] == 0


def test_nice_subtracts_and_admin_overrides() -> None:
    jobs = [PendingJob(1, submit_time=NOW - 7 * DAY, nice=300),
            PendingJob(2, submit_time=NOW, admin_priority=42),
            PendingJob(3, submit_time=NOW - 7 * DAY, admin_priority=0)]
    p = prio(jobs, **ONLY_AGE)
    assert p[1] == 700
    assert p[2] == 42 and p[3] == 0
    d = schedule(Snapshot(NOW, [NodeView("n", 1, 0)], [], jobs),
                 SchedulerConfig(**ONLY_AGE))
    assert d.priorities == {1: 700, 2: 42, 3: 0}


def test_partition_qos_assoc_normalised_by_largest() -> None:
    jobs = [PendingJob(1, submit_time=NOW, partition_priority=2, qos_priority=10,
                       assoc_priority=5),
            PendingJob(2, submit_time=NOW, partition_priority=4, qos_priority=40,
                       assoc_priority=0)]
    p = prio(jobs, weight_age=0, weight_fairshare=0, weight_assoc=100)
    assert p[1] == 1000 * 0.5 + 1000 * 0.25 + 100
    assert p[2] == 1000 + 1000


def test_job_size_large_small_and_relative_to_time() -> None:
    big = PendingJob(1, submit_time=NOW, gpus_per_node=8, num_nodes=2, time_limit=3600)
    small = PendingJob(2, submit_time=NOW, gpus_per_node=1, time_limit=3600)
    short_big = PendingJob(3, submit_time=NOW, gpus_per_node=8, num_nodes=2, time_limit=60)
    knobs = dict(weight_age=0, weight_fairshare=0, weight_partition=0, weight_job_size=1000)
    p = prio([big, small, short_big], **knobs)
    assert p[1] == 500 and p[2] == 1000 / 32
    p = prio([big, small, short_big], favor_small=True, **knobs)
    assert p[2] > p[1]
    p = prio([big, small, short_big], favor_small=True, size_relative_to_time=True, **knobs)
    assert p[3] > p[2] > p[1]  # 16 GPU-minutes < 1 GPU-hour < 16 GPU-hours


def test_priority_orders_the_queue() -> None:
    old = PendingJob(1, submit_time=NOW - DAY, cpus_per_node=1)
    new = PendingJob(2, submit_time=NOW - 10, cpus_per_node=1)
    snap = Snapshot(NOW, [NodeView("n", 1, 0)], [], [new, old])
    d = schedule(snap, SchedulerConfig(**ONLY_AGE))
    assert [s.job_id for s in d.starts] == [1]
    assert d.reasons == {2: "Resources"}
    new.nice = -10_000
    d = schedule(snap, SchedulerConfig(**ONLY_AGE))
    assert [s.job_id for s in d.starts] == [2]
