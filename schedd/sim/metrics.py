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
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from schedd.sim.replay import JobRecord, Replay

TAU = 10.0  # seconds: the bounded-slowdown threshold
LATE = 1e-6  # seconds: starting later than this after the reservation is a violation


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

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs for the printed summary."""
        return [
            ("jobs", f"{self.jobs:,}"),
            ("average wait", f"{self.avg_wait:,.2f} s"),
            ("average bounded slowdown", f"{self.avg_bsld:,.2f} (tau = {TAU:g} s)"),
            ("utilisation", f"{self.utilisation:.4f}"),
            ("makespan", f"{self.makespan:,.0f} s"),
            ("reservation violations", f"{self.violations:,} (of {self.reserved:,} reserved jobs;"
                                       f" {self.late_vs_last:,} late vs their last reservation)"),
        ]


def bounded_slowdown(wait: float, run: float, tau: float = TAU) -> float:
    return max(1.0, (wait + run) / max(run, tau))


def summarize(result: Replay, capacity: int) -> Metrics:
    records = result.records
    if not records:
        return Metrics(0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0)
    waits = [r.start - r.submit for r in records]
    first_submit = min(r.submit for r in records)
    last_end = max(r.end for r in records)
    makespan = last_end - first_submit
    busy = sum(r.units * r.run for r in records)
    return Metrics(
        jobs=len(records),
        avg_wait=sum(waits) / len(records),
        avg_bsld=sum(bounded_slowdown(w, r.run) for w, r in zip(waits, records, strict=True)) / len(records),
        utilisation=busy / (capacity * makespan) if makespan > 0 else 0.0,
        makespan=makespan,
        violations=_late(records, result.first_reservation),
        late_vs_last=_late(records, result.last_reservation),
        reserved=len(result.first_reservation),
    )


def _late(records: list[JobRecord], reservations: dict[int, float]) -> int:
    return sum(
        1 for r in records
        if r.job_id in reservations and r.start > reservations[r.job_id] + LATE
    )


CSV_HEADER = ("id", "submit", "start", "end", "procs")


def write_csv(records: Iterable[JobRecord], path: str | Path) -> None:
    """One row per job, in submit order: ``id,submit,start,end,procs`` (seconds, trace clock)."""
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_HEADER)
        for r in records:
            writer.writerow((r.job_id, _num(r.submit), _num(r.start), _num(r.end), r.procs))


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
