"""Starting a batch job's supervisor (``agentd.stepd``): forked by the node's fork server
(``agentd.forkserver``), or, while there is none, started as a Python process of its own.

A supervisor started either way runs the same code (``stepd.supervise``) in the same setting
(its own session, the job's files as stdout and stderr, the command FIFO, cwd /), outlives the
agent and writes the job's end to the spool; only the cost differs: a fork of the small fork
server (about a millisecond) against a Python start per job (about 36 ms of CPU, which halved
the node's launch rate; docs/benchmarks.md, "Launch").

The fork server is the agent's child, started on the first launch. When it is gone (killed,
crashed, or silent for ``reply_timeout``) a launch never waits for it: that job's supervisor
is started directly, the agent's log says so once, and the next launch starts a new server
(at most one start per ``restart_backoff`` seconds, so a server that cannot start costs no
more than one try now and then).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("agentd.supervisors")

REPLY_TIMEOUT = 10.0  # seconds a fork server may take to answer before it counts as gone
RESTART_BACKOFF = 10.0  # seconds between two starts of the fork server
STOP_WAIT = 5.0  # seconds the agent waits for its fork server to exit on close()
# a supervisor finds the agentd package where this agent found it, whatever the job's
# environment says (the job's environment is applied only at the job's own exec)
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
SUPERVISOR_ENV = {"PYTHONPATH": PACKAGE_ROOT, "PATH": os.defpath}


@dataclass(slots=True)
class Started:
    """A supervisor just started: ``proc`` when the agent started it directly (its child, to
    reap), else ``pidfd`` (readable once it has exited; -1 where the kernel has none: watch
    the pid)."""

    pid: int
    pidfd: int = -1
    proc: subprocess.Popen | None = None


class SupervisorStarter:
    """Starts the supervisors of one node's jobs; ``close()`` stops its fork server."""

    def __init__(self, reply_timeout: float = REPLY_TIMEOUT,
                 restart_backoff: float = RESTART_BACKOFF,
                 server_command: list[str] | None = None):
        self.reply_timeout = reply_timeout
        self.restart_backoff = restart_backoff
        self.server_command = server_command or [sys.executable, "-S", "-m", "agentd.forkserver"]
        self._server: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._next_start = 0.0  # monotonic time before which no new server is started
        self._direct_said = False  # the log said supervisors are started directly
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)  # supervisors' stdin

    @property
    def server_pid(self) -> int:
        """The fork server's pid; 0 when none runs."""
        return self._server.pid if self._server is not None and self._alive() else 0

    def start(self, spool_root: str, key: tuple[int, int], out_fd: int, err_fd: int,
              control_fd: int) -> Started:
        """Start job ``key``'s supervisor with these files as its stdout, stderr and command
        FIFO (the caller keeps and closes its own descriptors). Raises OSError when even a
        direct start fails."""
        forked = self._fork(spool_root, key, [out_fd, err_fd, control_fd])
        if forked is not None:
            return forked
        if not self._direct_said:
            self._direct_said = True
            log.warning("no supervisor fork server: starting job supervisors directly "
                        "(python -S -m agentd.stepd, slower) until it is back")
        return self._start_directly(spool_root, key, out_fd, err_fd, control_fd)

    def reap(self) -> None:
        """Reap a fork server that exited (call when a child of the agent did)."""
        if self._server is not None and not self._alive():
            self._gone(f"it exited with status {self._server.returncode}")

    def close(self) -> None:
        """Stop the fork server (its supervisors run on) and release what this holds."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._server is not None:
            try:
                self._server.wait(timeout=STOP_WAIT)  # it exits on its socket's close
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
            self._server = None
        if self._devnull >= 0:
            os.close(self._devnull)
            self._devnull = -1

    # --- through the fork server -----------------------------------------------------------

    def _fork(self, spool_root: str, key: tuple[int, int], fds: list[int]) -> Started | None:
        """Ask the fork server for the supervisor; None when there is no server to ask or it
        did not answer (it is then gone)."""
        sock = self._connection()
        if sock is None:
            return None
        request = json.dumps({"spool": spool_root, "job_id": key[0], "generation": key[1]})
        try:
            socket.send_fds(sock, [request.encode()], fds)
            data, got, _, _ = socket.recv_fds(sock, 4096, 1, socket.MSG_CMSG_CLOEXEC)
        except TimeoutError:
            data, got = self._last_words(sock)
            if not data:
                return None
        except OSError as exc:
            self._gone(exc.strerror or str(exc))
            return None
        if not data:
            self._gone("it closed its socket")
            return None
        try:
            reply = json.loads(data)
            pid = int(reply["pid"])
        except (ValueError, KeyError, TypeError):
            for fd in got:
                os.close(fd)
            log.warning("the supervisor fork server could not start job %s's supervisor: %s",
                        key[0], data[:200].decode(errors="replace"))
            return None
        if self._direct_said:
            self._direct_said = False
            log.info("supervisor fork server (pid %d) is back: supervisors are forked again",
                     self._server.pid if self._server is not None else 0)
        return Started(pid, pidfd=got[0] if got else -1)

    def _connection(self) -> socket.socket | None:
        """The socket to a live fork server, started now if none runs and none was started
        within ``restart_backoff``."""
        if self._server is not None:
            if self._alive():
                return self._sock
            self._gone(f"it exited with status {self._server.returncode}")
        if time.monotonic() < self._next_start:
            return None
        self._next_start = time.monotonic() + self.restart_backoff
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._server = subprocess.Popen(
                [*self.server_command, str(theirs.fileno())], stdin=self._devnull,
                stdout=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), cwd="/",
                env=SUPERVISOR_ENV, start_new_session=True, close_fds=True)
        except OSError as exc:
            ours.close()
            log.warning("cannot start the supervisor fork server: %s", exc.strerror or exc)
            return None
        finally:
            theirs.close()
        ours.settimeout(self.reply_timeout)
        self._sock = ours
        log.info("supervisor fork server started (pid %d)", self._server.pid)
        return ours

    def _alive(self) -> bool:
        assert self._server is not None
        return self._server.poll() is None

    def _last_words(self, sock: socket.socket) -> tuple[bytes, list[int]]:
        """A server that did not answer in time is killed; a reply it sent before it died
        still counts (its supervisor runs), else there is none (b"")."""
        sock.setblocking(False)
        self._sock = None  # kept open a moment longer, for a reply already there
        self._gone(f"it did not answer within {self.reply_timeout:g} s")
        try:
            data, got, _, _ = socket.recv_fds(sock, 4096, 1, socket.MSG_CMSG_CLOEXEC)
        except OSError:
            return b"", []
        finally:
            sock.close()
        return data, got

    def _gone(self, why: str) -> None:
        """The fork server is of no more use: killed (if it still runs), reaped, forgotten."""
        server, self._server = self._server, None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if server is None:
            return
        server.kill()  # Popen's: only while it has not been reaped (its pid is still its own)
        server.wait()
        log.warning("supervisor fork server (pid %d) is gone: %s", server.pid, why)

    # --- directly ------------------------------------------------------------------------

    def _start_directly(self, spool_root: str, key: tuple[int, int], out_fd: int, err_fd: int,
                        control_fd: int) -> Started:
        """``python -S -m agentd.stepd``: a process of its own, the agent's child."""
        proc = subprocess.Popen(
            [sys.executable, "-S", "-m", "agentd.stepd", spool_root, str(key[0]), str(key[1]),
             str(control_fd)],
            stdin=self._devnull, stdout=out_fd, stderr=err_fd, pass_fds=(control_fd,),
            cwd="/", env=SUPERVISOR_ENV, start_new_session=True, close_fds=True)
        return Started(proc.pid, proc=proc)
