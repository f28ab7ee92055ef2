"""Forwarding step task output to schedd, so srun shows it without a directory nodes share.

For each task stream schedd marks ``forward`` (srun without ``--output``/``--error``), the agent
makes a file in its own spool, ``<spool>/steps/<job>.<step>/<procid>.out|.err`` (the directory
root's, 0700), opened here before the uid switch: the task, running as the job's user, only
inherits the descriptor and cannot reach the file by name. The agent then sends what the task
writes as ``step_output`` chunks (CHUNK bytes, base64) at their byte offsets.

Reliability is go-back-N with cumulative acknowledgements: up to WINDOW chunks of a stream are
in flight; schedd answers each with the offset it expects next. A reply that does not move past
the chunk it answers (schedd's buffer is full, or an earlier chunk was lost) rewinds to the
acknowledged offset after BACKOFF; silence rewinds after RESEND_AFTER. Chunks are read back from
the file (``pread``), so the agent holds no output in memory; the files are removed once all
of it was taken. ``gone`` (schedd no longer holds the step) drops the rest.
"""

from __future__ import annotations

import base64
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHUNK = 48 * 1024  # bytes of output per step_output (64 KiB once base64)
WINDOW = 4  # chunks of one stream in flight
TURN_CAP = 1024 * 1024  # bytes read for sending per agent loop turn, over every stream
RESEND_AFTER = 3.0  # seconds without an acknowledgement before going back
BACKOFF = 0.2  # seconds before resending a chunk schedd did not take

StreamKey = tuple[int, str]  # (procid, "out" | "err")


@dataclass(slots=True)
class Stream:
    """One forwarded file: what was sent of it and what schedd acknowledged."""

    procid: int
    name: str  # "out" | "err"
    fd: int  # read-only, read at offsets
    acked: int = 0  # schedd holds every byte below
    sent: int = 0  # the next offset to send
    since: float = 0.0  # when the oldest unacknowledged chunk went out (or acked last moved)
    hold_until: float = 0.0
    final: int = -1  # the file's size once the tasks are gone; -1 while they run
    gone: bool = False

    @property
    def complete(self) -> bool:
        return self.gone or (self.final >= 0 and self.acked >= self.final)

    def due(self, now: float, budget: int) -> list[tuple[int, bytes]]:
        """The chunks (offset, bytes) to send now, at most ``budget`` bytes."""
        if self.gone or now < self.hold_until:
            return []
        if self.sent > self.acked and now - self.since >= RESEND_AFTER:
            self.sent = self.acked  # no answer: go back
        out: list[tuple[int, bytes]] = []
        while self.sent - self.acked < WINDOW * CHUNK and budget > 0:
            data = os.pread(self.fd, min(CHUNK, budget), self.sent)
            if not data:
                break
            if self.sent == self.acked:
                self.since = now
            out.append((self.sent, data))
            self.sent += len(data)
            budget -= len(data)
        return out

    def answered(self, offset: int, reply: dict[str, Any], now: float) -> None:
        """schedd's reply to the chunk sent at ``offset``."""
        if reply.get("gone"):
            self.gone = True
            return
        expected = reply.get("expected")
        if not isinstance(expected, int) or isinstance(expected, bool):
            return
        if expected > self.acked:
            self.acked, self.since = expected, now
            self.sent = max(self.sent, expected)
        if expected <= offset:  # this chunk was not taken: go back, after a pause
            self.sent = self.acked
            self.hold_until = now + BACKOFF


@dataclass(slots=True)
class StepOutput:
    """The forwarded streams of one step on this node, and the directory of their files."""

    directory: Path
    streams: dict[StreamKey, Stream] = field(default_factory=dict)

    @classmethod
    def create(cls, root: Path, job_id: int, step_id: int,
               wanted: list[StreamKey]) -> tuple[StepOutput, dict[StreamKey, int]]:
        """Make the step's files; the write descriptors for the tasks (the caller closes them
        once the tasks have them). Raises OSError, leaving nothing behind."""
        output = cls(root / f"{job_id}.{step_id}")
        writers: dict[StreamKey, int] = {}
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            shutil.rmtree(output.directory, ignore_errors=True)  # a stale one, from a crash
            output.directory.mkdir(mode=0o700)
            for procid, name in wanted:
                path = output.path((procid, name))
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW
                writers[(procid, name)] = os.open(path, flags | os.O_CLOEXEC, 0o600)
                reader = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                output.streams[(procid, name)] = Stream(procid, name, reader)
        except OSError:
            for fd in writers.values():
                os.close(fd)
            output.close()
            raise
        return output, writers

    def path(self, key: StreamKey) -> str:
        return str(self.directory / f"{key[0]}.{key[1]}")

    def due(self, now: float, budget: int) -> list[tuple[Stream, int, bytes]]:
        out = []
        for stream in self.streams.values():
            for offset, data in stream.due(now, budget):
                out.append((stream, offset, data))
                budget -= len(data)
        return out

    def finish(self) -> None:
        """The tasks are gone: what their files hold now is all there is to send."""
        for stream in self.streams.values():
            stream.final = os.fstat(stream.fd).st_size

    @property
    def complete(self) -> bool:
        return all(s.complete for s in self.streams.values())

    def close(self) -> None:
        for stream in self.streams.values():
            os.close(stream.fd)
        self.streams.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def message(node: str, key: tuple[int, int], stream: Stream, offset: int,
            data: bytes) -> dict[str, Any]:
    """The ``step_output`` body of one chunk."""
    return {"node": node, "job_id": key[0], "step_id": key[1], "procid": stream.procid,
            "stream": stream.name, "offset": offset, "data": base64.b64encode(data).decode()}
