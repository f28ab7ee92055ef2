"""The availability profile: what each node has free now and at every future instant the plan
knows of.

Each node keeps a step function over time: breakpoints ``times`` (``times[0]`` is now) and, per
segment ``[times[k], times[k+1])``, the free CPUs, memory and GPU count. Running jobs give the
node back at their end (start + limit, or a prediction when asked for); reservations and the
jobs this cycle starts take from it. Only counts are planned for the future: which GPU indices a
reserved job gets is decided when it really starts, so the plan needs no more than counts.
A node of several GPU types (a mixed MIG layout, ``NodeView.gpu_kinds``) keeps those counts per
type too (``NodeTimeline.typed``): a job asking for a type is planned on GPUs of that type, one
that asks for none on a mix it can hold for its whole run (``NodeTimeline.gpu_vector``), and
the GPUs it gets when it starts are of the types it was planned on.

A node that has only releases ahead is *monotone* (free never shrinks): for it "fits now" means
"fits for as long as you like" and the earliest fit is a single bisection, which is what keeps a
cycle over a thousand nodes cheap. Only nodes that carry a future reservation pay for a scan.

Times are rounded up to ``bf_resolution`` (an absolute grid, so consecutive cycles agree) to
bound the number of breakpoints; rounding up is conservative: a plan never promises a resource
earlier than it is surely free.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import chain, count, filterfalse, islice
from operator import attrgetter
from typing import NamedTuple

from schedd.scheduler import shares
from schedd.scheduler.snapshot import NodeView, RunningJob

INFINITY = math.inf
# stamps for ``NodeTimeline.version``: unique across all timelines, so a stamp names one
# state of one node (a memo that kept it knows the node unchanged while it reads the same)
_STAMPS = count(1)
_GPU_INDEX = attrgetter("index")
# a node's step function: breakpoints, free CPUs, memory and GPUs per segment, monotone, and
# on a node of several GPU types the free GPUs of each type per segment (None otherwise)
Steps = tuple[list[float], list[int], list[int], list[int], bool, dict[str, list[int]] | None]


class Demand(NamedTuple):
    """What a job needs on each of its nodes. A named tuple, not a frozen dataclass: the walk
    makes one or more per job it places or plans, every cycle, and a tuple is made in C (a
    frozen dataclass sets each field through ``object.__setattr__``)."""

    cpus: int
    mem: int
    gpus: int
    # the GPU type asked for (``PendingJob.gpu_type``): only a node of several types
    # (``NodeTimeline.typed``) reads it; "" takes GPUs of any type
    kind: str = ""


def round_up(t: float, resolution: int) -> float:
    """``t`` rounded up to the ``resolution`` grid (no rounding for a resolution of 0 or 1)."""
    if resolution <= 1 or t == INFINITY:
        return t
    return math.ceil(t / resolution) * resolution


class NodeTimeline:
    """One node's free resources over time, plus which GPU indices are free now."""

    __slots__ = (
        "index", "view", "times", "cpus", "mem", "gpus", "monotone", "gpus_free", "islands",
        "cpus_held", "_memo", "_first", "shares", "share_until", "share_kind", "version",
        "typed",
    )

    def __init__(self, index: int, view: NodeView, now: float) -> None:
        self.index = index
        self.view = view
        self.times: list[float] = [now]
        self.cpus: list[int] = [view.cpus]
        self.mem: list[int] = [view.memory_mb]
        self.gpus: list[int] = [len(view.gpus)]
        self.monotone = True
        self.gpus_free: list[int] = sorted(map(_GPU_INDEX, view.gpus))
        # GPU index -> NVLink island, made when a job first picks GPUs here (most nodes of a
        # cycle start nothing, and a profile is built every cycle)
        self.islands: dict[int, int] | None = None
        self.cpus_held: set[int] = set()  # CPU ids held now (by running or just placed jobs)
        # start_intervals answers until the next change: reservations of one shape ask often
        self._memo: dict[tuple, list[tuple[float, float]]] = {}
        self._first: dict[tuple, float | None] = {}  # first_start's answers, likewise
        # GPU shares (scheduler/shares.py): GPU index -> shares in use now, and until when the
        # plan holds that GPU whole for them (the latest end of its share-holders)
        self.shares: dict[int, int] = {}
        self.share_until: dict[int, float] = {}
        self.share_kind: dict[int, str] = {}  # and which kind of share (shares.KINDS) each is
        # a fresh stamp at every change of the step function (placement.EarliestMemo)
        self.version = next(_STAMPS)
        # a node of several GPU types: type -> free GPUs of that type per segment (the sum
        # over types is ``gpus``); None on a node of one type
        self.typed: dict[str, list[int]] | None = None
        if view.gpu_kinds:
            typed: dict[str, list[int]] = {}
            for g in view.gpus:
                kind = view.gpu_kinds.get(g.index, "")
                typed.setdefault(kind, [0])[0] += 1
            self.typed = typed

    # --- building -------------------------------------------------------------------------

    def set_releases(self, releases: list[tuple[float, int, int, int]],
                     typed: Sequence[tuple[float, str]] = ()) -> None:
        """Turn (time, cpus, mem, gpus) releases of the running jobs into the step function;
        ``typed``: on a node of several GPU types, (time, type) for each GPU released.

        Called once, after the running jobs' holdings were taken from the first segment.
        """
        self.version = next(_STAMPS)
        releases.sort()
        c, m, g = self.cpus[0], self.mem[0], self.gpus[0]
        times, cpus, mem, gpus = self.times, self.cpus, self.mem, self.gpus
        for t, dc, dm, dg in releases:
            c, m, g = c + dc, m + dm, g + dg
            if t <= times[-1]:
                cpus[-1], mem[-1], gpus[-1] = c, m, g
            else:
                times.append(t)
                cpus.append(c)
                mem.append(m)
                gpus.append(g)
        if self.typed is not None:
            n = len(times)
            for kind in self.typed:
                self.typed[kind] *= n
            for t, kind in typed:
                steps = self.typed[kind]
                for k in range(max(bisect_right(times, t) - 1, 0), n):
                    steps[k] += 1

    def take_now(self, cpus: int, mem: int, gpu_indices: Iterable[int],
                 cpu_ids: Iterable[int] = ()) -> int:
        """A running job's holding: removed from the first segment (its release is added later).

        Returns how many of its GPU indices this node really has (the count to give back)."""
        self.version = next(_STAMPS)
        self.cpus_held.update(cpu_ids)
        taken = 0
        if gpu_indices:  # set operations in C: a profile is built from every running job
            left = set(self.gpus_free).difference(gpu_indices)
            taken = len(self.gpus_free) - len(left)
            if taken:
                if self.typed is not None:
                    kinds = self.view.gpu_kinds
                    for g in set(self.gpus_free).difference(left):
                        self.typed[kinds.get(g, "")][0] -= 1
                self.gpus_free = sorted(left)
        self.cpus[0] -= cpus
        self.mem[0] -= mem
        self.gpus[0] -= taken
        return taken

    def take_shares_now(self, shards: dict[int, int], end: float,
                        kind: str = shares.SHARD) -> int:
        """A running job's GPU shares: each GPU newly in use by shares leaves the free GPUs
        now. Returns how many GPUs that took (``build`` plans them back at their last end)."""
        self.version = next(_STAMPS)
        taken = 0
        for g, n in shards.items():
            if g not in self.shares:
                if g not in self.gpus_free:
                    continue  # not this node's, or held whole (a stale record): no shares
                self.gpus_free.remove(g)
                self.shares[g] = 0
                self.share_kind[g] = kind
                taken += 1
                if self.typed is not None:
                    self.typed[self.view.gpu_kinds.get(g, "")][0] -= 1
            elif self.share_kind[g] != kind:
                continue  # shared the other way (a stale record): a GPU has one kind
            self.shares[g] += n
            if end > self.share_until.get(g, -INFINITY):
                self.share_until[g] = end
        self.gpus[0] -= taken
        return taken

    def shared_free(self, kind: str = shares.SHARD) -> dict[int, int]:
        """GPU index -> shares still free now, of the GPUs in use by shares of ``kind``."""
        per_gpu = shares.per_gpu(self.view, kind)
        return {g: per_gpu - n for g, n in self.shares.items()
                if n < per_gpu and self.share_kind[g] == kind}

    def give_shares(self, shards: dict[int, int], opened: list[int], now: float,
                    end: float, kind: str = shares.SHARD) -> None:
        """Shares of a job started now: GPUs it opens are held whole ``[now, end)``; a shared
        GPU it outlives is held on until ``end``."""
        self.version = next(_STAMPS)
        for g in opened:
            self.gpus_free.remove(g)
            self.shares[g] = 0
            self.share_kind[g] = kind
        for g, n in shards.items():
            self.shares[g] += n
            until = self.share_until.get(g)
            one = Demand(0, 0, 1, self.view.gpu_kinds.get(g, ""))  # this GPU's type
            if until is None:
                self.hold(one, now, end)
                self.share_until[g] = end
            elif until < end:
                self.hold(one, until, end)
                self.share_until[g] = end

    # --- questions --------------------------------------------------------------------------

    def fits_now(self, d: Demand) -> bool:
        return self.cpus[0] >= d.cpus and self.mem[0] >= d.mem and self.gpus[0] >= d.gpus and (
            self.typed is None or not d.gpus or self._typed_room(d, 0, 1) >= d.gpus)

    # --- a node of several GPU types (``typed``) -------------------------------------------

    def _kinds_of(self, d: Demand) -> Iterable[str]:
        """The types ``d`` may take: its own, or any ("" or a type the node lacks: any)."""
        assert self.typed is not None
        return (d.kind,) if d.kind in self.typed else self.typed

    def _typed_room(self, d: Demand, a: int, b: int) -> int:
        """How many GPUs ``d`` can hold through segments ``a`` to ``b - 1`` of a typed node:
        of its type, the fewest free then; of any type, the sum of each type's fewest (a GPU is
        held whole for the whole run, so it must stay of one type)."""
        typed = self.typed
        assert typed is not None
        return sum(min(typed[kind][a:b]) for kind in self._kinds_of(d))

    def gpu_vector(self, d: Demand, start: float, end: float) -> dict[str, int]:
        """The GPUs of each type that ``d`` takes on a typed node during ``[start, end)``: its
        type's; or, asking for none, those of the types with the most free throughout first
        (then by name). The same answer for the same state: ``hold`` takes these, and a job
        started now is given GPUs of these types (``pick_gpus``'s ``by_type``)."""
        assert self.typed is not None
        a = max(self._seg(start), 0)
        b = max(bisect_left(self.times, end), a + 1)  # segments a..b-1 meet [start, end)
        room = sorted((-min(self.typed[kind][a:b]), kind) for kind in self._kinds_of(d))
        out: dict[str, int] = {}
        need = d.gpus
        for free, kind in room:
            n = min(need, -free)
            if n > 0:
                out[kind] = n
                need -= n
        if need > 0:  # more than it can hold (a caller that did not ask ``fits``): as asked
            kind = d.kind if d.kind in self.typed else room[0][1]
            out[kind] = out.get(kind, 0) + need
        return out

    def _typed_intervals(self, d: Demand, duration: float) -> list[tuple[float, float]]:
        """``start_intervals`` on a typed node. A start inside segment ``k`` fits while every
        segment it reaches has the CPUs and memory and the GPUs hold through all of them
        (``_typed_room``): fewer the later it starts in ``k``, so the starts in ``k`` that fit
        run from ``times[k]`` to the last end it can reach, less ``duration``."""
        times, cpus, mem, gpus = self.times, self.cpus, self.mem, self.gpus
        n = len(times)
        out: list[tuple[float, float]] = []
        kinds = [self.typed[kind] for kind in self._kinds_of(d)]  # type: ignore[index]
        for k in range(n):
            j = k  # segments k..j-1 fit together
            least = [steps[k] for steps in kinds]  # each type's fewest free over k..j
            while j < n and cpus[j] >= d.cpus and mem[j] >= d.mem and gpus[j] >= d.gpus:
                if d.gpus:
                    least = [min(m, steps[j]) for m, steps in zip(least, kinds, strict=True)]
                    if sum(least) < d.gpus:
                        break
                j += 1
            if j == k:
                continue
            reach = times[j] if j < n else INFINITY
            hi = min(reach - duration, times[k + 1] if k + 1 < n else INFINITY)
            if hi < times[k]:
                continue
            if out and out[-1][1] >= times[k]:
                out[-1] = (out[-1][0], max(out[-1][1], hi))
            else:
                out.append((times[k], hi))
        return out

    def _seg(self, t: float) -> int:
        """Index of the segment that contains instant ``t``."""
        return bisect_right(self.times, t) - 1

    def fits(self, d: Demand, start: float, end: float) -> bool:
        """Whether ``d`` is free during the whole of ``[start, end)``."""
        k = max(self._seg(start), 0)
        if self.monotone:
            return self.cpus[k] >= d.cpus and self.mem[k] >= d.mem and self.gpus[k] >= d.gpus \
                and (self.typed is None or not d.gpus or self._typed_room(d, k, k + 1) >= d.gpus)
        times, cpus, mem, gpus = self.times, self.cpus, self.mem, self.gpus
        n = len(times)
        a = k
        while k < n and times[k] < end:
            if cpus[k] < d.cpus or mem[k] < d.mem or gpus[k] < d.gpus:
                return False
            k += 1
        return self.typed is None or not d.gpus or self._typed_room(d, a, max(k, a + 1)) >= d.gpus

    def free_at(self, t: float) -> tuple[int, int, int]:
        k = max(self._seg(t), 0)
        return self.cpus[k], self.mem[k], self.gpus[k]

    def start_intervals(self, d: Demand, duration: float) -> list[tuple[float, float]]:
        """Closed intervals ``[lo, hi]`` of start times at which ``d`` fits for ``duration``.

        A maximal run of fitting segments ``[A, B)`` admits every start in ``[A, B - duration]``.
        """
        if self.typed is not None:
            key = (d, duration)
            found = self._memo.get(key)
            if found is None:
                found = self._memo[key] = self._typed_intervals(d, duration)
            return found
        key = (d.cpus, d.mem, d.gpus) if self.monotone else (d.cpus, d.mem, d.gpus, duration)
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._start_intervals(d, duration)
        return found

    def _start_intervals(self, d: Demand, duration: float) -> list[tuple[float, float]]:
        times, cpus, mem, gpus = self.times, self.cpus, self.mem, self.gpus
        n = len(times)
        if self.monotone:
            for k in range(n):
                if cpus[k] >= d.cpus and mem[k] >= d.mem and gpus[k] >= d.gpus:
                    return [(times[k], INFINITY)]
            return []
        out: list[tuple[float, float]] = []
        k = 0
        while k < n:
            if cpus[k] >= d.cpus and mem[k] >= d.mem and gpus[k] >= d.gpus:
                a = times[k]
                while k < n and cpus[k] >= d.cpus and mem[k] >= d.mem and gpus[k] >= d.gpus:
                    k += 1
                b = times[k] if k < n else INFINITY
                if b - a >= duration:
                    out.append((a, b - duration))
            else:
                k += 1
        return out

    def first_start(self, d: Demand, duration: float, after: float) -> float | None:
        """The earliest start no sooner than ``after`` at which ``d`` fits for ``duration``:
        the first of ``start_intervals`` that reaches ``after``, clipped to it.

        A one-node job needs no more than this, and the scan stops at the first fitting run of
        segments instead of listing every interval of a long plan (conservative backfill on a
        pool re-plans hundreds of jobs a cycle, each over a profile as long as the plan).
        """
        if self.typed is not None:
            for lo, hi in self.start_intervals(d, duration):
                if hi >= after:
                    return lo if lo > after else after
            return None
        key = (d.cpus, d.mem, d.gpus) if self.monotone else (d.cpus, d.mem, d.gpus, duration)
        known = self._memo.get(key)
        if known is not None:
            for lo, hi in known:
                if hi >= after:
                    return lo if lo > after else after
            return None
        asked = (key, after)
        if asked in self._first:
            return self._first[asked]
        found = self._first[asked] = self._first_start(d, duration, after)
        return found

    def _first_start(self, d: Demand, duration: float, after: float) -> float | None:
        times, cpus, mem, gpus = self.times, self.cpus, self.mem, self.gpus
        n = len(times)
        k = max(self._seg(after), 0)
        while k < n:
            if cpus[k] >= d.cpus and mem[k] >= d.mem and gpus[k] >= d.gpus:
                a = times[k]
                if self.monotone:
                    return a if a > after else after
                while k < n and cpus[k] >= d.cpus and mem[k] >= d.mem and gpus[k] >= d.gpus:
                    k += 1
                b = times[k] if k < n else INFINITY
                if b - a >= duration and b - duration >= after:
                    return a if a > after else after
            else:
                k += 1
        return None

    def earliest(self, d: Demand, duration: float) -> float | None:
        """The earliest start at which ``d`` fits for ``duration``, or None if never."""
        for lo, _hi in self.start_intervals(d, duration):
            return lo
        return None

    # --- changes ----------------------------------------------------------------------------

    def _split(self, t: float) -> int:
        """Make ``t`` a breakpoint; return its segment index."""
        k = self._seg(t)
        if k >= 0 and self.times[k] == t:
            return k
        k += 1
        self.times.insert(k, t)
        self.cpus.insert(k, self.cpus[k - 1])
        self.mem.insert(k, self.mem[k - 1])
        self.gpus.insert(k, self.gpus[k - 1])
        if self.typed is not None:
            for steps in self.typed.values():
                steps.insert(k, steps[k - 1])
        return k

    def hold(self, d: Demand, start: float, end: float) -> None:
        """Take ``d`` during ``[start, end)``: a job started now or a reservation."""
        self.version = next(_STAMPS)
        self._memo.clear()
        self._first.clear()
        if start > self.times[0]:
            self.monotone = False
        else:
            start = self.times[0]
        vector = self.gpu_vector(d, start, end) if self.typed is not None and d.gpus else None
        a = self._split(start)
        b = self._split(end) if end != INFINITY else len(self.times)
        for k in range(a, b):
            self.cpus[k] -= d.cpus
            self.mem[k] -= d.mem
            self.gpus[k] -= d.gpus
        if vector:
            for kind, n in vector.items():
                steps = self.typed[kind]  # type: ignore[index]
                for k in range(a, b):
                    steps[k] -= n

    def agrees(self, future: Steps) -> bool:
        """Whether ``future`` (the last cycle's final step function of this node) has free
        now what this node has: then ``adopt`` may take it."""
        times, cpus, mem, gpus, _monotone, typed = future
        k = bisect_right(times, self.times[0]) - 1
        if k < 0 or (cpus[k], mem[k], gpus[k]) != (self.cpus[0], self.mem[0], self.gpus[0]):
            return False
        if self.typed is None or typed is None:
            return self.typed is None and typed is None
        return typed.keys() == self.typed.keys() and all(
            typed[kind][k] == steps[0] for kind, steps in self.typed.items())

    def adopt(self, future: Steps) -> None:
        """Take ``future`` from now on as this node's step function (``agrees`` first). Its
        ``monotone`` is kept: a node that carried a future reservation stays non-monotone,
        which every question answers alike, only slower. The lists are copied."""
        self.version = next(_STAMPS)
        times, cpus, mem, gpus, monotone, typed = future
        now = self.times[0]
        k = bisect_right(times, now) - 1
        self.times = [now, *times[k + 1:]]
        self.cpus = cpus[k:]
        self.mem = mem[k:]
        self.gpus = gpus[k:]
        self.monotone = monotone
        if typed is not None:
            self.typed = {kind: steps[k:] for kind, steps in typed.items()}
        self._memo.clear()
        self._first.clear()

    def steps(self) -> Steps:
        """The step function as it stands (for ``adopt`` in the next cycle; not copied)."""
        return self.times, self.cpus, self.mem, self.gpus, self.monotone, self.typed

    def pick_gpus(self, count: int, gpu_type: str = "",
                  by_type: dict[str, int] | None = None) -> list[int]:
        """Choose ``count`` free GPU indices now, keeping NVLink islands whole; on a node of
        several GPU types (``NodeView.gpu_kinds``) only GPUs of ``gpu_type`` when given, or
        ``by_type``'s count of each type (the types the plan held for it: ``gpu_vector``).

        Best fit by island: the island with the fewest free GPUs that still holds the whole
        request; a request no island holds takes the emptiest islands whole, then the remainder
        from the best-fitting island, so what stays free is in as few, as large pieces as can be.
        """
        if count <= 0:
            return []
        if by_type:
            return sorted(chain.from_iterable(
                self.pick_gpus(n, kind) for kind, n in sorted(by_type.items())))
        if self.islands is None:
            self.islands = {g.index: g.island for g in self.view.gpus}
        by_island: dict[int, list[int]] = {}
        kinds = self.view.gpu_kinds
        for i in self.gpus_free:
            if gpu_type and kinds and kinds.get(i) != gpu_type:
                continue
            by_island.setdefault(self.islands.get(i, 0), []).append(i)
        chosen: list[int] = []
        need = count
        while need > 0:
            fitting = [(len(v), isl) for isl, v in by_island.items() if len(v) >= need]
            if fitting:
                _n, isl = min(fitting)
                chosen.extend(by_island[isl][:need])
                break
            _n, isl = max((len(v), -isl) for isl, v in by_island.items())
            part = by_island.pop(-isl)
            chosen.extend(part)
            need -= len(part)
        chosen.sort()
        taken = set(chosen)
        self.gpus_free = [i for i in self.gpus_free if i not in taken]
        return chosen


    def pick_cpus(self, count: int, near_gpus: Iterable[int] = ()) -> list[int]:
        """Choose ``count`` CPU ids not held now: first those near ``near_gpus`` (the GPUs'
        NVML affinity, where the node reports it), then the lowest free ids.

        The count accounting already guarantees ``count`` CPUs are free; a running job placed
        before ids were chosen holds a count but no ids, so free ids are never fewer than that.
        Should they be (a node re-registered with fewer CPUs), the ids run short rather than
        being shared."""
        if count <= 0:
            return []
        held = self.cpus_held
        near: set[int] = set()
        if near_gpus:
            wanted = set(near_gpus)
            for g in self.view.gpus:
                if g.index in wanted:
                    near.update(g.cpus)
        if not near:  # the lowest free ids: a scan in C that stops once it has them
            chosen = list(islice(filterfalse(held.__contains__, range(self.view.cpus)), count))
            held.update(chosen)
            return chosen
        free = [c for c in range(self.view.cpus) if c not in held]
        free.sort(key=lambda c: (c not in near, c))
        chosen = sorted(free[:count])
        held.update(chosen)
        return chosen


