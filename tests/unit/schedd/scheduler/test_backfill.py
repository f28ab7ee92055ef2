"""Backfill over the availability profile: the seed's worked example, the daemon-level
scenario, FCFS/EASY/conservative, promised starts, gangs and the per-cycle work bound."""

from __future__ import annotations

import pytest

from kiln.config import SchedulerConfig
from schedd.scheduler.cycle import schedule
from schedd.scheduler.snapshot import NodeView, RunningJob, Snapshot
from tests import builders
from tests.builders import node_view, started

NOW = 1_000_020.0  # on the 60-second grid
MIN = 60


def gpu_node(name: str = "n1", gpus: int = 8, cpus: int = 64) -> NodeView:
    return node_view(name, gpus, cpus=cpus, per_island=4)


def running(job_id: int, node: str, gpus: list[int], minutes_left: float) -> RunningJob:
    return builders.running(job_id, node, gpus, start=NOW - 600, end=NOW + minutes_left * MIN)


job = builders.pending


def seed_snapshot(free_gpus: int, order: tuple[str, ...] = ("a", "b", "c")) -> Snapshot:
    """A 16-GPU node, 16 - free_gpus of them busy for 30 more minutes, a 16-GPU head job:
    a hole of ``free_gpus`` GPUs for 30 minutes. Candidates a(4, 20'), b(8, 40'), c(2, 25')."""
    shapes = {"a": (4, 20), "b": (8, 40), "c": (2, 25)}
    busy = list(range(16 - free_gpus))
    pending = [job(1, 16, 60, "head")]
    for k, name in enumerate(order):
        gpus, minutes = shapes[name]
        pending.append(job(10 + k, gpus, minutes, name))
    return Snapshot(NOW, [gpu_node(gpus=16)], [running(100, "n1", busy, 30)], pending)


def names(snapshot: Snapshot, decisions) -> list[str]:
    by_id = {j.job_id: j.name for j in snapshot.pending}
    return [by_id[i] for i in started(decisions)]


def test_seed_b_never_starts_now() -> None:
    for fill in ("priority", "area", "short_area"):
        for reservations in (1, 2, 100):
            snap = seed_snapshot(8)
            cfg = SchedulerConfig(fill=fill, bf_max_reservations=reservations)
            got = names(snap, schedule(snap, cfg))
            assert "b" not in got, (fill, reservations)
            assert set(got) == {"a", "c"}


def test_seed_area_chooses_a_before_c() -> None:
    snap = seed_snapshot(8)
    assert names(snap, schedule(snap, SchedulerConfig(fill="area"))) == ["a", "c"]
    # with room for only one of them, area takes a even when c has the higher priority
    snap = seed_snapshot(5, order=("c", "b", "a"))
    assert names(snap, schedule(snap, SchedulerConfig(fill="area"))) == ["a"]
    assert names(snap, schedule(snap, SchedulerConfig(fill="priority"))) == ["c"]


def test_seed_one_free_gpu_starts_nothing() -> None:
    snap = seed_snapshot(1)
    for fill in ("priority", "area", "short_area"):
        decisions = schedule(snap, SchedulerConfig(fill=fill))
        assert started(decisions) == []
        assert decisions.reasons[1] == "Resources"


def test_seed_head_reserved_at_hole_end() -> None:
    snap = seed_snapshot(8)
    decisions = schedule(snap, SchedulerConfig(fill="area"))
    assert decisions.expected_start[1] == NOW + 30 * MIN


def test_daemon_scenario() -> None:
    """One 8-GPU node, a 5-GPU job running with 30 minutes left; head 8 GPUs/60',
    then 2/20', 2/40', 1/25'."""
    snap = Snapshot(
        NOW, [gpu_node()], [running(100, "n1", [0, 1, 2, 3, 4], 30)],
        [job(1, 8, 60), job(2, 2, 20), job(3, 2, 40), job(4, 1, 25)],
    )
    for cfg in (SchedulerConfig(), SchedulerConfig(fill="priority", bf_max_reservations=1),
                SchedulerConfig(fill="area", bf_max_reservations=100)):
        d = schedule(snap, cfg)
        assert sorted(started(d)) == [2, 4]
        assert d.reasons == {1: "Resources", 3: "Priority"}
        assert abs(d.expected_start[1] - (NOW + 30 * MIN)) <= cfg.bf_resolution
        assert set(d.priorities) == {1, 2, 3, 4}
        gpus = sorted(g for s in d.starts for a in s.allocation for g in a.gpus)
        assert gpus == [5, 6, 7]


