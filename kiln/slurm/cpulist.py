"""CPU id lists in the kernel's and Slurm's spelling ("0-3,8"): cpusets, ``CPU_IDs=``, NVML
affinity in the ledger."""

from __future__ import annotations

TYPE_CHECKING = False  # sinfo imports this on its fast path: collections costs it ~2 ms
if TYPE_CHECKING:
    from collections.abc import Iterable


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11)."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(out))


def format_cpu_list(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 5) -> '0-2,5'."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
