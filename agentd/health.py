"""Slurm's HealthCheckProgram: ``[agent] health_check_program`` run every
``health_check_interval`` seconds, as the agent's user (root on a real node), with
SLURMD_NODENAME in its environment. It runs in a thread of its own with a timeout, so the
agent's loop never waits on it; the heartbeat carries its latest verdict to schedd, which
drains the node with the first line of a failing check's output as the Reason.

``health_check_node_state`` (Slurm's HealthCheckNodeState) limits the checks to nodes in some
states: the agent then asks for its node's state with each heartbeat (schedd's view: IDLE,
MIXED or ALLOCATED, and whether it is drained) and skips a due check while the node is in
none of them. CYCLE spreads a cluster's checks over the interval instead of running them all
at once: each node's first check waits a share of the interval fixed by its name."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
import zlib

log = logging.getLogger("agentd.health")

REASON_MAX = 256


class HealthCheck:
    def __init__(self, program: str, interval: float, node: str, timeout: float = 60.0,
                 node_states: frozenset[str] = frozenset({"ANY"})) -> None:
        self.program, self.interval, self.node = program, interval, node
        self.timeout = timeout
        self._started: float | None = None
        self.set_states(node_states)
        self.node_state: tuple[str, bool] | None = None  # schedd's (alloc, drained)
        self._lock = threading.Lock()
        self._verdict: str | None = None  # "" passed, else the Reason; None: none yet
        self._thread: threading.Thread | None = None
        self._last: float | None = None  # when the latest check was due

    @property
    def enabled(self) -> bool:
        return bool(self.program) and self.interval > 0

    def set_states(self, node_states: frozenset[str]) -> None:
        """The states the checks run in (health_check_node_state; again at reconfigure)."""
        self.states = node_states - {"CYCLE"} or frozenset({"ANY"})
        # CYCLE: the first check waits this node's share of the interval
        self._phase = (zlib.crc32(self.node.encode()) % 1000) / 1000 * self.interval \
            if "CYCLE" in node_states else 0.0

    @property
    def wants_state(self) -> bool:
        """Whether the heartbeat asks schedd for the node's state (a node-state filter)."""
        return self.enabled and "ANY" not in self.states

    def eligible(self) -> bool:
        """Whether the node is in a state the checks run in (Slurm's HealthCheckNodeState:
        IDLE includes a drained idle node, NONDRAINED_IDLE does not)."""
        if "ANY" in self.states:
            return True
        if self.node_state is None:
            return False
        alloc, drained = self.node_state
        if alloc == "IDLE":
            return "IDLE" in self.states or ("NONDRAINED_IDLE" in self.states and not drained)
        return (alloc == "MIXED" and "MIXED" in self.states) or \
            (alloc == "ALLOCATED" and "ALLOC" in self.states)

    def tick(self, now: float) -> None:
        """Start a check when one is due, none is running and the node is in a state the
        checks run in; a due check skipped for its state waits for the next interval, as
        Slurm's (before schedd has said the node's state, it waits for that word)."""
        if not self.enabled:
            return
        if self._started is None:
            self._started = now
        if now < self._started + self._phase or \
                (self._last is not None and now - self._last < self.interval):
            return
        if self._thread is not None and self._thread.is_alive():
            return
        if "ANY" not in self.states and self.node_state is None:
            return
        self._last = now
        if not self.eligible():
            return
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
