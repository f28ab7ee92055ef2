"""Recording expected starts and measuring how far off they were (schedd/reports/forecast.py)."""

from __future__ import annotations

import pytest

from kiln.model import Job
from schedd.reports import forecast


def test_first_forecast_is_kept_and_last_follows_each_cycle() -> None:
    job = Job(id=1)
    forecast.publish(job, 1000.0, now=10.0)
    forecast.publish(job, 1300.0, now=20.0)
    assert job.expected_start == 1300.0
    assert job.forecast_first == [1000.0, 10.0]
    assert job.forecast_last == [1300.0, 20.0]


def test_errors_are_actual_minus_expected_for_started_jobs_only() -> None:
    late = Job(id=1, start_time=1100.0, forecast_first=[1000.0, 50.0],
               forecast_last=[1090.0, 900.0])
    never = Job(id=2, start_time=0.0, forecast_first=[1.0, 0.0], forecast_last=[1.0, 0.0])
    unforecast = Job(id=3, start_time=500.0)
    errors = forecast.errors_of([late, never, unforecast])
    assert errors == [forecast.ForecastError(1, 100.0, 10.0, 1050.0)]


@pytest.mark.parametrize("values,q,expected", [
    ([], 0.5, 0.0), ([7.0], 0.9, 7.0), ([1.0, 2.0, 3.0, 4.0], 0.5, 2.5),
    ([float(i) for i in range(11)], 0.9, 9.0), ([3.0, 1.0, 2.0], 0.5, 2.0),
])
def test_quantile_interpolates_between_order_statistics(values, q, expected) -> None:
    assert forecast.quantile(values, q) == pytest.approx(expected)


def test_summary_of_signed_errors() -> None:
    s = forecast.summarise([-120.0, 30.0, 90.0, 600.0, 0.0], tolerance=60.0)
    assert s.count == 5
    assert s.median_abs == 90.0
    assert s.p90_abs == pytest.approx(408.0)  # between 120 and 600
    assert s.mean == pytest.approx(120.0)
    assert (s.late, s.early) == (2, 1)
    assert forecast.summarise([]).to_wire() == {"count": 0, "median_abs": 0.0, "p90_abs": 0.0,
                                                "mean": 0.0, "late": 0, "early": 0}


def test_calibration_of_the_published_bands() -> None:
    from schedd.reports.forecast import calibration, publish_band

    jobs = []
    for i, start in enumerate((100.0, 200.0, 400.0)):  # p50 150, p90 300 for each
        job = Job(id=i + 1)
        publish_band(job, 150.0, 300.0, 140.0, 250.0, now=0.0)
        publish_band(job, 999.0, 999.0, 999.0, 999.0, now=50.0)  # only the first is kept
        job.start_time = start
        jobs.append(job)
    jobs.append(Job(id=9, start_time=50.0))  # no band: not counted
    got = calibration(jobs)
    assert got.count == 3
    assert got.within_p90 == pytest.approx(2 / 3)
    assert got.p50_median_abs == 50.0  # |100-150|, |200-150|, |400-150|
    assert got.p90_median_abs == 100.0
    assert calibration([]).count == 0
