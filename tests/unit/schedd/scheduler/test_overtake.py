"""A bound on overtaking in the hole (``bf_overtake``, scheduler/overtake.py): the core counts
the later work that took a hole a waiting job fitted in, hands the count back in its decisions,
and a job whose count passes the bound is owed a reservation (walked as a due job, reserved on
top of the head's). Through the simulator on random traces with exact estimates: no promise is
broken, and every owed job that does not start has a plan; off (the default), nothing is
counted."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.config import SchedulerConfig
from kiln.model import Job
from schedd.lifecycle.agents import AgentRegistry
from schedd.lifecycle.planner import Planner
from schedd.lifecycle.victims import Tracker
from schedd.scheduler import overtake
from schedd.scheduler.cycle import owed_jobs, schedule
from schedd.scheduler.snapshot import Decisions, NodeView, PendingJob, RunningJob, Snapshot
from simulator.machine import pool
from simulator.policy import policy_config
from simulator.replay import replay
from simulator.swf import Trace, TraceJob
from tests.builders import handler_context, node_view, pending, running

NOW = 1_000_000.0
MIN = 60


def node(gpus: int = 16) -> NodeView:
    return node_view("n1", gpus, cpus=gpus, memory_mb=0, gpu_memory_mb=0)


def job(job_id: int, gpus: int, minutes: int, submit: float) -> PendingJob:
    return pending(job_id, gpus, minutes, submit=submit, cpus_per_node=gpus)


def busy(gpus: int, minutes: int) -> RunningJob:
    return running(100, "n1", range(gpus), start=NOW - 600, end=NOW + minutes * MIN)


def snapshot(pending: list[PendingJob], busy_gpus: int = 8, **kw) -> Snapshot:
    """16 GPUs, ``busy_gpus`` of them held for an hour; the head (job 1) wants all 16 for an
    hour, so it is reserved at +60' and the hole is the rest until then."""
    head = job(1, 16, 60, NOW - 3000)
    return Snapshot(NOW, [node()], [busy(busy_gpus, 60)], [head, *pending], **kw)


def config(bound: float) -> SchedulerConfig:
    return SchedulerConfig(bf_resolution=1, bf_overtake=bound)


A = job(2, 4, 30, NOW - 2000)  # older: 4 GPUs, 30' (1,800 s planned)
B = job(3, 8, 50, NOW - 1000)  # later and larger: hole_area gives it the hole first
B_WORK = 8 / 16 * 50 * MIN  # machine-seconds: half the cluster for 50'


def test_a_job_passed_over_in_the_hole_is_counted() -> None:
    decisions = schedule(snapshot([A, B]), config(0.5))
    assert [s.job_id for s in decisions.starts] == [3]  # B took all 8 free GPUs
    assert decisions.passed_over == {2: B_WORK}  # A fitted, and B (behind it) took the hole
    # off, the default: nothing counted, the same starts
    off = schedule(snapshot([A, B]), SchedulerConfig(bf_resolution=1))
    assert SchedulerConfig().bf_overtake == 0 and off.passed_over == {}
    assert off.starts == decisions.starts


def test_an_owed_job_starts_in_its_turn_before_the_fill() -> None:
    c = job(4, 8, 50, NOW - 500)  # another later, larger job that would take the hole again
    carried = {2: B_WORK}  # what the last cycle counted for A: 1,500 > 0.5 x 1,800
    owed = schedule(snapshot([A, c], passed_over=carried), config(0.5))
    assert [s.job_id for s in owed.starts] == [2]
    assert owed.passed_over == {}  # A started: its count is dropped
    # under a looser bound (1 x 1,800 s) A is not owed: C takes the hole, A's count grows
    loose = schedule(snapshot([A, c], passed_over=carried), config(1.0))
    assert [s.job_id for s in loose.starts] == [4]
    assert loose.passed_over == {2: 2 * B_WORK}


