"""Advance reservations in the pure scheduler core: blocked time for everyone else, the only
capacity for their own jobs (schedd/scheduler/reserved.py)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.config import SchedulerConfig
from kiln.model import NodeAllocation
from schedd.scheduler.cycle import schedule
from schedd.scheduler.reserved import RESERVED_FOR_OTHER, WAITING
from schedd.scheduler.snapshot import (
    NodeView,
    PendingJob,
    ReservationView,
    RunningJob,
    Snapshot,
)
from tests.builders import node_view, pending

NOW = 1_000_020.0  # on the 60 s grid
CONFIG = SchedulerConfig()


def node(name: str = "n1", gpus: int = 8) -> NodeView:
    return node_view(name, gpus, gpu_type="", model="H100")


def job(job_id: int, gpus: int = 1, minutes: int = 20, resv: str = "", **kw) -> PendingJob:
    return pending(job_id, gpus, minutes, submit=NOW - job_id, user="u", account="a",
                   cpus_per_node=1, reservation=resv, **kw)


def resv(name: str = "r", start: float = NOW + 600, hours: float = 1.0, gpus: int = 8,
         cpus: int = 64, nodes: tuple[str, ...] = ("n1",)) -> ReservationView:
    return ReservationView(name, start, start + hours * 3600,
                           {n: (cpus, 512_000 * gpus // 8, gpus) for n in nodes})


def run(snapshot: Snapshot, config: SchedulerConfig = CONFIG):
    d = schedule(snapshot, config)
    return {s.job_id: s for s in d.starts}, d


def test_outsider_that_would_overlap_waits_with_slurms_reason() -> None:
    r = resv()
    starts, d = run(Snapshot(NOW, [node()], pending=[job(1, minutes=20)], reservations=[r]))
    assert starts == {}
    assert d.reasons[1] == RESERVED_FOR_OTHER
    assert d.expected_start[1] >= r.end


def test_outsider_that_ends_before_the_window_starts() -> None:
    starts, d = run(Snapshot(NOW, [node()], pending=[job(1, minutes=5)], reservations=[resv()]))
    assert set(starts) == {1}


def test_short_job_backfills_while_the_long_one_waits_for_the_window_end() -> None:
    snap = Snapshot(NOW, [node()], pending=[job(1, minutes=20), job(2, minutes=5)],
                    reservations=[resv()])
    starts, d = run(snap)
    assert set(starts) == {2}
    assert d.reasons[1] == RESERVED_FOR_OTHER


def test_member_waits_for_the_window_then_starts_on_the_reserved_gpus() -> None:
    r = resv(gpus=8)
    member = job(1, gpus=8, minutes=30, resv="r")
    starts, d = run(Snapshot(NOW, [node()], pending=[member], reservations=[r]))
    assert starts == {}
    assert d.reasons[1] == WAITING
    assert d.expected_start[1] == r.start
    starts, d = run(Snapshot(r.start, [node()], pending=[member], reservations=[r]))
    assert set(starts) == {1}
    assert sorted(starts[1].allocation[0].gpus) == list(range(8))


def test_member_must_end_by_the_reservations_end() -> None:
    r = resv(start=NOW, hours=0.5)
    starts, d = run(Snapshot(NOW, [node()], pending=[job(1, minutes=45, resv="r")],
                             reservations=[r]))
    assert starts == {}
    assert d.reasons[1] == "Resources"


def test_member_uses_no_more_than_the_holding() -> None:
    r = resv(start=NOW, gpus=4)
    starts, _ = run(Snapshot(NOW, [node()], pending=[job(1, gpus=6, resv="r")],
                             reservations=[r]))
    assert starts == {}
    starts, _ = run(Snapshot(NOW, [node()], pending=[job(1, gpus=4, resv="r")],
                             reservations=[r]))
    assert set(starts) == {1}


def test_gpu_count_reservation_leaves_the_rest_of_the_node_to_others() -> None:
    r = resv(start=NOW, gpus=4, cpus=32)
    starts, _ = run(Snapshot(NOW, [node()], pending=[job(1, gpus=4, minutes=120)],
                             reservations=[r]))
    assert set(starts) == {1}
    starts, d = run(Snapshot(NOW, [node()], pending=[job(2, gpus=6)], reservations=[r]))
    assert starts == {}
    assert d.reasons[2] == RESERVED_FOR_OTHER


def test_running_members_count_inside_the_holding_and_keep_their_gpus() -> None:
    r = resv(start=NOW - 60, gpus=4, cpus=32)
    member_run = RunningJob(9, [NodeAllocation("n1", 1, 1000, [0, 1])], NOW - 60, NOW + 600,
                            reservation="r")
    snap = Snapshot(NOW, [node()], running=[member_run],
                    pending=[job(1, gpus=4, resv="r"), job(2, gpus=2, resv="r"),
                             job(3, gpus=4, minutes=120)], reservations=[r])
    starts, d = run(snap)
    assert set(starts) == {2, 3}  # 2 of the 4 reserved left; the 4 unreserved for job 3
    assert d.reasons[1] == "Resources"
    used = {g for s in starts.values() for a in s.allocation for g in a.gpus}
    assert used.isdisjoint({0, 1})
    assert len(used) == 6


def test_job_of_an_unknown_reservation_does_not_run_outside_it() -> None:
    starts, d = run(Snapshot(NOW, [node()], pending=[job(1, resv="gone")]))
    assert starts == {}
    assert d.reasons[1] == WAITING


def test_reservation_on_another_node_leaves_this_one_free() -> None:
    snap = Snapshot(NOW, [node("n1"), node("n2")], pending=[job(1, gpus=8, minutes=120)],
                    reservations=[resv(nodes=("n2",))])
    starts, _ = run(snap)
    assert [a.node for a in starts[1].allocation] == ["n1"]


def test_ended_reservation_blocks_nothing() -> None:
    r = resv(start=NOW - 7200, hours=1)
    starts, _ = run(Snapshot(NOW, [node()], pending=[job(1, gpus=8, minutes=120)],
                             reservations=[r]))
    assert set(starts) == {1}


def test_two_reservations_on_one_node_each_keep_their_share() -> None:
    a = resv("a", start=NOW, gpus=4, cpus=32)
    b = resv("b", start=NOW, gpus=4, cpus=32)
    snap = Snapshot(NOW, [node()], pending=[job(1, gpus=4, resv="a"), job(2, gpus=4, resv="b"),
                                            job(3, gpus=1, minutes=5)], reservations=[a, b])
    starts, d = run(snap)
    assert set(starts) == {1, 2}  # nothing left for the job outside both
    assert d.reasons[3] == RESERVED_FOR_OTHER
    gpus = [set(starts[i].allocation[0].gpus) for i in (1, 2)]
    assert gpus[0].isdisjoint(gpus[1])


def test_without_backfill_the_window_still_blocks() -> None:
    config = dataclasses.replace(CONFIG, backfill=False)
    starts, d = run(Snapshot(NOW, [node()], pending=[job(1, minutes=20)],
                             reservations=[resv()]), config)
    assert starts == {}
    assert d.reasons[1] == RESERVED_FOR_OTHER


# --- property: nobody outside runs into a reservation, members stay inside it ----------------

GRID = 60


@st.composite
def clusters(draw) -> Snapshot:
    nodes = [node(f"n{i}", gpus=draw(st.sampled_from([4, 8]))) for i in range(draw(
        st.integers(1, 3)))]
    left = {n.name: len(n.gpus) for n in nodes}
    views = []
    for k in range(draw(st.integers(0, 3))):
        n = draw(st.sampled_from(nodes))
        if not left[n.name]:
            continue
        g = draw(st.integers(1, left[n.name]))
        left[n.name] -= g
        start = NOW + GRID * draw(st.integers(0, 30))
        views.append(ReservationView(f"r{k}", start, start + GRID * draw(st.integers(5, 60)),
                                     {n.name: (n.cpus * g // len(n.gpus),
                                               n.memory_mb * g // len(n.gpus), g)}))
    names = [v.name for v in views]
    pending = [
        job(i, gpus=draw(st.integers(0, 4)), minutes=draw(st.integers(1, 90)),
            resv=draw(st.sampled_from([""] + names)) if names else "") for i in range(1, draw(st.integers(1, 8)) + 1)
    ]
    for p in pending:
        p.cpus_per_node = draw(st.integers(1, 8))
    return Snapshot(NOW, nodes, pending=pending, reservations=views)


def _use_at(t: float, starts: list[tuple[PendingJob, NodeAllocation, float]]) -> int:
    return sum(len(a.gpus) for _j, a, end in starts if NOW <= t < end)


@settings(max_examples=150, deadline=None)
@given(clusters(), st.sampled_from(["priority", "area", "short_area", "hole_area"]))
def test_reservations_are_kept(snap: Snapshot, fill: str) -> None:
    config = dataclasses.replace(CONFIG, fill=fill, bf_resolution=GRID)
    d = schedule(snap, config)
    jobs = {p.job_id: p for p in snap.pending}
    views = {v.name: v for v in snap.reservations}
    placed: dict[str, list[tuple[PendingJob, NodeAllocation, float]]] = {}
    for s in d.starts:
        p = jobs[s.job_id]
        end = -(-(NOW + p.time_limit) // GRID) * GRID
        if p.reservation:
            r = views[p.reservation]
            assert r.start <= NOW and end <= -(-r.end // GRID) * GRID
        for a in s.allocation:
            if p.reservation:
                assert a.node in views[p.reservation].holdings
            placed.setdefault(a.node, []).append((p, a, end))
    for n in snap.nodes:
        mine = placed.get(n.name, [])
        gpus = [g for _p, a, _e in mine for g in a.gpus]
        assert len(gpus) == len(set(gpus)) and len(gpus) <= len(n.gpus)
        outside = [x for x in mine if not x[0].reservation]
        points = {NOW} | {v.start for v in snap.reservations} | {e for *_x, e in mine}
        for t in points:
            held = sum(v.holdings[n.name][2] for v in snap.reservations
                       if n.name in v.holdings and v.start <= t < v.end)
            assert _use_at(t, outside) + held <= len(n.gpus)
            for v in snap.reservations:
                if n.name in v.holdings and v.start <= t < v.end:
                    members = [x for x in mine if x[0].reservation == v.name]
                    assert _use_at(t, members) <= v.holdings[n.name][2]
