"""``sinfo --json``: in the shape of Slurm 22.05's ``sinfo --json`` (openapi data_parser
v0.0.38): ``{"meta", "errors", "warnings", "nodes": [...], "partitions": [...]}`` with Slurm's
key names for the fields kiln has. Times are POSIX seconds, memory MiB, time limits minutes
(``null`` = UNLIMITED), as Slurm reports them.

``--json=v0.0.40|v0.0.41``: as Slurm 23.11 / 24.05's sinfo dumps OPENAPI_SINFO_RESP, ``{"sinfo":
[...]}``, one sinfo_data object per line sinfo would print (the node groups of its format:
by default a partition's nodes of one state; ``-N`` one per node), each with its counts,
minimums and maximums over the group's nodes and its partition's partition_info
(``PARSER_ARRAY(SINFO_DATA)`` in src/plugins/data_parser/v0.0.4x/parsers.c).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from cli.core.formats import openapi_v38_meta
from cli.nodeview import node_gres, node_gres_used, node_state, partition_nodes


def json_node(node: dict[str, Any]) -> dict[str, Any]:
    gpus = node.get("gpus") or []
    alloc_cpus = int(node.get("alloc_cpus") or 0)
    cpus = int(node.get("cpus") or 0)
    shown = str(node.get("state_display") or node.get("state") or "IDLE").upper()
    base, _, flag = shown.partition("+")
    flags = [flag] if flag else []
    if str(node.get("state", "")).upper() == "DRAIN" and "DRAIN" not in flags:
        flags.append("DRAIN")
    tres = f"cpu={cpus},mem={int(node.get('memory_mb') or 0)}M" + (
        f",gres/gpu={len(gpus)}" if gpus else "")
    return {
        "name": node["name"], "hostname": node["name"], "address": node.get("address", ""),
        "state": node_state(node, long=True).rstrip("*"), "state_flags": flags,
        "cpus": cpus, "alloc_cpus": alloc_cpus, "idle_cpus": max(cpus - alloc_cpus, 0),
        "real_memory": int(node.get("memory_mb") or 0),
        "alloc_memory": int(node.get("alloc_mem_mb") or 0),
        "gres": node_gres(node) if gpus else "", "gres_used": node_gres_used(node),
        "features": ",".join(node.get("features") or []),
        "active_features": ",".join(node.get("features") or []),
        "partitions": list(node.get("partitions") or []),
        "reason": node.get("reason", ""),
        "reason_changed_at": int(node.get("reason_time") or 0),
        "reason_set_by_user": node.get("reason_user") or "",
        "boot_time": int(node.get("boot_time") or 0),
        "slurmd_start_time": int(node.get("slurmd_start_time") or 0),
        "last_busy": int(node.get("last_heartbeat") or 0), "tres": tres,
        "gpus": [{"index": g.get("index"), "model": g.get("model", ""),
                  "memory_mb": g.get("memory_mb", 0)} for g in gpus],
        "responding": not base.endswith("*") and base != "DOWN",
    }


def _minutes(secs: Any) -> int | None:
    return None if secs is None else int(secs) // 60


def json_partition(part: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    members = partition_nodes(part, nodes)
    from kiln.slurm.hostlist import compress

    return {
        "name": part["name"], "nodes": compress([n["name"] for n in members]),
        "state": str(part.get("state", "UP")).upper(),
        "flags": ["default"] if part.get("default") else [],
        "max_time_limit": _minutes(part.get("max_time")),
        "default_time_limit": _minutes(part.get("default_time")),
        "priority_tier": part.get("priority_tier", 1),
        "total_nodes": len(members), "total_cpus": sum(int(n.get("cpus") or 0) for n in members),
        "total_gpus": sum(len(n.get("gpus") or []) for n in members),
    }


def print_json(partitions: list[dict[str, Any]], nodes: list[dict[str, Any]],
               groups: list[dict[str, Any]] | None = None, version: str = "") -> int:
    """v0.0.38 from the nodes and partitions; v0.0.40/41 from sinfo's node groups."""
    if version:
        doc = document_v4(groups or [], nodes, version)
    else:
        doc = {"meta": openapi_v38_meta(), "errors": [],
               "nodes": [json_node(n) for n in nodes],
               "partitions": [json_partition(p, nodes) for p in partitions]}
    print(json.dumps(doc, indent=2))
    return 0


def document_v4(groups: list[dict[str, Any]], nodes: list[dict[str, Any]],
                version: str) -> dict[str, Any]:
    from cli import data_parser
    from kiln.config import load

    cluster = load().cluster_name
    return data_parser.document(version, "sinfo", {
        "sinfo": [sinfo_data(g, nodes, cluster) for g in groups],
        "meta": data_parser.meta(version, sys.argv, cluster), "errors": [], "warnings": []})


def node_states(node: dict[str, Any]) -> list[str]:
    """NODE_STATES: the base state, then its flags (DRAIN, NOT_RESPONDING)."""
    display, _, reboot = str(node.get("state_display") or node.get("state") or "IDLE"
                             ).upper().partition("+")  # a reboot's flag, after the state
    display = display.rstrip("*")
    admin = str(node.get("state", "")).upper()
    busy = "ALLOCATED" if int(node.get("alloc_cpus") or 0) >= int(node.get("cpus") or 0) \
        else "MIXED"
    base, flags = {"DRAINING": (busy, ["DRAIN"]), "DRAINED": ("IDLE", ["DRAIN"]),
                   "DRAIN": ("IDLE", ["DRAIN"])}.get(display, (display, []))
    if display == "DOWN":
        if admin == "DRAIN":
            flags = ["DRAIN"]
        if admin not in ("DOWN", "DRAIN"):
            flags.append("NOT_RESPONDING")  # down because its agent went silent
    return [base, *flags, *([reboot] if reboot else [])]


