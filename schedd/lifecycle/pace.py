"""When the next scheduling cycle is due (``Pace``): on the interval, or sooner when something
changed. Held by the services object (``schedd/context.py``), read by the daemon's loop and set
by ``lifecycle/cycle.py``."""

from __future__ import annotations

from dataclasses import dataclass

from kiln.config import SchedulerConfig
from schedd import offload


@dataclass(slots=True)
class Pace:
    """When the next cycle is due: on the interval, or sooner when something changed
    (``due``, set by ``Context.wake_scheduler``)."""

    due: bool = True
    last: float = 0.0  # when the last cycle ran
    last_seconds: float = 0.0  # what it took
    forecast: offload.Ticket | None = None  # the timer's forecast being planned

    def until_next(self, sched: SchedulerConfig, now: float) -> float:
        """Seconds to the next cycle: on the interval, or sooner when something changed — but
        never sooner than min_interval (or twice the last cycle's duration) after the last one,
        so a burst of submissions shares one cycle instead of paying one each (Slurm's
        sched_min_interval)."""
        since = now - self.last
        if self.due:  # and at most a third of the loop's time goes to scheduling
            return max(0.0, max(sched.min_interval, 2 * self.last_seconds) - since)
        return max(0.0, sched.interval - since)
