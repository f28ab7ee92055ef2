"""The ``/slurm/v0.0.4x/`` paths (slurmrestd's openapi/slurmctld): each asks schedd with the
commands' own ops and builds its answer with the code behind the commands' ``--json`` (one
place: ``cli.squeue_json``, ``cli.sinfo_json``), in the shape the version publishes."""

from __future__ import annotations

import time
from typing import Any

from cli import squeue_json
from cli.core.formats import Ctx
from cli.nodeview import node_gres, node_gres_used
from cli.sinfo_json import node_states, partition_info
from kiln.slurm.hostlist import compress
from restd.errors import (
    ESLURM_INVALID_JOB_ID,
    ESLURM_INVALID_NODE_NAME,
    ESLURM_INVALID_PARTITION_NAME,
    ESLURM_REST_FAIL_PARSING,
    ESLURM_REST_INVALID_QUERY,
    RestError,
    from_schedd,
)
from restd.routing import Req, route
from restd.submit import build, hostname, submit_body

nv = {"set": True, "infinite": False}


def _no_val(number: Any) -> dict[str, Any]:
    return {**nv, "number": number}


def _job_id(req: Req) -> str:
    text = req.match["job_id"]
    head = text.split("_")[0].split("+")[0]
    if not head.isdigit() or int(head) <= 0:
        raise RestError(ESLURM_INVALID_JOB_ID, f"Invalid JobID={text} rejected", "job")
    return text


@route("GET", "/slurm/{v}/ping/")
async def ping(req: Req) -> dict[str, Any]:
    started = time.perf_counter()
    await req.call("ping")
    latency = int((time.perf_counter() - started) * 1e6)
    return {"pings": [{"hostname": hostname(), "pinged": "UP", "latency": latency,
                       "mode": "primary", "responding": True, "primary": True}]}


@route("GET", "/slurm/{v}/diag/")
async def diag(req: Req) -> dict[str, Any]:
    d = await req.call("sched_diag")
    cycles = int(d.get("cycles") or 0)
    jobs = d.get("jobs") or {}
    return {"statistics": {
        "req_time": _no_val(int(d.get("req_time") or 0)),
        "req_time_start": _no_val(int(d.get("req_time_start") or 0)),
        "schedule_cycle_last": int(d.get("last_us") or 0),
        "schedule_cycle_max": int(d.get("max_us") or 0),
        "schedule_cycle_total": cycles,
        "schedule_cycle_mean": int(d.get("sum_us") or 0) // cycles if cycles else 0,
        "schedule_cycle_mean_depth": int(d.get("depth_sum") or 0) // cycles if cycles else 0,
        "schedule_queue_length": int(d.get("queue_len") or 0),
        "bf_backfilled_jobs": int(d.get("backfilled") or 0),
        "jobs_submitted": int(jobs.get("submitted") or 0),
        "jobs_started": int(jobs.get("started") or 0),
        "jobs_completed": int(jobs.get("completed") or 0),
        "jobs_canceled": int(jobs.get("canceled") or 0),
        "jobs_failed": int(jobs.get("failed") or 0),
        "jobs_pending": int(d.get("pending") or 0),
        "jobs_running": int(d.get("running") or 0),
        "job_states_ts": _no_val(int(d.get("req_time") or 0)),
    }}


def _jobs_document(req: Req, jobs: list[dict[str, Any]], now: float) -> dict[str, Any]:
    doc = squeue_json.document(jobs, Ctx(now), req.version, {})
    doc.pop("meta", None)
    return doc


@route("GET", "/slurm/{v}/jobs/", fitted=True)
async def jobs(req: Req) -> dict[str, Any]:
    reply = await req.call("query_jobs", {"all_states": True})
    return _jobs_document(req, reply.get("jobs") or [], float(reply.get("now") or time.time()))


