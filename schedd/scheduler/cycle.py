"""One scheduling cycle over a snapshot: ``schedule(snapshot, config) -> Decisions``.

Pure: no database, no sockets, no clock (``snapshot.now`` is the time), and deterministic: the
same snapshot gives the same decisions. The daemon and the trace simulator run this same code.

Phases:
1. fair-share factors from the association tree (``fairshare.factors``)
2. priorities of every pending job (``priority.priorities``)
3. order: jobs holding a promised start first (by that start), then by priority, submit
   time, job id (when that order is submit order, ``by_submit`` gives it without ranking:
   the textbook policies and kiln without an association tree; a caller that vouches for a
   queue of plain arrivals, ``Snapshot.plain_arrivals``, spares it the passes that check)
4. availability profile of every node from the running jobs (``profile.build``)
5. the walk: start, reserve or hold back each job in order (``backfill.Walk``); jobs an
   association or QOS limit holds back are screened out and every start counted
   (``limits.Enforcer``)
6. decisions: starts with their allocations, reasons, expected starts, integer priorities
   (a caller that reads neither reasons nor priorities, the simulator, says so with
   ``Snapshot.explain``: then the jobs the walk never looks at get no reason and no job a
   priority, which on a long queue is most of a cycle)
7. preemption: victims for the jobs still waiting for resources (``preempt.decide``)
"""

from __future__ import annotations

from functools import partial
from itertools import compress
from operator import attrgetter, indexOf, not_

from kiln.config import SchedulerConfig
from schedd.scheduler import (
    fairshare,
    fragment,
    licenses,
    limits,
    overtake,
    preempt,
    priority,
    profile,
    replan,
    topology,
)
from schedd.scheduler import reserved as reservations
from schedd.scheduler.backfill import Walk, check_config, planned
from schedd.scheduler.snapshot import Decisions, PendingJob, Snapshot, Start


def schedule(snapshot: Snapshot, config: SchedulerConfig) -> Decisions:
    check_config(config)
    pending = snapshot.pending
    if not pending:
        return Decisions()
    owed = owed_jobs(snapshot, config)
    order, shown = ranked_order(snapshot, config, owed)
    held: list[int] = []
    if snapshot.preemption is not None:  # what preemption freed goes to its preemptor
        order = preempt.first(order, snapshot.preemption.in_flight)
        order, held = preempt.held_back(order, snapshot.preemption)
    resv = reservations.Reserved(snapshot, config.bf_resolution)  # advance reservations
    timelines = profile.build(
        snapshot.now, snapshot.nodes, resv.running_outside, config.bf_resolution,
        config.predict_runtime,
    )
    resv.block(timelines)
    topology.hold_running(timelines, snapshot.running, snapshot.now)  # --exclusive=topo
    # only a job naming a reservation needs the split (checked in C: the queue can be long;
    # not at all when the caller vouches that no job names one)
    named = not snapshot.plain_arrivals and any(map(_RESERVATION, order))
    order, members = resv.split(order) if named else (order, {})
    # preemption picks its preemptors by the reasons, so it needs them even when nobody reads them
    explain = snapshot.explain or snapshot.preemption is not None
    carry = not named and replan.eligible(snapshot, config)  # the plan goes to the next cycle
    walk = Walk(timelines, snapshot.now, config, snapshot.promised,
                snapshot.promised_nodes, explain, record=carry, owed=owed,
                frag=fragment.scorer_for(snapshot.gpu_history, pending, snapshot.nodes))
    gate = licenses.LicenseGate(snapshot.licenses, snapshot.running) \
        if snapshot.licenses else None  # -L: a job waits for its licenses (licenses.py)
    walking = gate.screen(order, walk.plan.starts, walk.plan.reasons) if gate else order
    replanned = replan.Replan(snapshot, config, walk) if carry else None
    if replanned is not None:  # only what changed since the last cycle's plan (replan.py)
        plan = replanned.run(walking)
    elif snapshot.limits is None:
        plan = walk.run(walking)
    else:  # association/QOS limits: skip blocked jobs, count each start (limits.py)
        enforcer = limits.Enforcer(snapshot.limits, snapshot.running, snapshot.nodes,
                                   snapshot.now)
        plan = walk.run(enforcer.screen(walking, walk.plan.starts, walk.plan.reasons))
        plan.starts = enforcer.settle(plan.starts, plan.reasons)
    if gate is not None:
        plan.starts = gate.settle(plan.starts, plan.reasons)
    if explain:
        resv.explain(order, walk, plan)
    if members:
        resv.place_members(members, timelines, config, plan)
    preemptions = preempt.decide(snapshot, plan.starts, plan.reasons, order, config)
    preempt.hold_for(plan.reserved_nodes, preemptions)
    plan.reasons.update(dict.fromkeys(held, "Priority"))  # behind the job that preempted them
    passed_over = passed_on(snapshot, walk, plan.starts, owed) \
        if config.bf_overtake else {}
    return Decisions(
        starts=[Start(job_id, alloc) for job_id, alloc in plan.starts],
        reasons=plan.reasons,
        expected_start=plan.expected_start,
        reserved_nodes=plan.reserved_nodes,
        depth=plan.depth, backfilled=min(plan.backfilled, len(plan.starts)),
        priorities=shown,
        preemptions=preemptions,
        memo=replanned.memo(plan.expected_start, plan.reserved_nodes) if replanned else None,
        passed_over=passed_over,
    )


