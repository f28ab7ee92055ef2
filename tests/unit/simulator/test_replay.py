"""Replay and metrics on a tiny trace whose FCFS schedule is worked out by hand.

Machine: 4 CPUs. Jobs (id: submit, run, procs, estimate):
  1: 0, 10, 2        -> starts 0, ends 10
  2: 1, 5, 4         -> needs the whole machine: starts 10 when job 1 ends, ends 15
  3: 2, 3, 1         -> FCFS keeps it behind job 2: starts 15, ends 18
  4: 20, 100, 1, 50  -> outruns its estimate: killed at 50, so starts 20, ends 70
  5: 20, 10, 3 (field 8 = 3, field 5 = 1) -> starts 20 beside job 4, ends 30
Waits 0, 9, 13, 0, 0: average 4.4 s. Bounded slowdowns 1, 14/10, 16/10, 1, 1: average 1.2.
Makespan 70 - 0 = 70 s. Busy CPU-seconds 2*10 + 4*5 + 1*3 + 1*50 + 3*10 = 123, so
utilisation = 123 / (4 * 70).
"""

from __future__ import annotations

import csv

import pytest

from kiln.config import SchedulerConfig
from kiln.model import NodeAllocation
from schedd.scheduler.snapshot import Decisions, Start
from simulator.machine import gpu_cluster, pool
from simulator.metrics import bounded_slowdown, summarize, write_csv
from simulator.policy import policy_config
from simulator.replay import SimError, replay
from simulator.swf import parse_swf

HAND_TRACE = """\
; MaxProcs: 4
1 0  -1 10  2 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1
2 1  -1 5   4 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1
3 2  -1 3   1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1
4 20 -1 100 1 -1 -1 -1 50 -1 1 -1 -1 -1 -1 -1 -1 -1
5 20 -1 10  1 -1 -1 3  -1 -1 1 -1 -1 -1 -1 -1 -1 -1
; a dropped job: no run time
6 30 -1 0   1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1
"""
EXPECTED = [  # id, submit, start, end, procs
    (1, 0, 0, 10, 2),
    (2, 1, 10, 15, 4),
    (3, 2, 15, 18, 1),
    (4, 20, 20, 70, 1),
    (5, 20, 20, 30, 3),
]


@pytest.fixture
def trace():
    return parse_swf(HAND_TRACE.splitlines(), name="hand")


def test_fcfs_schedule_by_hand(trace):
    result = replay(trace, pool(trace.max_procs), policy_config("fcfs"))
    got = [(r.job_id, r.submit, r.start, r.end, r.procs) for r in result.records]
    assert got == EXPECTED


def test_fcfs_metrics_by_hand(trace):
    machine = pool(trace.max_procs)
    result = replay(trace, machine, policy_config("fcfs"))
    metrics = summarize(result, machine.capacity)
    assert metrics.jobs == 5
    assert metrics.avg_wait == pytest.approx(4.4)
    assert metrics.avg_bsld == pytest.approx(1.2)
    assert metrics.makespan == 70
    assert metrics.utilisation == pytest.approx(123 / 280)
    # estimates are exact: any expected start the core gives the FCFS head is kept to the second
    starts = {r.job_id: r.start for r in result.records}
    assert all(starts[j] == t for j, t in result.first_reservation.items())
    assert (metrics.violations, metrics.late_vs_last) == (0, 0)


def test_bounded_slowdown_threshold():
    assert bounded_slowdown(wait=0, run=1) == 1.0
    assert bounded_slowdown(wait=20, run=2) == pytest.approx(2.2)  # (20 + 2) / 10
    assert bounded_slowdown(wait=100, run=50) == pytest.approx(3.0)


def test_one_cycle_per_instant(trace):
    calls = []

    def core(snapshot, config):
        from schedd.scheduler.cycle import schedule

        calls.append(snapshot.now)
        return schedule(snapshot, config)

    result = replay(trace, pool(4), policy_config("fcfs"), schedule=core)
    # instants with a queue: arrivals 0, 1, 2, 20 and the end at 10 (2 waits); 15 (3 waits)
    assert calls == [0, 1, 2, 10, 15, 20]
    assert result.cycles == len(calls)


def _promising(offset):
    """The real core, plus a promise of ``now + offset`` to every job it leaves waiting."""
    from schedd.scheduler.cycle import schedule

    def core(snapshot, config):
        decisions = schedule(snapshot, config)
        started = {s.job_id for s in decisions.starts}
        decisions.expected_start = {
            j.job_id: snapshot.now + offset for j in snapshot.pending if j.job_id not in started
        }
        return decisions

    return core


