"""Running a command in the terminal's foreground, as a shell runs a job (salloc's command).

The command gets a process group of its own and, when salloc's stdin is the terminal and
salloc is in its foreground, the terminal: Ctrl-C, Ctrl-Z and Ctrl-\\ then reach the command
(a shell, and the programs it starts in the foreground) and not salloc, which ignores them
meanwhile. When the command ends, salloc takes the terminal back and puts the terminal's
settings back as they were before (a command killed in raw mode leaves the terminal sane).

``Foreground.wait`` returns the command's wait status; it wakes up every ``tick`` seconds (and
at every signal) to let the caller look at the allocation, and records the hang-up/terminate
signals salloc itself gets (``Foreground.hangup``).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# signals the terminal sends to its foreground group: the command's, salloc ignores them
_TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN,
                     signal.SIGTTOU)
_ENDING_SIGNALS = (signal.SIGHUP, signal.SIGTERM)


@dataclass
class Foreground:
    """One command run in the foreground; use as a context manager around ``start``/``wait``."""

    argv: Sequence[str]
    env: dict[str, str]
    prog: str
    pid: int = 0
    hangup: int = 0  # SIGHUP/SIGTERM salloc got while the command ran (0: none)
    _tty: int = -1  # the terminal's descriptor when salloc runs in its foreground
    _saved: list[Any] | None = None  # the terminal's settings before the command
    _wake: tuple[int, int] = (-1, -1)
    _previous: dict[int, Any] = field(default_factory=dict)

    def __enter__(self) -> Foreground:
        if os.isatty(0):
            try:
                if os.tcgetpgrp(0) == os.getpgrp():
                    self._tty, self._saved = 0, termios.tcgetattr(0)
            except (OSError, termios.error):
                self._tty = -1
        self._wake = os.pipe()
        for fd in self._wake:
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wake[1], warn_on_full_buffer=False)
        interrupt = signal.SIG_IGN if self._tty >= 0 else self._forward
        for sig in _TERMINAL_SIGNALS:
            handler = interrupt if sig in (signal.SIGINT, signal.SIGQUIT) else signal.SIG_IGN
            self._previous[sig] = signal.signal(sig, handler)
        for sig in _ENDING_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._ending)
        self._previous[signal.SIGCHLD] = signal.signal(signal.SIGCHLD, lambda *_: None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.take_back()
        signal.set_wakeup_fd(-1)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        for fd in self._wake:
            os.close(fd)

    # --- the command ---------------------------------------------------------------------

    def start(self) -> None:
        """Fork and exec the command in its own process group, in the terminal's foreground."""
        pid = os.fork()
        if pid == 0:  # the child: never returns
            self._child()
        self.pid = pid
        try:
            os.setpgid(pid, pid)  # both sides set it: whichever runs first wins the race
        except OSError:
            pass
        self._give_terminal(pid)

    def _child(self) -> None:
        try:
            os.setpgid(0, 0)
            self._give_terminal(os.getpid())
            signal.set_wakeup_fd(-1)
            for sig in (*_TERMINAL_SIGNALS, *_ENDING_SIGNALS, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            os.execvpe(self.argv[0], list(self.argv), self.env)
        except OSError:
            print(f'{self.prog}: error: Unable to exec command "{self.argv[0]}"',
                  file=sys.stderr, flush=True)
        os._exit(1)

    def _give_terminal(self, pgid: int) -> None:
        if self._tty >= 0:
            try:
                os.tcsetpgrp(self._tty, pgid)
            except OSError:
                pass

    def take_back(self) -> None:
        """salloc's own again: the terminal's foreground and its settings from before."""
        if self._tty < 0:
            return
        try:
            os.tcsetpgrp(self._tty, os.getpgrp())
            if self._saved is not None:
                termios.tcsetattr(self._tty, termios.TCSADRAIN, self._saved)
        except (OSError, termios.error):
            pass

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the command's group and to the terminal's foreground group (the
        program a shell runs in the foreground has a group of its own)."""
        groups = {self.pid}
        if self._tty >= 0:
            try:
                groups.add(os.tcgetpgrp(self._tty))
            except OSError:
                pass
        for pgid in groups - {os.getpgrp(), 0}:
            try:
                os.killpg(pgid, signum)
            except OSError:
                pass

    def wait(self, tick: float, on_tick: Callable[[], None]) -> int:
        """Wait for the command to end; its wait status. ``on_tick`` runs every ``tick``
        seconds (and after every signal) while it runs."""
        while True:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return 0
            if pid:
                return status
            select.select([self._wake[0]], [], [], tick)
            try:
                os.read(self._wake[0], 512)
            except BlockingIOError:
                pass
            on_tick()

    # --- signals salloc gets ----------------------------------------------------------------

    def _forward(self, signum: int, _frame: Any) -> None:
        """No terminal: an interrupt of salloc goes to its command."""
        if self.pid:
            self.signal(signum)

    def _ending(self, signum: int, _frame: Any) -> None:
        self.hangup = signum
        if self.pid:
            self.signal(signal.SIGHUP)


def exit_status(status: int) -> int:
    """salloc's exit code for its command's wait status (Slurm's salloc: a command killed by
    SIGHUP, SIGINT, SIGQUIT or SIGKILL, most likely by its user, is a normal exit)."""
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (
            signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
        return 0
    return 1
