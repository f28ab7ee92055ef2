"""The cycle's fast paths give exactly what the general code gives.

- ``cycle.by_submit`` (priority order = submit order) against ``cycle.ordered`` over the floats
  of ``priority.priorities``, on shuffled queues with submit ties, nice values and promises of
  every size (picked out one by one and by a mask), and, on queues in arrival order, with the
  order vouched for (``in_order``: no check, promised jobs found without a list of ids);
- the constant priority shown for every job against ``priority.displayed``;
- ``NodeTimeline.first_start`` against the first of ``start_intervals``.
"""

from __future__ import annotations

import dataclasses
import random

from kiln.config import SchedulerConfig
from schedd.scheduler import cycle, priority
from schedd.scheduler.profile import Demand, NodeTimeline
from schedd.scheduler.snapshot import NodeView, PendingJob, Snapshot

NOW = 10_000_000.0
CLUSTER = priority.ClusterSize(cpus=256, gpus=0)
TEXTBOOK = SchedulerConfig(weight_age=0, weight_fairshare=0, weight_partition=0, weight_qos=0)
AGE_ONLY = SchedulerConfig(weight_fairshare=0, weight_qos=0, max_age=3600)


def _queue(rng: random.Random, n: int, nice: bool) -> list[PendingJob]:
    jobs = [PendingJob(i, cpus_per_node=rng.randint(1, 64),
                       submit_time=NOW - rng.choice([0, 10, 10, 4000, 9000, rng.uniform(0, 9000)]),
                       nice=rng.choice([0, 0, 5, -3]) if nice else 0)
            for i in range(1, n + 1)]
    if rng.random() < 0.5:
        jobs.sort(key=lambda j: (j.submit_time, j.job_id))  # arrival order: the quick check
    else:
        rng.shuffle(jobs)
    return jobs


def _promised(rng: random.Random, jobs: list[PendingJob]) -> dict[int, float]:
    size = rng.choice([0, 1, 3, len(jobs) // 2, len(jobs)])
    chosen = rng.sample(jobs, min(size, len(jobs)))
    out = {j.job_id: NOW + rng.choice([100, 100, 200, 700]) for j in chosen}
    if rng.random() < 0.3:
        out[10_000] = NOW + 5  # a promise of a job no longer pending
    return out


def test_by_submit_matches_the_general_order() -> None:
    rng = random.Random(7)
    for case in range(400):
        config = TEXTBOOK if case % 2 else AGE_ONLY
        jobs = _queue(rng, rng.randint(1, 60), nice=config is TEXTBOOK)
        promised = _promised(rng, jobs)
        assert priority.submit_ordered(jobs, config, None)
        prio = priority.priorities(jobs, NOW, config, CLUSTER, None)
        order, ranked, _ = cycle.by_submit(jobs, promised)
        assert order == cycle.ordered(jobs, prio, promised)
        assert ranked == cycle.ordered(jobs, prio, {})
        if len({j.nice for j in jobs}) == 1 and ranked == jobs:  # what in_order vouches
            assert cycle.by_submit(jobs, promised, in_order=True) == (order, ranked, True)


def test_queues_the_fast_path_must_not_take() -> None:
    jobs = [PendingJob(1, submit_time=NOW - 50), PendingJob(2, submit_time=NOW)]
    assert priority.submit_ordered(jobs, SchedulerConfig(), None)
    admin = [jobs[0], dataclasses.replace(jobs[1], admin_priority=5)]
    assert not priority.submit_ordered(admin, SchedulerConfig(), None)
    niced = [jobs[0], dataclasses.replace(jobs[1], nice=-100)]
    assert not priority.submit_ordered(niced, AGE_ONLY, None)  # age minus nice: no order
    assert priority.submit_ordered(niced, TEXTBOOK, None)  # nice alone: lower first
    parts = [jobs[0], dataclasses.replace(jobs[1], partition_priority=5)]
    assert not priority.submit_ordered(parts, SchedulerConfig(), None)
    assert not priority.submit_ordered(jobs, SchedulerConfig(weight_job_size=10), None)
    shares = {("a", "u"): 0.5}
    assert not priority.submit_ordered(jobs, SchedulerConfig(), shares)


def test_shown_priorities_match_the_general_path() -> None:
    rng = random.Random(11)
    node = NodeView("n1", 256, 1000)
    no_ramp = SchedulerConfig(weight_fairshare=0, weight_qos=0, max_age=0)
    with_qos = SchedulerConfig(weight_fairshare=0, max_age=3600)
    for case in range(120):
        config = [TEXTBOOK, AGE_ONLY, no_ramp, with_qos][case % 4]
        jobs = _queue(rng, rng.randint(1, 40), nice=case % 3 == 0)
        if config is with_qos and case % 8 == 3:
            jobs = [dataclasses.replace(j, qos_priority=10) for j in jobs]  # not plain
        jobs += [dataclasses.replace(j, job_id=j.job_id + 100, submit_time=NOW + 30)
                 for j in jobs[:2]]  # submitted after now: age 0
        snap = Snapshot(NOW, [node], [], jobs, promised=_promised(rng, jobs))
        prio = priority.priorities(jobs, NOW, config, CLUSTER, None)
        assert cycle.schedule(snap, config).priorities == priority.displayed(jobs, prio)


def test_first_start_is_the_first_start_interval() -> None:
    rng = random.Random(3)
    view = NodeView("n1", 64, 1000)
    for _ in range(300):
        tl = NodeTimeline(0, view, NOW)
        for _ in range(rng.randint(0, 8)):
            start = NOW + rng.choice([0, 0, 60, 120, 300, 600])
            tl.hold(Demand(rng.randint(1, 32), 0, 0), start, start + rng.choice([60, 240, 900]))
        d = Demand(rng.randint(1, 64), 0, 0)
        duration = rng.choice([1, 60, 200, 1000])
        after = NOW + rng.choice([0, 0, 30, 500])
        starts = [max(lo, after) for lo, hi in tl.start_intervals(d, duration) if hi >= after]
        tl._memo.clear()  # answer by the scan, not from the memo start_intervals filled
        assert tl.first_start(d, duration, after) == (starts[0] if starts else None)