def test_fcfs_stops_at_first_blocked() -> None:
    snap = Snapshot(
        NOW, [gpu_node()], [running(100, "n1", [0, 1, 2, 3, 4], 30)],
        [job(1, 2, 10), job(2, 8, 60), job(3, 1, 5)],
    )
    d = schedule(snap, SchedulerConfig(backfill=False))
    assert started(d) == [1]
    assert d.reasons == {2: "Resources", 3: "Priority"}
    assert d.expected_start == {2: NOW + 30 * MIN}


def test_easy_backfills_past_shadow_on_extra_resources() -> None:
    """Lifka's second rule: a job longer than the hole may run on what the head leaves over."""
    snap = Snapshot(
        NOW, [gpu_node()], [running(100, "n1", [0, 1, 2, 3], 30)],
        [job(1, 6, 60), job(2, 2, 600), job(3, 2, 600)],
    )
    d = schedule(snap, SchedulerConfig(bf_max_reservations=1, fill="priority"))
    assert started(d) == [2]  # 2 extra GPUs at the shadow time: one long job, not two
    assert d.reasons == {1: "Resources", 3: "Priority"}


def test_easy_versus_conservative() -> None:
    """EASY protects only the head; conservative protects every reserved job."""
    snap = Snapshot(
        NOW, [gpu_node()], [running(100, "n1", [0, 1, 2, 3, 4, 5], 30)],
        [job(1, 8, 60), job(2, 4, 60), job(3, 2, 25), job(4, 2, 200)],
    )
    easy = schedule(snap, SchedulerConfig(bf_max_reservations=1, fill="priority"))
    cons = schedule(snap, SchedulerConfig(bf_max_reservations=100, fill="priority"))
    assert started(easy) == [3]
    assert started(cons) == [3]
    assert set(cons.expected_start) == {1, 2, 4}
    assert set(easy.expected_start) == {1}
    assert cons.expected_start[2] == NOW + 90 * MIN  # behind the head
    assert cons.expected_start[4] == NOW + 90 * MIN  # beside job 2: 4 + 2 <= 8


def test_gang_starts_whole_or_not_at_all() -> None:
    nodes = [gpu_node("n1"), gpu_node("n2"), gpu_node("n3")]
    snap = Snapshot(NOW, nodes, [running(100, "n3", list(range(8)), 30)],
                    [job(1, 8, 60, nodes=3), job(2, 8, 20, nodes=2)])
    d = schedule(snap, SchedulerConfig(fill="priority"))
    assert started(d) == [2]  # ends before the 3-node head can start
    assert {a.node for a in d.starts[0].allocation} == {"n1", "n2"}
    assert d.expected_start[1] == NOW + 30 * MIN
    snap.pending[1] = job(2, 8, 40, nodes=2)  # would delay the head: waits
    d = schedule(snap, SchedulerConfig(fill="priority"))
    assert started(d) == []


def test_promised_job_keeps_its_slot_against_a_newcomer() -> None:
    snap = Snapshot(
        NOW, [gpu_node()], [running(100, "n1", list(range(6)), 30)],
        [job(1, 8, 60, submit=NOW - 100), job(2, 8, 60, submit=NOW - 10, nice=-100_000)],
        promised={1: NOW + 30 * MIN},
    )
    two = SchedulerConfig(bf_max_reservations=2)  # a plan for both jobs
    d = schedule(snap, two)
    assert d.expected_start[1] == NOW + 30 * MIN
    assert d.expected_start[2] == NOW + 90 * MIN
    snap.promised = {}
    d = schedule(snap, two)
    assert d.expected_start[2] == NOW + 30 * MIN  # without the promise priority decides


def test_bf_max_job_test_bounds_the_walk() -> None:
    snap = Snapshot(NOW, [gpu_node()], [], [job(i, 1, 10) for i in range(1, 21)])
    d = schedule(snap, SchedulerConfig(bf_max_job_test=5))
    assert started(d) == [1, 2, 3, 4, 5]
    assert all(d.reasons[i] == "Priority" for i in range(6, 21))


def test_bf_window_limits_reservations() -> None:
    snap = Snapshot(NOW, [gpu_node()], [running(100, "n1", list(range(8)), 600)],
                    [job(1, 8, 60)])
    assert schedule(snap, SchedulerConfig()).expected_start.get(1) is not None
    assert schedule(snap, SchedulerConfig(bf_window=3600)).expected_start == {}


