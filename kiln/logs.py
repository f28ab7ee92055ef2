"""Logging set-up shared by the daemons (standard library only: the agent imports it)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


def setup_logging(log_file: str | None, level: str = "INFO") -> None:
    handler: logging.Handler
    if log_file:
        private_file(log_file)
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def private_file(path: str) -> None:
    """A log file readable by its owner only (it names users, paths and refused keys),
    whatever the umask: created 0600, or tightened when it is ours."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class RepeatLimiter:
    """Rate-limits a log line that a peer can repeat at will (a refused key, say): the first
    occurrence per peer is logged, then at most one summary line per ``window`` seconds with
    how many there were. At most ``max_peers`` peers are tracked; the rest are counted together
    (a stream of fresh keys can neither grow this without bound nor flood the log).
    Thread-safe: ZeroMQ's authenticator calls it from its own thread."""

    OTHERS = "<other peers>"

    def __init__(self, logger: logging.Logger, window: float = 60.0, max_peers: int = 1000,
                 clock: Callable[[], float] = time.monotonic):
        self.log = logger
        self.window = window
        self.max_peers = max_peers
        self.clock = clock
        self._peers: dict[str, _Repeats] = {}
        self._lock = threading.Lock()

    def warning(self, peer: str, msg: str, *args: object) -> None:
        with self._lock:
            self._warning(peer, msg, args)

    def _warning(self, peer: str, msg: str, args: tuple) -> None:
        now = self.clock()
        if peer not in self._peers and len(self._peers) >= self.max_peers:
            self._expire(now)
            if len(self._peers) >= self.max_peers:
                peer, msg, args = self.OTHERS, "%s", (msg % args,)
        seen = self._peers.get(peer)
        if seen is None:
            self._peers[peer] = _Repeats(now, msg, args)
            self.log.warning(msg, *args)
            return
        seen.held, seen.msg, seen.args = seen.held + 1, msg, args
        if now - seen.logged >= self.window:
            self._summary(seen, now)

    def flush(self) -> None:
        """Log the summaries that are due (call it now and then, so a flood that stopped
        still gets its count) and forget peers quiet for a window."""
        with self._lock:
            now = self.clock()
            for seen in self._peers.values():
                if seen.held and now - seen.logged >= self.window:
                    self._summary(seen, now)
            self._expire(now)

    def _summary(self, seen: _Repeats, now: float) -> None:
        self.log.warning(seen.msg + " (%d times in the last %.0f s)", *seen.args, seen.held,
                         now - seen.logged)
        seen.logged, seen.held = now, 0

    def _expire(self, now: float) -> None:
        for peer, seen in list(self._peers.items()):
            if not seen.held and now - seen.logged >= self.window:
                del self._peers[peer]


@dataclass(slots=True)
class _Repeats:
    logged: float  # when a line for this peer was last written
    msg: str
    args: tuple
    held: int = 0  # occurrences since, not written