def passed_on(snapshot: Snapshot, walk: Walk, starts: list[tuple[int, list]],
              owed: frozenset[int]) -> dict[int, float]:
    """The next snapshot's ``passed_over`` (``bf_overtake``): this cycle's fill counted, the
    owed jobs marked, the started ones dropped (``overtake.carried``)."""
    started = {job_id for job_id, _ in starts}
    cluster = priority.ClusterSize.of(snapshot.nodes)
    lost = overtake.lost_in_fill(
        walk.gathered, walk.deferred, started,
        lambda j: overtake.share(j, cluster) * walk.duration(j)) if walk.gathered else {}
    return overtake.carried(snapshot.passed_over, lost, started, owed)


def owed_jobs(snapshot: Snapshot, config: SchedulerConfig) -> frozenset[int]:
    """The jobs passed over in the hole by too much later work, walked as due ones
    (``bf_overtake``, ``overtake.owed``); none when that is off."""
    if not config.bf_overtake:
        return frozenset()
    return overtake.owed(snapshot.pending, snapshot.passed_over, config.bf_overtake,
                         partial(planned, config.predict_runtime))


def ranked_order(snapshot: Snapshot, config: SchedulerConfig,
                 owed: frozenset[int] | None = None,
                 ) -> tuple[list[PendingJob], dict[int, int]]:
    """Phases 1-3 and the priorities of phase 6: the queue in walk order, and the integer
    priority of every pending job (none when the caller does not ask, ``Snapshot.explain``).
    ``owed``: the jobs walked as due ones (``owed_jobs``, found here when not given)."""
    pending, now = snapshot.pending, snapshot.now
    if owed is None:
        owed = owed_jobs(snapshot, config)
    shares = None  # no association tree: fair share is the same for every job
    if config.weight_fairshare and snapshot.associations:
        wanted = {(j.account, j.user) for j in pending} | {(j.account, "") for j in pending}
        shares = fairshare.factors(snapshot.associations, wanted)
    if not priority.submit_ordered(pending, config, shares, snapshot.plain_arrivals):
        cluster = priority.ClusterSize.of(snapshot.nodes)
        prio = priority.priorities(pending, now, config, cluster, shares)
        shown = priority.displayed(pending, prio) if snapshot.explain else {}
        order = ordered(pending, prio, snapshot.promised)
        return due_first(order, snapshot.promised, now, config.bf_due_wait, owed), shown
    order, ranked, one_nice = by_submit(pending, snapshot.promised, snapshot.plain_arrivals)
    if not one_nice or owed:  # the oldest jobs need not come first, nor the owed ones
        order = due_first(order, snapshot.promised, now, config.bf_due_wait, owed)
    if not snapshot.explain:
        return order, {}
    cluster = priority.ClusterSize.of(snapshot.nodes)  # a pass over the nodes: only when shown
    if one_nice and priority.constant(config):  # one value for every job: no arithmetic
        head = order[:1]
        prio = priority.priorities(head, now, config, cluster, shares)
        return order, dict.fromkeys(map(_JOB_ID, order),
                                    priority.displayed(head, prio)[head[0].job_id])
    if one_nice and priority.plain(ranked[0], config):  # age alone varies
        return order, priority.displayed_by_age(ranked, now, config, cluster, shares)
    return order, priority.displayed(pending, priority.priorities(
        pending, now, config, cluster, shares))


_JOB_ID = attrgetter("job_id")
_SUBMIT = attrgetter("submit_time")
_NICE = attrgetter("nice")
_RESERVATION = attrgetter("reservation")
_SUBMIT_ID = attrgetter("submit_time", "job_id")
_FEW = 16  # promised jobs picked out one by one below this; by a mask over the queue above


