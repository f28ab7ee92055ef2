"""TRES strings the Slurm way: ``cpu=4,mem=16G,node=1,billing=4,gres/gpu=2,gres/gpu:a100=2``.

Limits (GrpTRES, MaxTRESPerJob, GrpTRESMins), sacct's AllocTRES/ReqTRES and sreport all speak
this spelling, so it is parsed and printed in one place. A TRES map is ``dict[str, int]``: names
lower case (``gres/gpu:a100``), memory in MiB. In a limit, ``-1`` means "clear this limit", as
in ``sacctmgr modify ... set GrpTRES=gres/gpu=-1``. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Slurm's TRES ids 1..8 in order; gres/* (id 1001 on) and anything else come after, by name
ORDER = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")
KNOWN = frozenset(ORDER)
CLEAR = -1

_VALUE = re.compile(r"^(-?\d+)([KMGTP]?)$", re.IGNORECASE)
_MEM_FACTORS = {"": 1, "K": 0, "M": 1, "G": 1024, "T": 1024 ** 2, "P": 1024 ** 3}
_GRES = re.compile(r"^gres/[a-z0-9_]+(:[a-z0-9_.-]+)?$")


class TresError(ValueError):
    """A TRES string that cannot be read; the message is one user-facing line."""


def parse(text: str) -> dict[str, int]:
    """'cpu=2,mem=4G,gres/gpu=2' -> {'cpu': 2, 'mem': 4096, 'gres/gpu': 2}; '' -> {}."""
    out: dict[str, int] = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, eq, value = item.partition("=")
        name = canonical_name(name)
        if not eq:
            raise TresError(f"Invalid TRES specification: {item}")
        out[name] = parse_value(name, value.strip(), item)
    return out


def canonical_name(name: str) -> str:
    """'GRES/GPU:A100' -> 'gres/gpu:a100', 'gpu' -> 'gres/gpu'; unknown names raise."""
    name = name.strip().lower()
    if name == "gpu" or name.startswith("gpu:"):
        name = "gres/" + name
    if name in KNOWN or _GRES.match(name):
        return name
    raise TresError(f"Invalid TRES name: {name or '(empty)'}")


def parse_value(name: str, value: str, item: str = "") -> int:
    m = _VALUE.match(value)
    if not m:
        raise TresError(f"Invalid TRES value: {item or value}")
    number, unit = int(m.group(1)), m.group(2).upper()
    if number < 0:
        if number != CLEAR or unit:
            raise TresError(f"Invalid TRES value: {item or value}")
        return CLEAR
    if unit and name != "mem":
        raise TresError(f"Invalid TRES value: {item or value}")
    if name == "mem":
        return -(-number // 1024) if unit == "K" else number * _MEM_FACTORS[unit]
    return number


def sort_key(name: str) -> tuple[int, str]:
    return (ORDER.index(name), "") if name in KNOWN else (len(ORDER), name)


def to_string(tres: Mapping[str, int | float], units: bool = True,
              by_name: bool = False) -> str:
    """{'gres/gpu': 2, 'cpu': 1} -> 'cpu=1,gres/gpu=2'; memory as 4G/500M with ``units``.

    sacctmgr orders TRES by Slurm's TRES id; sacct (``by_name``) sorts the 'name=value' items
    as strings (slurmdb_make_tres_string_from_simple's char list, slurm_char_list_to_xstr:
    so 'gres/gpu:1g.10gb=1' comes before 'gres/gpu=1') and prints no memory of 0 as '0'."""
    parts = []
    for name in (sorted(tres) if by_name else sorted(tres, key=sort_key)):
        value = int(tres[name])
        if name == "mem" and units:
            parts.append(f"mem={unit_text(value) if by_name else format_mem(value)}")
        else:
            parts.append(f"{name}={value}")
    return ",".join(sorted(parts) if by_name else parts)


def unit_text(value: int, units: str = "MGTP") -> str:
    """Slurm's exact unit conversion (CONVERT_NUM_UNIT_EXACT): divide by 1024 only while it
    divides evenly. MB: 16000 -> '16000M', 16384 -> '16G'; KiB with units 'KMGTP'; 0 -> '0'."""
    value = int(value)
    if not value:
        return "0"
    i = 0
    while value % 1024 == 0 and i < len(units) - 1:
        value //= 1024
        i += 1
    return f"{value}{units[i]}"


def format_mem(mb: int) -> str:
    """sacctmgr's spelling: '0M' for none."""
    return unit_text(mb) if mb else "0M"


def merge_limit(old: dict[str, int], change: dict[str, int]) -> dict[str, int]:
    """A limit after ``set GrpTRES=...``: named TRES replaced, ``-1`` removes one."""
    out = dict(old)
    for name, value in change.items():
        if value == CLEAR:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def job_tres(cpus: int, mem_mb: int, nodes: int, gpus: int, gpu_type: str = "",
             billing: float | None = None, shards: int = 0, mps: int = 0) -> dict[str, int]:
    """The TRES a job asks for or holds, as limits count them (gres/gpu:<type> as well as the
    generic gres/gpu when the type is known; gres/shard for GPU shards, gres/mps for MPS)."""
    out = {"cpu": cpus, "mem": mem_mb, "node": nodes}
    if billing is not None:
        out["billing"] = int(round(billing))
    if gpus:
        out["gres/gpu"] = gpus
        if gpu_type:
            out[f"gres/gpu:{gpu_type.lower()}"] = gpus
    if shards:
        out["gres/shard"] = shards
    if mps:
        out["gres/mps"] = mps
    return out
