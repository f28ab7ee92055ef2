"""Placement: which nodes (and inside them which GPUs) a job gets, now or at a planned time.

Hard filters first (partition, features/constraints, GPU type, ``-w``, ``-x``, a node that takes
nothing new), then best fit across nodes: the nodes that will have the least left over, so partly
used nodes fill up and whole nodes stay free for big jobs. ``--exclusive`` takes whole nodes (its demand is the node's whole capacity, so an exclusive
job fits only where nothing else runs or is planned).
Inside a node the GPU indices keep NVLink islands whole (``NodeTimeline.pick_gpus``), and the
CPU ids are ones no running job holds, near the chosen GPUs first (``NodeTimeline.pick_cpus``).

Multi-node jobs are gangs: all nodes at one start time, or none.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from heapq import nsmallest
from itertools import chain, compress, count, repeat
from operator import attrgetter, eq, ne

from kiln.model import NodeAllocation
from schedd.scheduler import shares, topology
from schedd.scheduler.fragment import Scorer
from schedd.scheduler.profile import INFINITY, Demand, NodeTimeline
from schedd.scheduler.snapshot import NodeView, PendingJob

# why a job can never be placed as things stand (Slurm's pending reasons)
NEVER_FITS = "BadConstraints"
NODES_UNAVAILABLE = "ReqNodeNotAvail"


@dataclass(slots=True)
class Candidates:
    """The nodes a job may use at all, and why not if there are too few."""

    nodes: list[NodeTimeline]
    reason: str = ""
    every: bool = False  # all available nodes: no membership test needed
    ids: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not self.every:
            self.ids = frozenset(t.index for t in self.nodes)


def _matches(job: PendingJob, node: NodeView) -> bool:
    """The hard filters that do not depend on the job's size."""
    if job.partition and node.partitions and job.partition not in node.partitions:
        return False
    if job.features and not job.features <= node.features:
        return False
    if job.gpu_type and job.gpu_type != node.gpu_type and (
            job.gpu_type not in node.gpu_kinds.values()):
        return False
    return not (job.exclude and node.name in job.exclude)


def typed_gpus(job: PendingJob, node: NodeView) -> int:
    """How many of the node's GPUs the job may have: all, or on a node of several GPU types
    (a mixed MIG layout) those of the type it asks for."""
    if not job.gpu_type or not node.gpu_kinds:
        return len(node.gpus)
    return sum(1 for k in node.gpu_kinds.values() if k == job.gpu_type)


def typed_free(job: PendingJob, tl: NodeTimeline) -> bool:
    """Whether a node of several GPU types has enough free now of the type the job asks
    for (what ``NodeTimeline.fits_now`` asks of a typed demand; the free-now walk of
    ``_place_now_indexed`` reads the buckets' counts instead, so it asks this)."""
    kinds = tl.view.gpu_kinds
    if not job.gpu_type or not kinds or not job.gpus_per_node or job.exclusive:
        return True
    return sum(1 for g in tl.gpus_free if kinds.get(g) == job.gpu_type) >= job.gpus_per_node


def _big_enough(job: PendingJob, node: NodeView) -> bool:
    return (
        job.cpus_per_node <= node.cpus
        and job.mem_per_node_mb <= node.memory_mb
        and job.gpus_per_node <= typed_gpus(job, node)
        and shares.holds(job, node, len(node.gpus))
    )


def _big_when_resumed(job: PendingJob, node: NodeView) -> bool:
    """Big enough once its failed GPUs are back in service."""
    gpus = len(node.gpus) + node.failed_gpus
    return (job.cpus_per_node <= node.cpus and job.mem_per_node_mb <= node.memory_mb
            and job.gpus_per_node <= gpus and job.gpus_per_node <= typed_gpus(job, node)
            + node.failed_gpus and shares.holds(job, node, gpus))


def _unless_failed_gpus(job: PendingJob, cands: Candidates,
                        static: Sequence[NodeTimeline]) -> Candidates:
    """A job that never fits only because GPUs failed waits for their RESUME: the nodes it
    needs are unavailable (ReqNodeNotAvail), not a request no node can hold."""
    if cands.reason != NEVER_FITS or not any(t.view.failed_gpus for t in static):
        return cands
    healed = [t for t in static if _big_when_resumed(job, t.view)]
    if len(healed) >= job.num_nodes and (not job.nodelist or
                                         job.nodelist <= {t.view.name for t in healed}):
        return Candidates([], NODES_UNAVAILABLE)
    return cands


