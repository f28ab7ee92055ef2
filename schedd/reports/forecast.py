"""Expected starts kiln publishes, and how far off they turned out to be.

Every cycle the backfill plan gives each pending job it could place an expected start
(``squeue --start``). A promise is only worth as much as its record, so kiln keeps, per job:

- ``Job.forecast_first``: ``[expected start, when it was first published]``;
- ``Job.forecast_last``: ``[expected start, when it was last published]``;

and, once the job starts, writes both to the ledger with the start itself,
where ``kiln stats`` finds them next to the actual ``start_time``. The error of a forecast is
``actual start - expected start`` in seconds (positive: the job started later than promised).

Pure functions over ``Job``: the daemon calls ``publish``; the stats handler calls
``errors_of`` and ``summarise``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kiln.model import Job


def publish(job: Job, when: float, now: float) -> None:
    """Record this cycle's expected start of a pending job (in memory until it starts, when
    ``transitions.start_runs`` commits the job with its first and last forecasts)."""
    job.expected_start = when
    if job.forecast_first is None:
        job.forecast_first = [when, now]
    job.forecast_last = [when, now]


def publish_band(job: Job, p50: float, p90: float, plan_p50: float, plan_p90: float,
                 now: float) -> None:
    """Record a pending job's first published p50/p90 start (``Job.forecast_band``), with
    the plan's own starts, which recalibrate later forecasts once the job starts."""
    if job.forecast_band is None:
        job.forecast_band = [p50, p90, now, plan_p50, plan_p90]


@dataclass(frozen=True, slots=True)
class Calibration:
    """How the first published p50/p90 starts turned out (``kiln stats``)."""

    count: int
    within_p90: float  # share that started no later than their p90 (target >= 0.9)
    p50_median_abs: float  # seconds
    p90_median_abs: float  # seconds

    def to_wire(self) -> dict:
        return {"count": self.count, "within_p90": self.within_p90,
                "p50_median_abs": self.p50_median_abs, "p90_median_abs": self.p90_median_abs}


def calibration(jobs: Iterable[Job], tolerance: float = 0.0) -> Calibration:
    """Over the started jobs that had a published band: the share that started by their p90
    (``tolerance`` seconds of grace: the planning grid), and the median absolute errors."""
    checked = [(job.start_time, job.forecast_band) for job in jobs
               if job.start_time and job.forecast_band]
    if not checked:
        return Calibration(0, 0.0, 0.0, 0.0)
    within = sum(1 for start, band in checked if start <= band[1] + tolerance)
    return Calibration(len(checked), within / len(checked),
                       quantile([abs(start - band[0]) for start, band in checked], 0.5),
                       quantile([abs(start - band[1]) for start, band in checked], 0.5))


@dataclass(frozen=True, slots=True)
class ForecastError:
    job_id: int
    first: float  # seconds, actual - first published expected start
    last: float  # seconds, actual - last published expected start
    lead: float  # seconds between the first publication and the actual start


def errors_of(jobs: Iterable[Job]) -> list[ForecastError]:
    """One record per started job that had a published forecast."""
    out = []
    for job in jobs:
        first, last = job.forecast_first, job.forecast_last
        if not job.start_time or not _pair(first) or not _pair(last):
            continue
        out.append(ForecastError(job.id, job.start_time - first[0], job.start_time - last[0],
                                 job.start_time - first[1]))
    return out


def _pair(value: object) -> bool:
    return (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, (int, float)) for v in value))


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class Summary:
    """The error distribution of one kind of forecast (first or last published)."""

    count: int
    median_abs: float  # seconds
    p90_abs: float  # seconds
    mean: float  # seconds, signed: > 0 means jobs tend to start later than promised
    late: int  # jobs that started more than the tolerance after the promise
    early: int  # jobs that started more than the tolerance before it

    def to_wire(self) -> dict:
        return {"count": self.count, "median_abs": self.median_abs, "p90_abs": self.p90_abs,
                "mean": self.mean, "late": self.late, "early": self.early}


def summarise(errors: Sequence[float], tolerance: float = 60.0) -> Summary:
    """Median and 90th percentile of the absolute error, the signed mean, and how many jobs
    started later or earlier than ``tolerance`` seconds (one bf_resolution by default)."""
    if not errors:
        return Summary(0, 0.0, 0.0, 0.0, 0, 0)
    absolute = [abs(e) for e in errors]
    return Summary(len(errors), quantile(absolute, 0.5), quantile(absolute, 0.9),
                   sum(errors) / len(errors), sum(e > tolerance for e in errors),
                   sum(e < -tolerance for e in errors))