def by_submit(pending: list[PendingJob], promised: dict[int, float], in_order: bool = False,
              ) -> tuple[list[PendingJob], list[PendingJob], bool]:
    """``ordered`` for a queue whose priority order is (nice, submit time, job id)
    (``priority.submit_ordered``): the same list, without a priority per job, plus the queue in
    (nice, submit, id) order before the promised jobs were moved first, and whether every job
    has the same nice.

    ``in_order``: the caller vouches that the queue is already in that order with one nice
    (``Snapshot.plain_arrivals``), so nothing is checked. Otherwise a queue already in that
    order (ids and submit times both rising, one nice: a queue in arrival order) is recognised
    in C at little more than a pass; any other is put in order by three stable sorts on one
    plain key each (job id, then submit time, then nice), which give the (nice, submit, id)
    order without building a key tuple per job. The promised jobs go first in promise order
    (``promised_first``).
    """
    if in_order:
        return promised_first(pending, promised), pending, True
    ids = list(map(_JOB_ID, pending))
    submits = list(map(_SUBMIT, pending))
    one_nice = len(set(map(_NICE, pending))) == 1
    # comparing with a sorted copy: timsort checks a sorted list of ints or floats in C with
    # one specialised comparison per item (job ids are distinct, so rising means strictly)
    if one_nice and ids == sorted(ids) and submits == sorted(submits):
        base = list(pending)  # already in order, as a queue in arrival order usually is
    else:
        base = sorted(pending, key=_JOB_ID)
        base.sort(key=_SUBMIT)
        base.sort(key=_NICE)
        ids = list(map(_JOB_ID, base))
    return promised_first(base, promised, ids), base, one_nice


def promised_first(base: list[PendingJob], promised: dict[int, float],
                   ids: list[int] | None = None) -> list[PendingJob]:
    """``base`` (a queue in priority order) with the promised jobs moved first, in promise
    order; a stable sort keeps the queue's order among equal promises, as ``ordered``'s
    tie-break does. ``ids``: base's job ids, when the caller has listed them already.

    A few promised jobs are found one by one, by a scan in C that stops at the job (the
    promised jobs of a queue in arrival order are near its head); more by a mask over the queue.
    """
    if not promised:
        return base
    if len(promised) <= _FEW:
        at = sorted(i for i in map(_index_in(base, ids), promised) if i >= 0)
        first = [base[i] for i in at]
        base = list(base)
        for i in reversed(at):
            del base[i]
    else:
        mask = list(map(promised.__contains__, ids if ids is not None else map(_JOB_ID, base)))
        first = list(compress(base, mask))
        base = list(compress(base, map(not_, mask)))
    if not first:
        return base
    # promise order, stable (queue order among equal promises), sorted by a key list read in C
    # rather than a key function called per job: this runs every cycle over every promise
    keys = list(map(promised.__getitem__, map(_JOB_ID, first)))
    return list(map(first.__getitem__, sorted(range(len(first)), key=keys.__getitem__))) + base


def _index_in(base: list[PendingJob], ids: list[int] | None):
    """``job id -> its position in base``, -1 when it is not there (a promise of a job gone)."""
    def index(job_id: int) -> int:
        try:
            return ids.index(job_id) if ids is not None else indexOf(map(_JOB_ID, base), job_id)
        except ValueError:
            return -1
    return index


def due_first(order: list[PendingJob], promised: dict[int, float], now: float,
              bound: int, owed: frozenset[int] = frozenset()) -> list[PendingJob]:
    """``order`` with the due jobs (waiting ``bound`` seconds or more, or ``owed``: passed over
    too much, ``overtake.owed``) moved right behind the promised jobs, oldest first: a due job
    waits behind no job that came after it, whatever its priority (``backfill.Walk.due``).
    ``bound`` 0 and none owed: nobody is due, the order is kept."""
    if not bound and not owed:
        return order
    cut = now - bound if bound else float("-inf")
    head = [j for j in order if j.job_id in promised]
    rest = [j for j in order if j.job_id not in promised]
    is_due = [j.submit_time <= cut or j.job_id in owed for j in rest]
    due = sorted(compress(rest, is_due), key=_SUBMIT_ID)
    if not due:
        return order
    return head + due + list(compress(rest, map(not_, is_due)))


def ordered(pending: list[PendingJob], prio: dict[int, float],
            promised: dict[int, float]) -> list[PendingJob]:
    """Priority order, except that jobs promised a start by an earlier cycle come first, in the
    order of their promised starts.

    Re-planning promised jobs in promise order never moves one later: every job planned before
    it was promised no later, so (with limits that hold) it can only use less of the time after
    this job's promise than it did when the promise was made. A newcomer, however high its
    priority, is planned after them and cannot take a promised slot.
    """
    if promised:
        far = float("inf")
        return sorted(pending, key=lambda j: (promised.get(j.job_id, far), -prio[j.job_id],
                                              j.submit_time, j.job_id))
    return sorted(pending, key=lambda j: (-prio[j.job_id], j.submit_time, j.job_id))
