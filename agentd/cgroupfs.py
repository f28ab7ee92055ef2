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


    # --- the end's counters, read once the tree is empty -------------------------------

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer killed in this cgroup (its own counter)."""
        if "memory" in self.dirs:  # v1 counts a kill only where the victim was: sum the leaves
            return sum(_field(read(os.path.join(p, "memory.oom_control")), "oom_kill")
                       for p in walk(self.dirs["memory"]))
        if "unified" in self.dirs:
            return _field(read(os.path.join(self.dirs["unified"], "memory.events")), "oom_kill")
        return 0

    def max_rss_kb(self) -> int:
        """The cgroup's own peak memory use, KiB (0 when the kernel keeps none)."""
        text = ""
        if "memory" in self.dirs:
            text = read(os.path.join(self.dirs["memory"], "memory.max_usage_in_bytes"))
        elif "unified" in self.dirs:
            text = read(os.path.join(self.dirs["unified"], "memory.peak"))
        return int(text) // 1024 if text.strip().isdigit() else 0

    def cpu_seconds(self) -> tuple[float, float] | None:
        """(user, system) CPU seconds of everything that ran in the job, from the cgroup's
        counters; None when the host keeps none."""
        if "cpuacct" in self.dirs:
            user = read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage_user")).strip()
            system = read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage_sys")).strip()
            if user.isdigit() and system.isdigit():
                return int(user) / 1e9, int(system) / 1e9
        if "unified" in self.dirs:
            text = read(os.path.join(self.dirs["unified"], "cpu.stat"))
            if "user_usec" in text:
                return _field(text, "user_usec") / 1e6, _field(text, "system_usec") / 1e6
        return None

    def remove(self) -> bool:
        """rmdir the tree in every hierarchy, deepest first; False if any cgroup stays (a
        process still in it: the kernel refuses, EBUSY)."""
        ok = True
        for top in self.dirs.values():
            for path in reversed(list(walk(top))):
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    ok = False
        return ok

    def finish(self) -> dict[str, Any] | None:
        """The end's counters of an empty tree, then the tree removed: what the supervisor
        does once the job's cgroup has emptied, in parallel with the agent (whose loop is
        serial), and writes into the exit file for the agent. None while a process is in it;
        ``removed`` False where a cgroup stayed (the agent then looks and removes itself)."""
        if self.populated():
            return None
        cpu = self.cpu_seconds()
        counters: dict[str, Any] = {"oom_kills": self.oom_kills(),
                                    "max_rss_kb": self.max_rss_kb(),
                                    "cpu": None if cpu is None else list(cpu)}
        counters["removed"] = self.remove()
        return counters


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


def _field(text: str, name: str) -> int:
    """The number after ``name`` in a cgroup's ``key value`` lines (0 when absent)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name and value.strip().isdigit():
            return int(value)
    return 0


def _wait_frozen(state: str) -> None:
    deadline = time.monotonic() + FREEZE_WAIT
    while time.monotonic() < deadline:
        if read(state).strip() != "FREEZING":
            return
        time.sleep(0.005)
