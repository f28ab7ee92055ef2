"""placement.EarliestMemo: a walk's reservations answered from kept per-node answers must be
the answers of asking every node again (the same schedule, start for start)."""

from __future__ import annotations

import random

import pytest

from cli.bench import synthetic_snapshot
from kiln.config import SchedulerConfig
from schedd.scheduler import placement
from schedd.scheduler.cycle import schedule
from schedd.scheduler.placement import EarliestMemo, earliest_start
from schedd.scheduler.profile import Demand, NodeTimeline
from schedd.scheduler.snapshot import PendingJob
from tests.builders import node_view

NOW = 1_000_000.0


def decisions(snapshot, config):
    d = schedule(snapshot, config)
    return d.starts, d.expected_start, d.reserved_nodes, d.reasons


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("placement_kind", ["frag", "bestfit"])
def test_cycle_with_memo_is_the_cycle_without(monkeypatch, seed: int,
                                              placement_kind: str) -> None:
    snap = synthetic_snapshot(600, 48, 8, seed, placement=placement_kind)
    config = SchedulerConfig(bf_max_reservations=60, fill="short_area")
    with_memo = decisions(snap, config)
    assert with_memo[1], "the case must make reservations"
    monkeypatch.setattr(placement, "MEMO_MIN_NODES", 10**9)  # every question asked afresh
    assert decisions(snap, config) == with_memo


def test_memo_sees_every_change_between_questions() -> None:
    rng = random.Random(7)
    nodes = [NodeTimeline(i, node_view(f"n{i}", 8), NOW) for i in range(40)]
    memo = EarliestMemo()
    for round_ in range(200):
        gpus = rng.choice((1, 2, 4, 8))
        job = PendingJob(round_, num_nodes=rng.choice((1, 1, 2, 3)), gpus_per_node=gpus,
                         cpus_per_node=gpus, mem_per_node_mb=100 * gpus)
        duration = rng.choice((600.0, 3600.0))
        want = earliest_start(job, nodes, NOW, duration, NOW + 86400)
        got = earliest_start(job, nodes, NOW, duration, NOW + 86400, memo)
        assert got == want
        if got is not None:  # reserve it, as a walk does: the next answers must see it
            t, chosen = got
            for tl in chosen:
                tl.hold(Demand(job.cpus_per_node, job.mem_per_node_mb, gpus), t,
                        t + duration)
