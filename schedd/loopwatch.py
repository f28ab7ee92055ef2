"""What held schedd's loop: each turn's time, split by what ran in it (a diagnostic).

schedd answers everyone from one thread, so a bystander's squeue waits for whatever the turn
it arrived in is doing. With ``KILN_SLOW_TURN_MS=N`` in schedd's environment, every turn of the
loop that takes N ms or longer is logged with its parts, longest first:

    slow turn 212 ms: op query_jobs uid 1001 150 ms, encode 40 ms, cycle 15 ms, ...

Parts are the loop's phases (``agents``, ``clients``, ``long requests``, ``cycle``, each timer)
and, inside them, each request's handler (``op NAME uid N``), each slice of a long one (``slice
NAME uid N``), the encoding of replies (``encode``) and the cyclic garbage collector's
pauses (``gc`` and its generation, 2 being a full collection); a phase's own figure includes
the requests and collections that ran in it. Unset (the default), the watch does nothing but a
few clock reads per turn.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("schedd.loop")

ENV = "KILN_SLOW_TURN_MS"
SHOWN = 8  # parts named in a slow turn's line


@dataclass(slots=True)
class LoopWatch:
    threshold: float | None  # seconds; None: off
    started: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    _gc_started: float = 0.0

    def __post_init__(self) -> None:
        if self.threshold is not None:
            gc.callbacks.append(self._collected)

    @classmethod
    def from_env(cls) -> LoopWatch:
        text = os.environ.get(ENV, "").strip()
        try:
            return cls(float(text) / 1000 if text else None)
        except ValueError:
            log.warning("%s=%r is not a number of milliseconds: the loop is not watched",
                        ENV, text)
            return cls(None)

    @property
    def on(self) -> bool:
        return self.threshold is not None

    def begin(self) -> None:
        if self.threshold is not None:
            self.started = time.perf_counter()
            self.parts.clear()

    def add(self, name: str, since: float) -> None:
        """Count the time from ``since`` (a ``time.perf_counter()``) to now under ``name``."""
        if self.threshold is not None:
            self.parts[name] = self.parts.get(name, 0.0) + time.perf_counter() - since

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.add(f"gc {info['generation']}", self._gc_started)

    def end(self) -> None:
        if self.threshold is None:
            return
        total = time.perf_counter() - self.started
        if total >= self.threshold:
            top = sorted(self.parts.items(), key=lambda kv: -kv[1])[:SHOWN]
            log.info("slow turn %.0f ms: %s", total * 1000,
                     ", ".join(f"{name} {sec * 1000:.0f} ms" for name, sec in top))
