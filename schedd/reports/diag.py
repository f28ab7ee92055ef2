"""sdiag's figures: what schedd's scheduling cycles have done since it started.

kiln has one cycle that both schedules in priority order and backfills behind the first job
that cannot start (``schedd.scheduler.backfill.Walk``), so sdiag's "main" and "backfill"
sections describe the same cycles: the main section their time and depth (the pending jobs the
walk tested), the backfill section the jobs started behind a blocked job and the queue it saw.
Times are microseconds, as Slurm's. Nothing here is stored: a restart starts the figures over,
as slurmctld's do.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

# a job state a commit moves a job into -> sdiag's counter (Slurm: submitted, started,
# completed, canceled, failed)
STATE_COUNTERS = {"RUNNING": "started", "COMPLETED": "completed", "CANCELLED": "canceled",
                  "FAILED": "failed", "TIMEOUT": "failed", "NODE_FAIL": "failed",
                  "OUT_OF_MEMORY": "failed", "PREEMPTED": "failed", "DEADLINE": "failed"}


@dataclass(slots=True)
class SchedulerDiag:
    since: float  # when schedd started counting
    cycles: int = 0
    last_us: int = 0
    max_us: int = 0
    sum_us: int = 0
    depth_sum: int = 0
    last_depth: int = 0
    queue_len: int = 0
    queue_len_sum: int = 0
    last_when: float = 0.0
    backfilled: int = 0

    def cycle_done(self, now: float, seconds: float, depth: int, queue_len: int,
                   backfilled: int) -> None:
        micros = int(seconds * 1e6)
        self.cycles += 1
        self.last_us, self.max_us = micros, max(self.max_us, micros)
        self.sum_us += micros
        self.last_depth, self.depth_sum = depth, self.depth_sum + depth
        self.queue_len, self.queue_len_sum = queue_len, self.queue_len_sum + queue_len
        self.last_when = now
        self.backfilled += backfilled

    def to_wire(self, now: float, pending: int, running: int,
                states: Counter[str]) -> dict[str, Any]:
        """The reply to ``sched_diag``; ``states``: how many times jobs entered each state
        (and ``submitted``) since schedd started (``State.state_counts``)."""
        jobs: Counter[str] = Counter({"submitted": states.get("submitted", 0)})
        for state, count in states.items():
            if state in STATE_COUNTERS:
                jobs[STATE_COUNTERS[state]] += count
        return {"req_time": now, "req_time_start": self.since, "cycles": self.cycles,
                "last_us": self.last_us, "max_us": self.max_us, "sum_us": self.sum_us,
                "depth_sum": self.depth_sum, "last_depth": self.last_depth,
                "queue_len": self.queue_len, "queue_len_sum": self.queue_len_sum,
                "last_when": self.last_when, "backfilled": self.backfilled,
                "jobs": {k: jobs.get(k, 0) for k in
                         ("submitted", "started", "completed", "canceled", "failed")},
                "pending": pending, "running": running}
