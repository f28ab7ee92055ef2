"""Python's cyclic garbage collector, kept from stalling schedd's loop.

A full collection (generation 2) scans every container object schedd holds and stops the one
thread that answers everyone while it does: 55 ms at 2,000 jobs in memory on this 2-core
host, 200-600 ms while a user's sacct held 20,000 ledger jobs (issue 12's bystander saw them
as its worst squeue). Most of what a full collection scans is long-lived and not garbage (the
modules, the config, the jobs), so:

- what start-up made is frozen (``gc.freeze``: out of the collector's reach; reference
  counting still frees it) before the loop starts;
- after each full collection the loop freezes its survivors too (at the next ``tick``), so the
  next one scans only what came since;
- every ``UNFREEZE_SECONDS`` everything frozen is handed back (``gc.unfreeze``), so that a
  reference cycle among frozen objects that became garbage is still collected: one full
  scan of the heap per period instead of one every few seconds.
"""

from __future__ import annotations

import gc
from typing import Any

UNFREEZE_SECONDS = 600.0


class Collector:
    def __init__(self, now: float, unfreeze_every: float = UNFREEZE_SECONDS):
        self.unfreeze_every = unfreeze_every
        self.unfrozen_at = now
        self.full_since_freeze = False
        self.started = False  # a Daemon built by a test leaves the collector as it is

    def start(self) -> None:
        """Freeze what start-up made, and the survivors of full collections from now on (call
        once, just before the loop)."""
        self.started = True
        gc.callbacks.append(self._collected)
        gc.freeze()

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            self.full_since_freeze = True  # frozen by the loop, not inside the collector

    def tick(self, now: float) -> None:
        """A timer of the loop: freeze the survivors of a full collection, or hand everything
        back to the collector once a period."""
        if not self.started:
            return
        if now - self.unfrozen_at >= self.unfreeze_every:
            self.unfrozen_at = now
            self.full_since_freeze = False
            gc.unfreeze()
        elif self.full_since_freeze:
            self.full_since_freeze = False
            gc.freeze()

    def close(self) -> None:
        if self._collected in gc.callbacks:
            gc.callbacks.remove(self._collected)
