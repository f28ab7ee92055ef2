"""Slurm's license requests: ``-L/--licenses=name[:count][,name[:count]...]`` (count 1 when
not given; a name given twice adds up), as the scheduler, admission and scontrol read them."""

from __future__ import annotations


class LicenseError(ValueError):
    """Not a license request Slurm would parse."""


def parse(text: str) -> dict[str, int]:
    """'matlab:2,comsol' -> {'matlab': 2, 'comsol': 1}; '' -> {}."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, count = item.partition(":")
        if not name or (sep and not count.isdigit()) or (sep and int(count) < 1):
            raise LicenseError(f"Invalid license specification: {item}")
        out[name] = out.get(name, 0) + (int(count) if sep else 1)
    return out


def text(licenses: dict[str, int]) -> str:
    """{'matlab': 2} -> 'matlab:2' (how squeue %W and scontrol show job print a request)."""
    return ",".join(f"{name}:{count}" for name, count in licenses.items())
