"""The files of a job's supervisor in the agent's spool (``stepd/`` in ``agentd.spool``).

Shared by the agent (``Spool``) and the supervisor (``agentd.stepd``, one started per job):
so this module imports ``os`` and ``json`` only (no pathlib or dataclasses), and paths are
strings. Per job, ``stepd/<job>.<generation>.<kind>``:

- ``launch``: what to run (argv, environment, user, limit), written by the agent, taken by
  the supervisor (renamed to ``claimed``, read and removed: one supervisor per launch);
- ``ctl``: the FIFO of the agent's commands, one JSON line each;
- ``pid``: the batch shell's pid, written by the supervisor once it has started it;
- ``exit``: how the job ended, written durably by the supervisor (``write_durable``).

And one for the node, ``stepd/schedd-heard``: touched by the agent whenever it hears schedd;
its mtime is the clock of every supervisor's fence.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False  # typing is not imported at run time (see agentd/stepd.py)
if TYPE_CHECKING:
    from typing import Any

KINDS = ("launch", "claimed", "ctl", "pid", "exit")
HEARD = "schedd-heard"


def stepd_dir(spool_root: str) -> str:
    return os.path.join(spool_root, "stepd")


def path(spool_root: str, job_id: int, generation: int, kind: str) -> str:
    """A file of the job's supervisor: ``kind`` is one of ``KINDS``."""
    if kind not in KINDS:
        raise ValueError(f"no supervisor file {kind!r}")
    return os.path.join(spool_root, "stepd", f"{job_id}.{generation}.{kind}")


def heard_path(spool_root: str) -> str:
    return os.path.join(spool_root, "stepd", HEARD)


def heard_age(spool_root: str, now: float) -> float | None:
    """Seconds since the agent last heard schedd; None when it never has."""
    try:
        return now - os.stat(heard_path(spool_root)).st_mtime
    except OSError:
        return None


def write_small(target: str, text: str) -> None:
    """Write a file whole (temporary file, then rename), mode 0600; no fsync."""
    tmp = target + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, target)


def write_durable(target: str, text: str) -> None:
    """Write a file so that it is either absent or whole, even across a crash of the node:
    temporary file, fsync, rename, fsync of the directory."""
    tmp = target + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dir_fd = os.open(os.path.dirname(target), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_json(target: str) -> dict[str, Any] | None:
    """A JSON object from a file, or None (absent, torn, not an object)."""
    try:
        with open(target, "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