def test_an_owed_job_that_cannot_start_is_reserved_on_top_of_the_head() -> None:
    # 14 GPUs busy: A (4 GPUs) does not fit now. Owed, it gets a plan beside the head's (which
    # holds its promise from the last cycle), although one reservation is the limit; and it
    # stays owed whatever its count says later
    carried = {2: B_WORK}
    promise = {"promised": {1: NOW + 3600}, "promised_nodes": {1: ["n1"]}}
    decisions = schedule(snapshot([A], busy_gpus=14, passed_over=carried, **promise),
                         config(0.5))
    assert decisions.starts == []
    assert decisions.expected_start == {1: NOW + 3600, 2: NOW + 2 * 3600}
    assert decisions.passed_over == {2: overtake.OWED}
    plain = schedule(snapshot([A], busy_gpus=14, passed_over=carried, **promise), config(10.0))
    assert plain.expected_start == {1: NOW + 3600}  # not owed: EASY's one reservation


def test_only_later_jobs_started_ahead_in_the_fill_count() -> None:
    early, mine, late, after = (job(i, 1, 10, NOW - 100 + i) for i in range(10, 14))
    gathered = [early, mine, late, after]  # walk (queue) order
    filled = [early, late, mine, after]  # the fill rule's order
    lost = overtake.lost_in_fill(gathered, filled, {early.job_id, late.job_id, after.job_id},
                                 lambda j: float(j.job_id))
    # ``mine`` lost to ``late`` only: ``early`` was ahead of it in the queue too, and
    # ``after`` started after its turn had passed
    assert lost == {mine.job_id: float(late.job_id)}


def test_the_count_is_carried_and_the_started_dropped() -> None:
    out = overtake.carried({1: 5.0, 2: 1.0, 3: 2.0}, {1: 1.0, 4: 3.0}, [2], [3])
    assert out == {1: 6.0, 3: overtake.OWED, 4: 3.0}


def test_a_negative_bound_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="bf_overtake must not be negative"):
        schedule(snapshot([A]), SchedulerConfig(bf_overtake=-1))


def test_the_daemon_hands_the_count_back_for_the_jobs_still_pending(tmp_path: Path) -> None:
    ctx = handler_context(tmp_path, NOW, nodes=("n1",), partitions=(), accounts=False)
    cfg, state = ctx.cfg, ctx.state
    state.add_jobs([Job(id=1, submit_time=NOW, time_limit=60)], [])
    planner = Planner(cfg, state, AgentRegistry(cfg, lambda *a: None), Tracker())
    assert planner.snapshot(NOW)[0].passed_over == {}
    planner.remember(Decisions(passed_over={1: 5.0, 7: 2.0}))  # job 7 is gone
    assert planner.snapshot(NOW)[0].passed_over == {1: 5.0}
    ctx.close()


# --- through the simulator ------------------------------------------------------------------

CPUS = 8

jobs = st.lists(
    st.tuples(st.integers(0, 200), st.integers(1, 60), st.integers(1, CPUS)),  # submit, run, procs
    min_size=20, max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(jobs, st.sampled_from(["hole_area", "short_area", "area"]), st.integers(1, 3),
       st.sampled_from([0.01, 0.5, 2.0]))
def test_owed_jobs_get_a_plan_and_no_promise_is_broken(rows, fill, reservations, bound) -> None:
    rows = sorted(rows, key=lambda r: r[0])
    trace = Trace("random", CPUS, [TraceJob(i + 1, float(s), float(r), p, float(r))
                                   for i, (s, r, p) in enumerate(rows)])
    cfg = dataclasses.replace(policy_config("kiln"), fill=fill, bf_max_reservations=reservations,
                              bf_overtake=bound)
    unplanned: list[tuple[float, int]] = []

    def checked(snap: Snapshot, conf: SchedulerConfig) -> Decisions:
        decisions = schedule(snap, conf)
        started = {s.job_id for s in decisions.starts}
        unplanned.extend((snap.now, j) for j in owed_jobs(snap, conf)
                         if j not in started and j not in decisions.expected_start)
        return decisions

    result = replay(trace, pool(CPUS), cfg, checked)
    assert unplanned == []
    for r in result.records:  # exact estimates: no job starts after its first promise
        promised = result.first_reservation.get(r.job_id)
        if promised is not None:
            assert r.start <= promised + 1e-6, (r, promised)
