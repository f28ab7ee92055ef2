"""Logging set-up shared by the daemons (standard library only: the agent imports it)."""

from __future__ import annotations

import logging
import os
import sys


def setup_logging(log_file: str | None, level: str = "INFO") -> None:
    handler: logging.Handler
    if log_file:
        private_file(log_file)
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def private_file(path: str) -> None:
    """A log file readable by its owner only (it names users, paths and refused keys),
    whatever the umask: created 0600, or tightened when it is ours."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
