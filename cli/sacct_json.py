"""``sacct --json=v0.0.40|v0.0.41``: the slurmdbd job records of Slurm 23.11's / 24.05's
data_parser (``PARSER_ARRAY(JOB)`` and ``PARSER_ARRAY(STEP)`` in
``src/plugins/data_parser/v0.0.4x/parsers.c``), built from the rows schedd's accounting
answers (``schedd/reports/accounting.py``): a job, then its steps (``batch``, ``extern``,
``0``, ``1``...), each a step record of the job before it.

As the parser dumps them: a step's id is its full name (``83043.batch``), its nodes a range and
a list, its start and end ``{set, infinite, number}``; states are lists of the schema's names;
exit codes Slurm's verbose ones; TRES lists of ``{type, name, id, count}`` (memory in MiB,
measured usage in bytes as slurmdbd keeps ``TRESUsageIn*``)."""

from __future__ import annotations

import pwd
import sys
from typing import Any

from cli import data_parser

nv = data_parser.no_val
_NO_TRES: dict[str, list[Any]] = {"max": [], "min": [], "average": [], "total": []}


def exit_code(text: str) -> dict[str, Any]:
    """'2:0' (code:signal, as sacct prints it) as the verbose exit code."""
    code, _, sig = (text or "0:0").partition(":")
    return data_parser.exit_code(int(code or 0), int(sig or 0))


def cpu_times(row: dict[str, Any]) -> dict[str, Any]:
    """time.total/user/system: seconds and microseconds, where the row has them."""
    out = {}
    for key, name in (("total_cpu", "total"), ("user_cpu", "user"), ("system_cpu", "system")):
        value = row.get(key)
        if value is not None:
            secs = float(value)
            out[name] = {"seconds": int(secs), "microseconds": int(round((secs % 1) * 1e6))}
    return out


def state(row: dict[str, Any]) -> list[str]:
    """The record's base state (sacct's 'CANCELLED by 0' is CANCELLED); a run that was
    requeued is PENDING with the REQUEUED flag, as slurmdbd keeps it."""
    base = row.get("state_base") or str(row["state"]).split()[0]
    return ["PENDING", "REQUEUED"] if base == "REQUEUED" else [base]


def _user_name(uid: Any) -> str:
    if uid is None:
        return ""
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (KeyError, ValueError, OverflowError):
        return str(uid)


