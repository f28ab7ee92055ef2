"""Slurm's HealthCheckProgram: ``[agent] health_check_program`` run every
``health_check_interval`` seconds, as the agent's user (root on a real node), with
SLURMD_NODENAME in its environment. It runs in a thread of its own with a timeout, so the
agent's loop never waits on it; the heartbeat carries its latest verdict to schedd, which
drains the node with the first line of a failing check's output as the Reason."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time

log = logging.getLogger("agentd.health")

REASON_MAX = 256


class HealthCheck:
    def __init__(self, program: str, interval: float, node: str, timeout: float = 60.0) -> None:
        self.program, self.interval, self.node = program, interval, node
        self.timeout = timeout
        self._lock = threading.Lock()
        self._verdict: str | None = None  # "" passed, else the Reason; None: none yet
        self._thread: threading.Thread | None = None
        self._last = 0.0

    @property
    def enabled(self) -> bool:
        return bool(self.program) and self.interval > 0

    def tick(self, now: float) -> None:
        """Start a check when one is due and none is running."""
        if not self.enabled or now - self._last < self.interval:
            return
        if self._thread is not None and self._thread.is_alive():
            return
        self._last = now
        self._thread = threading.Thread(target=self._run, name="health-check", daemon=True)
        self._thread.start()

    def verdict(self) -> str | None:
        """The latest check's result, sent with every heartbeat (schedd acts on it
        idempotently, so a lost heartbeat loses nothing): "" passed, else the Reason; None
        before the first check has ended."""
        with self._lock:
            return self._verdict

    def _run(self) -> None:
        env = dict(os.environ, SLURMD_NODENAME=self.node)
        start = time.monotonic()
        try:
            p = subprocess.run([self.program], env=env, capture_output=True, text=True,
                               timeout=self.timeout, stdin=subprocess.DEVNULL, check=False)
            out = (p.stdout or p.stderr or "").strip().splitlines()
            first = out[0].strip() if out else ""
            verdict = "" if p.returncode == 0 else (
                first or f"health check failed (exit {p.returncode})")
        except subprocess.TimeoutExpired:
            verdict = f"health check timed out after {self.timeout:.0f} s"
        except OSError as exc:
            verdict = f"health check could not run: {exc.strerror or exc}"
        if verdict:
            log.warning("health check failed after %.1f s: %s", time.monotonic() - start,
                        verdict)
        with self._lock:
            self._verdict = verdict[:REASON_MAX]
