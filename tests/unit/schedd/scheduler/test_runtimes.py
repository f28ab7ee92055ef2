"""Run-time predictions from history (schedd/scheduler/runtimes.py): the conformal ranks, the
limit as the cap and the fallback, conditioning on elapsed time, and the calibration of the
plan's waits (Kaplan-Meier over censored waits, classes, the adaptive level)."""

from __future__ import annotations

import random

import pytest

from kiln.model import NodeAllocation
from schedd.scheduler.runtimes import (
    LeadCalibration,
    RuntimeHistory,
    Shape,
    km_quantile,
    predictions,
    rank_quantile,
)
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot

HOUR = 3600
SHAPE = Shape(1, 4, 8, 4 * HOUR)


def test_rank_quantile_is_the_conformal_rank() -> None:
    runs = [float(x) for x in range(1, 10)]  # 9 runs: ceil(0.9 * 10) = 9 -> the largest
    assert rank_quantile(runs, 0.9) == 9.0
    assert rank_quantile(runs[:8], 0.9) is None  # ceil(0.9 * 9) = 9 > 8 runs
    assert rank_quantile(runs, 0.5) == 5.0
    assert rank_quantile([], 0.5) is None


def test_no_history_predicts_the_limit() -> None:
    band = RuntimeHistory().band("ann", SHAPE)
    assert (band.p50, band.p90) == (SHAPE.time_limit, SHAPE.time_limit)


def test_p50_from_few_runs_p90_only_from_nine() -> None:
    history = RuntimeHistory()
    for minutes in (10, 20, 30):
        history.record("ann", SHAPE, minutes * 60)
    band = history.band("ann", SHAPE)
    assert band.p50 == 20 * 60  # ceil(0.5 * 4) = 2nd smallest
    assert band.p90 == SHAPE.time_limit  # three runs cannot bound the 90th percentile
    for minutes in range(40, 100, 10):
        history.record("ann", SHAPE, minutes * 60)
    assert history.band("ann", SHAPE).p90 == 90 * 60  # 9 runs: the 9th smallest


def test_predictions_are_capped_by_the_limit_and_per_user() -> None:
    history = RuntimeHistory()
    for _ in range(10):
        history.record("ann", SHAPE, 10 * HOUR)  # ran past a limit raised since
    assert history.band("ann", SHAPE).p90 == SHAPE.time_limit
    assert history.band("bob", SHAPE).p50 == SHAPE.time_limit  # nothing known of bob


def test_same_size_under_another_limit_stands_in() -> None:
    history = RuntimeHistory()
    history.record("ann", Shape(1, 4, 8, 2 * HOUR), 600)
    assert history.band("ann", SHAPE).p50 == 600
    history.record("ann", SHAPE, 1200)  # the exact shape, once known, is used alone
    assert history.band("ann", SHAPE).p50 == 1200


def test_a_running_job_is_predicted_from_the_longer_runs() -> None:
    history = RuntimeHistory()
    for minutes in (5, 10, 60):
        history.record("ann", SHAPE, minutes * 60)
    assert history.band("ann", SHAPE, elapsed=20 * 60).p50 == 60 * 60
    # it has outrun every run seen: only the limit bounds it
    assert history.band("ann", SHAPE, elapsed=2 * HOUR).p50 == SHAPE.time_limit


def test_recent_runs_only() -> None:
    history = RuntimeHistory(keep=3)
    for minutes in (100, 100, 100, 1, 1, 1):
        history.record("ann", SHAPE, minutes * 60)
    assert history.band("ann", SHAPE).p50 == 60


def test_predictions_for_a_snapshot() -> None:
    history = RuntimeHistory()
    for _ in range(9):
        history.record("ann", SHAPE, 600)
    pending = PendingJob(1, user="ann", cpus_per_node=4, gpus_per_node=8,
                         time_limit=SHAPE.time_limit)
    run = RunningJob(2, [NodeAllocation("n1", 4, 0, list(range(8)))], 1000.0,
                     1000.0 + SHAPE.time_limit, user="ann")
    snap = Snapshot(1100.0, [NodeView("n1", 4, 0)], [run], [pending])
    got = predictions(history, snap, {2: pending})
    assert got.runtime[1] == (600, 600)
    assert got.end[2] == (1600.0, 1600.0)


def test_km_without_censoring_is_the_rank_quantile() -> None:
    values = [float(x) for x in range(1, 20)]
    assert km_quantile(values, [], 0.9) == rank_quantile(values, 0.9)
    assert km_quantile([], [5.0], 0.5) is None


def test_km_counts_the_jobs_still_waiting() -> None:
    started = [1.0] * 9
    # nine more have already waited 3x their plan: the p90 is not 1 any more
    assert km_quantile(started, [3.0] * 9, 0.9) == pytest.approx(3.0)
    assert km_quantile(started, [], 0.9) == 1.0


def test_calibration_takes_the_plan_until_it_knows_better() -> None:
    cal = LeadCalibration(floor=60.0)
    assert cal.stretch(0.0, 600.0, 1200.0) == (600.0, 1200.0)


def test_calibration_stretches_by_the_recent_ratio() -> None:
    cal = LeadCalibration(floor=60.0)
    for job in range(20):  # every job waited twice what its plan said
        t = job * 10_000.0
        cal.published(job, t, t + 1000.0, t + 1000.0)
        cal.started(job, t + 2000.0)
    p50, p90 = cal.stretch(1e6, 1e6 + 1000.0, 1e6 + 1000.0)
    assert p50 == pytest.approx(1e6 + 2000.0)
    assert p90 == pytest.approx(1e6 + 2000.0)


def test_the_adaptive_level_rises_with_misses_and_holds_the_target() -> None:
    cal = LeadCalibration(floor=60.0)
    level = cal.level
    cal.published(1, 0.0, 100.0, 100.0, shown=100.0)
    cal.factors(200.0, 100.0)  # its p90 passed while it waits: a miss, known now
    assert cal.level > level
    for job in range(1000, 1100):  # a long run of p90s that held: back down to 0.9, not below
        cal.published(job, 300.0, 400.0, 400.0, shown=400.0)
        cal.started(job, 350.0)
    assert cal.level == LeadCalibration.TARGET
    rng = random.Random(7)
    misses = shown = 0
    t = 0.0
    for job in range(2, 3000):  # waits 1x to 4x the plan, a shift half-way through
        t += 100.0
        plan = t + 600.0
        _, p90 = cal.stretch(t, plan, plan)
        cal.published(job, t, plan, plan, shown=p90)
        stretch = rng.uniform(1, 2) if job < 1500 else rng.uniform(2, 4)
        start = t + 600.0 * stretch
        cal.started(job, start)
        if job > 200:
            shown += 1
            misses += start > p90
    assert misses / shown <= 0.12
