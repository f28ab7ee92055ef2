"""Progress bars for kiln's own long commands (``kiln sim``, ``kiln db upgrade``, ``kiln
bench``), drawn with rich on stderr, so stdout keeps only the command's figures.

Only where a person watches: when stderr is not a terminal (a pipe, a log, a test) nothing is
drawn and rich is not even imported. The Slurm-named commands never use this: their output
must stay Slurm's (the import contracts in pyproject.toml keep rich out of them).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Update = Callable[[float], None]  # how much of the total is done


@contextmanager
def progress(description: str, total: float | None, enabled: bool | None = None,
             console: Any = None) -> Iterator[Update]:
    """A bar for ``total`` units of work (None: a pulse, for work of unknown length), gone
    when the work is. ``enabled`` None: when stderr is a terminal."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield _nothing
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                  TimeElapsedColumn(), console=console or Console(stderr=True),
                  transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)


def _nothing(done: float) -> None:
    return None