def filter_key(job: PendingJob) -> tuple:
    """Jobs with equal keys pass the hard filters on the same nodes."""
    return (job.partition, job.features, job.gpu_type, job.nodelist, job.exclude)


class CandidateCache:
    """The nodes each job may use, computed once per filter key per cycle.

    Most jobs of a cycle share a filter key and fit the smallest matching node, so after the
    first job of a key the answer is a dictionary lookup and three comparisons.
    """

    def __init__(self, timelines: Sequence[NodeTimeline]) -> None:
        self.timelines = timelines
        self._by_filter: dict[tuple, tuple[list[NodeTimeline], list[NodeTimeline],
                                           tuple[int, int, int]]] = {}
        self._by_size: dict[tuple, Candidates] = {}
        self._whole: dict[tuple, Candidates] = {}
        self._available = sum(1 for t in timelines if t.view.available)

    def get(self, job: PendingJob) -> Candidates:
        if job.num_nodes < 1:
            return Candidates([], NEVER_FITS)
        if job.partition or job.features or job.gpu_type or job.nodelist or job.exclude:
            key = filter_key(job)
        else:
            key = ()
        found = self._by_filter.get(key)
        if found is None:
            static = [t for t in self.timelines if _matches(job, t.view)]
            usable = [t for t in static if t.view.available]
            smallest = (
                min((t.view.cpus for t in static), default=0),
                min((t.view.memory_mb for t in static), default=0),
                min((typed_gpus(job, t.view) for t in static), default=0),
            )
            found = (static, usable, smallest)
            self._by_filter[key] = found
        static, usable, (c, m, g) = found
        if (not job.nodelist and not job.shards_per_node and not job.mps_per_node
                and job.cpus_per_node <= c
                and job.mem_per_node_mb <= m and job.gpus_per_node <= g):
            if len(usable) >= job.num_nodes:
                whole = self._whole.get(key)
                if whole is None:
                    whole = Candidates(usable, every=len(usable) == self._available)
                    self._whole[key] = whole
                return whole
            if len(static) < job.num_nodes:
                return Candidates([], NEVER_FITS)
            return Candidates([], NODES_UNAVAILABLE)
        full = (key, job.cpus_per_node, job.mem_per_node_mb, job.gpus_per_node, job.num_nodes,
                job.shards_per_node, job.mps_per_node)
        cands = self._by_size.get(full)
        if cands is None:
            cands = _unless_failed_gpus(
                job, _sized(job, [t for t in static if _big_enough(job, t.view)]), static)
            self._by_size[full] = cands
        return cands


def keep_to(cands: Candidates, names: Sequence[str], num_nodes: int) -> Candidates:
    """The candidates narrowed to a promise's nodes, when they can still hold the gang.

    A promised job that moved to other nodes could land in another promised job's slot there;
    kept to its own nodes it only ever uses what its promise already counted on.
    """
    wanted = set(names)
    kept = [t for t in cands.nodes if t.view.name in wanted]
    if len(kept) < num_nodes or len(kept) < len(wanted):
        return cands
    return Candidates(kept)


def _sized(job: PendingJob, static: list[NodeTimeline]) -> Candidates:
    if job.nodelist:
        names = {t.view.name for t in static}
        if not job.nodelist <= names or len(job.nodelist) > job.num_nodes:
            return Candidates([], NEVER_FITS)
    if len(static) < job.num_nodes:
        return Candidates([], NEVER_FITS)
    usable = [t for t in static if t.view.available]
    if len(usable) < job.num_nodes or (
        job.nodelist and not job.nodelist <= {t.view.name for t in usable}
    ):
        return Candidates([], NODES_UNAVAILABLE)
    return Candidates(usable)


def candidates(job: PendingJob, timelines: Sequence[NodeTimeline]) -> Candidates:
    """Nodes that pass the hard filters and take new work; a reason when fewer than needed."""
    static = [t for t in timelines if _matches(job, t.view)]
    return _unless_failed_gpus(job, _sized(job, [t for t in static if _big_enough(job, t.view)]),
                               static)


def demand_on(job: PendingJob, node: NodeView) -> Demand:
    """What the job takes on ``node``: its per-node request, or the whole node if exclusive."""
    if job.exclusive:
        return Demand(node.cpus, node.memory_mb, len(node.gpus))
    kind, units = shares.asked(job)
    if units:  # planned on fresh GPUs (scheduler/shares.py)
        return Demand(job.cpus_per_node, job.mem_per_node_mb,
                      shares.whole_gpus(units, shares.per_gpu(node, kind)))
    return Demand(job.cpus_per_node, job.mem_per_node_mb, job.gpus_per_node, job.gpu_type)


