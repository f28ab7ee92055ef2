"""Re-planning only what changed (scheduler/replan.py): with the last cycle's plan handed back
(``Snapshot.memo``), every cycle decides exactly what the full re-plan decides, and plans far
fewer reservations; a memo that does not match the snapshot is not used."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.model import NodeAllocation
from schedd.scheduler import backfill
from schedd.scheduler.cycle import schedule
from schedd.scheduler.profile import Demand, build
from schedd.scheduler.replan import PlanMemo
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot
from simulator.machine import gpu_cluster, pool
from simulator.policy import policy_config
from simulator.replay import replay
from simulator.swf import Trace, TraceJob

CONSERVATIVE = policy_config("conservative")
FIELDS = ("starts", "reasons", "expected_start", "reserved_nodes", "priorities", "depth",
          "backfilled")


@st.composite
def traces(draw, procs: int = 32) -> Trace:
    jobs, submit = [], 0
    for job_id in range(1, draw(st.integers(2, 40)) + 1):
        submit += draw(st.sampled_from([0, 0, 1, 3, 10]))
        run = draw(st.integers(1, 30))
        early = draw(st.sampled_from([0, 0, 0, 0, 1, 7]))  # mostly exact, some end early
        jobs.append(TraceJob(job_id, submit, run, draw(st.integers(1, procs)), run + early))
    return Trace(name="random", max_procs=procs, jobs=jobs)


class Twin:
    """A core that also decides each cycle without the memo, and records any difference."""

    def __init__(self) -> None:
        self.cycles = self.carried = 0
        self.differences: list[str] = []

    def __call__(self, snapshot: Snapshot, config) -> object:
        carried = schedule(snapshot, config)
        full = schedule(dataclasses.replace(snapshot, memo=None), config)
        self.cycles += 1
        self.carried += isinstance(snapshot.memo, PlanMemo)
        for name in FIELDS:
            if getattr(carried, name) != getattr(full, name):
                self.differences.append(f"t={snapshot.now:g}: {name}")
        return carried


@settings(max_examples=60, deadline=None)
@given(trace=traces(), gpu=st.booleans())
def test_every_cycle_decides_as_the_full_replan(trace, gpu):
    machine = gpu_cluster(trace.max_procs, 4, 8) if gpu else pool(trace.max_procs)
    twin = Twin()
    replay(trace, machine, CONSERVATIVE, twin)
    assert twin.differences == []


def _reservations(trace: Trace, carry: bool, monkeypatch) -> int:
    """Reservations planned over a replay (Walk.reserve calls), with or without the memo."""
    made = 0
    reserve = backfill.Walk.reserve

    def counting(self, job, nodes):
        nonlocal made
        made += 1
        return reserve(self, job, nodes)

    monkeypatch.setattr(backfill.Walk, "reserve", counting)

    def core(snapshot, config):
        return schedule(snapshot if carry else dataclasses.replace(snapshot, memo=None), config)

    result = replay(trace, pool(trace.max_procs), CONSERVATIVE, core)
    return made, [(r.job_id, r.start) for r in result.records]


def test_the_carried_plan_spares_most_reservations(monkeypatch):
    # a burst of 60 jobs on 8 CPUs, exact estimates: the queue stays long
    jobs = [TraceJob(i, float(i // 3), float(5 + i % 7), 1 + i % 8, float(5 + i % 7))
            for i in range(1, 61)]
    trace = Trace(name="burst", max_procs=8, jobs=jobs)
    full, schedule_full = _reservations(trace, False, monkeypatch)
    carried, schedule_carried = _reservations(trace, True, monkeypatch)
    assert schedule_carried == schedule_full
    assert carried * 5 < full


PENDING = [PendingJob(job_id=j, cpus_per_node=4, time_limit=100, submit_time=0.0)
           for j in (10, 11, 12)]


def _snapshot(now: float, running: list[RunningJob], memo=None, promised=({}, {})) -> Snapshot:
    return Snapshot(now, [NODE], running, list(PENDING), promised=promised[0],
                    promised_nodes=promised[1], memo=memo)


NODE = NodeView("n", 4, 0)


def test_a_memo_that_does_not_match_is_not_used(monkeypatch):
    # one 4-CPU node: job 1 runs until 100; jobs 10, 11, 12 are planned at 100, 200, 300
    run = RunningJob(1, [NodeAllocation("n", 4, 0, [])], 0.0, 100.0)
    first = schedule(_snapshot(0.0, [run]), CONSERVATIVE)
    assert first.expected_start == {10: 100, 11: 200, 12: 300}
    assert isinstance(first.memo, PlanMemo)
    promised = dict(first.expected_start), dict(first.reserved_nodes)
    planned = []
    reserve = backfill.Walk.reserve
    monkeypatch.setattr(backfill.Walk, "reserve",
                        lambda self, job, nodes: planned.append(job.job_id) or
                        reserve(self, job, nodes))
    # as planned, job 1 still running at 50: the plan is carried, nothing planned again
    kept = schedule(_snapshot(50.0, [run], first.memo, promised), CONSERVATIVE)
    assert (kept.expected_start, planned) == ({10: 100, 11: 200, 12: 300}, [])
    # job 1 ended early, at 50: the carried plan (10 at 100) would be wrong; the core sees it
    decided = schedule(_snapshot(50.0, [], first.memo, promised), CONSERVATIVE)
    assert [s.job_id for s in decided.starts] == [10]
    assert decided.expected_start == {11: 150, 12: 250}
    assert planned == [11, 12]
    # job 1's limit extended to 150 (free now as planned, not later): planned again
    planned.clear()
    longer = RunningJob(1, run.allocation, 0.0, 150.0)
    decided = schedule(_snapshot(50.0, [longer], first.memo, promised), CONSERVATIVE)
    assert decided.expected_start == {10: 150, 11: 250, 12: 350}
    assert planned == [10, 11, 12]
    # another job's objects (a request could have changed): planned again
    planned.clear()
    other = dataclasses.replace(_snapshot(50.0, [run], first.memo, promised),
                                pending=[dataclasses.replace(j) for j in PENDING])
    assert schedule(other, CONSERVATIVE).expected_start == {10: 100, 11: 200, 12: 300}
    assert planned == [10, 11, 12]


def test_adopt_takes_the_last_plan_cut_at_now():
    [before] = build(0.0, [NodeView("n", 8, 100)], [], 1)
    before.hold(Demand(2, 0, 0), 10, 50)
    [tl] = build(20.0, [NodeView("n", 8, 100)], [], 1)
    assert not tl.agrees(before.steps())  # free now: 8 here, 6 in the plan
    tl.hold(Demand(2, 0, 0), 20.0, 50)
    assert tl.agrees(before.steps())
    tl.adopt(before.steps())
    assert (tl.times, tl.cpus, tl.monotone) == ([20.0, 50], [6, 8], False)
    assert before.times == [0.0, 10, 50]  # the memo's lists are copied, not shared
