"""Logging set-up shared by the daemons (standard library only: the agent imports it)."""

from __future__ import annotations

import logging
import sys


def setup_logging(log_file: str | None, level: str = "INFO") -> None:
    handler: logging.Handler
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