def demand_now(job: PendingJob, node: NodeView) -> Demand:
    """What a job started now holds through ``NodeTimeline.hold``: ``demand_on``, but for a
    share job only CPUs and memory (its GPUs are held by ``NodeTimeline.give_shares``)."""
    if not job.shards_per_node and not job.mps_per_node:
        return demand_on(job, node)
    if job.exclusive:
        return Demand(node.cpus, node.memory_mb, 0)
    return Demand(job.cpus_per_node, job.mem_per_node_mb, 0)


def share_pick(job: PendingJob, tl: NodeTimeline, now: float, end: float
               ) -> tuple[dict[int, int], list[int]] | None:
    """Where a share job's shares go on ``tl`` if it starts now and runs until ``end``
    (``shares.pick``), or None. A shared GPU whose hold ends before ``end`` is offered only
    if the plan can hold it on until then, together with the fresh GPUs the job opens."""
    kind, units = shares.asked(job)
    per_gpu, free, one = shares.per_gpu(tl.view, kind), tl.gpus_free, kind == shares.MPS
    shared = tl.shared_free(kind)
    found = shares.pick(units, per_gpu, shared, free, one)
    until = tl.share_until
    if found is not None and any(until[g] < end for g in found[0] if g in until):
        # it outlives shared GPUs it would use, holding each on past its planned end: only
        # worth it where that saves as many fresh GPUs. Otherwise it takes more GPUs after
        # their end than the plan counted for it (``demand_on``'s fresh GPUs), and breaks a
        # reservation made later in the walk (tests/property/test_shares_props.py's example)
        inside = shares.pick(units, per_gpu,
                             {g: f for g, f in shared.items() if until[g] >= end}, free, one)
        if inside is not None and _gpus_taken(tl, inside, end) < _gpus_taken(tl, found, end):
            found = inside
    if found is None or _gpus_held_on(tl, found, now, end):
        return found
    # it would outlive shared GPUs the plan cannot hold on: only those it does not outlive
    found = shares.pick(units, per_gpu,
                        {g: f for g, f in shared.items() if until[g] >= end}, free, one)
    return found if found is None or _gpus_held_on(tl, found, now, end) else None


def _gpus_taken(tl: NodeTimeline, found: tuple[dict[int, int], list[int]], end: float) -> int:
    """The GPUs a share pick holds beyond what is already held: those it opens, and the
    shared ones it holds on past their planned end."""
    shards, opened = found
    until = tl.share_until
    return len(opened) + sum(1 for g in shards if g in until and until[g] < end)


def _gpus_held_on(tl: NodeTimeline, found: tuple[dict[int, int], list[int]], now: float,
                  end: float) -> bool:
    """Whether the plan can hold the GPUs of a share pick for ``[now, end)``: the fresh ones
    from now, and each shared one it outlives from that GPU's planned end. What it needs only
    grows with time, so checking each step's need until ``end`` covers every instant."""
    shards, opened = found
    untils = sorted(tl.share_until[g] for g in shards
                    if g in tl.share_until and tl.share_until[g] < end)
    need = len(opened)
    if need and not tl.fits(Demand(0, 0, need), now, end):
        return False
    for at in untils:
        need += 1
        if not tl.fits(Demand(0, 0, need), max(at, now), end):
            return False
    return True


def _place_shares_now(job: PendingJob, cands: Candidates, now: float, end: float,
                      frag: Scorer | None = None) -> list[NodeTimeline] | None:
    """``place_now`` for a share job: nodes whose shares (and fresh GPUs) hold it now; with
    ``frag``, ordered by the fragmentation measure (``fragment.Scorer.share_key``)."""
    fitting = []
    kind = shares.asked(job)[0]
    keys: dict[int, tuple] = {}
    scored = frag is not None and frag.workload is not None
    for tl in cands.nodes:
        if not shares.per_gpu(tl.view, kind):
            continue
        found = share_pick(job, tl, now, end)
        if found is None:
            continue
        d = demand_now(job, tl.view)
        d = Demand(d.cpus, d.mem, len(found[1]))
        if tl.fits_now(d) and (tl.monotone or tl.fits(d, now, end)):
            fitting.append(tl)
            if scored:
                keys[tl.index] = (*frag.share_key(  # type: ignore[union-attr]
                    tl.gpus[0], tl.shared_free(), shares.per_gpu(tl.view, kind), tl.cpus[0], found,
                    d.cpus, len(tl.view.gpus)), tl.index)
    if len(fitting) < job.num_nodes:
        return None
    return _choose(job, fitting, now, keys.__getitem__ if scored else None)


