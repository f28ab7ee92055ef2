"""Slurm's compact job state codes (squeue's ``%t``: PD, R, CG, ...), by state name.

Plain strings, in a module of their own: squeue and sinfo print them without importing
``kiln.slurm.states`` (its ``enum`` classes cost a command a few ms of its start).
``states.COMPACT_STATES`` is this table keyed by ``JobState``.
"""

from __future__ import annotations

COMPACT_CODES: dict[str, str] = {
    "PENDING": "PD",
    "RUNNING": "R",
    "SUSPENDED": "S",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "FAILED": "F",
    "CANCELLED": "CA",
    "TIMEOUT": "TO",
    "NODE_FAIL": "NF",
    "OUT_OF_MEMORY": "OOM",
    "PREEMPTED": "PR",
    "REQUEUED": "RQ",
}
