"""The agent's spool: each job's script and a small record, so jobs outlive an agent restart.

Layout under ``spool_dir`` (Slurm's SlurmdSpoolDir)::

    scripts/<job>.<generation>   the batch script, mode 0700, owned by the job's user
    jobs/<job>.<generation>.json the record: launch spec (without script and environment), pid,
                                 process create time, launch time, and once ended the outcome

``scripts/`` is 0711 so a user can execute their own script but list nobody's; ``jobs/`` is
0700 (records name users and paths). Records are written to a temporary file and renamed, without
fsync: they matter only when the agent restarts while the node (and so its processes) lives on.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def job_key(job_id: int, generation: int) -> str:
    return f"{job_id}.{generation}"


@dataclass(slots=True)
class Spool:
    root: Path

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        for name, mode in (("scripts", 0o711), ("jobs", 0o700)):
            path = self.root / name
            path.mkdir(exist_ok=True)
            os.chmod(path, mode)

    def script_path(self, job_id: int, generation: int) -> Path:
        return self.root / "scripts" / job_key(job_id, generation)

    def record_path(self, job_id: int, generation: int) -> Path:
        return self.root / "jobs" / f"{job_key(job_id, generation)}.json"

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
