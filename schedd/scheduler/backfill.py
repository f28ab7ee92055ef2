"""The walk: pending jobs in priority order over the availability profile.

- A job that fits now, for its whole planned run, without touching any reservation, starts.
- ``backfill=False``: the first job that does not fit stops the walk (strict FCFS/priority; it
  still gets an expected start, which nothing can take from it).
- ``backfill=True``: a job that does not fit gets a reservation at its earliest start, for up to
  ``bf_max_reservations`` jobs, and for every *due* job (waiting ``bf_due_wait`` or more, when
  that is set, or *owed*: passed over in the hole by more later work than ``bf_overtake``
  allows, ``overtake.py``: ``Walk.due``); the reservation is held in the profile, so later
  jobs start now only where they delay none (whether they end before it or use what it leaves
  over). With one reservation this is EASY (Lifka), with many it is conservative backfill.
- Fill rule ``area``: once some job waits, the jobs that could start now are not started in
  priority order but gathered and started by GPUs x minutes (CPUs x minutes as the second key),
  ties by name: the hole takes the largest area first, never the smallest GPU count first.
  Fill rule ``hole_area`` (the default): gathered likewise, but the jobs that end by the
  earliest reservation of the cycle go first, each class by area (``hole_key``).
  Fill rule ``short_area``: gathered likewise, but jobs planned for at most
  ``bf_short_job`` seconds go first: a wait hurts their (bounded) slowdown most and they take
  almost no area; among them the widest first (first-fit decreasing on the hole's width, the
  only dimension that matters for jobs that end soon); then the rest by area. A job that was promised a start by an
  earlier cycle is never gathered: it starts in its turn, as promised.

Reasons, as Slurm gives them: the first job held back for lack of resources is ``Resources``;
the jobs after it that do not start are ``Priority``. At most ``bf_max_job_test`` jobs are
looked at; the rest wait with ``Priority``. With ``explain`` off (nobody reads the reasons:
``Snapshot.explain``), the jobs the walk never looks at (behind FCFS's blocked head, past
``bf_max_job_test``) need not get one: naming each would be the whole cost of a long queue.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import compress, repeat
from operator import attrgetter, ge, le, or_

from kiln.config import SchedulerConfig
from kiln.model import NodeAllocation
from schedd.scheduler import placement, topology
from schedd.scheduler.profile import Demand, NodeTimeline, round_up
from schedd.scheduler.snapshot import PendingJob

FILL_RULES = ("priority", "area", "short_area", "hole_area")
_JOB_ID = attrgetter("job_id")
# the filters a job's candidate nodes depend on, besides its size (``FitBounds``)
_FILTER_NAMES = ("partition", "features", "gpu_type", "exclude", "exclusive", "segment",
                 "exclusive_topo", "switches")
_FILTERS = attrgetter(*_FILTER_NAMES)
_CPUS = attrgetter("cpus_per_node")
_EXCLUSIVE = attrgetter("exclusive")
_SIZE_NAMES = ("num_nodes", "cpus_per_node", "mem_per_node_mb", "gpus_per_node")
_SIZE = attrgetter(*_SIZE_NAMES)
# what decides whether a job may fit now and which nodes it may use (placement.CandidateCache),
# laid out as _FILTERS, -w, _SIZE: the tail cuts FitBounds' key and point from it in C
_SHAPE = attrgetter(*_FILTER_NAMES, "nodelist", *_SIZE_NAMES)
_BOUND_KEY = slice(0, len(_FILTER_NAMES))
_BOUND_SIZE = slice(len(_FILTER_NAMES) + 1, None)


def check_config(config: SchedulerConfig) -> None:
    """A clear one-line error for a policy the walk cannot follow (the daemon checks at start)."""
    if config.fill not in FILL_RULES:
        raise ValueError(f"scheduler fill rule {config.fill!r} is not one of "
                         f"{', '.join(FILL_RULES)}")
    if min(_NON_NEGATIVE(config)) >= 0:  # one C call: this runs every cycle
        return
    for name, value in zip(_NON_NEGATIVE_NAMES, _NON_NEGATIVE(config), strict=True):
        if value < 0:
            raise ValueError(f"scheduler {name} must not be negative")


_NON_NEGATIVE_NAMES = ("bf_max_reservations", "bf_max_job_test", "bf_resolution", "bf_window",
                       "bf_short_job", "bf_due_wait", "bf_overtake", "max_age",
                       "max_switch_wait")
_NON_NEGATIVE = attrgetter(*_NON_NEGATIVE_NAMES)


@dataclass(slots=True, frozen=True)
class Held:
    """One reservation of the plan: the job, its slot and what it takes on each node."""

    job: PendingJob
    start: float
    end: float
    on: tuple[tuple[int, Demand], ...]  # (node index, demand there)


@dataclass(slots=True)
class Plan:
    starts: list[tuple[int, list[NodeAllocation]]] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)
    expected_start: dict[int, float] = field(default_factory=dict)
    reserved_nodes: dict[int, list[str]] = field(default_factory=dict)
    depth: int = 0  # pending jobs the walk tested (sdiag's depth)
    backfilled: int = 0  # jobs started behind a job that could not start (sdiag)


class FitBounds:
    """What one cycle's walk learnt about which plain jobs fit now for their whole run.

    Whether a job fits now, on nodes that pass its filters, for its whole run without touching
    the plan depends on its filters, its size (nodes; CPUs, memory and GPUs per node) and its
    planned length, and monotonically in each of the last: a job that fits, fits with less of
    any of them; one that does not, not with more (fewer candidate nodes, each asked for more,
    for longer). So the jobs answered are kept as points (nodes, CPUs, memory, GPUs, seconds)
    per filter key, on two frontiers: those that fit (a job no larger anywhere fits) and those
    that do not (a job no smaller anywhere does not). Valid until the profile changes."""

    __slots__ = ("_fits", "_fails")

    def __init__(self) -> None:
        self._fits: dict[tuple, list[tuple[int, ...]]] = {}
        self._fails: dict[tuple, list[tuple[int, ...]]] = {}

    @staticmethod
    def of(job: PendingJob, duration: int) -> tuple[tuple, tuple[int, ...]]:
        return _FILTERS(job), (*_SIZE(job), duration)

    def known(self, key: tuple, point: tuple[int, ...]) -> bool | None:
        """True: it fits; False: it does not; None: not known."""
        for p in self._fits.get(key, ()):
            if all(map(ge, p, point)):
                return True
        for p in self._fails.get(key, ()):
            if all(map(le, p, point)):
                return False
        return None

    def learn(self, key: tuple, point: tuple[int, ...], fits: bool) -> None:
        if fits:  # keep the frontier: drop the points this one covers
            kept = [p for p in self._fits.get(key, ()) if not all(map(le, p, point))]
            self._fits[key] = [*kept, point]
        else:
            kept = [p for p in self._fails.get(key, ()) if not all(map(ge, p, point))]
            self._fails[key] = [*kept, point]

    def clear(self) -> None:
        self._fits.clear()
        self._fails.clear()


def planned(predict: bool, job: PendingJob) -> int:
    """Seconds the job is planned for: its limit, or its predicted run time when asked
    (``predict``, first: ``partial(planned, predict)`` is a call as cheap as a method's)."""
    limit = max(int(job.time_limit), 1)
    if predict and job.predicted_runtime:
        return min(max(int(job.predicted_runtime), 1), limit)
    return limit


def area(job: PendingJob, duration: float) -> tuple[float, float]:
    minutes = duration / 60.0
    return (job.total_gpus * minutes, job.cpus_per_node * job.num_nodes * minutes)


class Walk:
    """One walk over the ordered queue; see the module docstring for the rules."""

    def __init__(self, timelines: list[NodeTimeline], now: float, config: SchedulerConfig,
                 promised: Collection[int] = (),
                 promised_nodes: Mapping[int, Sequence[str]] | None = None,
                 explain: bool = True, record: bool = False,
                 owed: frozenset[int] = frozenset(),
                 frag: placement.Scorer | None = None) -> None:
        self.timelines = timelines
        self.now = now
        self.config = config
        self.promised = promised
        self.promised_nodes = promised_nodes or {}
        self.explain = explain  # a reason for the jobs never looked at too
        # seconds a job is planned for (``planned``), read for every job walked: one call
        self.duration: Callable[[PendingJob], int] = partial(planned, config.predict_runtime)
        self.free = placement.FreeIndex(timelines, by_mem=frag is not None)
        self.plan = Plan()
        self.reservations = 0
        self.planned_all = config.bf_max_reservations <= 0  # no reservation left to make
        self.blocked = False
        self.deferred: list[PendingJob] = []
        self.shadow: float | None = None  # the earliest reservation's start, once the fill asks
        self.candidates = placement.CandidateCache(timelines).get
        self.earliest_memo = placement.EarliestMemo()  # one-node reservations' answers
        # with ``record``: every reservation and start as made, in walk order, for the next
        # cycle's re-plan (``replan.PlanMemo``)
        self.held: dict[int, Held] | None = {} if record else None  # job id -> its slot
        self.began: list[tuple[int, float, list[NodeAllocation]]] = []
        # ``bf_overtake`` (overtake.py): the owed jobs, walked and reserved as due ones; and,
        # when it is on, the gathered jobs in walk order, for the count of who passed whom
        self.owed = owed
        self.gathered: list[PendingJob] = []
        # the cycle's fragmentation measure (fragment.py): which nodes a GPU job starts on;
        # None: best fit
        self.frag = frag

    def end_of(self, job: PendingJob, start: float) -> float:
        return round_up(start + self.duration(job), self.config.bf_resolution)

    def run(self, order: Iterable[PendingJob], tested: int = 0) -> Plan:
        """Walk ``order``; ``tested``: jobs already looked at this cycle (a walk resumed after
        its first part was taken from the last cycle's plan, ``replan``)."""
        limit = max(self.config.bf_max_job_test, 1)
        reasons = self.plan.reasons
        jobs = iter(order)
        for job in jobs:
            if tested >= limit or (self.blocked and not self.config.backfill):
                reasons[job.job_id] = "Priority"
                break
            tested += 1
            self.visit(job)
            if self.blocked and self.planned_all and not self.may_precede_due(job):
                break
        else:
            self.plan.depth = tested
            return self.finish()
        # Nothing left to plan: the rest can only start now, and most cannot (the quick
        # FreeIndex test); this loop is what a long queue behind a full cluster costs.
        if not self.config.backfill:  # FCFS: everything behind the blocked head waits
            self.name_the_rest(jobs)
            self.plan.depth = tested
            return self.finish()
        return self.tail(jobs, tested, limit)

    def tail(self, jobs: Iterator[PendingJob], tested: int, limit: int) -> Plan:
        """The queue behind the plan, with backfill: each job starts now or waits.

        A job that cannot fit now waits for the same reason as every job of its shape until
        something starts: that verdict is kept per shape (a key built in C), so a long tail of
        like jobs costs a lookup each. A job that may fit is walked, except a plain one (not
        promised, not due, no ``-w``) under a fill rule that gathers (``fill`` other than
        ``priority``) whose answer ``FitBounds`` already knows. A visit that starts a job
        forgets all of it (the profile changed). A plain job can only be gathered or wait here
        (``defer_if_fits``), so it never starts one."""
        reasons = self.plan.reasons
        if not self.explain:
            jobs, tested = self.too_wide_left_out(jobs, tested, limit)
        may_fit, candidates, visit = self.free.may_fit, self.candidates, self.visit
        starts, deferred = self.plan.starts, self.deferred
        verdicts: dict[tuple, str] = {}
        unfit: dict[tuple, placement.Candidates] = {}  # shape -> its nodes (or why none)
        bounds = FitBounds()
        gathers = self.config.fill != "priority"
        promised, promised_nodes = self.promised, self.promised_nodes
        now, due_wait, owed = self.now, self.config.bf_due_wait, self.owed
        duration = self.duration
        for job in jobs:
            if tested >= limit:
                reasons[job.job_id] = "Priority"
                self.name_the_rest(jobs)
                break
            tested += 1
            shape = _SHAPE(job)
            reason = verdicts.get(shape)
            if reason is not None:
                reasons[job.job_id] = reason
                continue
            if not may_fit(job):
                reasons[job.job_id] = verdicts[shape] = candidates(job).reason or "Priority"
                continue
            # plain: no -w, neither promised (kept to its nodes, never gathered) nor due
            plain = gathers and not job.nodelist and job.job_id not in promised \
                and job.job_id not in promised_nodes \
                and not (due_wait and now - job.submit_time >= due_wait) \
                and not (owed and job.job_id in owed) \
                and not job.switches  # its bound ends with its own wait (topology.bound)
            if plain:
                cands = unfit.get(shape)
                if cands is None:
                    cands = unfit[shape] = candidates(job)
                plain = not cands.reason
            if plain:  # FitBounds.of, cut from the shape: this runs for every job that may fit
                key, point = shape[_BOUND_KEY], (*shape[_BOUND_SIZE], duration(job))
                known = bounds.known(key, point)
                if known is not None:
                    if known:
                        deferred.append(job)
                    reasons[job.job_id] = "Priority"
                    continue
            if plain:
                bounds.learn(key, point, self.defer_if_fits(job, cands))
                continue
            started = len(starts)
            visit(job)
            if len(starts) != started:
                verdicts.clear()
                bounds.clear()
        self.plan.depth = tested
        return self.finish()

    def defer_if_fits(self, job: PendingJob, cands: placement.Candidates) -> bool:
        """``visit`` for a plain job of the tail (``cands``: its nodes, with no reason), which
        may fit now (``FreeIndex.may_fit``): the walk is blocked with every reservation made,
        so such a job is gathered for the fill if it fits now for its whole run, and otherwise
        waits with ``Priority`` (it gets no reservation, being neither due nor promised).
        Whether it fits, for ``FitBounds``."""
        self.plan.reasons[job.job_id] = "Priority"
        if placement.place_now(job, cands, self.now, self.end_of(job, self.now),
                               self.free) is None:
            return False
        self.deferred.append(job)
        return True

    def too_wide_left_out(self, jobs: Iterator[PendingJob], tested: int, limit: int,
                          ) -> tuple[Iterator[PendingJob], int]:
        """The tail without the jobs that ask for more CPUs per node than any node has free now
        (found by a pass in C), when nobody reads their reasons (``explain`` off): the walk
        would only name them, since what is free now can only shrink while it walks (it starts
        jobs; nothing ends), so none of them could fit now when its turn came. The jobs past
        ``bf_max_job_test`` stay where they are, and the left-out ones count as tested."""
        rest = list(jobs)
        room = max(limit - tested, 0)
        looked = rest if room >= len(rest) else rest[:room]
        # one pass in C, no list between its steps: kept are the jobs that ask for no more
        # than the most free, and the exclusive ones (their answer is the whole node's: walked)
        narrow = map(le, map(_CPUS, looked), repeat(self.free.max_cpus))
        kept = list(compress(looked, map(or_, narrow, map(_EXCLUSIVE, looked))))
        tested += len(looked) - len(kept)
        if len(looked) < len(rest):
            kept += rest[room:]
        return iter(kept), tested

    def name_the_rest(self, jobs: Iterable[PendingJob]) -> None:
        """``Priority`` for the jobs the walk will not look at, when reasons are wanted."""
        if self.explain:
            self.plan.reasons.update(dict.fromkeys(map(_JOB_ID, jobs), "Priority"))

    def finish(self) -> Plan:
        if self.deferred:
            self.fill_hole()
        return self.plan

    def nodes_for(self, job: PendingJob) -> placement.Candidates:
        """The nodes the job may use: those that pass its filters, kept to its promise's."""
        cands = self.candidates(job)
        if not cands.reason and job.job_id in self.promised_nodes:
            cands = placement.keep_to(cands, self.promised_nodes[job.job_id], job.num_nodes)
        return cands

    def visit(self, job: PendingJob) -> None:
        cands = self.nodes_for(job)
        if cands.reason:
            self.plan.reasons[job.job_id] = cands.reason
            return
        if self.free.may_fit(job):
            chosen = placement.place_now(job, cands, self.now, self.end_of(job, self.now),
                                         self.free, self.frag)
            if chosen is not None:
                if (self.blocked and self.config.fill != "priority"
                        and job.job_id not in self.promised and not self.due(job)):
                    self.deferred.append(job)
                    self.plan.reasons[job.job_id] = "Priority"
                else:
                    self.start(job, chosen)
                return
        self.plan.reasons[job.job_id] = "Priority" if self.blocked else "Resources"
        if self.config.backfill:
            if not self.planned_all or self.due(job):
                self.reserve(job, cands.nodes)
        elif not self.blocked:
            self.reserve(job, cands.nodes)
        self.blocked = True

    def due(self, job: PendingJob) -> bool:
        """Whether the job has waited ``bf_due_wait`` seconds (0: nobody is ever due), or is owed
        a reservation for having been passed over too much (``overtake.owed``). A due job
        is planned right after the promised jobs, oldest first (``cycle.due_first``), gets a
        reservation beyond ``bf_max_reservations`` and is never held back for the fill rule: from
        then on no later job can delay it, so backfill delays any job by at most the bound."""
        bound = self.config.bf_due_wait
        return (bool(bound) and self.now - job.submit_time >= bound) or job.job_id in self.owed

    def may_precede_due(self, job: PendingJob) -> bool:
        """Whether a due job may still come after this one: the order is promised jobs, then
        due ones, then the rest (``cycle.due_first``), so not once a job is neither."""
        return bool(self.config.bf_due_wait or self.owed) \
            and (job.job_id in self.promised or self.due(job))

    def start(self, job: PendingJob, chosen: list[NodeTimeline]) -> None:
        end = self.end_of(job, self.now)
        # on a node of several GPU types, the types a job that names none is held on
        by_type = placement.gpu_vectors(job, chosen, self.now, end)
        for tl in chosen:
            self.free.before_change(tl)
            tl.hold(placement.demand_now(job, tl.view), self.now, end)
        allocation = placement.allocate(job, chosen, self.now, end, by_type)
        for tl in chosen:
            self.free.after_change(tl)
        if job.exclusive_topo:  # --exclusive=topo: the rest of its blocks held for it too
            for tl in topology.peers(chosen, self.timelines):
                self.free.before_change(tl)
                topology.hold_free(tl, self.now, end)
                self.free.after_change(tl)
        self.plan.starts.append((job.job_id, allocation))
        if self.held is not None:
            self.began.append((job.job_id, end, allocation))
        self.plan.reasons.pop(job.job_id, None)
        if self.blocked:
            self.plan.backfilled += 1

    def reserve(self, job: PendingJob, nodes: list[NodeTimeline]) -> None:
        """Plan the job at its earliest start; hold the resources there (with backfill)."""
        found = self.earliest(job, nodes)
        if found is None:
            return
        t, chosen = found
        self.plan.expected_start[job.job_id] = t
        self.plan.reserved_nodes[job.job_id] = sorted(tl.view.name for tl in chosen)
        if not self.config.backfill:
            return  # FCFS: nothing may start behind the head, so nothing need be held
        end = self.end_of(job, t)
        demands = [placement.demand_on(job, tl.view) for tl in chosen]
        for tl, demand in zip(chosen, demands, strict=True):
            tl.hold(demand, t, end)
        on = [(tl.index, demand) for tl, demand in zip(chosen, demands, strict=True)]
        if job.exclusive_topo:  # --exclusive=topo: the rest of its blocks held for it too
            on += [(tl.index, topology.hold_free(tl, t, end))
                   for tl in topology.peers(chosen, self.timelines)]
        if self.held is not None:
            self.held[job.job_id] = Held(job, t, end, tuple(on))
        if not self.due(job):  # a due (or owed) job's is on top: the head keeps its own
            self.reservations += 1
        self.planned_all = self.reservations >= self.config.bf_max_reservations

    def earliest(self, job: PendingJob, nodes: list[NodeTimeline],
                 ) -> tuple[float, list[NodeTimeline]] | None:
        """The job's earliest start within ``bf_window`` on ``nodes``, and the nodes then."""
        duration = self.end_of(job, self.now) - self.now
        horizon = self.now + self.config.bf_window
        return placement.earliest_start(job, nodes, self.now, duration, horizon,
                                        self.earliest_memo)

    def fill_hole(self) -> None:
        """Start the gathered jobs that still fit, in the order of the fill rule."""
        if self.config.bf_overtake:
            self.gathered = list(self.deferred)  # walk order, before the fill rule's
        self.deferred.sort(key=self.fill_key)
        for job in self.deferred:
            if not self.free.may_fit(job):
                continue
            chosen = placement.place_now(
                job, self.candidates(job), self.now, self.end_of(job, self.now), self.free,
                self.frag)
            if chosen is not None:
                self.start(job, chosen)

    def fill_key(self, job: PendingJob) -> tuple:
        """``area``: largest GPUs x minutes first (CPUs x minutes next), ties by name.
        ``short_area``: jobs planned for at most ``bf_short_job`` seconds first, widest first
        (GPUs, then CPUs, then the shorter), then the others as ``area``.

        Short jobs all end soon, so for them the hole is one-dimensional: its width now. Widest
        first is first-fit decreasing on that width; the narrow ones fill what is left, and a
        narrow job finds another hole far more easily than a wide one does."""
        duration = self.duration(job)
        if self.config.fill == "hole_area":
            return self.hole_key(job, duration)
        if self.config.fill == "short_area" and duration <= self.config.bf_short_job:
            return (0, -job.total_gpus, -job.cpus_per_node * job.num_nodes, duration, job.name,
                    job.job_id)
        gpu_area, cpu_area = area(job, duration)
        return (1, -gpu_area, -cpu_area, 0, job.name, job.job_id)

    def hole_key(self, job: PendingJob, duration: int) -> tuple:
        """``hole_area``: the jobs that end by the earliest reservation of this cycle first,
        then the others; in each class the largest GPUs x minutes first (CPUs x minutes next),
        ties by name.

        A hole has two parts. Until the first reservation starts, everything free now is free
        for any job that ends by then: such a job delays no reservation whatever it takes, and
        gives all of it back before any reserved job needs it. Past that instant only the extra
        (what the reservations leave over) is free, and a job that runs on into it holds it.
        Filling the bounded part first, largest first (first-fit decreasing on area), packs it;
        the long jobs then take the extra by area. No reservation this cycle: one class."""
        shadow = self.shadow
        if shadow is None:
            shadow = self.shadow = min(self.plan.expected_start.values(), default=float("inf"))
        gpu_area, cpu_area = area(job, duration)
        late = round_up(self.now + duration, self.config.bf_resolution) > shadow  # end_of's
        return (late, -gpu_area, -cpu_area, job.name, job.job_id)
