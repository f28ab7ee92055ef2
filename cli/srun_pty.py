"""``srun --pty``: one task under a pseudo-terminal on its node, driven from srun's terminal.

srun asks for the step with ``pty`` and its terminal's size; the node's agent runs task 0
with a pty as its stdin, stdout, stderr and controlling terminal (``agentd/terminal.py``).
srun puts its own terminal in raw mode, so every key (Ctrl-C, Ctrl-Z and Ctrl-\\ too) is a
byte sent on, in ``step_input`` messages at their offsets, and the *remote* pty's line
discipline does what a local terminal would: echo, line editing, SIGINT/SIGTSTP/SIGQUIT to the
task's foreground process group. A window size change (SIGWINCH) is sent as ``winsize``
(TIOCSWINSZ there, SIGWINCH to the task). What the task writes comes back as the step's one
forwarded stream, with the same backpressure as any srun output (``docs/srun.md``), copied to
srun's stdout byte for byte.

The terminal's settings are put back on every way out: the task's end (its status is srun's),
an error talking to schedd (schedd restarting), SIGTERM/SIGHUP (the step is cancelled), and an
exception; ``RawTerminal`` is a context manager and also registers itself with ``atexit``.

srun polls ``step_wait`` for output: every FAST seconds while keys or output move, backing off
to SLOW when nothing does (``bin/bench-pty`` measures the keystroke round trip).
"""

from __future__ import annotations

import atexit
import base64
import fcntl
import os
import select
import signal
import struct
import sys
import termios
import tty
from dataclasses import dataclass, field
from typing import Any

from cli.core import fail
from cli.core.client import Client, ClientError

FAST, SLOW = 0.001, 0.05  # seconds between step_wait polls: while busy, and idle at most
BUSY_FOR = 0.2  # seconds of fast polling after the last key or output
READ_SIZE = 16 * 1024  # bytes of input per step_input, at most


def window_size(fd: int = 0) -> list[int] | None:
    """The terminal's [rows, columns], or None when ``fd`` is not a terminal."""
    try:
        rows, cols, _, _ = struct.unpack("HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ,
                                                             b"\0" * 8))
    except OSError:
        return None
    return [rows, cols] if rows and cols else None


@dataclass
class RawTerminal:
    """srun's terminal in raw mode while the step runs, restored on every way out."""

    fd: int = 0
    saved: list[Any] | None = None

    def __enter__(self) -> RawTerminal:
        if os.isatty(self.fd):
            try:
                self.saved = termios.tcgetattr(self.fd)
                tty.setraw(self.fd, termios.TCSANOW)
            except termios.error:
                self.saved = None
            atexit.register(self.restore)
        return self

    def restore(self) -> None:
        if self.saved is not None:
            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
            except termios.error:
                pass

    def __exit__(self, *exc: object) -> None:
        self.restore()
        atexit.unregister(self.restore)


@dataclass
class Signals:
    """SIGWINCH (send the new size) and SIGTERM/SIGHUP/SIGINT (cancel the step), as flags."""

    resized: bool = False
    ending: int = 0
    previous: dict[int, Any] = field(default_factory=dict)

    def __enter__(self) -> Signals:
        self.previous[signal.SIGWINCH] = signal.signal(signal.SIGWINCH, self._resize)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            self.previous[sig] = signal.signal(sig, self._end)
        return self

    def _resize(self, *_: Any) -> None:
        self.resized = True

    def _end(self, signum: int, _frame: Any) -> None:
        self.ending = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def run_terminal(job_id: int, body: dict[str, Any], forwarded: Any,
                 prog: str) -> dict[str, Any]:
    """Start the step ``body`` asks for under a pseudo-terminal and drive it from this
    terminal until it is over; step_wait's last reply. ``forwarded`` (cli.srun.Forwarded)
    copies the task's one stream to stdout."""
    body = {**body, "pty": True}
    size = window_size()
    if size:
        body["winsize"] = size
    with Client() as client, Signals() as signals, RawTerminal() as raw:
        try:
            started = client.call("step_start", {"step": body})
        except ClientError as exc:
            raw.restore()
            fail(f"Unable to create step for job {job_id}: {exc.message}")
        session = Session(client, job_id, int(started["step_id"]), forwarded, signals)
        result = session.run()
    if signals.ending and not result.get("tasks"):
        print(f"{prog}: Job step aborted: cancelling step {job_id}.{session.step_id}",
              file=sys.stderr, flush=True)
    return result


@dataclass
class Session:
    """The keys, the size and the output of one terminal step, until it is over."""

    client: Client
    job_id: int
    step_id: int
    forwarded: Any  # cli.srun.Forwarded
    signals: Signals
    offset: int = 0  # of the input stream: the next byte's
    stdin_open: bool = True
    cancelled: bool = False

    def run(self) -> dict[str, Any]:
        import time

        busy_until = 0.0
        while True:
            now = time.monotonic()
            wait = FAST if now < busy_until else SLOW
            moved = self._input(wait)
            if self.signals.resized:
                self.signals.resized = False
                self._send({"winsize": window_size()} if window_size() else {})
            if self.signals.ending and not self.cancelled:
                self.cancelled = True
                self.client.call("step_cancel", {"job_id": self.job_id,
                                                 "step_id": self.step_id})
            reply = self.client.call("step_wait", {
                "job_id": self.job_id, "step_id": self.step_id,
                "cursors": self.forwarded.cursor_list()})
            if self.forwarded.take(reply.get("output") or []):
                moved = True
            if reply.get("done"):
                self.forwarded.finish()
                return reply
            if moved:
                busy_until = time.monotonic() + BUSY_FOR

    def _input(self, wait: float) -> bool:
        """Send what was typed (waiting up to ``wait`` for it); True when something was."""
        if not self.stdin_open:
            select.select([], [], [], wait)
            return False
        ready, _, _ = select.select([0], [], [], wait)
        if not ready:
            return False
        try:
            data = os.read(0, READ_SIZE)
        except OSError:
            data = b""
        if not data:  # stdin ended (not a terminal): the task's terminal gets end-of-file
            self.stdin_open = False
            data = b"\x04"
        self._send({"offset": self.offset, "data": base64.b64encode(data).decode()})
        self.offset += len(data)
        return True

    def _send(self, fields: dict[str, Any]) -> None:
        if fields:
            self.client.call("step_input", {"job_id": self.job_id, "step_id": self.step_id,
                                            **fields})
