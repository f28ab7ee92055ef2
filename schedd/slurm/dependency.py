"""``--dependency``: parse Slurm's expression and judge it against the states of other jobs.

``afterok:12:13,afterany:14`` needs all parts; ``afterok:12?afternotok:13`` needs any part.
A referenced id names a job or a whole array (all tasks sharing that ``array_job_id``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from schedd.slurm.states import JobState

KINDS = ("after", "afterany", "afterok", "afternotok", "afterburstbuffer", "aftercorr", "expand",
         "singleton")


# The most job ids one expression may name, all its terms together. Slurm has no fixed limit
# (its expressions are capped at 128 KiB); every id is judged while the job waits.
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
        ids: list[JobRef] = []
        for piece in rest.split(":"):
            piece = piece.split("+")[0]  # after:id+minutes: the delay is ignored
            base, _, task = piece.partition("_")
            if not base.isdigit() or (task and not task.isdigit()):
                raise DependencyError("Job dependency problem")
            ids.append((int(base), int(task) if task else None))
        terms.append(Term(kind, tuple(ids)))
    if sum(len(term.job_ids) for term in terms) > MAX_TERMS:
        raise DependencyError("Job dependency problem")
    return Dependency(tuple(terms), any_of)


# Verdicts
MET, WAITING, NEVER = "met", "waiting", "never"


def _term_verdict(term: Term, states: Iterable[JobState]) -> str:
    states = list(states)
    if not states:
        # unknown or purged job: Slurm treats a vanished dependency as satisfied
        return MET
    finished = [s.finished for s in states]
    if term.kind in ("after", "expand"):
        return MET if all(s != JobState.PENDING for s in states) else WAITING
    if not all(finished):
        return WAITING
    if term.kind == "afterany":
        return MET
    ok = [s == JobState.COMPLETED for s in states]
    if term.kind in ("afterok", "aftercorr", "afterburstbuffer"):
        return MET if all(ok) else NEVER
    if term.kind == "afternotok":
        return MET if not any(ok) else NEVER
    return WAITING


def evaluate(dep: Dependency, states_of: Callable[[int, int | None], list[JobState]],
             singleton_clear: Callable[[], bool]) -> str:
    """MET, WAITING or NEVER. ``states_of(id, task)`` gives the states of a job, of one array
    task, or (task None) of every task of the array with that id."""
    verdicts = []
    for term in dep.terms:
        if term.kind == "singleton":
            verdicts.append(MET if singleton_clear() else WAITING)
            continue
        per_job = [_term_verdict(term, states_of(*ref)) for ref in term.job_ids]
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
