"""The GPU-sharing replay of Weng et al. (USENIX ATC'23): tasks arrive and never leave.

The protocol of "Beware of Fragmentation": tasks are drawn at random from the trace's pods (with
replacement, so the arriving workload follows the trace's task-type distribution) and arrive
one at a time; each is placed at once by the placement under test or, if it fits on no node,
recorded failed. Nothing ever ends. Arrivals stop once the GPU demand that arrived reaches the
cluster's GPU capacity. What is compared is how much GPU capacity is left unallocated then:
the fragments a placement created, since the demand was there.

The draws depend only on the seed, not on the placement, so every placement of one seed sees
the same tasks in the same order. ``random``'s own draws come from a second generator.
"""

from __future__ import annotations

import random
import time
from bisect import insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from schedd.scheduler.gpushare import (
    WHOLE,
    NodeKind,
    NodeState,
    Task,
    Workload,
    pick_random,
    score,
)

CURVE_COLUMNS = ("arrived_gpu_fraction", "allocated_gpu_fraction", "unallocated_gpu_fraction",
                 "failed_gpu_fraction", "fragmented_gpu_fraction", "tasks", "failed_tasks")


class SharingError(Exception):
    """A replay that cannot run (no GPU on the cluster, no pod that asks for one)."""


@dataclass(slots=True)
class Point:
    """The cluster when the arrived demand reached a given share of the capacity."""

    arrived: int  # milli-GPU
    allocated: int
    failed: int
    fragmented: float  # the summed fragmentation of every node, milli-GPU
    tasks: int
    failed_tasks: int

    def fractions(self, capacity: int) -> dict[str, float | int]:
        return {
            "arrived_gpu_fraction": self.arrived / capacity,
            "allocated_gpu_fraction": self.allocated / capacity,
            "unallocated_gpu_fraction": (capacity - self.allocated) / capacity,
            "failed_gpu_fraction": self.failed / capacity,
            "fragmented_gpu_fraction": self.fragmented / capacity,
            "tasks": self.tasks,
            "failed_tasks": self.failed_tasks,
        }


@dataclass(slots=True)
class SharingResult:
    placement: str
    seed: int
    nodes: int
    capacity: int  # milli-GPU
    end: Point
    curve: list[Point] = field(default_factory=list)  # at each 1 % of arrived demand
    seconds: float = 0.0

    def summary(self) -> dict[str, float | int | str]:
        return {"placement": self.placement, "seed": self.seed, "nodes": self.nodes,
                "gpus": self.capacity / WHOLE, **self.end.fractions(self.capacity),
                "seconds": round(self.seconds, 3)}


def replay(tasks: Sequence[Task], kinds: Sequence[NodeKind], placement: str, seed: int = 0,
           workload: Workload | None = None,
           progress: Callable[[int, int], None] | None = None) -> SharingResult:
    """Replay draws of ``tasks`` onto empty nodes ``kinds`` with ``placement``.

    ``workload`` is the distribution fgd and kiln measure fragmentation against (default: the
    task types of ``tasks``); ``progress(arrived, capacity)`` is called after each arrival.
    """
    capacity = WHOLE * sum(k.gpus for k in kinds)
    if not capacity:
        raise SharingError("the node list has no GPU")
    if not any(t.gpus for t in tasks):
        raise SharingError("no pod of the trace asks for a GPU")
    workload = workload or Workload(tasks)
    started = time.perf_counter()
    draws = random.Random(seed)
    chooser = random.Random(f"{seed}/placement")
    groups: dict[NodeState, list[int]] = {}
    for i, kind in enumerate(kinds):
        groups.setdefault(NodeState.empty(kind), []).append(i)
    fragmented = sum(workload.fragmentation(s) * len(ids) for s, ids in groups.items())
    memo: dict[tuple[NodeState, Task], tuple[tuple, NodeState] | None] = {}
    point = Point(0, 0, 0, fragmented, 0, 0)
    curve: list[Point] = []
    step = 0
    while point.arrived < capacity:
        task = tasks[draws.randrange(len(tasks))]
        point.arrived += task.demand
        point.tasks += 1
        chosen = _choose(placement, groups, task, workload, memo, chooser)
        if chosen is None:
            point.failed += task.demand
            point.failed_tasks += 1
        else:
            before, after = chosen
            ids = groups[before]
            node = ids.pop(0)
            if not ids:
                del groups[before]
            insort(groups.setdefault(after, []), node)
            point.allocated += task.demand
            point.fragmented += workload.fragmentation(after) - workload.fragmentation(before)
        while step < 100 and point.arrived * 100 >= capacity * (step + 1):
            step += 1
            curve.append(Point(**{f: getattr(point, f) for f in Point.__slots__}))
        if progress is not None:
            progress(min(point.arrived, capacity), capacity)
    return SharingResult(placement, seed, len(kinds), capacity, point, curve,
                         time.perf_counter() - started)


def _choose(placement: str, groups: dict[NodeState, list[int]], task: Task, workload: Workload,
            memo: dict, chooser: random.Random) -> tuple[NodeState, NodeState] | None:
    """(the state of the node chosen, its state after) or None: the task fits nowhere.

    Scores are per distinct state (memoised: states and tasks repeat), ties broken by the
    lowest node number, and the node taken from a state is its lowest-numbered one.
    """
    if placement == "random":
        states = list(groups.items())
        picked = pick_random([(s, len(ids)) for s, ids in states], task, chooser)
        return None if picked is None else (states[picked[0]][0], picked[1])
    best = None
    for state, ids in groups.items():
        key = (state, task)
        scored = memo.get(key, memo)
        if scored is memo:
            scored = memo[key] = score(placement, state, task, workload)
        if scored is None:
            continue
        rank = (scored[0], ids[0])
        if best is None or rank < best[0]:
            best = (rank, state, scored[1])
    return None if best is None else (best[1], best[2])