@route("GET", "/slurm/{v}/job/{job_id}", fitted=True)
async def job(req: Req) -> dict[str, Any]:
    job_id = _job_id(req)
    reply = await req.call("query_jobs", {"job_ids": [job_id], "all_states": True})
    if not reply.get("jobs"):
        raise RestError(ESLURM_INVALID_JOB_ID, f"Unable to query JobId={job_id}",
                        "_handle_job_get")
    return _jobs_document(req, reply["jobs"], float(reply.get("now") or time.time()))


KILL = {"KILL", "SIGKILL", "9"}


def _per_job(reply: dict[str, Any], source: str) -> None:
    """A per-job refusal of cancel or update_job (what scancel and scontrol print) as
    Slurm's error."""
    for problem in reply.get("errors") or []:
        message = str(problem.get("message") if isinstance(problem, dict) else problem)
        code = ("permission_denied" if "permission denied" in message.lower()
                else "invalid_job_id" if message == "Invalid job id specified" else "invalid")
        raise from_schedd(code, message, source)


@route("DELETE", "/slurm/{v}/job/{job_id}")
async def cancel(req: Req) -> dict[str, Any]:
    """slurm_kill_job2: no signal or SIGKILL ends the job (CANCELLED), as scancel; another
    signal is delivered as ``scancel -s`` (``flags``: BATCH_JOB, FULL_JOB as -b, -f)."""
    job_id = _job_id(req)
    body: dict[str, Any] = {"job_ids": [job_id]}
    signal = (req.query.get("signal") or "").upper()
    if signal and signal not in KILL:
        body["signal"] = signal
    flags = set(filter(None, (req.query.get("flags") or "").split(",")))
    if "BATCH_JOB" in flags:
        body["batch_only"] = True
    if "FULL_JOB" in flags:
        body["full"] = True
    _per_job(await req.call("cancel", body), "_handle_job_delete")
    return {"status": [{"job_id": int(job_id.split("_")[0]), "step_id": "",
                        "error": {"string": "", "code": 0, "message": ""},
                        "federation": {"sibling": ""}}]}


# job_desc_msg field -> update_job's change (the ones scontrol update job takes)
UPDATES = {"name": "name", "comment": "comment", "partition": "partition", "qos": "qos",
           "account": "account", "nice": "nice", "priority": "priority",
           "dependency": "dependency", "requeue": "requeue", "reservation": "reservation",
           "constraints": "constraint", "excluded_nodes": "exclude",
           "required_nodes": "nodelist", "cpus_per_task": "cpus_per_task",
           "tasks": "num_tasks", "minimum_nodes": "num_nodes"}


@route("POST", "/slurm/{v}/job/{job_id}")
async def update(req: Req) -> dict[str, Any]:
    job_id = _job_id(req)
    desc = await req.json()
    if not isinstance(desc, dict):
        raise RestError(ESLURM_REST_FAIL_PARSING, "Rejecting request. The body must be a "
                        "job_desc_msg object", "_job_post_update")
    changes: dict[str, Any] = {}
    hold = None
    for field, value in desc.items():
        plain = value.get("number") if isinstance(value, dict) and "number" in value else value
        if isinstance(value, dict) and value.get("infinite"):
            plain = None
        if field == "time_limit":
            changes["time_limit"] = None if plain is None else int(plain) * 60
        elif field == "time_minimum":
            changes["time_min"] = None if plain is None else int(plain) * 60
        elif field == "memory_per_node":
            changes["mem_per_node_mb"] = int(plain or 0)
        elif field == "hold":
            hold = bool(plain)
        elif field in UPDATES:
            if isinstance(plain, list):
                plain = ",".join(map(str, plain))
            changes[UPDATES[field]] = plain
        else:
            raise RestError(ESLURM_REST_INVALID_QUERY, f"kiln cannot update job field "
                            f"{field}", "_job_post_update", 400)
    if changes:
        _per_job(await req.call("update_job", {"job_ids": [job_id], "changes": changes}),
                 "_job_post_update")
    if hold is not None:
        _per_job(await req.call("hold" if hold else "release", {"job_ids": [job_id]}),
                 "_job_post_update")
    return {"job_id": int(job_id.split("_")[0]), "step_id": "", "job_submit_user_msg": ""}


