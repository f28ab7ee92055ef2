"""The figures a replay is judged by, defined as textbook pool simulators define them.

For the replayed jobs (after the trace filter), with ``wait = start - submit`` and ``run`` the
actual run time (cut at the estimate):

- average wait: mean of ``wait``, seconds;
- average bounded slowdown: mean of ``max(1, (wait + run) / max(run, TAU))``, TAU = 10 s;
- makespan: ``last end - first submit``, seconds;
- utilisation: ``sum(units * run) / (capacity * makespan)``: the share of the machine's
  capacity (CPUs in the pool model, GPUs in the GPU model) busy between the first submit and
  the last end;
- reservation violations: jobs that started later than the FIRST reservation the plan gave
  them (the promise ``squeue --start`` first showed). ``late_vs_last`` counts jobs that started
  later than the LAST reservation they were given, the one in force when they started; with
  accurate estimates and a correct core both are 0 for EASY and conservative backfill.

The tail and fairness (issue 18):

- p50/p95/p99/max wait: nearest-rank percentiles of ``wait`` (the smallest wait that at least
  p % of the jobs do not exceed), so every figure is the wait of a real job;
- per user (the trace's field 12; jobs of unknown user form one group, ``-1``): jobs, mean and
  max wait, mean bounded slowdown (``by_user``, ``kiln sim --by-user FILE``);
- Jain's fairness index of the users' mean bounded slowdowns, ``(sum x)^2 / (n sum x^2)``: 1 when
  every user sees the same slowdown, 1/n when one user takes all of it;
- the worst user's mean wait: the largest of the users' mean waits, and whose it is.

A slice (``Slice``: a range of job numbers, or a window of submit times) restricts every figure
to the jobs in it. Its utilisation is the machine's busy share over the slice's span (its first
submit to its last end), counting the part of EVERY job's run that falls inside that span, so a
slice's utilisation is the machine's, not the slice's jobs' alone; over the whole trace it is
the definition above.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from simulator.replay import JobRecord, Replay

TAU = 10.0  # seconds: the bounded-slowdown threshold
LATE = 1e-6  # seconds: starting later than this after the reservation is a violation
PERCENTILES = (50, 95, 99)


@dataclass(slots=True, frozen=True)
class Slice:
    """The jobs a figure is about: job numbers in ``[first, last]`` (``by = "job"``) or submit
    times in ``[first, last)`` seconds of the trace clock (``by = "time"``); None = unbounded."""

    by: str = "job"
    first: float | None = None
    last: float | None = None

    def __contains__(self, record: JobRecord) -> bool:
        key = record.job_id if self.by == "job" else record.submit
        if self.first is not None and key < self.first:
            return False
        if self.last is None:
            return True
        return key <= self.last if self.by == "job" else key < self.last

    def describe(self) -> str:
        what = "jobs" if self.by == "job" else "submitted"
        unit = "" if self.by == "job" else " s"
        low = "start" if self.first is None else f"{self.first:,g}{unit}"
        high = "end" if self.last is None else f"{self.last:,g}{unit}"
        return f"{what} {low} to {high}"


@dataclass(slots=True)
class UserFigures:
    """One user's share of a replay: what ``--by-user`` writes."""

    user: int
    jobs: int
    avg_wait: float
    max_wait: float
    avg_bsld: float


@dataclass(slots=True)
class Metrics:
    jobs: int
    avg_wait: float
    avg_bsld: float
    utilisation: float
    makespan: float
    violations: int
    late_vs_last: int
    reserved: int  # jobs that ever had a reservation
    wait_percentiles: dict[int, float]  # 50, 95, 99 -> nearest-rank wait, seconds
    max_wait: float
    users: int
    jain_bsld: float  # Jain's index of the users' mean bounded slowdowns
    worst_user: int  # the user with the largest mean wait
    worst_user_wait: float

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs for the printed summary."""
        tail = ", ".join(f"p{p} {w:,.0f}" for p, w in self.wait_percentiles.items())
        return [
            ("jobs", f"{self.jobs:,}"),
            ("average wait", f"{self.avg_wait:,.2f} s"),
            ("wait tail", f"{tail}, max {self.max_wait:,.0f} s"),
            ("average bounded slowdown", f"{self.avg_bsld:,.2f} (tau = {TAU:g} s)"),
            ("utilisation", f"{self.utilisation:.4f}"),
            ("makespan", f"{self.makespan:,.0f} s"),
            ("reservation violations", f"{self.violations:,} (of {self.reserved:,} reserved jobs;"
                                       f" {self.late_vs_last:,} late vs their last reservation)"),
            ("users", f"{self.users:,} (Jain's index of mean bounded slowdown "
                      f"{self.jain_bsld:.4f}; worst mean wait {self.worst_user_wait:,.2f} s, "
                      f"user {self.worst_user})"),
        ]


def bounded_slowdown(wait: float, run: float, tau: float = TAU) -> float:
    return max(1.0, (wait + run) / max(run, tau))


def summarize(result: Replay, capacity: int, window: Slice | None = None) -> Metrics:
    """The figures of the replay, or of the jobs in ``window`` when one is given."""
    everything = result.records
    records = everything if window is None else [r for r in everything if r in window]
    if not records:
        return Metrics(0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, dict.fromkeys(PERCENTILES, 0.0), 0.0, 0,
                       0.0, -1, 0.0)
    waits = [r.start - r.submit for r in records]
    first_submit = min(r.submit for r in records)
    last_end = max(r.end for r in records)
    makespan = last_end - first_submit
    users = by_user(records)
    worst = max(users, key=lambda u: (u.avg_wait, -u.user))
    ordered = sorted(waits)
    reserved = result.first_reservation
    return Metrics(
        jobs=len(records),
        avg_wait=sum(waits) / len(records),
        avg_bsld=sum(map(bounded_slowdown, waits, (r.run for r in records))) / len(records),
        utilisation=busy_share(everything, capacity, first_submit, last_end),
        makespan=makespan,
        violations=_late(records, reserved),
        late_vs_last=_late(records, result.last_reservation),
        reserved=sum(1 for r in records if r.job_id in reserved),
        wait_percentiles={p: nearest_rank(ordered, p) for p in PERCENTILES},
        max_wait=ordered[-1],
        users=len(users),
        jain_bsld=jain([u.avg_bsld for u in users]),
        worst_user=worst.user,
        worst_user_wait=worst.avg_wait,
    )


def nearest_rank(ordered: Sequence[float], p: float) -> float:
    """The p-th percentile of a sorted list by nearest rank: its ceil(p/100 * n)-th value."""
    rank = max(math.ceil(p / 100.0 * len(ordered)), 1)
    return ordered[rank - 1]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one value holds everything."""
    square = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * square) if square else 1.0


