"""How sinfo (and its --json) and scontrol name a node: its state word, its GRES, a
partition's nodes.

Shared by ``cli/sinfo.py``, ``cli/sinfo_json.py`` and ``cli/scontrol.py`` (so none imports
another).
"""

from __future__ import annotations

from kiln.slurm.cpulist import format_cpu_list
from kiln.slurm.gres import gres_type

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from typing import Any

# state_display -> (compact, long)
NODE_STATES = {
    "IDLE": ("idle", "idle"), "MIXED": ("mix", "mixed"), "ALLOCATED": ("alloc", "allocated"),
    "DOWN": ("down", "down"), "DRAIN": ("drain", "drained"), "DRAINED": ("drain", "drained"),
    "DRAINING": ("drng", "draining"), "FUTURE": ("futr", "future"),
    "COMPLETING": ("comp", "completing"), "RESERVED": ("resv", "reserved"),
}


# a reboot's flag (schedd/lifecycle/reboot.py) -> sinfo's suffix: "@" pending, "^" issued
REBOOT_FLAGS = {"REBOOT_REQUESTED": "@", "REBOOT_ISSUED": "^"}


def node_state(node: dict[str, Any], long: bool = False) -> str:
    display = str(node.get("state_display") or node.get("state") or "IDLE").upper()
    display, _, flag = display.partition("+")
    star = display.endswith("*")
    names = NODE_STATES.get(display.rstrip("*"), (display.lower(), display.lower()))
    if flag == "REBOOT_ISSUED":  # Slurm shows a node being rebooted as booting
        names = ("boot", "rebooting")
    return names[1 if long else 0] + ("*" if star else "") + REBOOT_FLAGS.get(flag, "")


def gpu_types(node: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The node's GPUs by type, types in name order: one type for most nodes; a MIG GPU of
    mixed profiles is several (``1g.10gb``, ``3g.40gb``), as Slurm lists typed gres."""
    out: dict[str, list[dict[str, Any]]] = {}
    for g in node.get("gpus") or []:
        out.setdefault(gres_type(str(g.get("model", ""))), []).append(g)
    return dict(sorted(out.items()))


def node_gres(node: dict[str, Any]) -> str:
    """The node's GRES as Slurm spells it (sinfo's %G, scontrol's ``Gres=``): ``gpu:h100:8``,
    and ``gpu:h100:8(S:0-1)`` where the GPUs' CPU affinity is known (``gpu_sockets``); GPUs of
    several types one item each, ``gpu:1g.10gb:2,gpu:3g.40gb:1``."""
    gpus = node.get("gpus") or []
    if not gpus:
        return "(null)"
    items = []
    for gtype, typed in gpu_types(node).items():
        gres = f"gpu:{gtype}:{len(typed)}" if gtype else f"gpu:{len(typed)}"
        sockets = gpu_sockets({"cpus": node.get("cpus"), "gpus": typed})
        items.append(f"{gres}(S:{sockets})" if sockets else gres)
    return ",".join([*items, *(f"{kind}:{total}" for kind, total, _used in node_shares(node))])


def node_shards(node: dict[str, Any]) -> int:
    """The GPU shards (gres/shard) the node offers in all: shards per GPU x its GPUs."""
    return int(node.get("shards_per_gpu") or 0) * len(node.get("gpus") or [])


def node_shares(node: dict[str, Any]) -> list[tuple[str, int, int]]:
    """The GPU shares the node offers, (kind, in all, in use), for each kind it offers:
    gres/shard (shards per GPU x its GPUs), then gres/mps (MPS units per GPU x its GPUs, as
    Slurm counts a node's mps)."""
    gpus = len(node.get("gpus") or [])
    out = []
    for kind, key in (("shard", "shards"), ("mps", "mps")):
        total = int(node.get(f"{key}_per_gpu") or 0) * gpus
        if total:
            out.append((kind, total, int(node.get(f"alloc_{key}") or 0)))
    return out


def gpu_sockets(node: dict[str, Any]) -> str:
    """The sockets near the node's GPUs, as Slurm lists them after a GRES (its
    ``_core_bitmap2str``: every socket holding a core near any GPU of the type), '' when no GPU
    reports its affinity. kiln shows each CPU as a socket of one core (scontrol's
    ``Sockets=<CPUs> CoresPerSocket=1``), so the sockets are the near CPU ids."""
    cpus = int(node.get("cpus") or 0)
    near = {int(c) for g in node.get("gpus") or [] for c in g.get("cpus") or []
            if 0 <= int(c) < cpus}
    return format_cpu_list(near)


def node_gres_drain(node: dict[str, Any]) -> str:
    """The node's failed GPUs (kiln's per-GPU drain, schedd/lifecycle/gpuhealth.py) as Slurm
    spells a GRES with indices, ``gpu:a100:1(IDX:0)``; '' when none failed."""
    failed = [int(g["index"]) for g in node.get("gpus") or [] if g.get("fault")]
    if not failed:
        return ""
    items = []
    for gtype, typed in gpu_types(node).items():  # one item per type (a mixed MIG layout)
        ids = [int(g["index"]) for g in typed if g.get("fault")]
        if ids:
            kind = f"gpu:{gtype}" if gtype else "gpu"
            items.append(f"{kind}:{len(ids)}(IDX:{format_cpu_list(ids)})")
    return ",".join(items)


def node_gres_used(node: dict[str, Any]) -> str:
    gpus = node.get("gpus") or []
    if not gpus:
        return "gpu:0"
    types = gpu_types(node)
    if len(types) > 1:  # several types: each one's in use, by the GPU indices held
        held = set(node.get("alloc_gpu_ids") or [])
        items = [f"gpu:{t}:{sum(1 for g in typed if g.get('index') in held)}"
                 for t, typed in types.items()]
    else:
        gtype = next(iter(types))
        used = int(node.get("alloc_gpus") or 0)
        items = [f"gpu:{gtype}:{used}" if gtype else f"gpu:{used}"]
    return ",".join([*items, *(f"{kind}:{used}" for kind, _total, used in node_shares(node))])


def partition_nodes(part: dict[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The partition's nodes: its own list, else the nodes that name it, else every node."""
    names = part.get("nodes") or []
    if names:
        by_name = {n["name"]: n for n in nodes}
        return [by_name[n] for n in names if n in by_name]
    members = [n for n in nodes if part["name"] in (n.get("partitions") or [])]
    return members or list(nodes)