def _leftover(tl: NodeTimeline, d: Demand, t: float) -> tuple[int, int, int, int]:
    c, m, g = tl.free_at(t)
    return (g - d.gpus, c - d.cpus, m - d.mem, tl.index)


def _required_first(job: PendingJob, chosen: list[NodeTimeline]) -> list[NodeTimeline]:
    """-w nodes are part of the gang whatever their fit rank."""
    if not job.nodelist:
        return chosen
    return sorted(chosen, key=lambda t: (t.view.name not in job.nodelist, t.index))


def place_now(
    job: PendingJob, cands: Candidates, now: float, end: float, free: FreeIndex | None = None,
    frag: Scorer | None = None,
) -> list[NodeTimeline] | None:
    """The gang that can run from now until ``end`` without touching any plan: best fit, or
    with ``frag`` (the cycle's workload) for a GPU job the least fragmenting
    (``fragment.py``). Which nodes fit does not depend on ``frag``, only which are chosen."""
    if job.shards_per_node or job.mps_per_node:
        return _place_shares_now(job, cands, now, end, frag)
    if free is not None and not job.exclusive:
        return _place_now_indexed(job, cands, now, end, free, frag)
    fitting = []
    for tl in cands.nodes:
        d = demand_on(job, tl.view)
        if not tl.fits_now(d) or not typed_free(job, tl):
            continue
        if tl.monotone or tl.fits(d, now, end):
            fitting.append(tl)
    if len(fitting) < job.num_nodes:
        return None
    return _choose(job, fitting, now)


def _place_now_indexed(
    job: PendingJob, cands: Candidates, now: float, end: float, free: FreeIndex,
    frag: Scorer | None = None,
) -> list[NodeTimeline] | None:
    """``place_now`` through the free-now buckets, least free first: the first nodes found
    are the best fit, so a job on a big cluster looks at few nodes. With ``frag``, a GPU job
    walks the buckets in the order of the fragmentation measure instead
    (``fragment.Scorer.key_order``), so the first nodes found are the least fragmenting."""
    d = Demand(job.cpus_per_node, job.mem_per_node_mb, job.gpus_per_node, job.gpu_type)
    need = job.num_nodes
    topo = topology.applies(job, cands.nodes)
    if job.nodelist or topo:
        need = len(cands.nodes)  # gather all: the -w nodes must be among the chosen
    fitting: list[NodeTimeline] = []
    timelines = free.timelines
    every, ids = cands.every, cands.ids
    keys_by_fit = None
    if (frag is not None and free.by_mem is not None and d.gpus and not job.nodelist
            and frag.workload is not None):
        keys = keys_by_fit = frag.key_order(free.sorted_keys(), d.gpus, d.cpus)
    else:
        keys = free.keys_at_least(d.gpus, d.cpus)
    for key in keys:
        for index in (free.buckets[key] if keys_by_fit is None else
                      free.least_memory_first(key, d.mem)):
            if not every and index not in ids:
                continue
            tl = timelines[index]
            if tl.mem[0] < d.mem or not typed_free(job, tl):
                continue
            if tl.monotone or tl.fits(d, now, end):
                fitting.append(tl)
                if len(fitting) >= need:
                    break
        if len(fitting) >= need:
            break
    if len(fitting) < job.num_nodes:
        return None
    if job.nodelist or topo:
        return _choose(job, fitting, now)
    # found in (free GPUs, free CPUs, node) order: already the best fit
    return fitting[:need]