@route("POST", "/slurm/{v}/job/submit")
async def submit(req: Req) -> dict[str, Any]:
    body = await req.json()
    job, warnings = build(body, req.version, req.who.user, hostname(),
                          req.cfg.max_array_size)
    req.warnings.extend(warnings)
    reply = await req.call("submit", submit_body(job))
    job_id = int(reply["job_id"])
    return {"job_id": job_id, "step_id": "batch", "job_submit_user_msg": "",
            "result": {"job_id": job_id, "step_id": "batch", "error_code": 0,
                       "error": "", "job_submit_user_msg": ""}}


def _csv(value: Any) -> list[str]:
    return [v for v in (value if isinstance(value, list) else str(value or "").split(","))
            if v]


def node_info(node: dict[str, Any]) -> dict[str, Any]:
    gpus = node.get("gpus") or []
    cpus, alloc = int(node.get("cpus") or 0), int(node.get("alloc_cpus") or 0)
    memory = int(node.get("memory_mb") or 0)
    return {
        "name": node["name"], "hostname": node["name"],
        "address": node.get("address") or node["name"], "architecture": "x86_64",
        "state": node_states(node), "cpus": cpus, "alloc_cpus": alloc,
        "alloc_idle_cpus": max(cpus - alloc, 0), "effective_cpus": cpus,
        "real_memory": memory, "alloc_memory": int(node.get("alloc_mem_mb") or 0),
        "free_mem": _no_val(max(memory - int(node.get("alloc_mem_mb") or 0), 0)),
        "gres": node_gres(node) if gpus else "", "gres_used": node_gres_used(node),
        "features": _csv(node.get("features")), "active_features": _csv(node.get("features")),
        "partitions": list(node.get("partitions") or []),
        "reason": node.get("reason") or "",
        "reason_changed_at": _no_val(int(node.get("reason_time") or 0)),
        "reason_set_by_user": node.get("reason_user") or "",
        "boot_time": _no_val(int(node.get("boot_time") or 0)),
        "slurmd_start_time": _no_val(int(node.get("slurmd_start_time") or 0)),
        "last_busy": _no_val(int(node.get("last_heartbeat") or 0)),
        "tres": f"cpu={cpus},mem={memory}M,billing={cpus}"
                + (f",gres/gpu={len(gpus)}" if gpus else ""),
        "sockets": 1, "cores": cpus, "threads": 1, "weight": 1, "port": 0,
        "cluster_name": "", "version": "",
    }


@route("GET", "/slurm/{v}/nodes/")
async def nodes(req: Req) -> dict[str, Any]:
    reply = await req.call("query_nodes")
    now = int(reply.get("now") or time.time())
    return {"nodes": [node_info(n) for n in reply.get("nodes") or []],
            "last_update": _no_val(now)}


@route("GET", "/slurm/{v}/node/{node_name}")
async def node(req: Req) -> dict[str, Any]:
    name = req.match["node_name"]
    reply = await req.call("query_nodes", {"names": [name]})
    found = reply.get("nodes") or []
    if not found:
        raise RestError(ESLURM_INVALID_NODE_NAME, f"Unable to query node {name}",
                        "op_handler_node", 404)
    return {"nodes": [node_info(n) for n in found],
            "last_update": _no_val(int(reply.get("now") or time.time()))}


# update_node_msg's state names -> scontrol update node State= words
NODE_STATES = {"DRAIN": "drain", "RESUME": "resume", "DOWN": "down", "IDLE": "resume",
               "UNDRAIN": "undrain", "FAIL": "drain", "POWER_DOWN": "down"}


