"""The ``/slurmdb/v0.0.4x/`` paths (slurmrestd's openapi/slurmdbd): accounting from schedd's
ledger through the commands' ops (``acct_jobs`` as sacct asks it, ``sacctmgr show``), shaped by
the code behind ``sacct --json`` (``cli.sacct_json``) or to the published schema."""

from __future__ import annotations

import time
from typing import Any

from cli import sacct, sacct_json
from cli.core import CommandError
from restd.errors import ESLURM_INVALID_JOB_ID, ESLURM_REST_INVALID_QUERY, RestError
from restd.routing import Req, route

# the query parameters of GET /slurmdb/.../jobs -> sacct's options (cli/sacct.build_query)
JOB_FILTERS = {"account": "accounts", "job_name": "name", "partition": "partition",
               "qos": "qos", "users": "user", "state": "state", "start_time": "starttime",
               "end_time": "endtime", "node": "nodelist", "step": "jobs"}
# ... that change nothing kiln answers (their default is what kiln does)
JOB_FLAGS = {"show_duplicates", "skip_steps", "disable_truncate_usage_time", "whole_hetjob",
             "disable_whole_hetjob", "disable_wait_for_result", "show_batch_script",
             "show_job_environment", "cluster"}


def _no_val(number: Any) -> dict[str, Any]:
    return {"set": number is not None, "infinite": False, "number": number or 0}


async def _acct(req: Req, values: dict[str, list[str | None]]) -> dict[str, Any]:
    specs = sacct.parse_job_specs([v or "" for v in values.get("jobs", [])])
    now = time.time()
    try:
        query, _, _ = sacct.build_query({**values, "allusers": [None]}, specs, now)
    except CommandError as exc:
        raise RestError(ESLURM_REST_INVALID_QUERY, str(exc), "slurmdb_jobs_get", 400) from None
    if "starttime" not in values and not specs:
        query["start"] = 0.0  # slurmrestd: every job the ledger holds, not sacct's today
    reply = await req.call("acct_jobs", query)
    rows = sacct.keep_steps(reply.get("rows") or [], specs)
    doc = sacct_json.document(rows, req.version)
    doc.pop("meta", None)
    return doc


@route("GET", "/slurmdb/{v}/jobs/", fitted=True)
async def jobs(req: Req) -> dict[str, Any]:
    values: dict[str, list[str | None]] = {}
    for key, value in req.query.items():
        if key in JOB_FILTERS:
            values.setdefault(JOB_FILTERS[key], []).append(value)
        elif key == "show_duplicates":
            values["duplicates"] = [None]
        elif key == "skip_steps":
            values["allocations"] = [None]
        elif key not in JOB_FLAGS:
            raise RestError(ESLURM_REST_INVALID_QUERY, f"kiln does not filter jobs by {key}",
                            "slurmdb_jobs_get", 400)
    return await _acct(req, values)


@route("GET", "/slurmdb/{v}/job/{job_id}", fitted=True)
async def job(req: Req) -> dict[str, Any]:
    job_id = req.match["job_id"]
    if not job_id.split(".")[0].split("_")[0].isdigit():
        raise RestError(ESLURM_INVALID_JOB_ID, f"Invalid job id {job_id}", "slurmdb_job_get")
    doc = await _acct(req, {"jobs": [job_id]})
    if not doc.get("jobs"):
        raise RestError(ESLURM_INVALID_JOB_ID, f"Unable to find job {job_id}",
                        "slurmdb_job_get")
    return doc


async def _show(req: Req, entity: str, names: list[str] | None = None,
                with_assoc: bool = False) -> list[dict[str, Any]]:
    body: dict[str, Any] = {"verb": "show", "entity": entity, "with_assoc": with_assoc}
    if names:
        body["names"] = names
    return (await req.call("sacctmgr", body)).get("rows") or []


def _int(text: Any) -> int | None:
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _assoc(row: dict[str, Any]) -> dict[str, Any]:
    return {"account": row.get("account", ""), "cluster": row.get("cluster", ""),
            "user": row.get("user", ""), "partition": row.get("partition", ""),
            "parent_account": row.get("parent_name", ""),
            "shares_raw": _int(row.get("share")) or 1,
            "priority": _no_val(_int(row.get("priority"))),
            "qos": [q for q in str(row.get("qos") or "").split(",") if q],
            "default": {"qos": row.get("default_qos") or ""},
            "max": {"jobs": {"total": _no_val(_int(row.get("max_jobs"))),
                             "active": _no_val(_int(row.get("max_jobs"))),
                             "accruing": _no_val(None)}},
            "is_default": False, "comment": ""}


@route("GET", "/slurmdb/{v}/accounts/")
async def accounts(req: Req) -> dict[str, Any]:
    rows = await _show(req, "account")
    return {"accounts": [{"name": r["account"], "description": r.get("description", ""),
                          "organization": r.get("organization", ""), "flags": [],
                          "coordinators": [], "associations": []} for r in rows]}


@route("GET", "/slurmdb/{v}/associations/")
async def associations(req: Req) -> dict[str, Any]:
    rows = await _show(req, "association")
    return {"associations": [_assoc(r) for r in rows]}


@route("GET", "/slurmdb/{v}/users/")
async def users(req: Req) -> dict[str, Any]:
    rows = await _show(req, "user")
    return {"users": [{"name": r["user"], "administrator_level": [r.get("admin_level")
                                                                  or "None"],
                       "default": {"account": r.get("default_account", ""), "wckey": ""},
                       "flags": [], "coordinators": [], "associations": [], "wckeys": []}
                      for r in rows]}


@route("GET", "/slurmdb/{v}/qos/")
async def qos(req: Req) -> dict[str, Any]:
    rows = await _show(req, "qos")
    out = []
    for r in rows:
        mode = str(r.get("preempt_mode") or "cluster").upper()
        modes = [] if mode == "CLUSTER" else ["DISABLED" if mode == "OFF" else mode]
        out.append({"name": r["name"], "description": r.get("description", ""),
                    "priority": _no_val(_int(r.get("priority")) or 0),
                    "flags": [f.upper() for f in str(r.get("flags") or "").split(",") if f],
                    "preempt": {"list": [p for p in str(r.get("preempt") or "").split(",")
                                         if p], "mode": modes,
                                "exempt_time": _no_val(None)},
                    "usage_factor": _no_val(float(r.get("usage_factor") or 1.0)),
                    "usage_threshold": _no_val(None)})
    return {"qos": out}


# what kiln counts (Slurm's default AccountingStorageTRES, and the GPUs)
TRES = [("cpu", "", 1), ("mem", "", 2), ("energy", "", 3), ("node", "", 4),
        ("billing", "", 5), ("fs", "disk", 6), ("vmem", "", 7), ("pages", "", 8),
        ("gres", "gpu", 1001)]


@route("GET", "/slurmdb/{v}/tres/")
async def tres(req: Req) -> dict[str, Any]:
    await req.call("ping")  # only who may ask schedd may ask this
    return {"TRES": [{"type": kind, "name": name, "id": number, "count": 0}
                     for kind, name, number in TRES]}


@route("GET", "/slurmdb/{v}/diag/")
async def diag(req: Req) -> dict[str, Any]:
    d = await req.call("sched_diag")
    return {"statistics": {"time_start": int(d.get("req_time_start") or 0),
                           "rollups": [], "RPCs": [], "users": []}}
