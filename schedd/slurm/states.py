"""Job and node states, in Slurm's words, with their compact spellings.

Kept apart from ``schedd.model`` so that ``squeue`` and ``scancel`` can name states without
paying for the data classes (standard library only).
"""

from __future__ import annotations

from enum import StrEnum


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


COMPACT_STATES: dict[JobState, str] = {
    JobState.PENDING: "PD",
    JobState.RUNNING: "R",
    JobState.SUSPENDED: "S",
    JobState.COMPLETING: "CG",
    JobState.COMPLETED: "CD",
    JobState.FAILED: "F",
    JobState.CANCELLED: "CA",
    JobState.TIMEOUT: "TO",
    JobState.NODE_FAIL: "NF",
    JobState.OUT_OF_MEMORY: "OOM",
    JobState.PREEMPTED: "PR",
    JobState.REQUEUED: "RQ",
}

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


class NodeState(StrEnum):
    """Slurm's base node states; ``MIXED``/``ALLOCATED`` are derived from allocations for display."""

    IDLE = "IDLE"
    DOWN = "DOWN"
    DRAIN = "DRAIN"
    FUTURE = "FUTURE"
