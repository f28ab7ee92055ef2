"""Predictions and forecasts in a replay (simulator/forecasts.py): the p50/p90 starts
published at arrival and how they turned out, and planning on predicted run times."""

from __future__ import annotations

import dataclasses

from kiln.model import NodeAllocation
from schedd.scheduler.snapshot import PendingJob, RunningJob
from simulator.forecasts import SimForecaster
from simulator.machine import pool
from simulator.metrics import forecast_figures
from simulator.policy import policy_config
from simulator.replay import replay
from simulator.swf import parse_swf

# 4 CPUs; four whole-machine jobs of user 1 at t = 0..3, each runs 10 s of a 100 s estimate
TRACE = "; MaxProcs: 4\n" + "".join(
    f"{i} {i - 1} -1 10 4 -1 -1 -1 100 -1 1 1 -1 -1 -1 -1 -1 -1\n" for i in range(1, 5))


def test_a_replay_publishes_the_waiting_jobs_forecasts_and_checks_them() -> None:
    trace = parse_swf(TRACE.splitlines(), "t")
    result = replay(trace, pool(4), policy_config("easy"), forecasts=True)
    assert sorted(result.forecasts) == [2, 3, 4]  # job 1 started at its arrival
    # nothing is known yet at t = 1: job 2 is planned after job 1's whole estimate
    assert result.forecasts[2].p50 == 100.0
    figures = forecast_figures(result)
    assert figures.jobs == 3
    assert figures.within_p90 == 1.0  # each started sooner than its estimate-based plan
    assert figures.p50_median_abs > 0
    plain = replay(trace, pool(4), policy_config("easy"))
    assert plain.forecasts == {}
    assert [(r.start, r.end) for r in plain.records] == [(r.start, r.end)
                                                          for r in result.records]


def test_planning_on_predictions_sets_and_refreshes_them() -> None:
    config = dataclasses.replace(policy_config("easy"), predict_runtime=True)
    sim = SimForecaster(config)
    first = PendingJob(1, user="u1", cpus_per_node=4, time_limit=100)
    sim.arrive(first)
    assert first.predicted_runtime == 100  # no history: the limit
    run = RunningJob(1, [NodeAllocation("pool", 4, 0, [])], 0.0, 100.0, user="u1")
    sim.started(first, run)
    sim.finished(1, 10.0)
    second = PendingJob(2, user="u1", cpus_per_node=4, time_limit=100)
    sim.arrive(second)
    assert second.predicted_runtime == 10  # the user's last run of that shape
    run2 = RunningJob(2, [NodeAllocation("pool", 4, 0, [])], 20.0, 120.0, user="u1")
    sim.started(second, run2)
    assert run2.predicted_end == 30.0
    sim.refresh(31.0, {2: run2})  # it outlived its prediction and every run seen
    assert run2.predicted_end == 120.0
