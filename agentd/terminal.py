"""The pseudo-terminal of an ``srun --pty`` task on this node.

The agent opens a pty pair: the task gets the slave as its stdin, stdout, stderr and
controlling terminal (its session's), owned by the job's user so programs that open
``/dev/tty`` or the pts by name can; the agent keeps the master. What the task writes comes
out of the master and is forwarded like any task stream (``agentd/forward.py``: the master is
that stream's read end, with the same spool cap and backpressure). What srun's user types
arrives in ``step_input`` messages at their byte offsets in the input stream and is written
into the master; the line discipline of the pty then does what a local terminal would (Ctrl-C
is SIGINT to the foreground process group, Ctrl-Z SIGTSTP, Ctrl-\\ SIGQUIT, echo, line
editing). A new window size is set with TIOCSWINSZ, which sends SIGWINCH to the foreground
group.

Input the master cannot take at once (a task that does not read) waits here, up to
``MAX_PENDING`` bytes; beyond that, input is dropped and logged (a user cannot type that
much; a paste that large is cut, as a local terminal's buffer also is).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import termios
from dataclasses import dataclass

log = logging.getLogger("agentd.terminal")

MAX_PENDING = 1024 * 1024  # bytes of input waiting for the task to read, at most


@dataclass(slots=True)
class Terminal:
    """The master side of one task's pseudo-terminal, for its input and its size."""

    master: int  # kept for writing input and setting the size (the stream reads its own dup)
    next_offset: int = 0  # the input stream's offset expected next
    pending: bytes = b""  # input the master has not taken yet
    dropped: int = 0

    @classmethod
    def open(cls, uid: int, gid: int, winsize: list[int] | None) -> tuple[Terminal, int, int]:
        """A new pty: (the terminal, a non-blocking read descriptor of the master for the
        output stream, the slave for the task). Raises OSError, leaving nothing open."""
        master, slave = os.openpty()
        reader = -1
        try:
            os.set_inheritable(master, False)
            os.set_inheritable(slave, False)
            os.fchown(slave, uid, gid)
            os.fchmod(slave, 0o620)
            if winsize:
                _set_size(slave, winsize[0], winsize[1])
            reader = os.dup(master)
            os.set_inheritable(reader, False)
            os.set_blocking(reader, False)
            os.set_blocking(master, False)
        except OSError:
            for fd in (master, slave, reader):
                if fd >= 0:
                    os.close(fd)
            raise
        return cls(master), reader, slave

    def feed(self, offset: int | None, data: bytes) -> None:
        """Input at ``offset`` of srun's input stream (a resend's bytes that were written
        already are skipped), or with no offset from an attached reader (sattach), written
        as it comes."""
        if offset is not None:
            if offset + len(data) <= self.next_offset:
                return
            if offset < self.next_offset:
                data = data[self.next_offset - offset:]
            elif offset > self.next_offset:
                log.warning("terminal input: %d bytes were lost", offset - self.next_offset)
                self.next_offset = offset
            self.next_offset += len(data)
        if len(self.pending) + len(data) > MAX_PENDING:
            self.dropped += len(data)
            log.warning("terminal input: the task does not read; %d bytes dropped", len(data))
            return
        self.pending += data
        self.flush()

    def flush(self) -> None:
        """Write what input waits, as much as the master takes now."""
        while self.pending and self.master >= 0:
            try:
                took = os.write(self.master, self.pending)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno not in (errno.EIO, errno.EBADF):
                    log.warning("terminal input: %s", exc.strerror or exc)
                self.pending = b""
                return
            self.pending = self.pending[took:]

    def resize(self, rows: int, cols: int) -> None:
        if self.master >= 0:
            try:
                _set_size(self.master, rows, cols)
            except OSError as exc:
                log.warning("terminal size: %s", exc.strerror or exc)

    def close(self) -> None:
        if self.master >= 0:
            os.close(self.master)
            self.master = -1


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def controlling_terminal() -> None:
    """In the task, after setsid: make stdin (the slave) its session's controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