def usage(row: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A step's measured usage (tres.requested: TRESUsageIn*): the memory it peaked at (max)
    and its average, in bytes, where the agent sampled them."""
    out = {k: list(v) for k, v in _NO_TRES.items()}
    for key, name in (("max_rss_kb", "max"), ("ave_rss_kb", "average")):
        if row.get(key) is not None:
            out[name].append({"type": "mem", "name": "", "id": 2,
                              "count": int(row[key]) * 1024})
    return out


def step_record(row: dict[str, Any]) -> dict[str, Any]:
    nodes = row.get("node_list") or ""
    from kiln.slurm.hostlist import HostlistError, expand

    try:
        names = expand(nodes) if nodes else []
    except HostlistError:
        names = []
    return {
        "step": {"id": row["job_id_raw"], "name": row["name"]},
        "state": state(row), "exit_code": exit_code(row["exit_code"]),
        "nodes": {"range": nodes, "count": int(row.get("nnodes") or 0), "list": names},
        "tasks": {"count": int(row.get("ntasks") or 0)},
        "time": {"elapsed": int(row.get("elapsed") or 0),
                 "start": nv(int(row["start"])) if row.get("start") else nv(None),
                 "end": nv(int(row["end"])) if row.get("end") else nv(None),
                 "suspended": 0, **cpu_times(row)},
        "tres": {"allocated": data_parser.tres_list(row.get("alloc_tres") or ""),
                 "requested": usage(row), "consumed": {k: list(v) for k, v in _NO_TRES.items()}},
        "kill_request_user": _user_name(row.get("cancelled_by")),
    }


def std_paths(row: dict[str, Any]) -> dict[str, str]:
    """stdout/stderr/stdin as given (``%j`` and all) and expanded (v0.0.41's ``*_expanded``),
    as ``scontrol show job`` expands them."""
    from cli.scontrol import _expand_path

    job = {"id": int(row["job_id_raw"]), "name": row["name"], "user": row["user"],
           "array_job_id": row.get("array_job_id"), "array_task_id": row.get("array_task_id"),
           "batch_host": row.get("batch_host") or "", "workdir": row.get("workdir") or ""}
    default = "slurm-%A_%a.out" if row.get("array_job_id") is not None else "slurm-%j.out"
    out = row.get("stdout") or ""
    err = row.get("stderr") or ""
    stdin = row.get("stdin") or ""
    return {"stdout": out, "stderr": err, "stdin": stdin,
            "stdout_expanded": _expand_path(out, job, default),
            "stderr_expanded": _expand_path(err, job, "") if err
            else _expand_path(out, job, default),
            "stdin_expanded": _expand_path(stdin, job, "") if stdin else "/dev/null"}


def job_record(row: dict[str, Any]) -> dict[str, Any]:
    from kiln.identity import group_name

    limit = row.get("time_limit")
    start, eligible = int(row.get("start") or 0), int(row.get("eligible") or 0)
    # ReqMem is the job's whole memory (MiB): per node, its share of each of its nodes
    req_mem = data_parser.tres_list(f"mem={row['req_mem']}") if row.get("req_mem") else []
    mem = req_mem[0]["count"] // max(int(row.get("nnodes") or 1), 1) if req_mem else None
    return {
        "account": row["account"], "allocation_nodes": int(row.get("nnodes") or 0),
        "array": {"job_id": row.get("array_job_id") or 0,
                  "task_id": nv(row.get("array_task_id")),
                  "limits": {"max": {"running": {"tasks": 0}}}, "task": ""},
        "association": {"account": row["account"], "cluster": row["cluster"],
                        "partition": "", "user": row["user"], "id": 0},
        "cluster": row["cluster"], "constraints": row.get("constraints") or "",
        "comment": {"administrator": "", "job": row.get("comment") or "", "system": ""},
        "derived_exit_code": exit_code(row.get("derived_exit_code") or "0:0"),
        "exit_code": exit_code(row["exit_code"]),
        "time": {"elapsed": int(row.get("elapsed") or 0), "start": start,
                 "end": int(row.get("end") or 0), "submission": int(row.get("submit") or 0),
                 "eligible": eligible, "suspended": 0, **cpu_times(row),
                 "limit": nv(None, infinite=True) if limit is None
                 else nv(-(-int(limit) // 60)),
                 "planned": nv(max(start - eligible, 0)) if start else nv(None)},
        "group": "" if row.get("gid") is None else group_name(int(row["gid"])), "job_id": int(row["job_id_raw"]),
        "kill_request_user": _user_name(row.get("cancelled_by")),
        "name": row["name"], "nodes": row.get("node_list") or "None assigned",
        "partition": row["partition"], "priority": nv(int(row.get("priority") or 0)),
        "qos": row["qos"], "reservation": {"id": 0, "name": row.get("reservation") or ""},
        "required": {"CPUs": int(row.get("req_cpus") or 0),
                     "memory_per_node": nv(mem), "memory_per_cpu": nv(None)},
        "state": {"current": state(row), "reason": row.get("reason") or "None"},
        "steps": [],
        "tres": {"allocated": data_parser.tres_list(row.get("alloc_tres") or ""),
                 "requested": data_parser.tres_list(row.get("req_tres") or "")},
        "user": row["user"], "working_directory": row.get("workdir") or "",
        "wckey": {"wckey": row.get("wckey") or "", "flags": []},
        "licenses": row.get("licenses") or "", "hold": bool(row.get("held")),
        **std_paths(row),
    }


def document(rows: list[dict[str, Any]], version: str) -> dict[str, Any]:
    """The whole response: openapi_slurmdbd_jobs_resp."""
    jobs: list[dict[str, Any]] = []
    for row in rows:
        if row["kind"] == "step":
            if jobs:
                jobs[-1]["steps"].append(step_record(row))
            continue
        jobs.append(job_record(row))
    cluster = rows[0]["cluster"] if rows else ""
    return data_parser.document(version, "sacct", {
        "jobs": jobs, "meta": data_parser.meta(version, sys.argv, cluster),
        "errors": [], "warnings": []})
