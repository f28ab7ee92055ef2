"""The cgroup file operations that find, signal and kill every process of a job.

One copy, used by the agent (``agentd.cgroups.JobCgroup``) and by the job's supervisor
(``agentd.stepd``, which signals and kills the job while no agent may be running). The
supervisor starts once per job and is kept light, so this module needs only ``os``: paths are
strings, and a job's cgroup is known by a record of strings (``Tree``), as the launcher wrote it
into the supervisor's launch file (``JobCgroup.to_record``).
"""

from __future__ import annotations

import os
import signal as _signal
import time

FREEZE_WAIT = 2.0  # seconds a v1 freezer may take to report FROZEN before we kill anyway

TYPE_CHECKING = False  # typing is not imported at run time (the supervisor starts light)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any


class Tree:
    """A job's cgroup in each hierarchy (role -> directory) and which one tracks membership.

    ``tracking``: the role whose ``cgroup.procs`` lists the job's processes ("unified" for the
    v2 tree, else a v1 controller's); None: nothing tracks them (no cgroup found)."""

    __slots__ = ("dirs", "tracking")

    def __init__(self, dirs: dict[str, str], tracking: str | None):
        self.dirs, self.tracking = dirs, tracking

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Tree:
        return cls({str(r): str(p) for r, p in record["dirs"].items()}, record.get("tracking"))

    def _top(self, role: str, leaf: str | None) -> str:
        where = self.dirs[role]
        return os.path.join(where, leaf) if leaf else where

    def pids(self, leaf: str | None = None) -> list[int]:
        """Every process in the job's tree (or in one leaf)."""
        if self.tracking is None or self.tracking not in self.dirs:
            return []
        out: list[int] = []
        for path in walk(self._top(self.tracking, leaf)):
            out.extend(int(p) for p in read(os.path.join(path, "cgroup.procs")).split())
        return out

    def populated(self, leaf: str | None = None) -> bool:
        """Does any process remain (v2's ``populated``, else a walk of the v1 tree)?"""
        if self.tracking == "unified":
            events = read(os.path.join(self._top("unified", leaf), "cgroup.events"))
            if events:
                return "populated 1" in events
        return bool(self.pids(leaf))

    def signal(self, signum: int, leaf: str | None = None) -> None:
        for pid in self.pids(leaf):
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self, leaf: str | None = None) -> None:
        """SIGKILL every process: v2's ``cgroup.kill``; on v1 freeze, kill, thaw (so a fork
        bomb cannot outrun the kill); else kill what is listed."""
        if "unified" in self.dirs:
            target = os.path.join(self._top("unified", leaf), "cgroup.kill")
            if os.path.exists(target):
                try:
                    write(target, "1")
                    return
                except OSError:
                    pass
        state = os.path.join(self._top("freezer", leaf), "freezer.state") \
            if "freezer" in self.dirs else None
        frozen = False
        if state is not None and os.path.exists(state):
            try:
                write(state, "FROZEN")
                frozen = True
                _wait_frozen(state)
            except OSError:
                pass
        try:
            self.signal(_signal.SIGKILL, leaf)
        finally:
            if frozen:
                try:
                    write(state, "THAWED")  # type: ignore[arg-type]
                except OSError:
                    pass


def join_paths(paths: list[str]) -> None:
    """Put the calling process in the cgroups whose ``cgroup.procs`` these are (write "0":
    myself), for a process that is still root when it joins (the supervisor's child)."""
    for path in paths:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def walk(top: str) -> Iterator[str]:
    """``top`` and every cgroup below it, parents first (nothing if ``top`` is gone). One
    ``scandir`` per cgroup (a cgroup's children are its only subdirectories)."""
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    yield top
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from walk(entry.path)


def read(path: str) -> str:
    """A cgroup file's text ('' when it cannot be read): one ``open``, ``read``, ``close``
    (cgroup files are small; no buffered text stream around them)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        chunks = [os.read(fd, 65536)]
        while len(chunks[-1]) == 65536:
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks).decode("ascii", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _wait_frozen(state: str) -> None:
    deadline = time.monotonic() + FREEZE_WAIT
    while time.monotonic() < deadline:
        if read(state).strip() != "FREEZING":
            return
        time.sleep(0.005)
