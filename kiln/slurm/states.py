"""Job and node states, in Slurm's words, with their compact spellings.

Kept apart from ``kiln.model`` so that ``squeue`` and ``scancel`` can name states without
paying for the data classes (standard library only).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from kiln.slurm.compact import COMPACT_CODES


class JobState(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PREEMPTED = "PREEMPTED"
    REQUEUED = "REQUEUED"

    @property
    def compact(self) -> str:
        return COMPACT_STATES[self]

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATES


COMPACT_STATES: dict[JobState, str] = {JobState(name): code for name, code in COMPACT_CODES.items()}

FINISHED_STATES = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
        JobState.PREEMPTED,
    }
)
ACTIVE_STATES = frozenset({JobState.PENDING, JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED})

# the Reason of a job whose prolog failed: requeued and held (Slurm's state_desc; scontrol
# shows it with underscores), kept until the job is released
LAUNCH_FAILED_HELD = "launch failed requeued held"


class StateError(ValueError):
    """A job state name that is none; the message is Slurm's line."""


# Every spelling squeue -t, scancel -t and sacct -s take, upper case: long, compact, and the
# American CANCELED that Slurm also accepts.
_STATE_NAMES: dict[str, JobState] = {
    **{str(s): s for s in JobState},
    **{c: s for s, c in COMPACT_STATES.items()},
    "CANCELED": JobState.CANCELLED,
}


def parse_state(name: object) -> JobState:
    """'PENDING', 'pd', ' Running ', 'OOM', 'canceled' -> the JobState; StateError otherwise."""
    state = _STATE_NAMES.get(str(name).strip().upper())
    if state is None:
        shown = str(name)[:64]
        shown = shown if shown.isprintable() else repr(shown)
        raise StateError(f"Invalid job state specified: {shown}")
    return state


def parse_states(names: Iterable[object]) -> set[JobState] | None:
    """A list of state names -> the states; None when one of them is 'all' (every state)."""
    wanted: set[JobState] = set()
    for name in names:
        if str(name).strip().upper() == "ALL":
            return None
        wanted.add(parse_state(name))
    return wanted


class NodeState(StrEnum):
    """Slurm's base node states; ``MIXED``/``ALLOCATED`` are derived from allocations for display."""

    IDLE = "IDLE"
    DOWN = "DOWN"
    DRAIN = "DRAIN"
    FUTURE = "FUTURE"
