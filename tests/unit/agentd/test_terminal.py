"""agentd/terminal.py: a step task's pseudo-terminal (input at offsets, window size) and
cli/foreground.py's exit status of salloc's command."""

from __future__ import annotations

import os
import signal

from agentd.terminal import Terminal
from cli.foreground import exit_status
from cli.srun_pty import window_size


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def test_input_is_written_once_at_its_offset() -> None:
    term, reader, slave = Terminal.open(os.getuid(), os.getgid(), [30, 90])
    try:
        assert window_size(slave) == [30, 90]
        term.feed(0, b"ab")
        term.feed(0, b"ab")  # a resend: nothing twice
        term.feed(1, b"bc")  # overlapping: only "c" is new
        term.feed(3, b"d\n")
        term.feed(None, b"e\n")  # an attached reader's: no offset, srun's stay as they were
        assert term.next_offset == 5
        assert _read_all(slave) == b"abcd\ne\n"  # canonical mode: the line is ready
        term.resize(12, 40)
        assert window_size(slave) == [12, 40]
    finally:
        term.close()
        os.close(reader)
        os.close(slave)


def test_the_slave_belongs_to_the_task_user() -> None:
    term, reader, slave = Terminal.open(os.getuid(), os.getgid(), None)
    try:
        st = os.fstat(slave)
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (os.getuid(), os.getgid(), 0o620)
    finally:
        term.close()
        os.close(reader)
        os.close(slave)


def test_salloc_exit_status_follows_slurm() -> None:
    assert exit_status(7 << 8) == 7
    assert exit_status(signal.SIGHUP) == 0  # killed by SIGHUP (the terminal went away)
    assert exit_status(signal.SIGKILL) == 0
    assert exit_status(signal.SIGSEGV) == 1
