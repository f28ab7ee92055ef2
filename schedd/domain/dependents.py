"""The index from each job to the pending jobs that depend on it, and their verdicts, kept up
to date one edge at a time.

A pending job's ``--dependency`` is judged once, when it is first seen (submitted, loaded at
start-up, or its expression changed): every reference's verdict (MET, WAITING, NEVER) and, per
term and for the whole expression, how many references and terms stand at each. Then, when a
job changes state, only the references that cover it are judged again (a job, one array task,
the whole array), and each of those changes a count or two: the work of a state change is
proportional to the dependents it touches, never to the pending queue nor to the size of their
expressions. What a reference covers comes as a ``dependency.Summary`` from ``State`` (an
array's is a few counts kept until a task changes), so a reference to a 1,000-task array is
judged in O(1) too. Changes are gathered and applied when a verdict is next asked for, so the
thousand tasks of an array starting in one cycle cost one pass, not a thousand. Jobs with the
same expression (an array's tasks) share one judgement: a 100-task array waiting on 1,000
jobs is indexed and judged once, not 100 times (it still counts 100 x 1,000 against its
user's bound).

Pure bookkeeping: no ledger, no clock; ``State`` owns the instance and feeds it summaries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kiln.slurm.dependency import (
    MET,
    NEVER,
    WAITING,
    Dependency,
    JobRef,
    Summary,
    term_verdict,
)

Summaries = Callable[[list[JobRef]], dict[JobRef, Summary]]
_SLOT = {MET: 0, WAITING: 1, NEVER: 2}


def _of_counts(counts: list[int], total: int) -> str:
    """All of ``total`` parts: NEVER if one is, MET if all are, else WAITING."""
    if counts[2]:
        return NEVER
    return MET if counts[0] == total else WAITING


@dataclass(slots=True)
class _Term:
    kind: str
    refs: dict[JobRef, str]  # each reference's verdict
    counts: list[int]  # references MET, WAITING, NEVER
    verdict: str = WAITING


@dataclass(slots=True)
class _Watch:
    """One dependency expression, judged, and the pending jobs that wait on it."""

    jobs: set[int]
    any_of: bool
    terms: list[_Term]
    singleton: bool  # a singleton term: judged when asked, from State's index by user and name
    counts: list[int] = field(default_factory=lambda: [0, 0, 0])  # terms MET, WAITING, NEVER


class Dependents:
    def __init__(self) -> None:
        self._watches: dict[str, _Watch] = {}  # by expression
        self._expr: dict[int, str] = {}  # dependent job -> its expression
        # job, task or whole-array reference -> (expression, term index) naming it
        self._by_ref: dict[JobRef, set[tuple[str, int]]] = {}
        self._dirty: set[JobRef] = set()
        self.refs_judged = 0  # references judged, first time or again (tests, metrics)

    def __len__(self) -> int:
        return len(self._expr)

    def expression(self, job_id: int) -> str | None:
        return self._expr.get(job_id)

    def dependents_of(self, ref: JobRef) -> set[int]:
        return {job for expr, _ in self._by_ref.get(ref, ()) for job in self._watches[expr].jobs}

    def join(self, job_id: int, expr: str) -> bool:
        """Wait on an expression already judged for another job (True), with no parse."""
        watch = self._watches.get(expr)
        if watch is None:
            return False
        self.unwatch(job_id)
        watch.jobs.add(job_id)
        self._expr[job_id] = expr
        return True

    def watch(self, job_id: int, expr: str, dep: Dependency, summaries: Summaries) -> None:
        """Judge a dependent's expression in full (once for all jobs that share it) and index
        its references."""
        if self.join(job_id, expr):
            return
        self.unwatch(job_id)
        refs = list({ref: None for term in dep.terms for ref in term.job_ids})
        seen = summaries(refs) if refs else {}
        terms: list[_Term] = []
        singleton = False
        watch = _Watch({job_id}, dep.any_of, terms, False)
        for term in dep.terms:
            if term.kind == "singleton":
                singleton = True
                continue
            verdicts = {ref: term_verdict(term.kind, seen[ref]) for ref in term.job_ids}
            self.refs_judged += len(verdicts)
            counts = [0, 0, 0]
            for verdict in verdicts.values():
                counts[_SLOT[verdict]] += 1
            judged = _Term(term.kind, verdicts, counts, _of_counts(counts, len(verdicts)))
            terms.append(judged)
            watch.counts[_SLOT[judged.verdict]] += 1
            for ref in term.job_ids:
                self._by_ref.setdefault(ref, set()).add((expr, len(terms) - 1))
        watch.singleton = singleton
        self._watches[expr] = watch
        self._expr[job_id] = expr

    def unwatch(self, job_id: int) -> None:
        """A dependent that no longer waits (started, ended, forgotten, its expression changed);
        the expression's judgement goes with the last job that waits on it."""
        expr = self._expr.pop(job_id, None)
        if expr is None:
            return
        watch = self._watches[expr]
        watch.jobs.discard(job_id)
        if watch.jobs:
            return
        del self._watches[expr]
        for index, term in enumerate(watch.terms):
            for ref in term.refs:
                entries = self._by_ref.get(ref)
                if entries is not None:
                    entries.discard((expr, index))
                    if not entries:
                        del self._by_ref[ref]

    def changed(self, refs: Iterable[JobRef]) -> None:
        """These references may cover a job whose state changed: judged again when next asked."""
        self._dirty.update(ref for ref in refs if ref in self._by_ref)

    def _flush(self, summaries: Summaries) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = list(self._dirty), set()
        seen = summaries(dirty)
        for ref in dirty:
            for expr, index in list(self._by_ref.get(ref, ())):
                watch = self._watches[expr]
                term = watch.terms[index]
                self.refs_judged += 1
                new = term_verdict(term.kind, seen[ref])
                old = term.refs[ref]
                if new == old:
                    continue
                term.refs[ref] = new
                term.counts[_SLOT[old]] -= 1
                term.counts[_SLOT[new]] += 1
                verdict = _of_counts(term.counts, len(term.refs))
                if verdict != term.verdict:
                    watch.counts[_SLOT[term.verdict]] -= 1
                    watch.counts[_SLOT[verdict]] += 1
                    term.verdict = verdict

    def verdict(self, job_id: int, summaries: Summaries,
                singleton_clear: Callable[[], bool]) -> str | None:
        """MET, WAITING or NEVER (None: not watched); O(1) once the changes are applied."""
        expr = self._expr.get(job_id)
        if expr is None:
            return None
        watch = self._watches[expr]
        self._flush(summaries)
        counts = watch.counts
        total = len(watch.terms)
        if watch.singleton:
            counts = list(counts)
            counts[0 if singleton_clear() else 1] += 1
            total += 1
        if watch.any_of:
            if counts[0]:
                return MET
            return NEVER if counts[2] == total else WAITING
        return _of_counts(counts, total)
