"""``--array`` specifications: ``1-10``, ``1,3,5``, ``0-15:4``, ``0-3,7%2``.

Standard library only: sbatch validates with it before anything is sent, schedd expands with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PIECE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


class ArraySpecError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ArraySpec:
    task_ids: tuple[int, ...]
    max_running: int = 0  # the %N throttle; 0 = none


def parse(spec: str, max_array_size: int = 1001) -> ArraySpec:
    """Expand; every index must be below ``max_array_size`` (Slurm's MaxArraySize)."""
    text = spec.strip()
    throttle = 0
    if "%" in text:
        text, _, limit = text.partition("%")
        if not limit.isdigit():
            raise ArraySpecError("Invalid job array specification")
        throttle = int(limit)
    ids: set[int] = set()
    for piece in text.split(","):
        m = _PIECE.match(piece.strip())
        if not m:
            raise ArraySpecError("Invalid job array specification")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise ArraySpecError("Invalid job array specification")
        if hi >= max_array_size:
            raise ArraySpecError("Invalid job array specification")
        ids.update(range(lo, hi + 1, step))
    if not ids:
        raise ArraySpecError("Invalid job array specification")
    return ArraySpec(tuple(sorted(ids)), throttle)