def planning_end(run: RunningJob, use_prediction: bool) -> float:
    """When a running job's resources come back in the plan: its limit, or a prediction.

    Enforcement always uses the limit; a prediction only makes the plan less pessimistic.
    """
    if use_prediction and run.predicted_end is not None:
        return min(run.predicted_end, run.end_time)
    return run.end_time


def build(
    now: float,
    nodes: Sequence[NodeView],
    running: Sequence[RunningJob],
    resolution: int,
    use_prediction: bool = False,
) -> list[NodeTimeline]:
    """The profile of every node from the running jobs' holdings and planned ends."""
    timelines = [NodeTimeline(i, n, now) for i, n in enumerate(nodes)]
    by_name = {t.view.name: t for t in timelines}
    releases: dict[int, list[tuple[float, int, int, int]]] = {}
    # a job past its planned end still holds its resources now (KillWait, a late report):
    # plan them back a moment later, never now
    soonest = round_up(now + 1, resolution)
    shared: set[int] = set()
    typed: dict[int, list[tuple[float, str]]] = {}  # a typed node's GPU releases by type
    for run in running:  # every running job, every cycle: nothing here that can be hoisted
        end = run.end_time if not use_prediction else planning_end(run, use_prediction)
        if resolution > 1:
            end = round_up(end, resolution)
        if end < soonest:
            end = soonest
        for a in run.allocation:
            tl = by_name.get(a.node)
            if tl is None:
                continue
            if tl.typed is not None and a.gpus:
                kinds, free = tl.view.gpu_kinds, set(tl.gpus_free)
                typed.setdefault(tl.index, []).extend(
                    (end, kinds.get(g, "")) for g in set(a.gpus) if g in free)
            taken = tl.take_now(a.cpus, a.memory_mb, a.gpus, a.cpu_ids)
            releases.setdefault(tl.index, []).append((end, a.cpus, a.memory_mb, taken))
            if a.shards:
                tl.take_shares_now(a.shards, end, a.share_kind)
                shared.add(tl.index)
    for index in shared:  # a GPU shares hold comes back with the last of them
        tl = timelines[index]
        releases[index].extend((until, 0, 0, 1) for until in tl.share_until.values())
        if tl.typed is not None:
            typed.setdefault(index, []).extend(
                (until, tl.view.gpu_kinds.get(g, "")) for g, until in tl.share_until.items())
    for index, rel in releases.items():
        timelines[index].set_releases(rel, typed.get(index, ()))
    return timelines