class FreeIndex:
    """Available nodes bucketed by what they have free now, ``(GPUs, CPUs) -> node indices``.

    It answers the quick "can this fit anywhere now" (which keeps a full cluster's cycle linear
    in the queue, not in the nodes) and walks nodes least-free first for best fit.
    ``by_mem`` (the fragmentation-aware placement's walk): each bucket's nodes also by free
    memory, so a bucket is walked least memory first (``least_memory_first``).
    """

    def __init__(self, timelines: Sequence[NodeTimeline], by_mem: bool = False) -> None:
        self.timelines = timelines
        # (GPUs, CPUs) -> free memory -> node indices; and each bucket's memories, sorted
        self.by_mem: dict[tuple[int, int], dict[int, list[int]]] | None = {} if by_mem else None
        self._mems: dict[tuple[int, int], list[int]] = {}
        self.buckets: dict[tuple[int, int], list[int]] = {}
        self.gpu_count: dict[int, int] = {}
        self._keys: list[tuple[int, int]] | None = None
        self._max_cpus = 0
        for tl in timelines:
            if tl.view.available:
                self._add(tl)
        self._max_cpus = max((k[1] for k in self.buckets), default=0)

    def _add(self, tl: NodeTimeline) -> None:
        key = (tl.gpus[0], tl.cpus[0])
        bucket = self.buckets.get(key)
        if bucket is None:
            self.buckets[key] = [tl.index]
            self._keys = None
        else:
            insort(bucket, tl.index)
        self.gpu_count[key[0]] = self.gpu_count.get(key[0], 0) + 1
        if key[1] > self._max_cpus:
            self._max_cpus = key[1]
        if self.by_mem is not None:
            mems = self.by_mem.setdefault(key, {})
            same = mems.get(tl.mem[0])
            if same is None:
                mems[tl.mem[0]] = [tl.index]
                self._mems.pop(key, None)
            else:
                insort(same, tl.index)

    def _remove(self, tl: NodeTimeline) -> None:
        key = (tl.gpus[0], tl.cpus[0])
        bucket = self.buckets[key]
        del bucket[bisect_left(bucket, tl.index)]
        if not bucket:
            del self.buckets[key]
            self._keys = None
            if key[1] == self._max_cpus:
                self._max_cpus = max((k[1] for k in self.buckets), default=0)
        self.gpu_count[key[0]] -= 1
        if not self.gpu_count[key[0]]:
            del self.gpu_count[key[0]]
        if self.by_mem is not None:
            mems = self.by_mem[key]
            same = mems[tl.mem[0]]
            del same[bisect_left(same, tl.index)]
            if not same:
                del mems[tl.mem[0]]
                self._mems.pop(key, None)
                if not mems:
                    del self.by_mem[key]

    def least_memory_first(self, key: tuple[int, int], mem: int) -> Iterator[int]:
        """The nodes of bucket ``key`` with at least ``mem`` free, least free memory first
        (then node order): best fit on memory. Needs ``by_mem``."""
        assert self.by_mem is not None
        mems = self._mems.get(key)
        if mems is None:
            mems = self._mems[key] = sorted(self.by_mem[key])
        by_mem = self.by_mem[key]
        for m in mems[bisect_left(mems, mem):]:
            yield from by_mem[m]

    def before_change(self, tl: NodeTimeline) -> None:
        if tl.view.available:
            self._remove(tl)

    def after_change(self, tl: NodeTimeline) -> None:
        if tl.view.available:
            self._add(tl)

    def sorted_keys(self) -> list[tuple[int, int]]:
        """Every bucket's key, in order; the same list until a bucket opens or empties."""
        if self._keys is None:
            self._keys = sorted(self.buckets)
        return self._keys

    def keys_at_least(self, gpus: int, cpus: int) -> list[tuple[int, int]]:
        return [k for k in self.sorted_keys() if k[0] >= gpus and k[1] >= cpus]

    @property
    def max_cpus(self) -> int:
        """The most CPUs free now on any available node."""
        return self._max_cpus

    def may_fit(self, job: PendingJob) -> bool:
        """False only when no set of ``num_nodes`` available nodes has enough free now."""
        if job.exclusive:
            return True
        if job.cpus_per_node > self._max_cpus:
            return False
        need = job.gpus_per_node
        if need == 0 and job.num_nodes == 1:
            return True
        nodes = 0
        for g, n in self.gpu_count.items():
            if g >= need:
                nodes += n
        return nodes >= job.num_nodes


def _choose(job: PendingJob, fitting: list[NodeTimeline], t: float,
            key: Callable[[int], tuple] | None = None) -> list[NodeTimeline] | None:
    """The gang among ``fitting``: the -w nodes, then the best fit (or the least ``key``, by
    node index) for the rest."""
    if job.nodelist:
        required = [tl for tl in fitting if tl.view.name in job.nodelist]
        if len(required) < len(job.nodelist):
            return None
        rest = [tl for tl in fitting if tl.view.name not in job.nodelist]
    else:
        required, rest = [], fitting
    need = job.num_nodes - len(required)
    if key is not None:
        rank: Callable[[NodeTimeline], tuple] = lambda tl: key(tl.index)  # noqa: E731
    else:
        rank = lambda tl: _leftover(tl, demand_on(job, tl.view), t)  # noqa: E731
    if not _may_use_topology(job, rest):
        # the best ``need`` of a key that is unique (it ends in the node index): what the
        # sort's first ``need`` are, without sorting hundreds of tied earliest nodes
        if need == 1 and rest:
            return [*required, min(rest, key=rank)]
        return required + nsmallest(need, rest, key=rank)
    rest.sort(key=rank)
    if topology.applies(job, rest):  # the network decides among the best fits
        return topology.choose(job, rest, t)
    return required + rest[:need]


