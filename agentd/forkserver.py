"""agentd.forkserver: the node's supervisor fork server, so that a job's supervisor costs a fork
of a small process instead of a Python start (docs/benchmarks.md, "Launch").

The agent starts one (``python -S -m agentd.forkserver FD``, ``agentd.supervisors``), in a
session of its own, with ``agentd.stepd`` already imported, and asks it for each batch job's
supervisor over FD, one end of a ``SOCK_SEQPACKET`` socket pair:

- request: ``{"spool", "job_id", "generation"}`` as JSON, with three descriptors passed along
  (``SCM_RIGHTS``): the job's stdout and stderr files and the open command FIFO;
- the server forks; the child becomes the job's supervisor (``supervisor_child``: a session of
  its own, the files as fds 0-2, the FIFO as fd 3 and nothing else open, then the very
  ``stepd.supervise`` that ``python -m agentd.stepd`` runs) and never returns here;
- reply: ``{"pid"}`` with a pidfd of the child (``pidfd_open``, taken while the child cannot yet
  have been reaped, so it is that process whatever happens to its pid), which the agent polls
  to see the supervisor end although it is not the agent's child; or ``{"error"}``.

The server is the supervisors' parent and reaps them, but holds nothing of theirs: a supervisor
keeps running when the server dies (``kill -9`` included), and the server exits once the
agent's end of the socket closes (the agent exited or died), leaving the supervisors to init
and the next agent. It sets no signal handlers and starts no threads, so a child inherits
Python's own dispositions (those ``python -m agentd.stepd`` starts with) and no lock held.
"""

from __future__ import annotations

import gc
import json
import os
import select
import socket
import sys

from agentd import stepd

TYPE_CHECKING = False  # typing is not imported at run time (the supervisor's rule, stepd.py)
if TYPE_CHECKING:
    from typing import Any

CONTROL_FD = 3  # the command FIFO's descriptor in a forked supervisor
PASSED_FDS = 3  # stdout, stderr, command FIFO
MAX_MESSAGE = 64 * 1024  # a request is a spool path and a job's key
REAP_INTERVAL = 1.0  # seconds: the longest an ended supervisor stays a zombie here


def serve(sock: socket.socket) -> int:
    """Answer the agent's requests until its end of ``sock`` closes; 0 then."""
    while True:
        ready, _, _ = select.select([sock], [], [], REAP_INTERVAL)
        reap_children()
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, PASSED_FDS,
                                              socket.MSG_CMSG_CLOEXEC)
        except InterruptedError:
            continue
        except OSError:
            return 0  # the agent's end is gone
        if not data:
            close_all(fds)
            return 0  # the agent closed its end (exited, or died): the supervisors live on
        try:
            reply, reply_fds = fork_supervisor(data, fds)
        finally:
            close_all(fds)
        try:
            socket.send_fds(sock, [json.dumps(reply).encode()], reply_fds)
        except OSError:
            return 0
        finally:
            close_all(reply_fds)


def fork_supervisor(data: bytes, fds: list[int]) -> tuple[dict[str, Any], list[int]]:
    """Fork one job's supervisor for a request; the reply and the descriptors to send."""
    try:
        request = json.loads(data)
        spool, key = str(request["spool"]), (int(request["job_id"]), int(request["generation"]))
    except (ValueError, KeyError, TypeError):
        return {"error": "unreadable request"}, []
    if len(fds) != PASSED_FDS:
        return {"error": f"{len(fds)} descriptors passed, not {PASSED_FDS}"}, []
    try:
        pid = os.fork()
    except OSError as exc:
        return {"error": f"fork: {exc.strerror or exc}"}, []
    if pid == 0:
        supervisor_child(spool, key, fds)  # never returns
    try:
        return {"pid": pid}, [os.pidfd_open(pid)]
    except OSError:  # no pidfd here (a kernel before 5.3): the agent watches the pid instead
        return {"pid": pid}, []


def supervisor_child(spool: str, key: tuple[int, int], fds: list[int]) -> None:
    """In the forked child: become what ``python -m agentd.stepd`` would be, then supervise.

    A session of its own (no signal of the server's group reaches it); /dev/null, stdout and
    stderr as fds 0-2 and the FIFO as fd 3; every other descriptor the server had (its socket
    to the agent above all: the agent sees the server gone only once no process holds it) is
    closed; the working directory is /. Leaves only by ``os._exit``: nothing of the server's
    (a ``finally``, buffered output) runs twice."""
    code = 1
    try:
        os.setsid()
        out_fd, err_fd, control_fd = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        os.dup2(control_fd, CONTROL_FD)  # after the others: fd 3 may be one of them
        os.closerange(CONTROL_FD + 1, os.sysconf("SC_OPEN_MAX"))
        os.chdir("/")
        code = stepd.supervise(spool, key, CONTROL_FD)
    except BaseException as exc:  # noqa: BLE001 - whatever it is, the child must not return
        stepd.write_fd(2, f"slurmstepd: error: the job's supervisor failed: {exc}\n")
    finally:
        os._exit(code)


def reap_children() -> None:
    """Reap every supervisor of ours that has exited (their ends are in their exit files)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit():
        print("usage: python -m agentd.forkserver SOCKET_FD", file=sys.stderr)
        return 2
    sock = socket.socket(fileno=int(args[0]))
    sock.set_inheritable(False)
    gc.freeze()  # what is loaded now stays shared with the children (fewer copied pages)
    return serve(sock)


if __name__ == "__main__":
    sys.exit(main())
