"""``sinfo --json``: nodes and partitions in the shape of Slurm 22.05's ``sinfo --json``
(openapi data_parser v0.0.38): ``{"meta", "errors", "warnings", "nodes": [...],
"partitions": [...]}`` with Slurm's key names for the fields kiln has. Times are POSIX seconds,
memory MiB, time limits minutes (``null`` = UNLIMITED), as Slurm reports them.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

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
    from schedd.slurm.hostlist import compress

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
               version: str = "") -> int:
    if version:
        doc = document_v4(partitions, nodes, version)
    else:
        doc = {"meta": {"plugin": {"type": "openapi/v0.0.38", "name": "kiln"}},
               "errors": [], "warnings": [],
               "nodes": [json_node(n) for n in nodes],
               "partitions": [json_partition(p, nodes) for p in partitions]}
    print(json.dumps(doc, indent=2))
    return 0


def document_v4(partitions: list[dict[str, Any]], nodes: list[dict[str, Any]],
                version: str) -> dict[str, Any]:
    """--json=v0.0.40/41: the nodes and partitions responses of that data_parser, each held
    to its published schema, in one document (what sinfo's own reader needs of both)."""
    from cli import data_parser
    from schedd.config import load

    cluster = load().cluster_name
    meta = data_parser.meta(version, sys.argv, cluster)
    node_doc = data_parser.document(version, "nodes", {
        "nodes": [node_v4(n, cluster) for n in nodes], "meta": meta,
        "last_update": data_parser.no_val(int(time.time()))})
    part_doc = data_parser.document(version, "partitions", {
        "partitions": [partition_v4(p, nodes, cluster) for p in partitions], "meta": meta,
        "last_update": data_parser.no_val(int(time.time()))})
    return {**node_doc, "partitions": part_doc["partitions"]}


def node_v4(node: dict[str, Any], cluster: str) -> dict[str, Any]:
    old = json_node(node)
    state = [old["state"].split("+")[0].upper(), *old["state_flags"]]
    return {**old, "state": state, "cluster_name": cluster, "cores": 1, "sockets": old["cpus"],
            "threads": 1, "boards": 1, "effective_cpus": old["cpus"],
            "free_mem": {"set": True, "infinite": False,
                         "number": max(old["real_memory"] - old["alloc_memory"], 0)},
            "alloc_idle_cpus": old["idle_cpus"], "version": "kiln",
            "reason_changed_at": int(node.get("reason_time") or 0),
            "features": [f for f in old["features"].split(",") if f],
            "active_features": [f for f in old["active_features"].split(",") if f],
            "boot_time": {"set": True, "infinite": False, "number": old["boot_time"]},
            "slurmd_start_time": {"set": True, "infinite": False,
                                  "number": old["slurmd_start_time"]},
            "last_busy": {"set": True, "infinite": False, "number": old["last_busy"]},
            "weight": 1}


def partition_v4(part: dict[str, Any], nodes: list[dict[str, Any]],
                 cluster: str) -> dict[str, Any]:
    old = json_partition(part, nodes)

    def minutes(value: int | None) -> dict[str, Any]:
        return {"set": value is not None, "infinite": value is None,
                "number": value or 0}

    return {"name": old["name"], "cluster": cluster,
            "nodes": {"configured": old["nodes"], "total": old["total_nodes"],
                      "allowed_allocation": "", "default": ""},
            "partition": {"state": [old["state"]]},
            "cpus": {"total": old["total_cpus"], "task_binding": 0},
            "maximums": {"time": minutes(old["max_time_limit"])},
            "defaults": {"time": minutes(old["default_time_limit"])},
            "priority": {"tier": old["priority_tier"], "job_factor": 1},
            "tres": {"configured": f"cpu={old['total_cpus']},node={old['total_nodes']}"
                     + (f",gres/gpu={old['total_gpus']}" if old["total_gpus"] else "")}}