class RuntimeHistory:
    """Runtime prediction (opt-in): the mean of a user's last two actual run times of one job
    shape, capped by the limit. Pure: the owner records finished runs and asks for predictions.
    """

    def __init__(self, keep: int = 2) -> None:
        self.keep = keep
        self._runs: dict[tuple[str, tuple], list[float]] = {}

    @staticmethod
    def shape(num_nodes: int, cpus_per_node: int, gpus_per_node: int, time_limit: int) -> tuple:
        return (num_nodes, cpus_per_node, gpus_per_node, time_limit)

    def record(self, user: str, shape: tuple, runtime: float) -> None:
        runs = self._runs.setdefault((user, shape), [])
        runs.append(max(runtime, 0.0))
        del runs[: -self.keep]

    def predict(self, user: str, shape: tuple, limit: int) -> int | None:
        """Predicted run time in seconds, or None without history."""
        runs = self._runs.get((user, shape))
        if not runs:
            return None
        return min(int(math.ceil(sum(runs) / len(runs))), limit)

    def predicted_end(self, run: RunningJob, user_shape: tuple) -> float:
        """Planning end of a running job: start + prediction, never past its limit."""
        limit = int(run.end_time - run.start_time)
        pred = self.predict(run.user, user_shape, limit)
        return run.end_time if pred is None else run.start_time + pred
