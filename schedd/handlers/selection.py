"""Selection: which jobs an id list (``123``, ``123_4``, ``123_[1-5]``) and the usual filters
(users, accounts, partitions, QOS, states, names, nodes) name, for squeue, scancel, scontrol
and ``kiln why``; no handler.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from kiln.identity import Caller, is_operator
from kiln.model import ACTIVE_STATES, Job, JobState
from kiln.slurm import arrayspec
from kiln.slurm.states import StateError
from kiln.slurm.states import parse_states as _parse_states
from kiln.wire import protocol
from schedd.lifecycle.context import Context, RequestError

INVALID_JOB_ID = "Invalid job id specified"
DENIED = "Access/permission denied"
_JOB_ID = re.compile(r"^(\d+)(?:_(\d+|\[[0-9,\-:%]+\]))?(?:\.\w+)?$")
_BY_ID = operator.attrgetter("id")


MAX_ID_EXPANSION = 100_000  # job ids one request's id list may name, ranges counted in full
TOO_MANY_IDS = f"Too many job ids in one request (at most {MAX_ID_EXPANSION})"


@dataclass(frozen=True, slots=True)
class JobRef:
    """One id as a user writes it: ``123`` (a job or a whole array), ``123_4``, ``123_[1-5]``.
    Array indices are kept as ranges (``arrayspec`` pieces, cut to the indices an array can
    have: below ``max_array_size``), never expanded to match."""

    base: int
    pieces: tuple[arrayspec.Piece, ...] | None = None  # None: the job or every task of it

    def matches(self, job: Job) -> bool:
        if self.pieces is None:
            return job.id == self.base or job.array_job_id == self.base
        return (job.array_job_id == self.base and job.array_task_id is not None
                and arrayspec.in_pieces(job.array_task_id, self.pieces))

    def size(self) -> int:
        """How many ids this names (1 for a job or a whole array)."""
        return 1 if self.pieces is None else sum(map(arrayspec.piece_size, self.pieces))

    def task_ids(self) -> Iterator[int]:
        for lo, hi, step in self.pieces or ():
            yield from range(lo, hi + 1, step)


def parse_job_ref(text: str, max_array_size: int = protocol.MAX_ARRAY_SIZE) -> JobRef:
    m = _JOB_ID.match(str(text).strip())
    if not m:
        raise RequestError(INVALID_JOB_ID)
    base, task = int(m.group(1)), m.group(2)
    if task is None:
        return JobRef(base)
    if task.startswith("["):
        try:
            pieces, _ = arrayspec.parse_pieces(task[1:-1])
        except arrayspec.ArraySpecError:
            raise RequestError(INVALID_JOB_ID) from None
    else:
        pieces = ((int(task), int(task), 1),)
    return JobRef(base, arrayspec.clip(pieces, max_array_size))


def parse_job_refs(texts: Iterable[Any], max_array_size: int) -> list[JobRef]:
    """Every id of a request, bounded in total: a range counts as the ids it can match."""
    refs = [parse_job_ref(str(t), max_array_size) for t in texts]
    if sum(r.size() for r in refs) > MAX_ID_EXPANSION:
        raise RequestError(TOO_MANY_IDS)
    return refs


class RefSet:
    """A request's ids, for matching every job against all of them at once: whole jobs and
    arrays by id, array tasks by array id (a set per array, at most ``max_array_size``)."""

    def __init__(self, refs: list[JobRef]):
        self.refs = refs
        self.whole = {r.base for r in refs if r.pieces is None}
        self.tasks: dict[int, set[int]] = {}
        for ref in refs:
            if ref.pieces is not None:
                self.tasks.setdefault(ref.base, set()).update(ref.task_ids())

    def __bool__(self) -> bool:
        return bool(self.refs)

    def matches(self, job: Job) -> bool:
        if job.id in self.whole:
            return True
        array = job.array_job_id
        if array is None:
            return False
        return array in self.whole or job.array_task_id in self.tasks.get(array, ())

    def unmatched(self, texts: list[str], jobs: list[Job]) -> list[str]:
        """The ids (as written) that none of ``jobs`` matches."""
        ids = {j.id for j in jobs} | {j.array_job_id for j in jobs if j.array_job_id is not None}
        tasks = {(j.array_job_id, j.array_task_id) for j in jobs if j.array_task_id is not None}
        out = []
        for text, ref in zip(texts, self.refs, strict=True):
            if ref.pieces is None:
                found = ref.base in ids
            else:
                found = any((ref.base, t) in tasks for t in ref.task_ids())
            if not found:
                out.append(text)
        return out


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
    refs = RefSet(parse_job_refs(texts, ctx.cfg.max_array_size))
    states = parse_states(body["states"]) if body.get("states") else set()
    everything = body.get("all_states") or bool(refs) or states is None
    users = set(map(str, body.get("users") or []))
    accounts = {str(a).lower() for a in body.get("accounts") or []}
    partitions = set(map(str, body.get("partitions") or []))
    qos = set(map(str, body.get("qos") or []))
    names = set(map(str, body.get("names") or []))
    node_names = set(map(str, body.get("nodes") or []))
    if not (refs or states or everything or users or accounts or partitions or qos or names
            or node_names):  # plain squeue: the active jobs, no filter tested per job
        out = [job for job in ctx.state.jobs.values() if job.state in ACTIVE_STATES]
        out.sort(key=_BY_ID)
        return out, []
    out = []
    for job in ctx.state.jobs.values():
        if refs and not refs.matches(job):
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
    return out, refs.unmatched(texts, out)




def sees_all(ctx: Context, caller: Caller, kind: str) -> bool:
    """Whether ``caller`` sees everyone's ``kind`` (PrivateData: jobs, usage, accounts, users):
    always unless the site made it private, and then operators only."""
    return not ctx.cfg.private(kind) or is_operator(caller)


def visible_jobs(ctx: Context, caller: Caller, jobs: list[Job]) -> list[Job]:
    """PrivateData=jobs: a user sees only their own jobs (operators see every job)."""
    if sees_all(ctx, caller, "jobs"):
        return jobs
    return [j for j in jobs if j.uid == caller.uid]
