"""``squeue --json=v0.0.40|v0.0.41``: each job as the job_info of Slurm 23.11's / 24.05's
data_parser (``src/plugins/data_parser/v0.0.4x/parsers.c``, ``PARSER_ARRAY(JOB_INFO)``), by its
key names and types, with kiln's value wherever kiln has one.

What the parser dumps, kept here: a timestamp is ``{set, infinite, number}`` and set even when
0 (only NO_VAL is unset); an exit code is Slurm's verbose one (``cli.data_parser.exit_code``);
enums are lists of the schema's names (``job_state`` the base state then its flags,
``mail_type``, ``shared``/``exclusive``, ``show_flags``, ``profile``); ``standard_output`` and
``standard_error`` are expanded as ``scontrol show job`` shows them (``slurm_get_job_stdout``).
``data_parser.document`` then fits the whole to the version's schema."""

from __future__ import annotations

import sys
from typing import Any

from cli import data_parser
from cli.core.formats import Ctx, job_num_cpus, job_num_nodes, job_tres

nv = data_parser.no_val

# kiln's --mail-type words -> the data_parser's JOB_MAIL_FLAGS names
MAIL_FLAGS = {"BEGIN": ("BEGIN",), "END": ("END",), "FAIL": ("FAIL",),
              "REQUEUE": ("REQUEUE",), "ALL": ("BEGIN", "END", "FAIL", "REQUEUE", "STAGE_OUT"),
              "TIME_LIMIT": ("TIME=100%",), "TIME_LIMIT_90": ("TIME=90%",),
              "TIME_LIMIT_80": ("TIME=80%",), "TIME_LIMIT_50": ("TIME=50%",),
              "STAGE_OUT": ("STAGE_OUT",), "ARRAY_TASKS": ("ARRAY_TASKS",),
              "INVALID_DEPEND": ("INVALID_DEPENDENCY",)}


def mail_flags(text: str) -> list[str]:
    """'END,TIME_LIMIT_80' -> ['END', 'TIME=80%'] in the order of Slurm's flag table."""
    order = ("BEGIN", "END", "FAIL", "REQUEUE", "TIME=100%", "TIME=90%", "TIME=80%",
             "TIME=50%", "STAGE_OUT", "ARRAY_TASKS", "INVALID_DEPENDENCY")
    names = {f for word in (text or "").upper().split(",") for f in MAIL_FLAGS.get(
        word.strip(), ())}
    return [f for f in order if f in names]


def job_state(job: dict[str, Any]) -> list[str]:
    """The base state, then its flags: a completing job is its end state + COMPLETING (the
    end its stop mark records, else COMPLETED), a requeued one PENDING + REQUEUED."""
    state = str(job["state"])
    if state == "COMPLETING":
        ended = str((job.get("stop") or {}).get("ended") or "COMPLETED")
        if ended == "REQUEUED":
            return ["PENDING", "REQUEUED", "COMPLETING"]
        return [ended, "COMPLETING"]
    if state == "REQUEUED":
        return ["PENDING", "REQUEUED"]
    return [state]


def show_flags(values: dict[str, str | None]) -> list[str]:
    """The flags squeue loads jobs with (src/squeue/squeue.c): ALL with -a or -j, LOCAL with
    --local."""
    flags = []
    if "all" in values or values.get("jobs"):
        flags.append("ALL")
    if "local" in values:
        flags.append("LOCAL")
    return flags


def _gres(job: dict[str, Any], count: int) -> str:
    """A per-node/job/task GPU TRES as 23.11 spells it: 'gres/gpu:2', 'gres/gpu:a100:2'."""
    if not count:
        return ""
    gtype = job.get("gpu_type") or ""
    return f"gres/gpu:{gtype}:{count}" if gtype else f"gres/gpu:{count}"


def gres_detail(job: dict[str, Any]) -> list[str]:
    """Per node, its GPUs with their indices: ['gpu:a100:2(IDX:0-1)']."""
    from kiln.slurm.cpulist import format_cpu_list

    gtype = job.get("gpu_type") or ""
    out = []
    for a in job.get("allocation") or []:
        gpus = list(a.get("gpus") or [])
        if gpus:
            kind = f"gpu:{gtype}:" if gtype else "gpu:"
            out.append(f"{kind}{len(gpus)}(IDX:{format_cpu_list(gpus)})")
    return out


