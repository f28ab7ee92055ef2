"""Licenses in the pure core: a job starts only with its licenses free, counted across the
starts of one cycle and the running jobs; the rest wait with reason Licenses."""

from __future__ import annotations

from kiln.config import SchedulerConfig
from schedd.scheduler.cycle import schedule
from schedd.scheduler.snapshot import RunningJob, Snapshot
from tests.builders import node_view, pending, running, started

NOW = 1_000_020.0


def test_one_cycle_never_hands_out_more_licenses_than_there_are() -> None:
    jobs = [pending(i, 1, 10, licenses=(("matlab", 1),)) for i in (1, 2, 3)]
    snap = Snapshot(NOW, [node_view(per_island=4)], pending=jobs, licenses={"matlab": 2})
    decisions = schedule(snap, SchedulerConfig())
    assert started(decisions) == [1, 2]
    assert decisions.reasons[3] == "Licenses"


def test_running_jobs_hold_their_licenses_and_others_run_past() -> None:
    holder: RunningJob = running(9, "n1", [0], start=NOW - 600, end=NOW + 30 * 60)
    holder.licenses = (("matlab", 2),)
    jobs = [pending(1, 1, 10, licenses=(("matlab", 1),)), pending(2, 1, 10)]
    snap = Snapshot(NOW, [node_view(per_island=4)], running=[holder], pending=jobs,
                    licenses={"matlab": 2})
    decisions = schedule(snap, SchedulerConfig())
    assert started(decisions) == [2]  # no license needed: not held back by job 1
    assert decisions.reasons[1] == "Licenses"
