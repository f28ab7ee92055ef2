"""Fragmentation-aware placement in the live cycle: which of the feasible nodes a GPU job
starts on, by the measure of Weng et al. (USENIX ATC'23) that ``gpushare.py`` computes.

The measure needs a *workload*: what the jobs likely to come ask for. The core takes it from
its inputs alone (no clock, no ledger): the pending jobs' GPU asks, each job counted once, and
``Snapshot.gpu_history``, the decayed counts of the recent starts by shape that the caller keeps
(``StartHistory``: the daemon records each cycle's starts with the loop's time, the simulator
with its virtual clock) and hands in. A snapshot without a history (``None``) gets best fit, as
before this module: the simulator's replays do unless asked (``kiln sim --gpu-placement``).

Everything is in the terms of ``gpushare.Task``: per node, ``gpus`` GPUs of ``milli``
milli-GPU each (1000 = a whole GPU; a sharing job is one GPU of less). A share kind (shards
today; MPS percentages and MIG slices are the same arithmetic) comes in as its units per node
over the node's units per GPU (``SHARE_KINDS``), so the workload, the node states and the
scores never name a kind.

The rule (``Scorer``): among the nodes where the job fits now for its whole planned run
(the same feasibility test as before: a placement choice never touches a reservation), the one
whose fragmentation plus stranded GPU (``gpushare``'s ``kiln`` placement) grows least; ties to a
node that is not an untouched box of 8 or more GPUs when the job asks fewer than 8 (kept whole
for 8-GPU jobs), then to best fit (least GPUs, then CPUs, left), then to node order. Memory is a
hard filter here, not part of the measure. Inside the node the GPUs are picked as before
(NVLink islands whole, ``NodeTimeline.pick_gpus``; shares on the fullest shared GPU that holds
them, ``shares.pick``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from math import ceil
from operator import attrgetter

from kiln.model import NodeAllocation
from schedd.scheduler.gpushare import WHOLE, NodeKind, NodeState, Task, Workload, stranded
from schedd.scheduler.snapshot import NodeView, PendingJob

BOX = 8  # GPUs of a box kept whole for the jobs that take a whole one
MAX_TYPES = 64  # job shapes the workload keeps (the heaviest): the score's cost is linear in it
HALF_LIFE = 3600.0  # seconds: a start an hour ago weighs half a start now
_BIG = 1 << 62  # memory in the measure's states: not counted
_KIND = NodeKind("", 0, 0, 0)  # the measure reads no capacity, and GPU types are a hard filter

# Share kinds: (PendingJob field: units asked per node, NodeView field: units each GPU offers).
# A kind with these two fields needs nothing more here.
SHARE_KINDS: tuple[tuple[str, str], ...] = (("shards_per_node", "shards_per_gpu"),
                                            ("mps_per_node", "mps_per_gpu"))

_ASK = attrgetter("cpus_per_node", "mem_per_node_mb", "gpus_per_node",
                  *(field for field, _ in SHARE_KINDS))


def share_task(cpus: int, mem: int, units: int, per_gpu: int) -> Task | None:
    """The ask of ``units`` shares of GPUs that offer ``per_gpu`` each: a part of one GPU, or
    whole GPUs when it spans more than one."""
    if units <= 0 or per_gpu <= 0:
        return None
    if units >= per_gpu:
        return Task(cpus, mem, ceil(units / per_gpu), WHOLE)
    return Task(cpus, mem, 1, max(WHOLE * units // per_gpu, 1))


def ask_of(job: PendingJob, per_gpu: Mapping[str, int]) -> Task:
    """A pending job's ask per node. ``per_gpu``: each share kind's units per GPU (the
    cluster's, as ``Scorer`` reads them)."""
    return _ask(_ASK(job), per_gpu)


def _ask(fields: tuple, per_gpu: Mapping[str, int]) -> Task:
    cpus, mem, gpus, *units = fields
    for (_, node_field), n in zip(SHARE_KINDS, units, strict=True):
        if n:
            task = share_task(cpus, mem, n, per_gpu.get(node_field, 0))
            if task is not None:
                return task
    return Task(cpus, mem, gpus, WHOLE if gpus else 0)


def ask_of_allocation(allocation: Sequence[NodeAllocation]) -> Task | None:
    """What a started job took per node (its first node's part), for ``StartHistory``."""
    if not allocation:
        return None
    a = allocation[0]
    if a.shards:
        task = share_task(a.cpus, a.memory_mb, a.shard_count, a.shards_per_gpu)
        if task is not None:
            return task
    return Task(a.cpus, a.memory_mb, len(a.gpus), WHOLE if a.gpus else 0)


class StartHistory:
    """Decayed counts of recent starts by shape: each start weighs 1 when it is recorded and
    half that ``half_life`` seconds later. Pure: every time is passed in. At most ``keep``
    shapes are kept (the lightest dropped)."""

    def __init__(self, half_life: float = HALF_LIFE, keep: int = MAX_TYPES) -> None:
        if half_life <= 0:
            raise ValueError("the history's half-life must be positive")
        self.half_life = half_life
        self.keep = keep
        self.weights: dict[Task, float] = {}
        self.at: float | None = None  # the time the weights are as of

    def _decay(self, now: float) -> None:
        if self.at is not None and now > self.at and self.weights:
            factor = 0.5 ** ((now - self.at) / self.half_life)
            self.weights = {t: w * factor for t, w in self.weights.items() if w * factor > 1e-6}
        if self.at is None or now > self.at:
            self.at = now

    def record(self, allocation: Sequence[NodeAllocation], now: float) -> None:
        task = ask_of_allocation(allocation)
        if task is None:
            return
        self._decay(now)
        self.weights[task] = self.weights.get(task, 0.0) + 1.0
        if len(self.weights) > self.keep:
            del self.weights[min(self.weights, key=self.weights.__getitem__)]

    def snapshot(self, now: float) -> tuple[tuple[Task, float], ...]:
        """The history as of ``now``, for ``Snapshot.gpu_history``."""
        self._decay(now)
        return tuple(self.weights.items())


def workload(history: Iterable[tuple[Task, float]], pending: Sequence[PendingJob],
             per_gpu: Mapping[str, int]) -> Workload | None:
    """The workload of one cycle: the history's weights plus one per pending job, the
    ``MAX_TYPES`` heaviest shapes; None when none of it asks for a GPU."""
    weights: dict[Task, float] = {}
    for task, w in history:
        weights[task] = weights.get(task, 0.0) + w
    for fields, n in Counter(map(_ASK, pending)).items():  # counted in C: the queue is long
        task = _ask(fields, per_gpu)
        weights[task] = weights.get(task, 0.0) + n
    if len(weights) > MAX_TYPES:
        weights = dict(sorted(weights.items(), key=lambda p: -p[1])[:MAX_TYPES])
    if not any(t.gpus for t in weights):
        return None
    return Workload(weights)


def units_per_gpu(nodes: Sequence[NodeView]) -> dict[str, int]:
    """Each share kind's commonest units per GPU over the nodes that offer it."""
    out = {}
    for _, node_field in SHARE_KINDS:
        counts = Counter(n for n in map(attrgetter(node_field), nodes) if n)
        if counts:
            out[node_field] = counts.most_common(1)[0][0]
    return out


class Scorer:
    """One cycle's fragmentation measure: the workload (built on first use, from
    ``gpu_history`` and the pending jobs), and scores memoised per free state."""

    def __init__(self, history: Iterable[tuple[Task, float]], pending: Sequence[PendingJob],
                 nodes: Sequence[NodeView]) -> None:
        self._history = tuple(history)
        self._pending = pending
        self._nodes = nodes
        self._workload: Workload | None | bool = False  # False: not built yet
        self._delta: dict[tuple, float] = {}
        self._orders: dict[tuple, list[tuple[int, int]]] = {}
        self._orders_of: object = None
        self.box_sizes = frozenset(len(n.gpus) for n in nodes if len(n.gpus) >= BOX)

    @property
    def workload(self) -> Workload | None:
        if self._workload is False:
            self._workload = workload(self._history, self._pending, units_per_gpu(self._nodes))
        return self._workload  # type: ignore[return-value]

    def cost(self, frees: tuple[int, ...], cpus: int) -> float:
        """Fragmentation plus stranded GPU of a node with ``frees`` (milli-GPU free per GPU,
        largest first) and ``cpus`` CPUs free."""
        w = self.workload
        assert w is not None
        state = NodeState(_KIND, cpus, _BIG, frees)
        return w.fragmentation(state) + stranded(state, w)

    def whole_delta(self, free_gpus: int, free_cpus: int, gpus: int, cpus: int) -> float:
        """The measure's growth when ``gpus`` whole GPUs and ``cpus`` CPUs are taken from a
        node with ``free_gpus`` whole-free GPUs and ``free_cpus`` CPUs free."""
        key = (free_gpus, free_cpus, gpus, cpus)
        delta = self._delta.get(key)
        if delta is None:
            delta = round(self.cost((WHOLE,) * (free_gpus - gpus), free_cpus - cpus)
                          - self.cost((WHOLE,) * free_gpus, free_cpus), 6)
            self._delta[key] = delta
        return delta

    def box(self, free_gpus: int, gpus: int) -> bool:
        """Whether taking ``gpus`` from ``free_gpus`` free breaks an untouched box of
        ``BOX`` or more (read by free count: a node with as many free as a box size has)."""
        return gpus < BOX and free_gpus in self.box_sizes

    def key_order(self, keys: list[tuple[int, int]], gpus: int, cpus: int
                  ) -> list[tuple[int, int]]:
        """``FreeIndex`` bucket keys (free GPUs, free CPUs) that hold the ask, in the order the
        rule walks them. Memoised per ask while the set of keys is the same list."""
        if self._orders_of is not keys:
            self._orders.clear()
            self._orders_of = keys
        order = self._orders.get((gpus, cpus))
        if order is None:
            fitting = [k for k in keys if k[0] >= gpus and k[1] >= cpus]
            order = sorted(fitting, key=lambda k: (self.whole_delta(k[0], k[1], gpus, cpus),
                                                   self.box(k[0], gpus), k))
            self._orders[(gpus, cpus)] = order
        return order

    def share_key(self, whole: int, shared: Mapping[int, int], per_gpu: int, cpus_free: int,
                  pick: tuple[dict[int, int], list[int]], cpus: int, total_gpus: int
                  ) -> tuple:
        """The rule's sort key of a share pick on a node: ``whole`` whole-free GPUs,
        ``shared`` GPU -> free units of the GPUs in use by shares, ``per_gpu`` units each."""
        units, opened = pick
        before = [WHOLE] * whole + [WHOLE * f // per_gpu for f in shared.values()]
        left = dict(shared)
        for g in opened:
            left[g] = per_gpu
        for g, n in units.items():
            left[g] = left.get(g, 0) - n
        after = [WHOLE] * (whole - len(opened)) + [WHOLE * f // per_gpu
                                                   for f in left.values() if f > 0]
        delta = round(self.cost(tuple(sorted(after, reverse=True)), cpus_free - cpus)
                      - self.cost(tuple(sorted(before, reverse=True)), cpus_free), 6)
        untouched = total_gpus >= BOX and whole == total_gpus and opened
        return (delta, bool(untouched), whole - len(opened), cpus_free - cpus)


def scorer_for(history: Iterable[tuple[Task, float]] | None, pending: Sequence[PendingJob],
               nodes: Sequence[NodeView]) -> Scorer | None:
    """The cycle's scorer, or None without a history (best fit)."""
    return None if history is None else Scorer(history, pending, nodes)

