"""Cluster licenses as a scheduled resource (``[[license]]`` in kiln.toml, ``-L`` on a job):
a job starts only when every license it asks for has that many free; else it keeps pending
with Slurm's reason ``Licenses``. Pure, like the rest of the core.

The gate works as ``limits.Enforcer`` does: ``screen`` hands the walk only the jobs whose
licenses are free, charging each start the walk made meanwhile; ``settle`` checks the starts
the walk made after the screen saw its last job."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from schedd.scheduler.snapshot import PendingJob, RunningJob

REASON = "Licenses"


class LicenseGate:
    """One cycle's free license counts."""

    def __init__(self, totals: dict[str, int], running: Iterable[RunningJob]) -> None:
        self.free = dict(totals)
        for run in running:
            self._take(run.licenses)
        self._seen = 0
        self._by_id: dict[int, PendingJob] = {}

    def _take(self, licenses: tuple[tuple[str, int], ...]) -> None:
        for name, count in licenses:
            self.free[name] = self.free.get(name, 0) - count

    def fits(self, job: PendingJob) -> bool:
        return all(self.free.get(name, 0) >= count for name, count in job.licenses)

    def screen(self, order: Iterable[PendingJob], started: list[tuple[int, list]],
               reasons: dict[int, str]) -> Iterator[PendingJob]:
        for job in order:
            self._by_id[job.job_id] = job
            self._charge_new(started)
            if job.licenses and not self.fits(job):
                reasons[job.job_id] = REASON
                continue
            yield job

    def _charge_new(self, started: list[tuple[int, list]]) -> None:
        while self._seen < len(started):
            job = self._by_id.get(started[self._seen][0])
            if job is not None:
                self._take(job.licenses)
            self._seen += 1

    def settle(self, started: list[tuple[int, list]],
               reasons: dict[int, str]) -> list[tuple[int, list]]:
        kept = list(started[: self._seen])
        for job_id, alloc in started[len(kept):]:
            job = self._by_id.get(job_id)
            if job is not None and job.licenses:
                if not self.fits(job):
                    reasons[job_id] = REASON
                    continue
                self._take(job.licenses)
            kept.append((job_id, alloc))
        return kept