def _may_use_topology(job: PendingJob, nodes: Sequence[NodeTimeline]) -> bool:
    """False when ``topology.applies`` is false whatever the order of ``nodes``: a one-node
    job that asks nothing of the network, a ``-w`` job, or nodes without places."""
    if not (job.num_nodes > 1 or job.exclusive_topo or job.segment > 0) or job.nodelist:
        return False
    return any(tl.view.topo is not None for tl in nodes)


def earliest_start(
    job: PendingJob, nodes: Sequence[NodeTimeline], after: float, duration: float,
    horizon: float, memo: EarliestMemo | None = None,
) -> tuple[float, list[NodeTimeline]] | None:
    """The earliest time (no later than ``horizon``) at which the whole gang fits for
    ``duration``, and the nodes it would use then; None if not within the horizon.

    Each node contributes intervals of feasible starts; a sweep over their ends finds the first
    instant covered by ``num_nodes`` of them.
    """
    if memo is not None and len(nodes) < MEMO_MIN_NODES:
        memo = None
    fixed = None if job.exclusive or job.shards_per_node or job.mps_per_node else Demand(
        job.cpus_per_node, job.mem_per_node_mb, job.gpus_per_node, job.gpu_type)
    if job.num_nodes == 1 and not job.nodelist:
        if memo is not None and fixed is not None and not job.exclusive_topo \
                and not job.segment:
            return memo.earliest_one(nodes, fixed, duration, after, horizon)
        return _earliest_one(job, nodes, after, duration, horizon, fixed)
    events: list[tuple[float, int, int]]  # (time, 0 open / 1 close after, node index)
    rank = None  # _choose's best-fit key, through the memo where it has one
    if memo is not None and fixed is not None and not job.nodelist:
        events, bounded, by_index = memo.events(nodes, fixed, duration, after)
        rank = memo.ranker(by_index, fixed)
    else:
        events, by_index = [], {}
        bounded = False  # any interval with an end: then only the full sweep will do
        for tl in nodes:
            by_index[tl.index] = tl
            bounded = _add_events(events, tl, fixed or demand_on(job, tl.view), duration,
                                  after) or bounded
    if not bounded and not job.nodelist and len(events) >= job.num_nodes:
        # every interval runs to infinity: the gang starts at the num_nodes-th opening
        t = nsmallest(job.num_nodes, events)[-1][0]
        if t > horizon:
            return None
        opened = [by_index[e[2]] for e in events if e[0] <= t]
        chosen = _choose(job, opened, t, None if rank is None else partial(rank, t))
        if chosen is not None or not topology.applies(job, opened):
            return (t, chosen) if chosen is not None else None
        # the network's rule wants other nodes, or a later instant: the full sweep finds it
    if not events:
        return None
    events.sort()
    open_nodes: set[int] = set()
    need = job.num_nodes
    i = 0
    n = len(events)
    while i < n:
        t = events[i][0]
        if t > horizon:
            return None
        # opens at t count for t; closes at t (closed interval) still count for t
        j = i
        while j < n and events[j][0] == t and events[j][1] == 0:
            open_nodes.add(events[j][2])
            j += 1
        if len(open_nodes) >= need:
            chosen = _choose(job, [by_index[k] for k in sorted(open_nodes)], t,
                             None if rank is None else partial(rank, t))
            if chosen is not None:
                return t, chosen
        while j < n and events[j][0] == t:
            open_nodes.discard(events[j][2])
            j += 1
        i = j
    return None


def _add_events(events: list[tuple[float, int, int]], tl: NodeTimeline, d: Demand,
                duration: float, after: float) -> bool:
    """``tl``'s opens and closes of feasible starts no sooner than ``after`` onto ``events``;
    whether any interval has an end."""
    bounded = False
    for lo, hi in tl.start_intervals(d, duration):
        if hi < after:
            continue
        events.append((lo if lo > after else after, 0, tl.index))
        if hi != INFINITY:
            events.append((hi, 1, tl.index))
            bounded = True
    return bounded


