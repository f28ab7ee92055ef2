"""GPU-sharing placement and the fragmentation measure of Weng et al. (USENIX ATC'23).

"Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent"
observes that on a cluster where tasks ask for fractions of a GPU as well as whole GPUs, what is
left unallocated at the end is mostly *fragments*: free GPU capacity that no task of the workload
can use (half a GPU on a node whose CPUs are all taken, 0.3 GPU when tasks want 0.5, a partly
used GPU when tasks want whole ones). Their placement, fragmentation gradient descent (FGD),
puts each task where it increases the expected fragmentation least.

Everything here is pure arithmetic on node states (no clock, no database, no sockets): the
simulator (``simulator/sharing.py``) replays traces with it, and the tests check it by hand.

Units are integers: CPU in milli-cores, memory in MiB, GPU in milli-GPU (1000 = one GPU). A node
state keeps the free milli-GPU of each GPU *sorted*, largest first: two nodes of the same kind
whose GPUs have the same free amounts, in any order, are the same state for every placement, so
the simulator can score each distinct state once instead of each node.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

WHOLE = 1000  # milli-GPU in one GPU
PLACEMENTS = ("random", "bestfit", "worstfit", "dotprod", "fgd", "kiln")


class Task(NamedTuple):
    """What a task asks for: ``gpus`` GPUs of ``milli`` milli-GPU each (a sharing task is one GPU
    of milli < 1000, a CPU-only task zero), on a GPU model in ``models`` (None: any)."""

    cpu: int
    mem: int
    gpus: int
    milli: int
    models: frozenset[str] | None = None

    @property
    def demand(self) -> int:
        """The task's GPU demand in milli-GPU."""
        return self.gpus * self.milli


class NodeKind(NamedTuple):
    """A node's capacity: what it has when nothing runs on it."""

    model: str
    cpu: int
    mem: int
    gpus: int


class NodeState(NamedTuple):
    """What is free on a node; ``frees`` is each GPU's free milli-GPU, largest first."""

    kind: NodeKind
    cpu: int
    mem: int
    frees: tuple[int, ...]

    @classmethod
    def empty(cls, kind: NodeKind) -> NodeState:
        return cls(kind, kind.cpu, kind.mem, (WHOLE,) * kind.gpus)

    @property
    def free_gpu(self) -> int:
        return sum(self.frees)


def allowed(task: Task, model: str) -> bool:
    return task.models is None or model in task.models


def options(state: NodeState, task: Task) -> list[tuple[int, NodeState]]:
    """Every distinct way to place ``task`` on ``state``: (free milli-GPU of the GPU it takes
    before it does, the state after). Empty when the task does not fit. Whole-GPU tasks take
    entirely free GPUs; a sharing task takes part of one GPU with enough left."""
    if task.cpu > state.cpu or task.mem > state.mem or not allowed(task, state.kind.model):
        return []
    cpu, mem = state.cpu - task.cpu, state.mem - task.mem
    frees = state.frees
    if task.gpus == 0:
        return [(0, NodeState(state.kind, cpu, mem, frees))]
    if task.milli >= WHOLE:
        full = frees.count(WHOLE)  # sorted largest first: the full GPUs lead
        if full < task.gpus:
            return []
        rest = frees[task.gpus:] + (0,) * task.gpus
        return [(WHOLE, NodeState(state.kind, cpu, mem, rest))]
    out = []
    seen = set()
    for i, free in enumerate(frees):
        if free < task.milli:
            break
        if free in seen:
            continue
        seen.add(free)
        left = free - task.milli
        rest = list(frees[:i] + frees[i + 1:])
        rest.append(left)
        rest.sort(reverse=True)
        out.append((free, NodeState(state.kind, cpu, mem, tuple(rest))))
    return out


class Workload:
    """The task-type distribution fragmentation is measured against: each distinct task of the
    trace with its share of the tasks. Results are memoised per node state, since a replay
    meets the same states again and again."""

    def __init__(self, tasks: Iterable[Task] | Mapping[Task, float]) -> None:
        """``tasks``: the tasks (each counted once), or each task type with its weight."""
        counts = tasks if isinstance(tasks, Mapping) else Counter(tasks)
        total = sum(counts.values())
        if not total > 0:
            raise ValueError("a workload needs at least one task")
        self.types = {task: n / total for task, n in counts.items() if n > 0}
        # the GPU demand shapes: (gpus, milli); CPU-only tasks can use no GPU, they add nothing
        self.classes = sorted({(t.gpus, t.milli) for t in self.types if t.gpus})
        self._index = {c: i for i, c in enumerate(self.classes)}
        self._fits: dict[tuple[str, int, int], list[float]] = {}
        self._frag: dict[NodeState, float] = {}
        # the workload's GPU demand per milli-core of CPU it asks for (kiln's stranding term)
        cpu = sum(t.cpu * p for t, p in self.types.items())
        self.gpu_per_cpu = sum(t.demand * p for t, p in self.types.items()) / cpu if cpu else 0.0

    def _fit_mass(self, model: str, cpu: int, mem: int) -> list[float]:
        """Per demand class, the share of tasks whose CPU, memory and model fit."""
        key = (model, cpu, mem)
        mass = self._fits.get(key)
        if mass is None:
            mass = [0.0] * len(self.classes)
            for task, p in self.types.items():
                if task.gpus and task.cpu <= cpu and task.mem <= mem and allowed(task, model):
                    mass[self._index[(task.gpus, task.milli)]] += p
            self._fits[key] = mass
        return mass

    def fragmentation(self, state: NodeState) -> float:
        """The expected milli-GPU of ``state`` that a task drawn from the workload cannot use.

        For one task: if it fits nowhere on the node (CPU, memory, model, or no GPU with enough
        free), all the node's free GPU is a fragment to it; if it fits, the fragments are the
        GPUs whose free part is below what it needs of one GPU (min(demand, 1 GPU)). A CPU-only
        task uses no GPU, so every free GPU is a fragment to it. The node's fragmentation is
        the average over the workload, weighted by each task type's share.
        """
        frag = self._frag.get(state)
        if frag is not None:
            return frag
        frees = state.frees
        free = sum(frees)
        frag = float(free)
        if free:
            mass = self._fit_mass(state.kind.model, state.cpu, state.mem)
            full = frees.count(WHOLE)
            for (gpus, milli), p in zip(self.classes, mass, strict=True):
                if not p:
                    continue
                if milli >= WHOLE:
                    usable = WHOLE * full if full >= gpus else 0
                else:
                    usable = sum(f for f in frees if f >= milli)
                frag -= p * usable
        self._frag[state] = frag
        return frag


