"""How sinfo (and its --json) name a node: its state word, its GRES, a partition's nodes.

Shared by ``cli/sinfo.py`` and ``cli/sinfo_json.py`` (so neither imports the other).
"""

from __future__ import annotations

from schedd.slurm.gres import gres_type

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


def node_state(node: dict[str, Any], long: bool = False) -> str:
    display = str(node.get("state_display") or node.get("state") or "IDLE").upper()
    star = display.endswith("*")
    names = NODE_STATES.get(display.rstrip("*"), (display.lower(), display.lower()))
    return names[1 if long else 0] + ("*" if star else "")


def node_gres(node: dict[str, Any]) -> str:
    gpus = node.get("gpus") or []
    if not gpus:
        return "(null)"
    gtype = gres_type(str(gpus[0].get("model", "")))
    return f"gpu:{gtype}:{len(gpus)}" if gtype else f"gpu:{len(gpus)}"


def node_gres_used(node: dict[str, Any]) -> str:
    gpus = node.get("gpus") or []
    if not gpus:
        return "gpu:0"
    gtype = gres_type(str(gpus[0].get("model", "")))
    used = int(node.get("alloc_gpus") or 0)
    return f"gpu:{gtype}:{used}" if gtype else f"gpu:{used}"


def partition_nodes(part: dict[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The partition's nodes: its own list, else the nodes that name it, else every node."""
    names = part.get("nodes") or []
    if names:
        by_name = {n["name"]: n for n in nodes}
        return [by_name[n] for n in names if n in by_name]
    members = [n for n in nodes if part["name"] in (n.get("partitions") or [])]
    return members or list(nodes)
