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

from schedd.model import Job


def publish(job: Job, when: float, now: float) -> None:
    """Record this cycle's expected start of a pending job (in memory until it starts, when
    ``transitions.start_runs`` commits the job with its first and last forecasts)."""
    job.expected_start = when
    if job.forecast_first is None:
        job.forecast_first = [when, now]
    job.forecast_last = [when, now]


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