def test_short_area_puts_short_jobs_first() -> None:
    snap = Snapshot(
        NOW, [gpu_node()], [running(100, "n1", [0, 1, 2, 3, 4, 5], 30)],
        [job(1, 8, 60), job(2, 2, 25), job(3, 2, 5)],
    )
    assert started(schedule(snap, SchedulerConfig(fill="short_area"))) == [3]
    assert started(schedule(snap, SchedulerConfig(fill="area"))) == [2]
    snap.running = [running(100, "n1", [0, 1, 2, 3], 30)]  # room for both
    assert started(schedule(snap, SchedulerConfig(fill="short_area"))) == [3, 2]
    assert started(schedule(snap, SchedulerConfig(fill="area"))) == [2, 3]


def test_bf_resolution_rounds_up() -> None:
    snap = Snapshot(NOW, [gpu_node()], [running(100, "n1", list(range(8)), 10.5)],
                    [job(1, 8, 60)])
    assert schedule(snap, SchedulerConfig(bf_resolution=60)).expected_start[1] == NOW + 11 * MIN
    assert schedule(snap, SchedulerConfig(bf_resolution=1)).expected_start[1] == NOW + 630


def test_runtime_prediction_plans_with_predicted_end() -> None:
    run = running(100, "n1", list(range(8)), 60)
    run.predicted_end = NOW + 10 * MIN
    snap = Snapshot(NOW, [gpu_node()], [run], [job(1, 8, 60)])
    assert schedule(snap, SchedulerConfig()).expected_start[1] == NOW + 60 * MIN
    assert schedule(snap, SchedulerConfig(predict_runtime=True)).expected_start[1] == (
        NOW + 10 * MIN)


def test_deterministic() -> None:
    """Two cycles over equal snapshots, built apart (a cycle leaves no mark on the next one's
    input), decide the same — and decide something."""
    first = schedule(seed_snapshot(8), SchedulerConfig())
    second = schedule(seed_snapshot(8), SchedulerConfig())
    assert first.starts and first.expected_start
    assert first == second


def test_bad_fill_rule_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="fill rule 'smallest'"):
        schedule(seed_snapshot(8), SchedulerConfig(fill="smallest"))
    with pytest.raises(ValueError, match="bf_window must not be negative"):
        schedule(seed_snapshot(8), SchedulerConfig(bf_window=-1))


def test_hole_area_fills_the_part_before_the_reservation_first() -> None:
    # 16 GPUs, 8 busy for 30 more minutes; the head wants 12 GPUs for an hour: planned at
    # +30', leaving 4 GPUs of extra. L (4 GPUs, 2 h) fits only the extra and holds it past the
    # reservation; B (6 GPUs, 20') ends before the reservation. area: the larger area first;
    # hole_area: what ends by the reservation first, then the rest, each by area.
    def snap(busy: int) -> Snapshot:
        return Snapshot(NOW, [gpu_node(gpus=16)], [running(100, "n1", list(range(busy)), 30)],
                        [job(1, 12, 60, "head"), job(2, 4, 120, "L"), job(3, 6, 20, "B")])
    tight = snap(8)
    assert names(tight, schedule(tight, SchedulerConfig(fill="area"))) == ["L"]
    assert names(tight, schedule(tight, SchedulerConfig(fill="hole_area"))) == ["B"]
    roomy = snap(6)
    assert names(roomy, schedule(roomy, SchedulerConfig(fill="hole_area"))) == ["B", "L"]
    assert SchedulerConfig().fill == "hole_area"  # the default


def test_a_due_job_jumps_the_priority_order_and_gets_a_plan() -> None:
    # the node is full for an hour; A waited two hours at a low priority (nice), B is new
    a = job(1, 8, 60, "A", submit=NOW - 7200, nice=5000)
    b = job(2, 8, 60, "B", submit=NOW - 60)
    snap = Snapshot(NOW, [gpu_node()], [running(100, "n1", list(range(8)), 60)], [a, b])
    plain = schedule(snap, SchedulerConfig(bf_resolution=1))
    assert list(plain.expected_start) == [2]  # one reservation, for the higher priority
    due = schedule(snap, SchedulerConfig(bf_resolution=1, bf_due_wait=3600))
    # A's reservation is on top of the one, which B (not due) keeps
    assert due.expected_start == {1: NOW + 3600, 2: NOW + 7200}
    both_due = schedule(snap, SchedulerConfig(bf_resolution=1, bf_due_wait=60))
    assert both_due.expected_start == {1: NOW + 3600, 2: NOW + 7200}  # beyond the one
