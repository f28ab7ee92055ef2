"""Selection: which jobs an id list (``123``, ``123_4``, ``123_[1-5]``) and the usual filters
(users, accounts, partitions, QOS, states, names, nodes) name, for squeue, scancel, scontrol
and ``kiln why``; no handler.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

from schedd.context import Context, RequestError
from schedd.identity import Caller, is_operator
from schedd.model import ACTIVE_STATES, Job, JobState
from schedd.slurm import arrayspec
from schedd.slurm.states import StateError
from schedd.slurm.states import parse_states as _parse_states

INVALID_JOB_ID = "Invalid job id specified"
DENIED = "Access/permission denied"
_JOB_ID = re.compile(r"^(\d+)(?:_(\d+|\[[0-9,\-:%]+\]))?(?:\.\w+)?$")
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
    """Long or compact names, any case; 'all' means every state (None)."""
    try:
        return _parse_states(names)
    except StateError as exc:
        raise RequestError(str(exc)) from None


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




def sees_all(ctx: Context, caller: Caller, kind: str) -> bool:
    """Whether ``caller`` sees everyone's ``kind`` (PrivateData: jobs, usage, accounts, users):
    always unless the site made it private, and then operators only."""
    return not ctx.cfg.private(kind) or is_operator(caller)


def visible_jobs(ctx: Context, caller: Caller, jobs: list[Job]) -> list[Job]:
    """PrivateData=jobs: a user sees only their own jobs (operators see every job)."""
    if sees_all(ctx, caller, "jobs"):
        return jobs
    return [j for j in jobs if j.uid == caller.uid]