def _earliest_one(job: PendingJob, nodes: Sequence[NodeTimeline], after: float,
                  duration: float, horizon: float,
                  fixed: Demand | None) -> tuple[float, list[NodeTimeline]] | None:
    """``earliest_start`` for a one-node job without ``-w``: the sweep's answer without the
    sweep. Its first instant with a node open is the least of each node's earliest start, and
    the nodes open then are those whose earliest start it is (in node order, as the sweep
    gives them to ``_choose``)."""
    best = INFINITY
    at: list[NodeTimeline] = []
    for tl in nodes:
        t = tl.first_start(fixed or demand_on(job, tl.view), duration, after)
        if t is None or t > best:
            continue
        if t < best:
            best, at = t, [tl]
        else:
            at.append(tl)
    if not at or best > horizon:
        return None
    at.sort(key=_INDEX)
    return best, _choose(job, at, best)


_INDEX = attrgetter("index")
_VERSION = attrgetter("version")


# candidate lists shorter than this are asked node by node: on a few nodes the memo's
# bookkeeping (stamps read, keys built) costs more than the questions it saves
MEMO_MIN_NODES = 16


class _OneEntry:
    """What ``EarliestMemo`` keeps of one question: per node (in ``nodes`` order) its stamp
    when asked, its earliest start (INFINITY: none), and the best-fit key at ``best``."""

    __slots__ = ("nodes", "versions", "starts", "best", "keys")

    def __init__(self, nodes: Sequence[NodeTimeline]) -> None:
        self.nodes = nodes
        self.versions: list[int] = []
        self.starts: list[float] = []
        self.best = INFINITY
        self.keys: dict[int, tuple[int, int, int, int]] = {}  # position -> _leftover at best


class _GangEntry:
    """What ``EarliestMemo`` keeps of a gang's question: per node (in ``nodes`` order) its
    stamp when asked, its sweep events and whether one is a close."""

    __slots__ = ("nodes", "versions", "events", "closes", "bounded", "by_index")

    def __init__(self, nodes: Sequence[NodeTimeline]) -> None:
        self.nodes = nodes
        self.versions: list[int] = []
        self.events: list[list[tuple[float, int, int]]] = [[] for _ in nodes]
        self.closes: list[bool] = [False] * len(nodes)
        self.bounded = 0  # nodes with a close among their events
        self.by_index = {tl.index: tl for tl in nodes}


class EarliestMemo:
    """``earliest_start`` of one-node jobs of a fixed demand, across one walk's reservations.

    A walk plans up to ``bf_max_reservations`` jobs, each asking every candidate node for its
    earliest start (``NodeTimeline.first_start``); most ask one of a few shapes (demand and
    length), and between two questions only the few nodes the last reservation (or start)
    took from change. So the answers per node are kept per question (candidate list, demand,
    length, after) with each node's ``version`` stamp when answered, and a repeated question
    asks again only the nodes whose stamp moved. The answer is ``_earliest_one``'s: the least
    start, and among the nodes that have it the best fit (``_choose``'s ``_leftover``, which
    for one node and one demand is the least key, node index last)."""

    __slots__ = ("_entries", "_gangs", "_ranks")

    def __init__(self) -> None:
        self._entries: dict[tuple, _OneEntry] = {}
        self._gangs: dict[tuple, _GangEntry] = {}
        # (node index, demand) -> (stamp, instant, _leftover there): a gang's best-fit keys
        self._ranks: dict[tuple[int, Demand], tuple[int, float, tuple]] = {}

    def ranker(self, by_index: dict[int, NodeTimeline], d: Demand,
               ) -> Callable[[float, int], tuple]:
        """``_choose``'s key for a gang of demand ``d`` at an instant, by node index: the
        ``_leftover`` it computes, kept while the node's stamp and the instant stay."""
        ranks = self._ranks

        def rank(t: float, index: int) -> tuple:
            tl = by_index[index]
            known = ranks.get((index, d))
            if known is not None and known[0] == tl.version and known[1] == t:
                return known[2]
            k = _leftover(tl, d, t)
            ranks[index, d] = (tl.version, t, k)
            return k
        return rank

    def events(self, nodes: Sequence[NodeTimeline], d: Demand, duration: float, after: float,
               ) -> tuple[list[tuple[float, int, int]], bool, dict[int, NodeTimeline]]:
        """``earliest_start``'s sweep events for a gang of demand ``d`` on each of ``nodes``
        (the same multiset as asking every node; only the changed nodes are asked again),
        whether any is a close, and the nodes by index. The list is the memo's: the caller
        is the caller's."""
        key = (id(nodes), d, duration, after)
        entry = self._gangs.get(key)
        versions = list(map(_VERSION, nodes))
        if entry is None or entry.nodes is not nodes:
            entry = self._gangs[key] = _GangEntry(nodes)
            changed: Iterable[int] = range(len(nodes))
        else:
            changed = _changed(entry.versions, versions)
        entry.versions = versions
        per_node, closes = entry.events, entry.closes
        for i in changed:
            mine: list[tuple[float, int, int]] = []
            bounded = _add_events(mine, nodes[i], d, duration, after)
            per_node[i] = mine
            entry.bounded += bounded - closes[i]
            closes[i] = bounded
        events = list(chain.from_iterable(per_node))
        return events, entry.bounded > 0, entry.by_index

    def earliest_one(self, nodes: Sequence[NodeTimeline], d: Demand, duration: float,
                     after: float, horizon: float) -> tuple[float, list[NodeTimeline]] | None:
        key = (id(nodes), d, duration, after)
        entry = self._entries.get(key)
        versions = list(map(_VERSION, nodes))
        if entry is None or entry.nodes is not nodes:
            entry = self._entries[key] = _OneEntry(nodes)
            changed: Iterable[int] = range(len(nodes))
            entry.starts = [INFINITY] * len(nodes)
        else:
            changed = _changed(entry.versions, versions)
        entry.versions = versions
        starts, keys = entry.starts, entry.keys
        for i in changed:
            t = nodes[i].first_start(d, duration, after)
            starts[i] = INFINITY if t is None else t
            keys.pop(i, None)
        best = min(starts, default=INFINITY)
        if best == INFINITY or best > horizon:
            return None
        if best != entry.best:
            entry.best = best
            keys.clear()
        choice, at = None, -1
        for i in compress(count(), map(eq, starts, repeat(best))):
            k = keys.get(i)
            if k is None:
                k = keys[i] = _leftover(nodes[i], d, best)
            if choice is None or k < choice:
                choice, at = k, i
        return best, [nodes[at]]