def test_violations_count_first_and_last_reservations(trace):
    # Job 2 is promised 9 (at t=1) then 10 (t=2) and starts at 10: late vs the first only.
    # Job 3 is promised 10 (t=2) then 18 (t=10) and starts at 15: late vs the first only.
    result = replay(trace, pool(4), policy_config("fcfs"), schedule=_promising(8))
    assert result.first_reservation == {2: 9, 3: 10}
    assert result.last_reservation == {2: 10, 3: 18}
    metrics = summarize(result, 4)
    assert (metrics.violations, metrics.late_vs_last, metrics.reserved) == (2, 0, 2)


def test_promises_are_fed_back_to_the_next_cycle(trace):
    seen = []
    inner = _promising(8)

    def core(snapshot, config):
        seen.append(dict(snapshot.promised))
        return inner(snapshot, config)

    replay(trace, pool(4), policy_config("fcfs"), schedule=core)
    assert seen[:3] == [{}, {}, {2: 9}]


def test_csv_has_one_row_per_job(trace, tmp_path):
    result = replay(trace, pool(4), policy_config("fcfs"))
    out = tmp_path / "schedule.csv"
    write_csv(result.records, out)
    with open(out, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["id", "submit", "start", "end", "procs"]
    assert rows[1:] == [[str(v) for v in row] for row in EXPECTED]


def test_gpu_model_replays_in_gpu_units(trace):
    machine = gpu_cluster(trace.max_procs, nodes=2, gpus_per_node=2)
    result = replay(trace, machine, policy_config("fcfs"))
    # job 5 (3 procs) becomes a gang of 2 nodes x 2 GPUs, and job 4 (1 GPU, same instant,
    # ahead of it) holds a GPU on one of the nodes until 70: job 5 runs 70..80
    units = {r.job_id: r.units for r in result.records}
    assert units == {1: 2, 2: 4, 3: 1, 4: 1, 5: 4}
    assert [(r.job_id, r.start, r.end) for r in result.records][3:] == [(4, 20, 70), (5, 70, 80)]
    metrics = summarize(result, machine.capacity)
    assert metrics.makespan == 80
    assert metrics.utilisation == pytest.approx((20 + 20 + 3 + 50 + 40) / (4 * 80))


def test_core_that_overcommits_is_caught(trace):
    def greedy(snapshot, config):
        return Decisions(starts=[Start(j.job_id, [NodeAllocation("pool", j.cpus_per_node, 0)])
                                 for j in snapshot.pending])

    with pytest.raises(SimError, match="overcommits node pool"):
        replay(trace, pool(4), SchedulerConfig(), schedule=greedy)


def test_core_that_starts_nothing_is_caught(trace):
    with pytest.raises(SimError, match="left 5 job"):
        replay(trace, pool(4), SchedulerConfig(), schedule=lambda s, c: Decisions())


def test_core_that_starts_a_stranger_is_caught(trace):
    def stranger(snapshot, config):
        return Decisions(starts=[Start(999, [])])

    with pytest.raises(SimError, match="started job 999, which is not pending"):
        replay(trace, pool(4), SchedulerConfig(), schedule=stranger)


@pytest.mark.parametrize("policy", ["easy", "conservative"])
def test_backfill_policies_fill_the_hole(trace, policy):
    # job 3 (1 CPU, 3 s) fits beside job 1 at t=2 and ends at 5, before job 2's reservation
    # at 10: EASY and conservative start it at once; everything else is as under FCFS
    result = replay(trace, pool(4), policy_config(policy))
    got = {r.job_id: (r.start, r.end) for r in result.records}
    assert got == {1: (0, 10), 2: (10, 15), 3: (2, 5), 4: (20, 70), 5: (20, 30)}
    assert result.first_reservation == {2: 10}
    assert summarize(result, 4).violations == 0


def test_frag_placement_hands_the_start_history_to_the_core(trace):
    """--gpu-placement frag: every snapshot carries the replay's starts so far, decayed on the
    virtual clock (the daemon's input to the fragmentation-aware placement); bestfit: none."""
    from schedd.scheduler.cycle import schedule as core

    seen = []

    def spy(snapshot, config):
        seen.append((snapshot.now, snapshot.gpu_history))
        return core(snapshot, config)

    machine = gpu_cluster(trace.max_procs, nodes=2, gpus_per_node=2)
    result = replay(trace, machine, policy_config("fcfs"), schedule=spy, gpu_placement="frag")
    assert len(result.records) == 5
    assert seen[0] == (0, ())  # nothing started yet
    at_20 = next(dict(h) for t, h in seen if t == 20)  # jobs 1, 2 and 3 started by then
    assert sum(at_20.values()) == pytest.approx(sum(0.5 ** ((20 - s) / 3600) for s in (0, 10, 15)))
    seen.clear()
    replay(trace, machine, policy_config("fcfs"), schedule=spy)
    assert {h for _, h in seen} == {None}
    with pytest.raises(SimError, match="GPU placement 'worst' is not one of bestfit, frag"):
        replay(trace, machine, policy_config("fcfs"), gpu_placement="worst")