def stranded(state: NodeState, workload: Workload) -> float:
    """The free milli-GPU of ``state`` that its free CPU cannot feed, at the workload's mean CPU
    per GPU: kiln's second term. fgd looks one task ahead, so taking 32 of a box's 96 cores
    costs it nothing while every task type still fits, yet the 8 GPUs then lack the cores the
    tasks that would fill them bring along; this term counts that GPU as lost already."""
    if not workload.gpu_per_cpu:
        return 0.0
    return max(0.0, state.free_gpu - state.cpu * workload.gpu_per_cpu)


def _remaining(state: NodeState) -> float:
    """What is left on a node, each resource as a share of the node's capacity, summed."""
    kind = state.kind
    total = state.cpu / kind.cpu + state.mem / kind.mem
    if kind.gpus:
        total += state.free_gpu / (WHOLE * kind.gpus)
    return total


def _dot(state: NodeState, task: Task) -> float:
    """Tetris's alignment: task demand . node's free resources, both as shares of capacity."""
    kind = state.kind
    total = (task.cpu / kind.cpu) * (state.cpu / kind.cpu) + \
        (task.mem / kind.mem) * (state.mem / kind.mem)
    if kind.gpus:
        cap = WHOLE * kind.gpus
        total += (task.demand / cap) * (state.free_gpu / cap)
    return total


def score(placement: str, state: NodeState, task: Task, workload: Workload | None = None,
          ) -> tuple[tuple, NodeState] | None:
    """The best way to place ``task`` on ``state`` under ``placement`` and its score (lower is
    better; comparable across nodes), or None if it does not fit. Deterministic, so a caller
    may memoise it per (state, task). ``random`` is chosen by ``pick_random``, not scored.

    - ``bestfit``: the node with the least left afterwards (CPU, memory and GPU shares summed),
      inside it the GPU with the least free that fits;
    - ``worstfit``: the most left, the GPU with the most free;
    - ``dotprod``: the largest dot product of demand and free resources (Tetris), best-fit GPU;
    - ``fgd``: the smallest increase of the node's fragmentation, then best-fit GPU;
    - ``kiln``: the smallest increase of fragmentation plus stranded GPU (``stranded``), and
      among equal increases a node that is not an untouched box of 8 GPUs (kept whole for the
      8-GPU tasks), then the node with the least left (best fit).
    """
    choices = options(state, task)
    if not choices:
        return None
    if placement == "bestfit":
        free, after = min(choices)
        return (_remaining(after), free), after
    if placement == "worstfit":
        free, after = max(choices)
        return (-_remaining(after), -free), after
    if placement == "dotprod":
        free, after = min(choices)
        return (-_dot(state, task), free), after
    if placement in ("fgd", "kiln"):
        if workload is None:
            raise ValueError(f"placement {placement} needs the workload")
        if placement == "fgd":
            before = workload.fragmentation(state)
            delta, free, after = min((workload.fragmentation(after) - before, free, after)
                                     for free, after in choices)
            return (delta, free), after
        before = workload.fragmentation(state) + stranded(state, workload)
        delta, free, after = min(
            (workload.fragmentation(after) + stranded(after, workload) - before, free, after)
            for free, after in choices)
        whole_box = state.kind.gpus >= 8 and state.frees[-1] == WHOLE and task.gpus < 8
        return (round(delta, 6), whole_box, _remaining(after), free), after
    raise ValueError(f"unknown placement {placement!r}")


def pick_random(states: Sequence[tuple[NodeState, int]], task: Task, rng: random.Random,
                ) -> tuple[int, NodeState] | None:
    """``random``: a node drawn uniformly among those the task fits on, then one of its GPUs that
    fit, uniformly. ``states`` are (state, how many nodes are in it); returns (position in
    ``states``, the state after) or None."""
    fitting = [(i, n) for i, (state, n) in enumerate(states) if options(state, task)]
    if not fitting:
        return None
    total = sum(n for _, n in fitting)
    draw = rng.randrange(total)
    chosen = fitting[-1][0]
    for index, n in fitting:
        if draw < n:
            chosen = index
            break
        draw -= n
    state = states[chosen][0]
    choices = options(state, task)
    if task.gpus == 0 or task.milli >= WHOLE:
        return chosen, choices[0][1]
    gpu = rng.choice([f for f in state.frees if f >= task.milli])
    return chosen, next(after for free, after in choices if free == gpu)
