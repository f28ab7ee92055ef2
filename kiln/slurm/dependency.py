"""``--dependency``: parse Slurm's expression and judge it against the states of other jobs.

``afterok:12:13,afterany:14`` needs all parts; ``afterok:12?afternotok:13`` needs any part.
A referenced id names a job or a whole array (all tasks sharing that ``array_job_id``).

What a dependency costs is what it expands to: an array reference counts as the tasks it
covers, a repeated reference once (``parse`` merges repeats). schedd bounds that per job and
per user (``[schedd] max_dependency_jobs``, ``max_dependency_edges_per_user``), and judges a
whole-array reference from the array's ``Summary`` (a few counts), not task by task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kiln.slurm.states import JobState

KINDS = ("after", "afterany", "afterok", "afternotok", "afterburstbuffer", "aftercorr", "expand",
         "singleton")


# The most distinct job ids one expression may name, all its terms together, repeats merged
# (what they expand to, arrays counted in tasks, is bounded by schedd's config). Slurm has no
# fixed limit (its expressions are capped at 128 KiB).
MAX_TERMS = 1000


class DependencyError(ValueError):
    pass


JobRef = tuple[int, int | None]  # (job or array id, array task or None)


@dataclass(frozen=True, slots=True)
class Term:
    kind: str
    job_ids: tuple[JobRef, ...] = ()


@dataclass(frozen=True, slots=True)
class Dependency:
    terms: tuple[Term, ...]
    any_of: bool = False  # '?' separated


def parse(expr: str) -> Dependency:
    """Parse; raises DependencyError with Slurm's message on bad syntax."""
    expr = expr.strip()
    if not expr:
        raise DependencyError("Job dependency problem")
    if "," in expr and "?" in expr:
        raise DependencyError("Job dependency problem")
    any_of = "?" in expr
    terms = []
    for part in expr.split("?" if any_of else ","):
        kind, _, rest = part.partition(":")
        kind = kind.strip().lower()
        if kind == "singleton":
            if rest:
                raise DependencyError("Job dependency problem")
            terms.append(Term("singleton"))
            continue
        if kind not in KINDS or not rest:
            raise DependencyError("Job dependency problem")
        ids: dict[JobRef, None] = {}  # in order, each once: a repeat adds nothing to wait on
        for piece in rest.split(":"):
            piece = piece.split("+")[0]  # after:id+minutes: the delay is ignored
            base, _, task = piece.partition("_")
            if not base.isdigit() or (task and not task.isdigit()):
                raise DependencyError("Job dependency problem")
            ids[(int(base), int(task) if task else None)] = None
        terms.append(Term(kind, tuple(ids)))
    if sum(len(term.job_ids) for term in terms) > MAX_TERMS:
        raise DependencyError("Job dependency problem")
    return Dependency(tuple(terms), any_of)


# Verdicts
MET, WAITING, NEVER = "met", "waiting", "never"


@dataclass(frozen=True, slots=True)
class Summary:
    """What a term needs of the jobs one reference covers (a job, a task, a whole array): how
    many, how many still pend, have not finished, completed. An array's is kept by schedd
    until one of its tasks changes state, so judging a reference to it is O(1), not O(tasks)."""

    total: int = 0
    pending: int = 0
    unfinished: int = 0
    completed: int = 0


def summarize(states: Iterable[JobState]) -> Summary:
    total = pending = unfinished = completed = 0
    for s in states:
        total += 1
        pending += s == JobState.PENDING
        unfinished += not s.finished
        completed += s == JobState.COMPLETED
    return Summary(total, pending, unfinished, completed)


def term_verdict(kind: str, seen: Summary) -> str:
    """One reference's verdict for a term of this kind, from what it covers."""
    if not seen.total:
        # unknown or purged job: Slurm treats a vanished dependency as satisfied
        return MET
    if kind in ("after", "expand"):
        return MET if not seen.pending else WAITING
    if seen.unfinished:
        return WAITING
    if kind == "afterany":
        return MET
    if kind in ("afterok", "aftercorr", "afterburstbuffer"):
        return MET if seen.completed == seen.total else NEVER
    if kind == "afternotok":
        return MET if not seen.completed else NEVER
    return WAITING


def evaluate(dep: Dependency,
             states_of: Callable[[int, int | None], Summary | Iterable[JobState]],
             singleton_clear: Callable[[], bool]) -> str:
    """MET, WAITING or NEVER. ``states_of(id, task)`` gives the states of a job, of one array
    task, or (task None) of every task of the array with that id: their ``Summary``, or the
    states themselves."""
    verdicts = []
    for term in dep.terms:
        if term.kind == "singleton":
            verdicts.append(MET if singleton_clear() else WAITING)
            continue
        per_job = []
        for ref in term.job_ids:
            seen = states_of(*ref)
            per_job.append(term_verdict(term.kind, seen if isinstance(seen, Summary)
                                         else summarize(seen)))
        if NEVER in per_job:
            verdicts.append(NEVER)
        elif all(v == MET for v in per_job):
            verdicts.append(MET)
        else:
            verdicts.append(WAITING)
    if dep.any_of:
        if MET in verdicts:
            return MET
        return NEVER if all(v == NEVER for v in verdicts) else WAITING
    if NEVER in verdicts:
        return NEVER
    return MET if all(v == MET for v in verdicts) else WAITING
