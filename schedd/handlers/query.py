"""``query_jobs``: squeue and scontrol show job, answered from memory."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

from schedd.context import Context, RequestError
from schedd.identity import Caller, is_operator
from schedd.model import ACTIVE_STATES, COMPACT_STATES, ROW_FIELDS, Job, JobState, job_columns
from schedd.slurm import arrayspec

INVALID_JOB_ID = "Invalid job id specified"
_JOB_ID = re.compile(r"^(\d+)(?:_(\d+|\[[0-9,\-:%]+\]))?(?:\.\w+)?$")
_FROM_COMPACT = {v: k for k, v in COMPACT_STATES.items()}
_BY_ID = operator.attrgetter("id")


@dataclass(frozen=True, slots=True)
class JobRef:
    """One id as a user writes it: ``123`` (a job or a whole array), ``123_4``, ``123_[1-5]``."""

    base: int
    tasks: frozenset[int] | None = None

    def matches(self, job: Job) -> bool:
        if self.tasks is None:
            return job.id == self.base or job.array_job_id == self.base
        return job.array_job_id == self.base and job.array_task_id in self.tasks


def parse_job_ref(text: str) -> JobRef:
    m = _JOB_ID.match(str(text).strip())
    if not m:
        raise RequestError(INVALID_JOB_ID)
    base, task = int(m.group(1)), m.group(2)
    if task is None:
        return JobRef(base)
    if task.startswith("["):
        try:
            return JobRef(base, frozenset(arrayspec.parse(task[1:-1], 1 << 30).task_ids))
        except arrayspec.ArraySpecError:
            raise RequestError(INVALID_JOB_ID) from None
    return JobRef(base, frozenset({int(task)}))


def parse_states(names: list[Any]) -> set[JobState] | None:
    """Long or compact names, any case; 'all' means every state."""
    wanted: set[JobState] = set()
    for raw in names:
        name = str(raw).strip().upper()
        if name == "ALL":
            return None
        if name in _FROM_COMPACT:
            wanted.add(_FROM_COMPACT[name])
            continue
        try:
            wanted.add(JobState(name))
        except ValueError:
            raise RequestError(f"Invalid job state specified: {raw}") from None
    return wanted


def select_jobs(ctx: Context, body: dict[str, Any]) -> list[Job]:
    """Jobs in memory that pass every filter of a query or cancel body; an error when ids were
    asked for and none of them is known."""
    jobs, unmatched = select_jobs_reporting(ctx, body)
    if unmatched and not jobs:
        raise RequestError(INVALID_JOB_ID, "invalid_job_id")
    return jobs


def select_jobs_reporting(ctx: Context, body: dict[str, Any]) -> tuple[list[Job], list[str]]:
    """Like select_jobs, plus the ids asked for that matched no job (as the user wrote them)."""
    texts = [str(t) for t in body.get("job_ids") or []]
    refs = [parse_job_ref(t) for t in texts]
    states = parse_states(body["states"]) if body.get("states") else set()
    everything = body.get("all_states") or bool(refs) or states is None
    users = set(map(str, body.get("users") or []))
    accounts = {str(a).lower() for a in body.get("accounts") or []}
    partitions = set(map(str, body.get("partitions") or []))
    qos = set(map(str, body.get("qos") or []))
    names = set(map(str, body.get("names") or []))
    node_names = set(map(str, body.get("nodes") or []))
    out = []
    for job in ctx.state.jobs.values():
        if refs and not any(r.matches(job) for r in refs):
            continue
        if states:
            if job.state not in states:
                continue
        elif not everything and job.state not in ACTIVE_STATES:
            continue
        if users and job.user not in users and str(job.uid) not in users:
            continue
        if accounts and job.account.lower() not in accounts:
            continue
        if partitions and job.partition not in partitions:
            continue
        if qos and job.qos not in qos:
            continue
        if names and job.name not in names:
            continue
        if node_names and not node_names.intersection(a.node for a in job.allocation):
            continue
        out.append(job)
    out.sort(key=_BY_ID)
    unmatched = [t for t, r in zip(texts, refs, strict=True) if not any(r.matches(j) for j in out)]
    return out, unmatched


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
    attributes, column by column (column_reply); 10,000 full dictionaries cost a tenth of a second to build and as much again to encode
    and to decode."""
    if body.get("fields") is not None:
        return {**column_reply(select_jobs(ctx, body), row_columns(body["fields"])),
                "now": ctx.now()}
    jobs = select_jobs(ctx, body)
    with_script = bool(body.get("with_script"))
    operator = is_operator(caller)
    return {"jobs": [j.to_wire(with_script and (operator or j.uid == caller.uid)) for j in jobs],
            "now": ctx.now()}
