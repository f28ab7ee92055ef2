"""Forwarded step output in schedd: what the agents sent and srun has not yet taken.

A step's tasks write stdout/stderr into files in their node agent's spool; the agent sends what
they write (``step_output``: a chunk at a byte offset of one task's stream) and srun fetches it
with ``step_wait``. In between, schedd keeps, per (procid, stream), the bytes srun has not yet
confirmed, and the offset it expects next.

Reliability is go-back-N with cumulative acknowledgements: a chunk is taken only if it starts
exactly at the expected offset (a duplicate, an overlap or a gap is ignored), and every reply
says the expected offset, so the agent resends from there. Memory is bounded: past ``cap``
bytes buffered for the step a chunk is refused the same way, and the agent tries again later
(backpressure, not an unbounded queue). srun's cursors (the next offset it wants per stream)
release what it has written. Pure: no sockets, no clock.

**Taps** (sattach): a reader attached to a running step gets every byte taken from its
attaching on, in order, into its own ``Tap``; a tap holds at most TAP_CAP bytes and drops the
oldest beyond that (an attached reader never slows the task down: srun's buffer is the one
that pushes back). A tap not read for TAP_IDLE seconds is forgotten.
"""

from __future__ import annotations

import base64
from collections import deque
from dataclasses import dataclass, field

STREAMS = ("out", "err")
STEP_CAP = 4 * 1024 * 1024  # bytes buffered per step before agents are told to wait
REPLY_CAP = 1024 * 1024  # bytes of output in one step_wait reply

Key = tuple[int, str]  # (procid, "out" | "err")
TAP_CAP = 1024 * 1024  # bytes one attached reader (sattach) may have waiting, at most
TAP_IDLE = 60.0  # seconds after which a tap nobody reads is forgotten
MAX_TAPS = 8  # attached readers per step, at most (each may hold TAP_CAP)


@dataclass(slots=True)
class Tap:
    """What one attached reader has not read yet: (procid, stream, bytes) in order."""

    seen: float  # when it was last read (schedd's clock)
    chunks: deque[tuple[int, str, bytes]] = field(default_factory=deque)
    size: int = 0
    dropped: int = 0  # bytes dropped because the reader was too slow

    def add(self, key: Key, data: bytes) -> None:
        self.chunks.append((key[0], key[1], data))
        self.size += len(data)
        while self.size > TAP_CAP and self.chunks:
            _, _, old = self.chunks.popleft()
            self.size -= len(old)
            self.dropped += len(old)

    def take(self, now: float, limit: int = REPLY_CAP) -> list[list[int | str]]:
        """What the reader has not read, at most about ``limit`` bytes: [procid, stream,
        base64]; taken (the reader does not ask twice)."""
        self.seen = now
        out: list[list[int | str]] = []
        while self.chunks and limit > 0:
            procid, stream, data = self.chunks.popleft()
            self.size -= len(data)
            limit -= len(data)
            out.append([procid, stream, base64.b64encode(data).decode()])
        return out


@dataclass(slots=True)
class Pending:
    """One stream's bytes not yet confirmed by srun; ``base`` is the offset of data[0]."""

    base: int = 0
    data: bytearray = field(default_factory=bytearray)

    @property
    def end(self) -> int:
        """The offset expected next from the agent."""
        return self.base + len(self.data)


@dataclass(slots=True)
class StepOutput:
    """The forwarded output of one step, across its nodes."""

    cap: int = STEP_CAP
    streams: dict[Key, Pending] = field(default_factory=dict)
    size: int = 0  # bytes buffered, over every stream
    refused: int = 0  # chunks refused for want of room (backpressure), for the log/tests
    discard: bool = False  # srun left: take every chunk in order and keep none
    taps: dict[int, Tap] = field(default_factory=dict)  # attached readers (sattach), by id

    def accept(self, key: Key, offset: int, data: bytes) -> int:
        """Take ``data`` if it is the next chunk of the stream and fits; the offset expected
        next either way (the agent's cumulative acknowledgement)."""
        pending = self.streams.setdefault(key, Pending())
        if offset != pending.end or not data:
            return pending.end
        if self.discard:
            pending.base += len(data)
        elif self.size + len(data) > self.cap:
            self.refused += 1
            return pending.end
        else:
            pending.data += data
            self.size += len(data)
        for tap in self.taps.values():
            tap.add(key, data)
        return pending.end

    def attach(self, tap_id: int, now: float) -> Tap | None:
        """A new tap (a reader attaching now), or None when MAX_TAPS are attached; taps idle
        for TAP_IDLE are forgotten first."""
        for old, tap in list(self.taps.items()):
            if now - tap.seen > TAP_IDLE:
                del self.taps[old]
        if len(self.taps) >= MAX_TAPS:
            return None
        self.taps[tap_id] = Tap(now)
        return self.taps[tap_id]

    def trim(self, cursors: dict[Key, int]) -> None:
        """Drop what srun says it has written (everything below its cursor of a stream)."""
        for key, cursor in cursors.items():
            pending = self.streams.get(key)
            if pending is None or cursor <= pending.base:
                continue
            drop = min(cursor - pending.base, len(pending.data))
            del pending.data[:drop]
            pending.base += drop
            self.size -= drop

    def chunks(self, limit: int = REPLY_CAP) -> list[list[int | str]]:
        """What srun has not confirmed, at most ``limit`` bytes: [procid, stream, offset,
        base64]. Sent again until srun's cursors move past it (a lost reply loses nothing)."""
        out: list[list[int | str]] = []
        for (procid, stream), pending in sorted(self.streams.items()):
            if limit <= 0:
                break
            if pending.data:
                part = bytes(pending.data[:limit])
                out.append([procid, stream, pending.base, base64.b64encode(part).decode()])
                limit -= len(part)
        return out

    def abandon(self) -> None:
        """srun will read no more: free the buffers and let the agents finish (so the step
        can end instead of waiting on a reader that is gone)."""
        self.discard = True
        for pending in self.streams.values():
            pending.base = pending.end
            pending.data.clear()
        self.size = 0

    @property
    def drained(self) -> bool:
        return self.size == 0


def parse_cursors(items: list[object]) -> dict[Key, int]:
    """step_wait's ``cursors`` ([[procid, stream, offset], ...]); malformed entries skipped."""
    cursors: dict[Key, int] = {}
    for item in items:
        if (isinstance(item, list) and len(item) == 3 and _is_int(item[0])
                and item[1] in STREAMS and _is_int(item[2])):
            cursors[(item[0], item[1])] = item[2]  # type: ignore[index]
    return cursors


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
