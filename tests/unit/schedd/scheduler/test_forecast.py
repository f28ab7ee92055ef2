"""Start forecasts as quantiles (schedd/scheduler/forecast.py) and the shape advisor
(schedd/reports/advisor.py): the core re-run on the snapshot under predicted run times, and
the same job with one option changed, each figure from that plan."""

from __future__ import annotations

import dataclasses

from kiln.config import SchedulerConfig
from kiln.model import Job, Partition
from schedd.reports import advisor
from schedd.scheduler import forecast
from schedd.scheduler.cycle import schedule
from schedd.scheduler.snapshot import PendingJob, RunningJob, Snapshot
from tests.builders import node_view, pending, running

NOW = 1_000_020.0  # on the 60-second grid
MIN = 60
CFG = SchedulerConfig()


node = node_view


def busy(job_id: int, name: str, gpus: int, minutes_left: float) -> RunningJob:
    return running(job_id, name, range(gpus), start=NOW - 600, end=NOW + minutes_left * MIN)


def job(job_id: int, gpus: int, minutes: float, partition: str = "", **kw) -> PendingJob:
    return pending(job_id, gpus, minutes, partition=partition, **kw)


def test_the_p50_plan_counts_on_predicted_ends() -> None:
    # n1 busy for 3 h by its limit; its predictions say 20 min (p50) and 1 h (p90)
    snap = Snapshot(NOW, [node("n1")], [busy(100, "n1", 8, 180)], [job(1, 8, 60)])
    predictions = forecast.Predictions(end={100: (NOW + 20 * MIN, NOW + 60 * MIN)})
    got = forecast.forecasts(snap, CFG, predictions)[1]
    assert got.p50 == NOW + 20 * MIN
    assert got.p90 == NOW + 60 * MIN
    # the cycle's own plan is not touched: limits, and the snapshot is unchanged
    assert schedule(snap, CFG).expected_start[1] == NOW + 180 * MIN
    assert snap.running[0].predicted_end is None


def test_every_job_in_line_gets_a_forecast_not_only_the_reserved_one() -> None:
    snap = Snapshot(NOW, [node("n1")], [busy(100, "n1", 8, 30)],
                    [job(1, 8, 60), job(2, 8, 60), job(3, 8, 60)])
    assert set(schedule(snap, CFG).expected_start) == {1}  # one reservation: EASY
    got = forecast.forecasts(snap, CFG, forecast.Predictions())
    assert [got[j].p50 for j in (1, 2, 3)] == [NOW + 30 * MIN, NOW + 90 * MIN,
                                               NOW + 150 * MIN]


def test_pending_jobs_ahead_are_planned_for_their_predicted_run() -> None:
    snap = Snapshot(NOW, [node("n1")], [busy(100, "n1", 8, 30)], [job(1, 8, 600), job(2, 8, 60)])
    predictions = forecast.Predictions(runtime={1: (10 * MIN, 100 * MIN)})
    got = forecast.forecasts(snap, CFG, predictions, [2])
    assert got == {2: forecast.Forecast(NOW + 40 * MIN, NOW + 130 * MIN)}


def test_the_p90_start_is_never_before_the_p50_start() -> None:
    assert forecast._band(200.0, 100.0) == forecast.Forecast(200.0, 200.0)
    assert forecast._band(None, 100.0) == forecast.Forecast(None, 100.0)


# --- the shape advisor --------------------------------------------------------------------


def gpu_job(**kw) -> Job:
    return Job(id=1, user="ann", gpus_per_node=8, time_limit=4 * 60 * MIN, partition="gpu", **kw)


def test_nearby_shapes_are_one_option_away() -> None:
    view = job(1, 8, 240, "gpu", num_nodes=2)
    parts = {"gpu": Partition("gpu"), "short": Partition("short", max_time=60 * MIN),
             "big": Partition("big"), "down": Partition("down", state="DOWN")}
    shapes = {s.change: s.view for s in advisor.nearby(gpu_job(), view, parts)}
    assert set(shapes) == {"--gres=gpu:4 instead of 8", "-N 1 instead of 2",
                           "--time=02:00:00 instead of 04:00:00",
                           "--time=01:00:00 instead of 04:00:00", "-p big instead of gpu"}
    assert shapes["--gres=gpu:4 instead of 8"].gpus_per_node == 4
    assert shapes["-p big instead of gpu"].partition == "big"
    assert shapes["--time=01:00:00 instead of 04:00:00"].time_limit == 60 * MIN


def test_the_gpu_option_is_said_as_the_user_asked() -> None:
    view = job(1, 8, 60)
    changes = [s.change for s in advisor.nearby(Job(id=1, gpus=8), view, {})]
    assert "--gpus=4 instead of 8" in changes


def p50(snap: Snapshot, job_id: int) -> float | None:
    return forecast.p50_start(snap, CFG, forecast.Predictions(), job_id)


def test_advice_from_the_plan_fewer_gpus_and_a_shorter_time() -> None:
    # 4 GPUs of n1 are free; the other 4 are busy for 3 h. The 8-GPU job waits 3 h.
    snap = Snapshot(NOW, [node("n1")], [busy(100, "n1", 4, 180)], [job(1, 8, 240, "gpu")])
    asked = p50(snap, 1)
    assert asked == NOW + 180 * MIN
    shapes = advisor.nearby(gpu_job(), snap.pending[0], {"gpu": Partition("gpu")})
    got = advisor.advise(snap, shapes, asked, p50)
    assert [(a.change, a.start) for a in got] == [("--gres=gpu:4 instead of 8", NOW)]


def test_advice_another_partition_with_free_nodes() -> None:
    nodes = [node("a1", partitions=frozenset({"gpu"})), node("b1", partitions=frozenset({"big"}))]
    snap = Snapshot(NOW, nodes, [busy(100, "a1", 8, 120)], [job(1, 8, 60, "gpu")])
    parts = {"gpu": Partition("gpu"), "big": Partition("big")}
    got = advisor.advise(snap, advisor.nearby(gpu_job(), snap.pending[0], parts), p50(snap, 1),
                         p50)
    assert [(a.change, a.start) for a in got] == [("-p big instead of gpu", NOW)]


def test_a_shorter_time_that_fits_before_the_reservation() -> None:
    # n1 is free for 90 min, then reserved for job 1 (the head); job 2 asks for 2 h
    snap = Snapshot(NOW, [node("n1"), node("n2")], [busy(100, "n2", 8, 90)],
                    [job(1, 8, 60, num_nodes=2), job(2, 8, 120)])
    asked = p50(snap, 2)
    assert asked is not None and asked > NOW
    shapes = advisor.nearby(dataclasses.replace(gpu_job(), time_limit=120 * MIN),
                            snap.pending[1], {})
    got = {a.change: a.start for a in advisor.advise(snap, shapes, asked, p50)}
    assert got.get("--time=01:00:00 instead of 02:00:00") == NOW


def test_no_advice_when_no_shape_starts_sooner() -> None:
    snap = Snapshot(NOW, [node("n1")], [], [job(1, 8, 60, "gpu")])
    shapes = advisor.nearby(gpu_job(), snap.pending[0], {"gpu": Partition("gpu")})
    assert advisor.advise(snap, shapes, p50(snap, 1), p50) == []
