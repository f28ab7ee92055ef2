"""One scheduling cycle over a snapshot: ``schedule(snapshot, config) -> Decisions``.

Pure: no database, no sockets, no clock (``snapshot.now`` is the time), and deterministic: the
same snapshot gives the same decisions. The daemon and the trace simulator run this same code.

Phases:
1. fair-share factors from the association tree (``fairshare.factors``)
2. priorities of every pending job (``priority.priorities``)
3. order: jobs holding a promised start first (by that start), then by priority, submit
   time, job id
4. availability profile of every node from the running jobs (``profile.build``)
5. the walk: start, reserve or hold back each job in order (``backfill.Walk``); jobs an
   association or QOS limit holds back are screened out and every start counted
   (``limits.Enforcer``)
6. decisions: starts with their allocations, reasons, expected starts, integer priorities
7. preemption: victims for the jobs still waiting for resources (``preempt.decide``)
"""

from __future__ import annotations

from schedd.config import SchedulerConfig
from schedd.scheduler import fairshare, limits, preempt, priority, profile, reservations
from schedd.scheduler.backfill import Walk, check_config
from schedd.scheduler.snapshot import Decisions, PendingJob, Snapshot, Start


def schedule(snapshot: Snapshot, config: SchedulerConfig) -> Decisions:
    check_config(config)
    pending = snapshot.pending
    if not pending:
        return Decisions()
    shares = None  # no association tree: fair share is the same for every job
    if config.weight_fairshare and snapshot.associations:
        wanted = {(j.account, j.user) for j in pending} | {(j.account, "") for j in pending}
        shares = fairshare.factors(snapshot.associations, wanted)
    prio = priority.priorities(
        pending, snapshot.now, config, priority.ClusterSize.of(snapshot.nodes), shares
    )
    order = ordered(pending, prio, snapshot.promised)
    if snapshot.preemption is not None:  # what preemption freed goes to its preemptor
        order = preempt.first(order, snapshot.preemption.in_flight)
    resv = reservations.Reserved(snapshot, config.bf_resolution)  # advance reservations
    timelines = profile.build(
        snapshot.now, snapshot.nodes, resv.running_outside, config.bf_resolution,
        config.predict_runtime,
    )
    resv.block(timelines)
    order, members = resv.split(order)
    walk = Walk(timelines, snapshot.now, config, snapshot.promised,
                snapshot.promised_nodes)
    if snapshot.limits is None:
        plan = walk.run(order)
    else:  # association/QOS limits: skip blocked jobs, count each start (limits.py)
        enforcer = limits.Enforcer(snapshot.limits, snapshot.running, snapshot.nodes,
                                   snapshot.now)
        plan = walk.run(enforcer.screen(order, walk.plan.starts, walk.plan.reasons))
        plan.starts = enforcer.settle(plan.starts, plan.reasons)
    resv.explain(order, walk, plan)
    if members:
        resv.place_members(members, timelines, config, plan)
    return Decisions(
        starts=[Start(job_id, alloc) for job_id, alloc in plan.starts],
        reasons=plan.reasons,
        expected_start=plan.expected_start,
        reserved_nodes=plan.reserved_nodes,
        priorities=priority.displayed(pending, prio),
        preemptions=preempt.decide(snapshot, plan.starts, plan.reasons, order, config),
    )


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
