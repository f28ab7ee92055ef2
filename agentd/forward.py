"""Forwarding step task output to schedd, so srun shows it without a directory nodes share.

For each task stream schedd marks ``forward`` (srun without ``--output``/``--error``), the task
writes into a **pipe** the agent made (the task inherits only the write end). The agent drains
the pipe into its own spool, ``<spool>/steps/<job>.<step>/<procid>.<out|err>.<n>`` (the
directory root's, 0700), and sends what it holds as ``step_output`` chunks (CHUNK bytes,
base64) at their byte offsets.

**The spool is capped** (root's files escape the users' quotas): per step (``step_cap``) and
per node (the ``room`` the step runner passes in). At the cap the agent stops reading the
pipe: the pipe fills and the task blocks in ``write()`` until schedd has taken (acknowledged)
enough of what the agent holds — backpressure to the writer, not disk to the node. A stream's
spool is a sequence of segment files; one is removed as soon as schedd acknowledged all of it,
so what a stream holds on disk is its unacknowledged bytes plus at most the acknowledged head of
its oldest segment.

Reliability is go-back-N with cumulative acknowledgements: up to WINDOW chunks of a stream are
in flight; schedd answers each with the offset it expects next. A reply that does not move past
the chunk it answers (schedd's buffer is full, or an earlier chunk was lost) rewinds to the
acknowledged offset after BACKOFF; silence rewinds after RESEND_AFTER. Chunks are read back from
the segment files (``pread``), so the agent holds no output in memory. ``gone`` (schedd no
longer holds the step) drops the rest: the pipe is still drained (so the task does not block
forever) but nothing more is kept.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import struct
import termios
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("agentd.forward")

CHUNK = 48 * 1024  # bytes of output per step_output (64 KiB once base64)
WINDOW = 4  # chunks of one stream in flight
TURN_CAP = 1024 * 1024  # bytes read for sending per agent loop turn, over every stream
PUMP_CAP = 4 * 1024 * 1024  # bytes moved from pipes into the spool per turn, over every stream
READ_SIZE = 256 * 1024  # bytes per read() from a pipe
PIPE_SIZE = 1024 * 1024  # the pipes' kernel buffer (F_SETPIPE_SZ), where the system allows
MAX_SEGMENT = 4 * 1024 * 1024  # bytes per spool segment file
RESEND_AFTER = 3.0  # seconds without an acknowledgement before going back
BACKOFF = 0.2  # seconds before resending a chunk schedd did not take
DEFAULT_STEP_CAP = 64 * 1024 * 1024  # bytes of a step's output the agent holds, at most

StreamKey = tuple[int, str]  # (procid, "out" | "err")


@dataclass(slots=True)
class _Segment:
    start: int  # stream offset of its first byte
    path: str
    length: int = 0

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(slots=True)
class Stream:
    """One forwarded stream: its pipe, its spool segments, what was sent and acknowledged."""

    procid: int
    name: str  # "out" | "err"
    base: str  # segment paths are base + ".<n>"
    pipe: int = -1  # the read end (non-blocking); -1 once closed
    segment_size: int = MAX_SEGMENT
    segments: deque[_Segment] = field(default_factory=deque)
    writer: int = -1  # the last segment's descriptor, for appending
    made: int = 0  # segment files made (names them)
    written: int = 0  # bytes taken from the pipe (and the agent's own lines): the stream's size
    acked: int = 0  # schedd holds every byte below
    sent: int = 0  # the next offset to send
    since: float = 0.0  # when the oldest unacknowledged chunk went out (or acked last moved)
    hold_until: float = 0.0
    ended: bool = False  # the tasks are gone: what the pipe held then is all there will be
    last: int = -1  # once ended: the stream's size then plus what its pipe held
    gone: bool = False
    pending: bytes = b""  # read from the pipe, not yet written (the disk refused)

    @property
    def final(self) -> int:
        """The stream's size once it is known (pipe closed, nothing pending); -1 before."""
        return self.written if self.pipe < 0 and not self.pending else -1

    @property
    def complete(self) -> bool:
        return self.gone or (self.final >= 0 and self.acked >= self.final)

    @property
    def held(self) -> int:
        """Bytes of this stream in the agent's spool (and read, waiting for the disk)."""
        start = self.segments[0].start if self.segments else self.written
        return self.written - start + len(self.pending)

    # --- taking output in -------------------------------------------------------------------

    def pump(self, room: int) -> int:
        """Move at most ``room`` bytes from the pipe into the spool; the bytes moved. Stops
        at an empty pipe; closes it at end of file (or, once ``ended``, when it is empty: a
        process that escaped the task's group may hold the write end)."""
        if self.pending and not self._store(self.pending):
            return 0
        moved = len(self.pending)
        self.pending = b""
        while self.pipe >= 0 and room - moved > 0:
            want = min(READ_SIZE, room - moved)
            if self.ended:
                if self.written >= self.last:  # more can only come from an escaped process
                    self._close_pipe()
                    break
                want = min(want, self.last - self.written)
            try:
                data = os.read(self.pipe, want)
            except BlockingIOError:
                if self.ended:
                    self._close_pipe()
                break
            except OSError as exc:
                if exc.errno != errno.EIO:  # EIO: a pty's master once the task side closed
                    log.warning("cannot read forwarded output: %s", exc.strerror or exc)
                self._close_pipe()
                break
            if not data:
                self._close_pipe()
                break
            moved += len(data)
            if self.gone:
                continue  # nobody wants it: drained so the task is not stuck, then dropped
            if not self._store(data):  # the rest waits in self.pending
                break
        return moved

    def add(self, data: bytes) -> None:
        """An agent's own line (slurmstepd's banner) at the stream's end, past any cap."""
        if self.gone or not data:
            return
        if self.pending:
            self.pending += data  # after what waits for the disk, in order
        else:
            self._store(data)

    def _store(self, data: bytes) -> bool:
        """Append to the spool, opening a new segment where the last is full (or was all
        taken); False when the disk refused (kept for the next turn)."""
        view = memoryview(data)
        try:
            while view:
                if self.writer < 0 or self.segments[-1].length >= self.segment_size:
                    self._new_segment()
                last = self.segments[-1]
                room = self.segment_size - last.length
                done = os.write(self.writer, view[:room])
                last.length += done
                self.written += done
                view = view[done:]
        except OSError as exc:
            if not self.pending:  # once per stall, not every turn
                log.warning("cannot spool forwarded output: %s", exc.strerror or exc)
            self.pending = bytes(view)
            return False
        return True

    def _new_segment(self) -> None:
        self._close_writer()
        path = f"{self.base}.{self.made}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self.writer = os.open(path, flags, 0o600)
        self.made += 1
        self.segments.append(_Segment(self.written, path))

    def _close_pipe(self) -> None:
        if self.pipe >= 0:
            os.close(self.pipe)
            self.pipe = -1

    def _close_writer(self) -> None:
        if self.writer >= 0:
            os.close(self.writer)
            self.writer = -1

    def _release(self) -> None:
        """Remove the segments schedd has taken all of (the last one too, when all of it was
        taken: the next byte starts a new one)."""
        while self.segments and self.segments[0].end <= self.acked:
            seg = self.segments.popleft()
            if not self.segments:
                self._close_writer()
            with contextlib.suppress(OSError):
                os.unlink(seg.path)

    # --- sending ----------------------------------------------------------------------------

    def due(self, now: float, budget: int) -> list[tuple[int, bytes]]:
        """The chunks (offset, bytes) to send now, at most ``budget`` bytes."""
        if self.gone or now < self.hold_until:
            return []
        if self.sent > self.acked and now - self.since >= RESEND_AFTER:
            self.sent = self.acked  # no answer: go back
        out: list[tuple[int, bytes]] = []
        while self.sent - self.acked < WINDOW * CHUNK and budget > 0:
            data = self._read(self.sent, min(CHUNK, budget))
            if not data:
                break
            if self.sent == self.acked:
                self.since = now
            out.append((self.sent, data))
            self.sent += len(data)
            budget -= len(data)
        return out

    def _read(self, offset: int, size: int) -> bytes:
        for seg in self.segments:
            if seg.start <= offset < seg.end:
                fd = os.open(seg.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
                try:
                    return os.pread(fd, min(size, seg.end - offset), offset - seg.start)
                finally:
                    os.close(fd)
        return b""

    def answered(self, offset: int, reply: dict[str, Any], now: float) -> None:
        """schedd's reply to the chunk sent at ``offset``."""
        if reply.get("gone"):
            self.drop()
            return
        expected = reply.get("expected")
        if not isinstance(expected, int) or isinstance(expected, bool):
            return
        expected = min(expected, self.written)
        if expected > self.acked:
            self.acked, self.since = expected, now
            self.sent = max(self.sent, expected)
            self._release()
        if expected <= offset:  # this chunk was not taken: go back, after a pause
            self.sent = self.acked
            self.hold_until = now + BACKOFF

    def drop(self) -> None:
        """schedd no longer wants this stream: free its spool (the pipe is drained on)."""
        self.gone = True
        self.pending = b""
        self._close_writer()
        for seg in self.segments:
            with contextlib.suppress(OSError):
                os.unlink(seg.path)
        self.segments.clear()

    def close(self) -> None:
        self._close_pipe()
        self._close_writer()


@dataclass(slots=True)
class StepOutput:
    """The forwarded streams of one step on this node, and the directory of their files."""

    directory: Path
    cap: int = DEFAULT_STEP_CAP
    streams: dict[StreamKey, Stream] = field(default_factory=dict)
    peak: int = 0  # the most it held at once (bytes), for the log and the tests

    @classmethod
    def create(cls, root: Path, job_id: int, step_id: int, wanted: list[StreamKey],
               cap: int = DEFAULT_STEP_CAP, readers: dict[StreamKey, int] | None = None
               ) -> tuple[StepOutput, dict[StreamKey, int]]:
        """Make the step's directory and a pipe per stream; the pipes' write ends for the
        tasks (the caller closes them once the tasks have them). A stream in ``readers``
        reads the non-blocking descriptor given (a pty's master: agentd/terminal.py; it is
        the stream's to close) instead of a pipe. Raises OSError, leaving nothing behind."""
        readers = dict(readers or {})
        output = cls(root / f"{job_id}.{step_id}", cap)
        writers: dict[StreamKey, int] = {}
        segment = max(CHUNK, min(MAX_SEGMENT, cap // 4))
        try:
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            shutil.rmtree(output.directory, ignore_errors=True)  # a stale one, from a crash
            output.directory.mkdir(mode=0o700)
            for key in list(readers):
                output.streams[key] = Stream(*key, str(output.directory / f"{key[0]}.{key[1]}"),
                                             readers.pop(key), segment_size=segment)
            for procid, name in wanted:
                if (procid, name) in output.streams:
                    continue
                read_end, write_end = os.pipe2(os.O_CLOEXEC)
                writers[(procid, name)] = write_end
                os.set_blocking(read_end, False)
                with contextlib.suppress(OSError):
                    fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
                output.streams[(procid, name)] = Stream(
                    procid, name, str(output.directory / f"{procid}.{name}"), read_end,
                    segment_size=segment)
        except OSError:
            for fd in [*writers.values(), *readers.values()]:
                os.close(fd)
            output.close()
            raise
        return output, writers

    @property
    def held(self) -> int:
        return sum(s.held for s in self.streams.values())

    def pipes(self) -> list[int]:
        """The pipes worth waiting on now: open, this step under its cap, and nothing
        waiting for the disk (retried every turn); a dropped stream's are always drained."""
        under = self.held < self.cap
        return [s.pipe for s in self.streams.values()
                if s.pipe >= 0 and (s.gone or (under and not s.pending))]

    def pump(self, room: int) -> int:
        """Move what the pipes hold into the spool while this step is under its cap and the
        node has ``room``; the bytes moved. A stream schedd dropped is drained regardless."""
        moved, held = 0, self.held
        for stream in self.streams.values():
            if stream.gone:
                stream.pump(READ_SIZE * 4)
                continue
            space = min(self.cap - held, room - moved)
            if space <= 0:
                continue
            took = stream.pump(space)
            moved, held = moved + took, held + took
        self.peak = max(self.peak, self.held)
        return moved

    def add(self, key: StreamKey, data: bytes) -> None:
        if key in self.streams:
            self.streams[key].add(data)

    def due(self, now: float, budget: int) -> list[tuple[Stream, int, bytes]]:
        out = []
        for stream in self.streams.values():
            for offset, data in stream.due(now, budget):
                out.append((stream, offset, data))
                budget -= len(data)
        return out

    def finish(self) -> None:
        """The tasks are gone: what the pipes hold now is all there is to send (a process
        that escaped their groups may write on; that is not waited for)."""
        for stream in self.streams.values():
            stream.ended = True
            stream.last = stream.written + len(stream.pending) + _available(stream.pipe)

    @property
    def complete(self) -> bool:
        return all(s.complete for s in self.streams.values())

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()
        self.streams.clear()
        shutil.rmtree(self.directory, ignore_errors=True)


def _available(fd: int) -> int:
    """Bytes a pipe holds (FIONREAD); 0 for a closed one."""
    if fd < 0:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
    except OSError:
        return 0


def check_cap(value: Any, name: str) -> int:
    """A cap from the config, in MB (a positive number): the bytes; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"[agent] {name} must be a positive number of MB, not {value!r}")
    return int(value * 1024 * 1024)


def message(node: str, key: tuple[int, int], stream: Stream, offset: int,
            data: bytes) -> dict[str, Any]:
    """The ``step_output`` body of one chunk."""
    return {"node": node, "job_id": key[0], "step_id": key[1], "procid": stream.procid,
            "stream": stream.name, "offset": offset, "data": base64.b64encode(data).decode()}