@route("POST", "/slurm/{v}/node/{node_name}")
async def update_node(req: Req) -> dict[str, Any]:
    name = req.match["node_name"]
    desc = await req.json()
    if not isinstance(desc, dict):
        raise RestError(ESLURM_REST_FAIL_PARSING, "Rejecting request. The body must be an "
                        "update_node_msg object", "op_handler_node")
    changes: dict[str, Any] = {}
    for field, value in desc.items():
        if field == "state":
            states = value if isinstance(value, list) else [value]
            words = [NODE_STATES.get(str(s).upper()) for s in states]
            if not words or None in words:
                raise RestError(ESLURM_REST_INVALID_QUERY, f"Invalid node state "
                                f"{','.join(map(str, states))}", "op_handler_node", 400)
            changes["state"] = words[0]
        elif field == "reason":
            changes["reason"] = str(value)
        elif field not in ("comment", "extra") or value:
            raise RestError(ESLURM_REST_INVALID_QUERY, f"kiln cannot update node field "
                            f"{field}", "op_handler_node", 400)
    await req.call("update_node", {"names": [name], "changes": changes})
    return {}


async def _partitions(req: Req, names: list[str] | None) -> dict[str, Any]:
    parts = (await req.call("query_partitions",
                            {"names": names} if names else {})).get("partitions") or []
    if names and not parts:
        raise RestError(ESLURM_INVALID_PARTITION_NAME, f"Unable to find partition {names[0]}",
                        "op_handler_partition", 404)
    all_nodes = (await req.call("query_nodes")).get("nodes") or []
    cluster = req.cfg.cluster_name
    return {"partitions": [partition_info(p, all_nodes, cluster) for p in parts],
            "last_update": _no_val(int(time.time()))}


@route("GET", "/slurm/{v}/partitions/")
async def partitions(req: Req) -> dict[str, Any]:
    return await _partitions(req, None)


@route("GET", "/slurm/{v}/partition/{partition_name}")
async def partition(req: Req) -> dict[str, Any]:
    return await _partitions(req, [req.match["partition_name"]])


def _reservation(r: dict[str, Any]) -> dict[str, Any]:
    nodes = r.get("nodes") or []
    return {"name": r.get("name", ""), "node_list": compress(list(nodes)) if isinstance(
                nodes, list) else str(nodes),
            "node_count": len(nodes) if isinstance(nodes, list) else 0,
            "core_count": int(r.get("cpus") or 0),
            "start_time": _no_val(int(r.get("start_time") or 0)),
            "end_time": _no_val(int(r.get("end_time") or 0)),
            "users": ",".join(r.get("users") or []),
            "accounts": ",".join(r.get("accounts") or []),
            "flags": [str(f).upper() for f in r.get("flags") or []],
            "partition": r.get("partition") or "",
            "tres": f"cpu={int(r.get('cpus') or 0)}"}


@route("GET", "/slurm/{v}/reservations/")
async def reservations(req: Req) -> dict[str, Any]:
    reply = await req.call("query_reservations")
    return {"reservations": [_reservation(r) for r in reply.get("reservations") or []],
            "last_update": _no_val(int(reply.get("now") or time.time()))}


@route("GET", "/slurm/{v}/reservation/{reservation_name}")
async def reservation(req: Req) -> dict[str, Any]:
    reply = await req.call("query_reservations", {"names": [req.match["reservation_name"]]})
    return {"reservations": [_reservation(r) for r in reply.get("reservations") or []],
            "last_update": _no_val(int(reply.get("now") or time.time()))}


@route("GET", "/slurm/{v}/licenses/")
async def licenses(req: Req) -> dict[str, Any]:
    reply = await req.call("query_licenses")
    out = []
    for lic in reply.get("licenses") or []:
        total, used = int(lic.get("total") or 0), int(lic.get("used") or 0)
        out.append({"LicenseName": lic["name"], "Total": total, "Used": used,
                    "Free": max(total - used, 0), "Remote": False, "Reserved": 0,
                    "LastConsumed": 0, "LastDeficit": 0, "LastUpdate": 0})
    return {"licenses": out, "last_update": _no_val(int(time.time()))}