def job_resources(job: dict[str, Any], version: str) -> dict[str, Any]:
    """The allocation. kiln's nodes are one core per socket, one thread per core (sinfo's
    S:C:T is CPUs:1:1), so each allocated CPU id is a socket with core 0. v0.0.40: counts and
    per node its sockets' cores by index; v0.0.41: a node object per node."""
    alloc = job.get("allocation") or []
    cpus = job_num_cpus(job)
    if version == "v0.0.40":
        return {"nodes": job.get("node_list", ""), "allocated_cpus": cpus,
                "allocated_hosts": len(alloc), "allocated_cores": cpus,
                "allocated_nodes": [
                    {"sockets": {str(c): {"cores": {"0": "allocated"}}
                                 for c in a.get("cpu_ids") or []},
                     "nodename": a.get("node", ""), "cpus_used": int(a.get("cpus") or 0),
                     "memory_used": 0, "memory_allocated": int(a.get("memory_mb") or 0)}
                    for a in alloc]}
    return {"select_type": ["CPU", "MEMORY"], "cpus": cpus, "threads_per_core": nv(1),
            "nodes": {"count": len(alloc), "select_type": ["AVAILABLE"],
                      "list": job.get("node_list", ""), "whole": bool(job.get("exclusive")),
                      "allocation": [
                          {"index": i, "name": a.get("node", ""),
                           "cpus": {"count": int(a.get("cpus") or 0), "used": 0},
                           "memory": {"used": 0, "allocated": int(a.get("memory_mb") or 0)},
                           "sockets": [{"index": c, "cores": [{"index": 0,
                                                              "status": ["ALLOCATED"]}]}
                                       for c in a.get("cpu_ids") or []]}
                          for i, a in enumerate(alloc)]}}


def _paths(job: dict[str, Any]) -> dict[str, str]:
    from cli.scontrol import _expand_path

    out = _expand_path(job.get("stdout", ""), job, "slurm-%A_%a.out" if job.get(
        "array_job_id") is not None else "slurm-%j.out")
    return {"standard_output": out,
            "standard_error": _expand_path(job["stderr"], job, "") if job.get("stderr")
            else out,
            "standard_input": _expand_path(job["stdin"], job, "") if job.get("stdin")
            else "/dev/null"}


def _memory(job: dict[str, Any]) -> dict[str, Any]:
    """pn_min_memory: per CPU (MEM_PER_CPU) or per node, the other NO_VAL."""
    if job.get("mem_per_cpu_mb"):
        return {"memory_per_cpu": nv(int(job["mem_per_cpu_mb"])), "memory_per_node": nv(None)}
    return {"memory_per_cpu": nv(None),
            "memory_per_node": nv(int(job.get("mem_per_node_mb") or 0))}


