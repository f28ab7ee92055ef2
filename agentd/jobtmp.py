"""A private /tmp and /dev/shm per job: Slurm's job_container/tmpfs.

Every process of a job on a node (its batch script, each srun task, sattach's and
``srun --pty``'s too, which are srun tasks) starts in a mount namespace of its own in which
``/tmp`` and ``/dev/shm`` are bind mounts of the job's directories on this node,
``BASE/<job id>/tmp`` and ``BASE/<job id>/shm`` (mode 1777, as the system's; ``BASE`` and
``BASE/<job id>`` are 0700 root, so no one reaches them from outside the job). All the job's
steps on a node bind the same two directories, so they see each other's files, as Slurm's
steps share the job's namespace; nothing of another job, or of the node's own /tmp, is
visible. The namespace's mounts are slaves of the host's (a mount the host makes later, an
automounted home, still appears), and its own binds never reach the host.

The agent makes the directories before the job's first process (``ensure``) and removes them
once the job has ended on this node (``sweep``: no process of the job left here and schedd no
longer counts it among the node's jobs). On by default where it can work: the agent runs as
root and can make a mount namespace (``probe``); ``[agent] job_tmp = false`` turns it off.

``enter`` runs in the job's child between fork and exec, still root: Python 3.11 has no
``os.unshare`` or ``mount``, so it calls libc's through ctypes, imported only there (the
supervisor starts light, agentd/stepd.py)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("agentd.jobtmp")

CLONE_NEWNS = 0x00020000
MS_BIND = 4096
MS_REC = 16384
MS_SLAVE = 1 << 19
DIRS = (("tmp", "/tmp"), ("shm", "/dev/shm"))  # (directory under the job's, mount point)


class JobTmpError(OSError):
    """The job's private /tmp could not be made or entered."""


def _own_namespace() -> Callable[..., None]:
    """In a child, as root: a mount namespace of its own, its mounts slaves of the host's;
    the ``mount(2)`` that binds in it (raising ``JobTmpError``, as this does)."""
    import ctypes  # noqa: PLC0415 - only a child with a private /tmp needs it

    libc = ctypes.CDLL(None, use_errno=True)

    def check(rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise JobTmpError(err, f"private /tmp: {what}: {os.strerror(err)}")

    check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")

    def bind(source: bytes, target: bytes, what: str) -> None:
        check(libc.mount(source, target, None, MS_BIND, None), what)

    return bind


def enter(paths: dict[str, str]) -> None:
    """In the job's child, as root: a mount namespace of its own, its mounts slaves of the
    host's, with the job's directories bound on /tmp and /dev/shm. A ``keep`` directory (the
    agent's spool, with the job's script, when the node keeps it under /tmp: a personal
    cluster's home in /tmp) is bound back at its own path inside them, so the job reaches
    what it reached before and nothing more."""
    bind = _own_namespace()
    # the sources held open (in the new namespace: a bind takes no mount of another) before
    # the first bind: a base under /tmp is out of reach once /tmp is bound
    fds = [(os.open(paths[name], os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW), paths[name],
            target) for name, target in DIRS]
    keep = paths.get("keep", "")
    if keep and hidden(keep):
        fds.append((os.open(keep, os.O_PATH | os.O_DIRECTORY), keep, keep))
    try:
        for fd, source, target in fds:
            if source == target:  # kept: its path made inside the job's own /tmp first
                os.makedirs(target, mode=0o755, exist_ok=True)
            bind(f"/proc/self/fd/{fd}".encode(), target.encode(), f"bind {source} on {target}")
    finally:
        for fd, _, _ in fds:
            os.close(fd)


def hidden(path: str) -> bool:
    """Whether a job's own /tmp or /dev/shm would hide ``path``."""
    return any(path == target or path.startswith(target + "/") for _, target in DIRS)


def probe() -> str:
    """Why a private /tmp cannot work here ("" when it can): the agent is not root, or a child
    cannot make a mount namespace (a container without CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        return "the agent does not run as root"
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's result is its exit code
        code = 1
        try:
            _own_namespace()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return "" if os.waitstatus_to_exitcode(status) == 0 else \
        "this node cannot make mount namespaces"


class JobTmp:
    """The per-job directories under ``base`` (one node's)."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)

    def paths(self, job_id: int) -> dict[str, str]:
        job = self.base / str(int(job_id))
        return {name: str(job / name) for name, _ in DIRS}

    def ensure(self, job_id: int) -> dict[str, str]:
        """The job's directories, made when missing (every step calls it; the first makes
        them); what ``enter`` binds."""
        try:
            self.base.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.base, 0o700)
            job = self.base / str(int(job_id))
            with contextlib.suppress(FileExistsError):
                os.mkdir(job, 0o700)
            if job.is_symlink() or not job.is_dir():
                raise JobTmpError(f"{job} is not a directory")
            for name, _ in DIRS:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(job / name)
                    os.chmod(job / name, 0o1777)
        except OSError as exc:
            raise JobTmpError(f"cannot make the job's private /tmp: "
                              f"{exc.strerror or exc}") from None
        return self.paths(job_id)

    def job_ids(self) -> set[int]:
        """The jobs whose directories are here."""
        try:
            return {int(p.name) for p in self.base.iterdir() if p.name.isdigit()}
        except FileNotFoundError:
            return set()

    def remove(self, job_id: int) -> None:
        """Gone with the job (rmtree never follows a link the job left in it)."""
        path = self.base / str(int(job_id))
        with contextlib.suppress(FileNotFoundError):
            if path.is_symlink() or not path.is_dir():
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)
        log.info("job %d: its private /tmp and /dev/shm removed", job_id)

    def sweep(self, keep: set[int]) -> list[int]:
        """Remove the directories of every job not in ``keep``; the ones removed."""
        gone = sorted(self.job_ids() - keep)
        for job_id in gone:
            self.remove(job_id)
        return gone