def gpu_vectors(job: PendingJob, chosen: Sequence[NodeTimeline], now: float, end: float,
                ) -> dict[int, dict[str, int]]:
    """Node index -> the GPUs of each type a job started now takes there, on the nodes of
    several GPU types where it asks for GPUs but no type (``NodeTimeline.gpu_vector``: what
    the plan leaves of each type for its whole run). Asked before ``hold``, which takes the
    same; ``allocate`` then picks GPUs of those types."""
    if job.gpu_type or job.exclusive or not job.gpus_per_node:
        return {}
    return {tl.index: tl.gpu_vector(demand_on(job, tl.view), now, end)
            for tl in chosen if tl.typed is not None}


def allocate(job: PendingJob, chosen: Sequence[NodeTimeline], now: float = 0.0,
             end: float = INFINITY, by_type: dict[int, dict[str, int]] | None = None,
             ) -> list[NodeAllocation]:
    """The per-node allocation of a job starting now on ``chosen``: GPU indices picked here
    (of the types ``by_type`` names, from ``gpu_vectors``), then CPU ids (near those GPUs when
    the node reports the affinity). A share job's shares are picked and held here, until
    ``end``."""
    out = []
    kind = shares.asked(job)[0]
    if kind:
        for tl in _required_first(job, list(chosen)):
            found = share_pick(job, tl, now, end)
            if found is None:  # place_now found it fits: never so
                raise ValueError(f"job {job.job_id}: shares no longer fit on {tl.view.name}")
            shards, opened = found
            tl.give_shares(shards, opened, now, end, kind)
            d = demand_now(job, tl.view)
            out.append(NodeAllocation(tl.view.name, d.cpus, d.mem, [],
                                      tl.pick_cpus(d.cpus, sorted(shards)), shards,
                                      shares.per_gpu(tl.view, kind), kind))
        return out
    for tl in _required_first(job, list(chosen)):
        d = demand_on(job, tl.view)
        gpus = tl.pick_gpus(d.gpus, "" if job.exclusive else job.gpu_type,
                            by_type.get(tl.index) if by_type else None)
        out.append(NodeAllocation(tl.view.name, d.cpus, d.mem, gpus, tl.pick_cpus(d.cpus, gpus)))
    return out


def _changed(before: list[int], now: list[int]) -> Sequence[int]:
    """The indices of the nodes whose timeline version moved since a memo's answer."""
    if before == now:
        return ()
    return list(compress(count(), map(ne, before, now)))
