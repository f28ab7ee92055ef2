"""The agent's spool: each job's script and a small record, so jobs outlive an agent restart.

Layout under ``spool_dir`` (Slurm's SlurmdSpoolDir)::

    scripts/<job>.<generation>   the batch script, mode 0700, owned by the job's user
    jobs/<job>.<generation>.json the record: launch spec (without script and environment), pid,
                                 process create time, launch time, and once ended the outcome
    jobs-tmp/<job>.<generation>/ the job's private directory, 0700, owned by the job's user:
                                 ``$KILN_CHECKPOINT_FILE`` is ``checkpoint`` in it (removed
                                 when the job ends)
    stepd/                       the files of each job's supervisor (``agentd.stepd``) and
                                 the fence's clock, ``schedd-heard`` (``agentd.stepfiles``)

``scripts/`` and ``jobs-tmp/`` are 0711 so a user can reach their own script and directory but
list nobody's (and only root creates in them: nobody can plant another user's checkpoint);
``jobs/`` and ``stepd/`` are 0700 (records name users and paths; only root may command a
supervisor). Records are written to a temporary file and renamed, without fsync: they matter
only when the agent restarts while the node (and so its processes) lives on. A job's exit file
is the one durable write (``stepfiles.write_durable``: fsync before the rename and of the
directory after): it is the job's only account of how it ended once its supervisor is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentd import stepfiles

CHECKPOINT_NAME = "checkpoint"


def job_key(job_id: int, generation: int) -> str:
    return f"{job_id}.{generation}"


@dataclass(slots=True)
class Spool:
    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        for name, mode in (("scripts", 0o711), ("jobs", 0o700), ("jobs-tmp", 0o711),
                           ("stepd", 0o700)):
            path = self.root / name
            path.mkdir(exist_ok=True)
            os.chmod(path, mode)

    def script_path(self, job_id: int, generation: int) -> Path:
        return self.root / "scripts" / job_key(job_id, generation)

    def record_path(self, job_id: int, generation: int) -> Path:
        return self.root / "jobs" / f"{job_key(job_id, generation)}.json"

    def stepd_path(self, job_id: int, generation: int, kind: str) -> Path:
        """A file of the job's supervisor (``agentd.stepfiles``: launch, ctl, pid, exit)."""
        return Path(stepfiles.path(str(self.root), job_id, generation, kind))

    @property
    def heard_path(self) -> Path:
        """Its mtime is the fence's clock: when schedd last answered one of the agent's
        heartbeats (the heartbeat's send time; ``agentd.lease``)."""
        return Path(stepfiles.heard_path(str(self.root)))

    def touch_heard(self, at: float | None = None) -> None:
        """schedd last proved it hears the agent ``at`` (default now): the file's mtime, which
        supervisors read (``agentd.lease`` calls this)."""
        times = None if at is None else (at, at)
        try:
            os.utime(self.heard_path, times)
        except FileNotFoundError:
            fd = os.open(self.heard_path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            os.close(fd)
            os.utime(self.heard_path, times)

    def write_small(self, path: Path, text: str) -> None:
        stepfiles.write_small(str(path), text)

    def read_exit(self, job_id: int, generation: int) -> dict[str, Any] | None:
        """The supervisor's account of the job's end, or None while there is none."""
        return stepfiles.read_json(str(self.stepd_path(job_id, generation, "exit")))

    def remove_stepd_files(self, job_id: int, generation: int) -> None:
        for kind in stepfiles.KINDS:
            with contextlib.suppress(OSError):
                self.stepd_path(job_id, generation, kind).unlink(missing_ok=True)

    def write_script(self, job_id: int, generation: int, text: str, uid: int, gid: int) -> Path:
        """Write the batch script for its user: 0700, owned by uid:gid (when we may chown)."""
        path = self.script_path(job_id, generation)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o700)
        try:
            os.fchmod(fd, 0o700)
            if os.geteuid() == 0:
                os.fchown(fd, uid, gid)
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        return path

    def private_dir(self, job_id: int, generation: int) -> Path:
        return self.root / "jobs-tmp" / job_key(job_id, generation)

    def checkpoint_path(self, job_id: int, generation: int) -> Path:
        """``$KILN_CHECKPOINT_FILE``: in the job's private directory, which only its user (and
        root) may enter, so no one else can create or touch it."""
        return self.private_dir(job_id, generation) / CHECKPOINT_NAME

    def make_private_dir(self, job_id: int, generation: int, uid: int, gid: int) -> Path:
        """The job's private directory, 0700, owned by uid:gid (a stale one is replaced)."""
        path = self.private_dir(job_id, generation)
        self.remove_private_dir(job_id, generation)
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)
        if os.geteuid() == 0:
            os.chown(path, uid, gid, follow_symlinks=False)
        return path

    def remove_private_dir(self, job_id: int, generation: int) -> None:
        """Gone with the job; rmtree never follows a link the user left in it."""
        path = self.private_dir(job_id, generation)
        with contextlib.suppress(FileNotFoundError):
            if os.path.islink(path) or not os.path.isdir(path):
                os.unlink(path)
            else:
                shutil.rmtree(path, ignore_errors=True)

    def checkpoint_mtime(self, job_id: int, generation: int, uid: int) -> float | None:
        """When the job last touched its checkpoint file, or None: a file that is not a plain
        file of the job's user (a symlink, someone else's) is not read, and neither is a
        directory that is not the one made for the job."""
        try:
            fd = os.open(self.private_dir(job_id, generation),
                         os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            own = os.fstat(fd)
            if own.st_uid != uid or stat.S_IMODE(own.st_mode) & 0o077:
                return None
            st = os.stat(CHECKPOINT_NAME, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return None
        return st.st_mtime

    def remove_script(self, job_id: int, generation: int) -> None:
        with contextlib.suppress(OSError):
            self.script_path(job_id, generation).unlink(missing_ok=True)

    def save(self, job_id: int, generation: int, record: dict[str, Any]) -> None:
        path = self.record_path(job_id, generation)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, separators=(",", ":")))
        os.replace(tmp, path)

    def forget(self, job_id: int, generation: int) -> None:
        with contextlib.suppress(OSError):
            self.record_path(job_id, generation).unlink(missing_ok=True)
        self.remove_script(job_id, generation)
        self.remove_private_dir(job_id, generation)
        self.remove_stepd_files(job_id, generation)

    def records(self) -> list[dict[str, Any]]:
        """Every readable record; a torn or foreign file is skipped (and left for a human)."""
        out = []
        for path in sorted((self.root / "jobs").glob("*.json")):
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and "job_id" in record and "generation" in record:
                out.append(record)
        return out
