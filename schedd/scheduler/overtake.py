"""A bound on overtaking in the hole (``bf_overtake``): a job that has lost holes it fitted in
to more than a bound of later work is owed a reservation.

EASY fills a hole in priority order: a job that fits now for its whole run starts before any
job behind it, so no job is ever passed over by a later one while it could start. kiln's
gathering fill rules (``hole_area``, ``area``, ``short_area``) pass over a job that fits when a
later one packs the hole better, and nothing else limits how much that costs one job: the
reservation protects only the head. So the core counts, per waiting job, the work of the jobs
behind it in the queue that started ahead of it in the fill of a cycle in which it was gathered
(it fitted) and did not start (``lost_in_fill``), and a job whose count exceeds ``bf_overtake``
times its own planned run is *owed* (``owed``). An owed job is walked like a due job
(``backfill.Walk.due``, ``cycle.due_first``): right behind the promised jobs, oldest first; it
starts in its turn if it fits and is otherwise reserved, on top of ``bf_max_reservations`` (a
reservation the queue's head keeps), and from then on its promise protects it.

Work is in machine-seconds: a job's share of the cluster (GPUs if it asks for GPUs, else CPUs)
times its planned run. The later jobs' work over the whole cluster is, in seconds, at most the
delay their passing cost the job, so the bound says: being passed over in the hole may add at
most ``bf_overtake`` to a job's slowdown before it gets EASY's protection.

The count is state carried between cycles: ``Snapshot.passed_over`` in, ``Decisions.passed_over``
out, fed back by the caller as it feeds back the promises; the core stays a function. A job once
owed is carried as ``OWED``, so it stays owed (its reservation must not lapse while a newer
count or a changed run-time prediction would say otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from schedd.scheduler.priority import ClusterSize
from schedd.scheduler.snapshot import PendingJob

OWED = float("inf")  # the count of a job that was owed: owed for good


def share(job: PendingJob, cluster: ClusterSize) -> float:
    """The job's share of the cluster: its GPUs if it asks for some, else its CPUs."""
    if job.gpus_per_node and cluster.gpus:
        return min(job.total_gpus / cluster.gpus, 1.0)
    return min(job.cpus_per_node * job.num_nodes / max(cluster.cpus, 1), 1.0)


def owed(pending: Iterable[PendingJob], passed: Mapping[int, float], bound: float,
         duration: Callable[[PendingJob], int]) -> frozenset[int]:
    """The pending jobs passed over by more than ``bound`` times their planned run."""
    if not passed:
        return frozenset()
    return frozenset(j.job_id for j in pending
                     if j.job_id in passed and passed[j.job_id] > bound * duration(j))


def lost_in_fill(gathered: Sequence[PendingJob], filled: Iterable[PendingJob],
                 started: set[int], work: Callable[[PendingJob], float]) -> dict[int, float]:
    """Per gathered job that did not start: the work of the jobs behind it in the queue
    (``gathered`` is in walk order) that started ahead of it in the fill order ``filled``.

    Only those: a job started ahead of it that was ahead of it in the queue too would have had
    the hole first under EASY as well, and a job started after its turn in the fill took only
    what it could not use."""
    rank = {job.job_id: i for i, job in enumerate(gathered)}
    out: dict[int, float] = {}
    ahead: list[tuple[int, float]] = []  # (rank, work) of the jobs started so far in the fill
    for job in filled:
        mine = rank[job.job_id]
        if job.job_id in started:
            ahead.append((mine, work(job)))
            continue
        took = sum(w for r, w in ahead if r > mine)
        if took:
            out[job.job_id] = took
    return out


def carried(before: Mapping[int, float], lost: Mapping[int, float], started: Iterable[int],
            owed_now: Iterable[int]) -> dict[int, float]:
    """The next cycle's ``passed_over``: the counts so far plus this cycle's, the jobs owed
    now marked ``OWED``, less the jobs that started."""
    out = dict(before)
    for job_id, w in lost.items():
        out[job_id] = out.get(job_id, 0.0) + w
    out.update(dict.fromkeys(owed_now, OWED))
    for job_id in started:
        out.pop(job_id, None)
    return out
