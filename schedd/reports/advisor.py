"""The shape advisor: when a job would start if it asked for a little less, or elsewhere.

A user whose 8-GPU job waits three hours would often take 4 GPUs now, or a shorter
``--time`` that fits the hole before the next reservation, or another partition, if only they
knew. ``sbatch --test-only`` and ``kiln why`` say so, one line per nearby shape that starts
sooner, e.g. ``with --gres=gpu:4 instead of 8: starts in ~25 min, not ~3 h``.

Every figure is the real plan: the caller's p50 start (``Planner.p50_start``, the scheduler
core re-run under predicted run times on the current snapshot) of the same job with the one
option changed, everything else as it is: the same jobs ahead, the same promises. No rule of
thumb: a shape that the plan does not start sooner is not offered.

The nearby shapes (``nearby``): half the GPUs per node, half the nodes of a multi-node job,
half and a quarter of the time limit (at least a minute), and each other partition that is up
and whose MaxTime allows the job's limit.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kiln.model import Job, Partition
from schedd.scheduler.snapshot import PendingJob, Snapshot

log = logging.getLogger("schedd.advisor")

MIN_LIMIT = 60  # seconds: no --time shorter than a minute is offered


def time_option(secs: int) -> str:
    """A limit as --time takes it: [D-]HH:MM:SS."""
    days, rest = divmod(max(int(secs), 0), 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


@dataclass(frozen=True, slots=True)
class Shape:
    """A nearby shape: the option the user would change, said as they would type it."""

    change: str  # e.g. "--gres=gpu:4 instead of 8"
    view: PendingJob  # the job as the core would see it with that change


@dataclass(frozen=True, slots=True)
class Advice:
    change: str
    start: float  # its p50 start, seconds since the epoch

    def to_wire(self) -> dict:
        return {"change": self.change, "start": self.start}


def _gpu_option(job: Job, view: PendingJob, per_node: int) -> str:
    """How the user asked for GPUs, with the new count: --gpus (a total), --gpus-per-task, or
    --gres / --gpus-per-node (per node)."""
    nodes = max(view.num_nodes, 1)
    if job.gpus:
        return f"--gpus={per_node * nodes} instead of {job.gpus}"
    if job.gpus_per_task:
        tasks = max(view.gpus_per_node // max(job.gpus_per_task, 1), 1)
        return (f"--gpus-per-task={max(per_node // tasks, 1)} instead of "
                f"{job.gpus_per_task}")
    kind = f"{job.gpu_type}:" if job.gpu_type else ""
    return f"--gres=gpu:{kind}{per_node} instead of {view.gpus_per_node}"


def nearby(job: Job, view: PendingJob, partitions: Mapping[str, Partition]) -> list[Shape]:
    """The shapes a user could accept instead of ``view``, each one option away."""
    out: list[Shape] = []
    if view.gpus_per_node > 1:
        half = view.gpus_per_node // 2
        out.append(Shape(_gpu_option(job, view, half),
                         dataclasses.replace(view, gpus_per_node=half)))
    if view.num_nodes > 1:
        half_nodes = view.num_nodes // 2
        out.append(Shape(f"-N {half_nodes} instead of {view.num_nodes}",
                         dataclasses.replace(view, num_nodes=half_nodes)))
    seen = {int(view.time_limit)}
    for fraction in (2, 4):
        limit = max(int(view.time_limit) // fraction // 60 * 60, MIN_LIMIT)
        if limit in seen or limit >= view.time_limit:
            continue
        seen.add(limit)
        out.append(Shape(f"--time={time_option(limit)} instead of "
                         f"{time_option(int(view.time_limit))}",
                         dataclasses.replace(view, time_limit=limit)))
    for name, part in sorted(partitions.items()):
        if name == view.partition or part.state != "UP":
            continue
        if part.max_time is not None and view.time_limit > part.max_time:
            continue
        out.append(Shape(f"-p {name} instead of {view.partition}",
                         dataclasses.replace(view, partition=name,
                                             partition_priority=part.priority_tier)))
    return out


def with_shape(snapshot: Snapshot, view: PendingJob) -> Snapshot:
    """The snapshot with the job of ``view``'s id replaced by ``view`` (added if absent)."""
    pending = [view if p.job_id == view.job_id else p for p in snapshot.pending]
    if all(p.job_id != view.job_id for p in snapshot.pending):
        pending.append(view)
    promised = {j: t for j, t in snapshot.promised.items() if j != view.job_id}
    nodes = {j: n for j, n in snapshot.promised_nodes.items() if j != view.job_id}
    return dataclasses.replace(snapshot, pending=pending, promised=promised,
                               promised_nodes=nodes)


class Forecaster(Protocol):
    """What the advisor asks of the planner (``lifecycle/planner.Planner``)."""

    def quantiles(self, snapshot: Snapshot, wanted: Collection[int] | None = None) -> dict: ...

    def p50_start(self, snapshot: Snapshot, job_id: int) -> float | None: ...


def outlook(planner: Forecaster, snapshot: Snapshot, view: PendingJob, shapes: list[Shape],
            resolution: float) -> dict[str, Any]:
    """What ``kiln why`` and ``sbatch --test-only`` add for a job of ``snapshot``: its p50
    and p90 start (``forecast``, None when the plan does not reach it) and which of its
    nearby ``shapes`` (``nearby``, made on schedd's loop: they read the partitions) start
    sooner (``advice``). Pure: run off the loop (schedd/offload.py) on a frozen planner. A
    forecast that fails is logged and left out: Slurm's answer (``--test-only``'s first
    line, ``kiln why``'s reason) never depends on it."""
    try:
        q = planner.quantiles(snapshot, [view.job_id]).get(view.job_id)
        asked = q.p50 if q is not None else None
        found = advise(snapshot, shapes, asked, planner.p50_start, float(resolution))
    except Exception:  # noqa: BLE001 - an extra, never the reason a request fails
        log.exception("forecast of job %s failed", view.job_id)
        return {"forecast": None, "advice": []}
    return {"forecast": None if q is None else {"p50": q.p50, "p90": q.p90},
            "advice": [a.to_wire() for a in found]}


def advise(snapshot: Snapshot, shapes: list[Shape], asked: float | None,
           p50_start: Callable[[Snapshot, int], float | None],
           resolution: float = 60.0) -> list[Advice]:
    """The shapes whose p50 start is sooner than ``asked`` (the job's own; None: not planned)
    by more than ``resolution`` seconds, soonest first."""
    out = []
    for shape in shapes:
        start = p50_start(with_shape(snapshot, shape.view), shape.view.job_id)
        if start is None:
            continue
        if asked is None or start < asked - resolution:
            out.append(Advice(shape.change, start))
    out.sort(key=lambda a: (a.start, a.change))
    return out