def _span(values: list[int]) -> dict[str, int]:
    return {"minimum": min(values, default=0), "maximum": max(values, default=0)}


def _null(text: str) -> str:
    return "" if text == "(null)" else text


def sinfo_data(group: dict[str, Any], nodes: list[dict[str, Any]], cluster: str
               ) -> dict[str, Any]:
    """One node group (sinfo's line): counts over its nodes, the per-node spans, the first
    node's descriptive fields (what sinfo prints for the line), its partition."""
    from cli import data_parser

    members = group["nodes"]
    first = members[0] if members else {}
    cpus = [int(n.get("cpus") or 0) for n in members]
    mem = [int(n.get("memory_mb") or 0) for n in members]
    free = [max(int(n.get("memory_mb") or 0) - int(n.get("alloc_mem_mb") or 0), 0)
            for n in members]
    kinds = [_kind(n) for n in members]
    alloc_cpus = sum(int(n.get("alloc_cpus") or 0) for n, k in zip(members, kinds, strict=True)
                     if k != "O")
    other_cpus = sum(c for c, k in zip(cpus, kinds, strict=True) if k == "O")
    names = [n["name"] for n in members]
    gpus = first.get("gpus") or []
    return {
        "port": 0, "node": {"state": node_states(first) if members else ["UNKNOWN"]},
        "nodes": {"allocated": kinds.count("A"), "idle": kinds.count("I"),
                  "other": kinds.count("O"), "total": len(members), "hostnames": names,
                  "addresses": [n.get("address") or n["name"] for n in members],
                  "nodes": names},
        "cpus": {"allocated": alloc_cpus, "idle": sum(cpus) - alloc_cpus - other_cpus,
                 "other": other_cpus, "total": sum(cpus), **_span(cpus),
                 "load": {"minimum": 0, "maximum": 0},
                 "per_node": {"max": data_parser.no_val(None, infinite=True)}},
        "sockets": _span(cpus), "cores": _span([1] * len(members)),
        "threads": _span([1] * len(members)), "disk": _span([0] * len(members)),
        "memory": {**_span(mem), "allocated": int(first.get("alloc_mem_mb") or 0),
                   "free": {"minimum": data_parser.no_val(min(free, default=None)),
                            "maximum": data_parser.no_val(max(free, default=None))}},
        "weight": _span([1] * len(members)),
        "features": {"total": ",".join(first.get("features") or []),
                     "active": ",".join(first.get("features") or [])},
        "gres": {"total": _null(node_gres(first)) if gpus else "",
                 "used": node_gres_used(first) if gpus else ""},
        "cluster": cluster, "comment": "", "extra": "", "reservation": "",
        "reason": {"description": first.get("reason") or "",
                   "time": int(first.get("reason_time") or 0),
                   "user": first.get("reason_user") or ""},
        "partition": partition_info(group["partition"], nodes, cluster),
    }


def _kind(node: dict[str, Any]) -> str:
    """sinfo's A/I/O: allocated (some or all of it), idle, other (down, drained)."""
    base = node_state(node).rstrip("*")
    if base in ("alloc", "mix", "comp"):
        return "A"
    return "I" if base == "idle" else "O"


def partition_info(part: dict[str, Any], nodes: list[dict[str, Any]],
                   cluster: str) -> dict[str, Any]:
    """PARTITION_INFO: what kiln's partition is, in the data_parser's shape."""
    from cli import data_parser

    old = json_partition(part, nodes) if part.get("name") else {
        "name": "", "nodes": "", "state": "UP", "max_time_limit": None,
        "default_time_limit": None, "priority_tier": 1, "total_nodes": 0, "total_cpus": 0,
        "total_gpus": 0}
    members = partition_nodes(part, nodes) if part.get("name") else []
    memory = sum(int(n.get("memory_mb") or 0) for n in members)

    def minutes(value: int | None) -> dict[str, Any]:
        return data_parser.no_val(value, infinite=value is None)

    unlimited = data_parser.no_val(None, infinite=True)
    return {"name": old["name"], "cluster": cluster,
            "nodes": {"configured": old["nodes"], "total": old["total_nodes"],
                      "allowed_allocation": ""},
            "partition": {"state": [old["state"]]},
            "cpus": {"total": old["total_cpus"], "task_binding": 0},
            "maximums": {"time": minutes(old["max_time_limit"]), "nodes": unlimited,
                         "cpus_per_node": unlimited, "cpus_per_socket": unlimited,
                         "shares": 1, "oversubscribe": {"jobs": 1, "flags": []},
                         "partition_memory_per_node": data_parser.no_val(0)},
            "minimums": {"nodes": 0},
            # no DefMemPerNode/MaxMemPerNode: 0 per node, none per CPU (MEM_PER_NODE dumps)
            "defaults": {"time": minutes(old["default_time_limit"]),
                         "partition_memory_per_node": data_parser.no_val(0)},
            "priority": {"tier": old["priority_tier"], "job_factor": 1},
            "tres": {"configured": f"cpu={old['total_cpus']},mem={memory}M,"
                                   f"node={old['total_nodes']},billing={old['total_cpus']}"
                     + (f",gres/gpu={old['total_gpus']}" if old["total_gpus"] else "")}}
