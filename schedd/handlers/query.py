"""``query_jobs``: squeue and scontrol show job, answered from memory."""

from __future__ import annotations

from typing import Any

from schedd.context import Context, RequestError
from schedd.handlers.selection import INVALID_JOB_ID, select_jobs, visible_jobs
from schedd.identity import Caller, is_operator
from schedd.model import ROW_FIELDS, Job, job_columns


def row_columns(fields: list[Any]) -> list[str]:
    """A query's ``fields`` checked against the Job attributes a row may carry, duplicates
    dropped (first kept)."""
    columns: list[str] = []
    for name in fields:
        if not isinstance(name, str) or name not in ROW_FIELDS:
            raise RequestError(f"Invalid job field: {name}")
        if name not in columns:
            columns.append(name)
    if not columns:
        raise RequestError("fields: at least one job field is needed")
    return columns


def column_reply(jobs: list[Job], names: list[str]) -> dict[str, Any]:
    """The jobs' ``names`` attributes, column by column: {"count": jobs, "columns": names,
    "values": [[each job's value], ...], "constant": {name: value}}. A column with one value
    for every job (most of them, in a queue of pending jobs) goes once, in "constant"."""
    reply: dict[str, Any] = {"count": len(jobs), "columns": [], "values": [], "constant": {}}
    for name, values in zip(names, job_columns(jobs, names), strict=True):
        if values and values.count(values[0]) == len(values):
            reply["constant"][name] = values[0]
        else:
            reply["columns"].append(name)
            reply["values"].append(values)
    return reply


def query_jobs(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """Without ``fields``: a wire dictionary per job. With ``fields`` (squeue): only those
    attributes, column by column (column_reply); 10,000 full dictionaries cost a tenth of a
    second to build and as much again to encode and to decode.

    What a job carries (``PRIVATE_FIELDS``: environment, export values, script, arguments)
    goes to its owner and operators only; ``fields`` can never name it (``ROW_FIELDS``)."""
    found = select_jobs(ctx, body)
    jobs = visible_jobs(ctx, caller, found)
    if found and not jobs and body.get("job_ids"):
        raise RequestError(INVALID_JOB_ID, "invalid_job_id")  # not even that it exists
    if body.get("fields") is not None:
        return {**column_reply(jobs, row_columns(body["fields"])), "now": ctx.now()}
    with_script = bool(body.get("with_script"))
    operator = is_operator(caller)
    return {"jobs": [j.to_wire(with_script=with_script, private=operator or j.uid == caller.uid)
                     for j in jobs],
            "now": ctx.now()}