def job_info(job: dict[str, Any], ctx: Ctx, cluster: str, version: str,
             flags: list[str]) -> dict[str, Any]:
    """One job as data_parser v0.0.40/41's job_info (the rest is the schema's empty value)."""
    from cli.core.formats import _gname

    limit = job.get("time_limit")
    alloc = job.get("allocation") or []
    state = str(job["state"])
    pending = state == "PENDING"
    running = state in ("RUNNING", "COMPLETING", "SUSPENDED")
    start = int(job.get("expected_start") or 0) if pending else int(job.get("start_time") or 0)
    end = int(job.get("end_time") or 0)
    if running and limit is not None and start:
        end = start + int(limit)  # a running job's end is when its limit runs out
    finished = not (pending or running)
    code, signal = (int(job.get("exit_code") or 0), int(job.get("exit_signal") or 0)) \
        if finished else (0, 0)
    exclusive = bool(job.get("exclusive"))
    return {
        "account": job.get("account", ""), "job_id": job["id"], "name": job.get("name", ""),
        "accrue_time": nv(int(job.get("eligible_time") or 0)),
        "allocating_node": job.get("submit_host", ""),
        "array_job_id": nv(job.get("array_job_id") or 0),
        "array_task_id": nv(job.get("array_task_id")),
        "array_max_tasks": nv(int(job.get("array_max_running") or 0)),
        "array_task_string": job.get("array_spec", "") if job.get("array_task_id") is None
        else "",
        "batch_flag": not job.get("interactive"), "batch_host": job.get("batch_host", ""),
        "billable_tres": nv(float(job_num_cpus(job)) if alloc else None),
        "cluster": cluster, "command": job.get("command", ""), "comment": job.get("comment", ""),
        "cpus": nv(job_num_cpus(job)), "cpus_per_task": nv(int(job.get("cpus_per_task") or 1)),
        "current_working_directory": job.get("workdir", ""),
        "dependency": job.get("dependency", ""),
        # the highest exit of its srun steps: not in the job's record (sacct's has it)
        "derived_exit_code": data_parser.exit_code(0),
        "eligible_time": nv(int(job.get("eligible_time") or 0)), "end_time": nv(end),
        "excluded_nodes": job.get("exclude", ""),
        "exclusive": ["true"] if exclusive else [], "shared": ["none"] if exclusive else [],
        "exit_code": data_parser.exit_code(code, signal),
        "features": job.get("constraint", ""), "gres_detail": gres_detail(job),
        "group_id": job.get("gid"), "group_name": _gname(int(job.get("gid") or 0)),
        # slurmctld's zeroed record: 0 (set) unless heterogeneous, or preempted, resized...
        "het_job_id": nv(0), "het_job_offset": nv(0), "het_job_id_set": "",
        "deadline": nv(0), "delay_boot": nv(0), "pre_sus_time": nv(0), "resize_time": nv(0),
        "preemptable_time": nv(0),
        "preempt_time": nv(int((job.get("preempt") or {}).get("at") or 0)),
        "hold": bool(job.get("held")),
        "job_resources": job_resources(job, version) if alloc else {},
        "job_state": job_state(job), "licenses": job.get("licenses", ""),
        "mail_type": mail_flags(job.get("mail_type", "")),
        "mail_user": job.get("mail_user") or job.get("user", ""),
        "max_nodes": nv(int(job.get("num_nodes_max") or 0)), **_memory(job),
        "memory_per_tres": f"gres/gpu:{job['mem_per_gpu_mb']}" if job.get("mem_per_gpu_mb")
        else "",
        "minimum_cpus_per_node": nv(int(job.get("cpus_per_task") or 1) * max(
            int(job.get("ntasks_per_node") or 0), 1)),
        "minimum_tmp_disk_per_node": nv(0),
        "nice": int(job.get("nice") or 0), "node_count": nv(job_num_nodes(job)),
        "nodes": job.get("node_list", ""), "partition": job.get("partition", ""),
        "priority": nv(int(job.get("priority") or 0)), "profile": ["NOT_SET"],
        "qos": job.get("qos", ""), "required_nodes": job.get("nodelist", ""),
        "requeue": bool(job.get("requeue", True)),
        "restart_cnt": int(job.get("restart_count") or 0),
        "resv_name": job.get("reservation", ""), "scheduled_nodes": job.get("sched_nodes", ""),
        "show_flags": flags, **_paths(job),
        "start_time": nv(start), "state_reason": job.get("reason", "None"),
        "submit_time": nv(int(job.get("submit_time") or 0)), "suspend_time": nv(0),
        "tasks": nv(int(job.get("num_tasks") or 1)),
        "tasks_per_node": nv(int(job["ntasks_per_node"]) if job.get("ntasks_per_node")
                             else None),
        "time_limit": nv(None, infinite=True) if limit is None else nv(int(limit) // 60),
        "time_minimum": nv(int(job["time_min"]) // 60 if job.get("time_min") else 0),
        "tres_alloc_str": job_tres(job) if alloc else "", "tres_req_str": job_tres(job),
        "tres_per_job": _gres(job, int(job.get("gpus") or 0)),
        "tres_per_node": _gres(job, int(job.get("gpus_per_node") or 0)),
        "tres_per_task": ",".join(filter(None, [
            f"cpu={job['cpus_per_task']}" if int(job.get("cpus_per_task") or 1) > 1 else "",
            _gres(job, int(job.get("gpus_per_task") or 0))])),
        "user_id": job.get("uid"), "user_name": job.get("user", ""),
        "wckey": job.get("wckey", ""),
    }


def document(jobs: list[dict[str, Any]], ctx: Ctx, version: str,
             values: dict[str, str | None]) -> dict[str, Any]:
    """The whole response: openapi_job_info_resp."""
    from kiln.config import load

    cluster = load().cluster_name
    flags = show_flags(values)
    return data_parser.document(version, "squeue", {
        "jobs": [job_info(j, ctx, cluster, version, flags) for j in jobs],
        "last_backfill": nv(int(ctx.now)), "last_update": nv(int(ctx.now)),
        "meta": data_parser.meta(version, sys.argv, cluster), "errors": [], "warnings": []})
