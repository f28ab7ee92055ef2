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


Piece = tuple[int, int, int]  # (first, last, step): the indices first, first+step, ... <= last


def parse_pieces(spec: str) -> tuple[tuple[Piece, ...], int]:
    """Check a specification and return its pieces and the %N throttle, expanding nothing:
    ``0-3000000`` is one piece whatever its size."""
    text = spec.strip()
    throttle = 0
    if "%" in text:
        text, _, limit = text.partition("%")
        if not limit.isdigit():
            raise ArraySpecError("Invalid job array specification")
        throttle = int(limit)
    pieces: list[Piece] = []
    for piece in text.split(","):
        m = _PIECE.match(piece.strip())
        if not m:
            raise ArraySpecError("Invalid job array specification")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        step = int(m.group(3)) if m.group(3) is not None else 1
        if hi < lo or step < 1:
            raise ArraySpecError("Invalid job array specification")
        pieces.append((lo, hi, step))
    return tuple(pieces), throttle


def clip(pieces: tuple[Piece, ...], max_array_size: int) -> tuple[Piece, ...]:
    """The pieces cut to the indices an array can have (below ``max_array_size``): what a
    job-id range such as ``7_[0-3000000]`` can match, at most ``max_array_size`` indices each."""
    out = []
    for lo, hi, step in pieces:
        hi = min(hi, max_array_size - 1)
        if lo <= hi:
            out.append((lo, hi - (hi - lo) % step, step))
    return tuple(out)


def piece_size(piece: Piece) -> int:
    lo, hi, step = piece
    return (hi - lo) // step + 1 if hi >= lo else 0


def in_pieces(index: int, pieces: tuple[Piece, ...]) -> bool:
    """Membership by arithmetic, nothing expanded."""
    return any(lo <= index <= hi and (index - lo) % step == 0 for lo, hi, step in pieces)


def parse(spec: str, max_array_size: int = 1001) -> ArraySpec:
    """Expand; every index must be below ``max_array_size`` (Slurm's MaxArraySize)."""
    pieces, throttle = parse_pieces(spec)
    ids: set[int] = set()
    for lo, hi, step in pieces:
        if hi >= max_array_size:
            raise ArraySpecError("Invalid job array specification")
        ids.update(range(lo, hi + 1, step))
    if not ids:
        raise ArraySpecError("Invalid job array specification")
    return ArraySpec(tuple(sorted(ids)), throttle)