def busy_share(records: Iterable[JobRecord], capacity: int, begin: float, end: float) -> float:
    """Units x seconds busy inside ``[begin, end)``, over what the machine had there."""
    if end <= begin or capacity <= 0:
        return 0.0
    busy = 0.0
    for r in records:
        inside = min(r.start + r.run, end) - max(r.start, begin)
        if inside > 0:
            busy += r.units * inside
    return busy / (capacity * (end - begin))


def by_user(records: Iterable[JobRecord]) -> list[UserFigures]:
    """Per user, in user number order: jobs, mean and max wait, mean bounded slowdown."""
    groups: dict[int, list[JobRecord]] = {}
    for r in records:
        groups.setdefault(r.user, []).append(r)
    figures = []
    for user in sorted(groups):
        jobs = groups[user]
        waits = [r.start - r.submit for r in jobs]
        figures.append(UserFigures(
            user=user,
            jobs=len(jobs),
            avg_wait=sum(waits) / len(jobs),
            max_wait=max(waits),
            avg_bsld=sum(map(bounded_slowdown, waits, (r.run for r in jobs))) / len(jobs),
        ))
    return figures


def _late(records: list[JobRecord], reservations: dict[int, float]) -> int:
    return sum(
        1 for r in records
        if r.job_id in reservations and r.start > reservations[r.job_id] + LATE
    )


CSV_HEADER = ("id", "submit", "start", "end", "procs")
USER_CSV_HEADER = ("user", "jobs", "avg_wait", "max_wait", "avg_bsld")


def write_csv(records: Iterable[JobRecord], path: str | Path) -> None:
    """One row per job, in submit order: ``id,submit,start,end,procs`` (seconds, trace clock)."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_HEADER)
        for r in records:
            writer.writerow((r.job_id, _num(r.submit), _num(r.start), _num(r.end), r.procs))


def write_user_csv(users: Iterable[UserFigures], path: str | Path) -> None:
    """One row per user (``by_user``): ``user,jobs,avg_wait,max_wait,avg_bsld``."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(USER_CSV_HEADER)
        for u in users:
            writer.writerow((u.user, u.jobs, f"{u.avg_wait:.2f}", _num(u.max_wait),
                             f"{u.avg_bsld:.4f}"))


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(slots=True, frozen=True)
class ForecastFigures:
    """How the p50 and p90 starts published at arrival (``kiln sim --forecasts``) turned out:
    the figures ``kiln stats`` gives for the daemon's."""

    jobs: int  # waiting jobs that got a forecast
    within_p90: float  # share that started no later than their p90 start (target >= 0.9)
    p50_median_abs: float  # seconds: median |start - p50 start|
    p90_median_abs: float  # seconds: median |start - p90 start|

    def rows(self) -> list[tuple[str, str]]:
        return [("forecasts", f"{self.jobs:,} waiting jobs: {self.within_p90:.1%} started by "
                              f"their p90; median |err| p50 {self.p50_median_abs:,.0f} s, "
                              f"p90 {self.p90_median_abs:,.0f} s")]


def forecast_figures(result: Replay, window: Slice | None = None) -> ForecastFigures:
    """The calibration of the forecasts of the jobs in ``window`` (all when None)."""
    starts = {r.job_id: r.start for r in result.records if window is None or r in window}
    checked = [(starts[j], f) for j, f in result.forecasts.items()
               if j in starts and f.p50 is not None and f.p90 is not None]
    if not checked:
        return ForecastFigures(0, 0.0, 0.0, 0.0)
    within = sum(1 for start, f in checked if start <= f.p90 + LATE)  # type: ignore[operator]
    p50 = sorted(abs(start - f.p50) for start, f in checked)  # type: ignore[operator]
    p90 = sorted(abs(start - f.p90) for start, f in checked)  # type: ignore[operator]
    return ForecastFigures(len(checked), within / len(checked), _median(p50), _median(p90))


def _median(ordered: Sequence[float]) -> float:
    n = len(ordered)
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
