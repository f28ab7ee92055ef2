"""The availability profile: step functions per node, start intervals, rounding, prediction."""

from __future__ import annotations

from schedd.scheduler.profile import (
    INFINITY,
    Demand,
    RuntimeHistory,
    build,
    planning_end,
    round_up,
)
from schedd.scheduler.snapshot import NodeView, RunningJob
from tests import builders
from tests.builders import node_view

NOW = 1000.0


def node() -> NodeView:
    return node_view("n", 4, cpus=8, memory_mb=100, gpu_type="", model="H100", gpu_memory_mb=1)


def running(job_id: int, gpus: list[int], end: float) -> RunningJob:
    return builders.running(job_id, "n", gpus, cpus=2, memory_mb=10, start=NOW - 10, end=end)


def test_build_releases_in_time_order() -> None:
    [tl] = build(NOW, [node()], [running(1, [0, 1], 1300), running(2, [2], 1100)], 1)
    assert tl.times == [NOW, 1100, 1300]
    assert tl.gpus == [1, 2, 4]
    assert tl.cpus == [4, 6, 8]
    assert tl.gpus_free == [3]
    assert tl.monotone


def test_start_intervals_around_a_reservation() -> None:
    [tl] = build(NOW, [node()], [running(1, [0, 1], 1300)], 1)
    tl.hold(Demand(0, 0, 4), 1500, 1600)
    assert not tl.monotone
    d = Demand(1, 1, 2)
    assert tl.start_intervals(d, 100) == [(NOW, 1400), (1600, INFINITY)]
    assert tl.earliest(Demand(1, 1, 3), 100) == 1300
    assert tl.earliest(Demand(1, 1, 3), 300) == 1600
    assert tl.fits(d, NOW, 1500) and not tl.fits(d, NOW, 1501)
    assert tl.free_at(1550) == (8, 100, 0)


def test_hold_now_keeps_monotone() -> None:
    [tl] = build(NOW, [node()], [], 1)
    tl.hold(Demand(2, 10, 2), NOW, 1200)
    assert tl.monotone
    assert tl.gpus == [2, 4]


def test_round_up_grid() -> None:
    assert round_up(61, 60) == 120
    assert round_up(120, 60) == 120
    assert round_up(61.5, 1) == 61.5
    assert round_up(INFINITY, 60) == INFINITY


def test_running_job_end_rounded_up_never_before_now() -> None:
    [tl] = build(NOW, [node()], [running(1, [0], 1001), running(2, [1], 900)], 60)
    assert tl.times == [NOW, 1020]
    assert tl.gpus == [2, 4]  # the overdue job still holds its GPU now


def test_overdue_job_is_not_free_now() -> None:
    [tl] = build(NOW, [node()], [running(1, [0, 1, 2, 3], 900)], 1)
    assert tl.gpus[0] == 0 and tl.times == [NOW, NOW + 1]


def test_prediction_only_shortens_the_plan() -> None:
    run = running(1, [0], 2000)
    assert planning_end(run, True) == 2000
    run.predicted_end = 1500
    assert planning_end(run, False) == 2000
    assert planning_end(run, True) == 1500
    run.predicted_end = 5000
    assert planning_end(run, True) == 2000


def test_runtime_history_mean_of_last_two_capped() -> None:
    h = RuntimeHistory()
    shape = h.shape(1, 8, 2, 3600)
    assert h.predict("ann", shape, 3600) is None
    for r in (100, 200, 400):
        h.record("ann", shape, r)
    assert h.predict("ann", shape, 3600) == 300
    assert h.predict("ann", shape, 250) == 250
    assert h.predict("bob", shape, 3600) is None
    run = RunningJob(1, [], 5000.0, 8600.0, user="ann")
    assert h.predicted_end(run, shape) == 5300.0
