"""``query_jobs``: squeue and scontrol show job; ``job_stat``: sstat; answered from memory."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kiln.identity import Caller, is_operator
from kiln.model import ROW_FIELDS, Job, job_columns
from kiln.slurm.stats import merge_usage
from schedd.handlers.selection import (
    INVALID_JOB_ID,
    select_jobs,
    select_jobs_reporting,
    visible_jobs,
)
from schedd.lifecycle.context import Context, RequestError
from schedd.slicing import each
from schedd.state import RUNNING_STATES


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


def query_jobs(ctx: Context, caller: Caller,
               body: dict[str, Any]) -> dict[str, Any] | Generator[None, None, dict[str, Any]]:
    """Without ``fields``: a wire dictionary per job, built and encoded in slices (a long
    request: ``wire_listing``). With ``fields`` (squeue): only those attributes, column by
    column (column_reply), at once; 10,000 full dictionaries cost a tenth of a second to
    build and as much again to encode and to decode.

    What a job carries (``PRIVATE_FIELDS``: environment, export values, script, arguments)
    goes to its owner and operators only; ``fields`` can never name it (``ROW_FIELDS``)."""
    found = select_jobs(ctx, body)
    jobs = visible_jobs(ctx, caller, found)
    if found and not jobs and body.get("job_ids"):
        raise RequestError(INVALID_JOB_ID, "invalid_job_id")  # not even that it exists
    if body.get("fields") is not None:
        return {**column_reply(jobs, row_columns(body["fields"])), "now": ctx.now()}
    return wire_listing(ctx, caller, jobs, bool(body.get("with_script")))


def wire_listing(ctx: Context, caller: Caller, jobs: list[Job],
                 with_script: bool) -> Generator[None, None, dict[str, Any]]:
    """{"jobs": [each job's wire dictionary], "now": ...}, in slices (``slicing.each``): a
    user listing every job of a full queue holds the loop a few ms at a time, not the tenth
    of a second the whole takes. Each job is read as it is when its turn comes."""
    operator = is_operator(caller)
    wire: list[dict[str, Any]] = []
    yield from each(jobs, lambda j: wire.append(
        j.to_wire(with_script=with_script, private=operator or j.uid == caller.uid)))
    return {"jobs": wire, "now": ctx.now()}


def job_stat(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """sstat: for each id asked for (in order), the jobs it names with their running steps,
    each step's live usage merged over its nodes (``kiln.slurm.stats.merge_usage``) from the
    agents' last heartbeats. A user sees their own jobs; another's comes back ``denied``
    (operators see every job), or not at all under PrivateData=jobs. A job that is not running
    has no steps."""
    operator = is_operator(caller)
    answers = []
    for text in body["job_ids"]:
        try:
            jobs, _ = select_jobs_reporting(ctx, {"job_ids": [text], "all_states": True})
        except RequestError:
            jobs = []
        jobs = visible_jobs(ctx, caller, jobs)  # PrivateData=jobs: another's is not even there
        found = []
        for job in jobs:
            entry: dict[str, Any] = {"job_id": job.id, "steps": []}
            if not operator and job.uid != caller.uid:
                entry["denied"] = True
            elif job.state in RUNNING_STATES and job.allocation:
                entry["steps"] = _running_steps(ctx, job)
            found.append(entry)
        answers.append({"id": text, "jobs": found})
    return {"answers": answers}


def _running_steps(ctx: Context, job: Job) -> list[dict[str, Any]]:
    """The batch step (on the batch host), then the srun steps still running, by id."""
    usage = ctx.agents.step_usage(job)
    steps = [("batch", [job.batch_host or job.allocation[0].node])]
    for live in sorted(ctx.steps.of_job(job.id), key=lambda s: s.step_id):
        if not live.done:
            steps.append((str(live.step_id), list(live.nodes)))
    return [{"step": step, "nodes": nodes,
             "usage": merge_usage({n: u for n, u in usage.get(step, {}).items() if n in nodes})}
            for step, nodes in steps]
