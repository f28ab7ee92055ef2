"""Re-planning only what changed: the last cycle's plan, carried into the next.

Conservative backfill gives every waiting job a reservation, and each cycle plans them all
again, in promise order (``cycle.ordered``), over a profile rebuilt from the running jobs: on a
loaded trace that is a hundred or more reservations a cycle, each a scan of a profile as long
as the plan. Between two cycles little changes (a job or two arrives, one starts), and when the
running jobs ended as planned the re-plan gives every promised job the slot it had (shown
below). This module gives the walk those slots without planning them and plans only the rest,
with decisions that are exactly those of the full re-plan.

The carried state (``PlanMemo``) is what one cycle leaves in ``Decisions.memo``; the caller
hands it back in ``Snapshot.memo`` (the simulator does; the daemon does not, so it plans in
full). The core trusts nothing in it that it does not check against the snapshot:

- the running jobs are exactly those the memo expects, each with the release the plan counted
  (the memo's running jobs and its starts, less those whose planned end has come): no job
  ended early, none is new, none is late. Then the profile of the running jobs from now on is
  the one the last plan was made over, plus its starts;
- the promised jobs are the memo's reservations, with the same starts and nodes, all still
  pending (the same job objects: a job's request cannot have changed), and none is promised
  for before now; the nodes, the config and the policy's conditions (``eligible``) are as they
  were.

Why the carried slots are the re-plan's. The walk plans the promised jobs in promise order.
Those promised for now (the *starters*) come first and are walked for real on the fresh profile:
they start, on their promised nodes (if one does not, the rest of the cycle is walked for real).
Take the next promised job ``j``, planned last cycle at ``[t_j, e_j)`` on its nodes over the
profile ``Q_last`` of the jobs planned before it then; by induction every promised job before
it now has its old slot, so it is planned over ``Q_now``: the running jobs (last cycle's plus
its starts, which ended or end as planned), the starters and the promised jobs before it.

1. ``j`` fits at ``t_j`` in ``Q_now``: every hold there was in last cycle's final plan, where
   ``j`` fit beside all of them.
2. ``j`` fits at no ``t`` in ``[now, t_j)``. From now on ``Q_now`` holds everything ``Q_last``
   held, except the jobs planned before ``j`` last cycle but promised after it now (a job
   backfilled ahead of an earlier one, as conservative backfill does), and those start at
   ``t_j`` or later. So at every instant before ``t_j``, ``Q_now`` leaves no more free than
   ``Q_last`` did. Had ``j`` fit at ``t`` now, its run from ``t`` (which ends by ``e_j``) would
   have fit in ``Q_last`` too: before ``t_j`` because ``Q_last`` left at least as much free,
   from ``t_j`` on because ``j`` itself was placed there in ``Q_last``. It did not: ``t_j`` was
   its earliest start then.

So ``j`` keeps its slot, and its nodes (the promise keeps it to them; planned at ``t_j`` on
exactly those, it takes them all). Every promised job's slot is carried, and only the jobs not
promised (the newcomers, and any the last plan could not place) are walked, over the carried
profile, as the full re-plan walks them after the promised ones. When a job ends early the
running jobs are not those expected, the memo is not used, and the cycle plans in full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter, is_

from kiln.config import SchedulerConfig
from kiln.model import NodeAllocation
from schedd.scheduler.backfill import Held, Plan, Walk
from schedd.scheduler.profile import Steps, planning_end, round_up
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot

Release = tuple[float, list[NodeAllocation]]  # planned release, and the allocation it frees
_JOB_ID = attrgetter("job_id")
_JOB = attrgetter("job")


@dataclass(slots=True)
class PlanMemo:
    """What one cycle of a re-planning policy leaves for the next (see the module docstring)."""

    config: SchedulerConfig
    fingerprint: tuple  # the nodes as the plan saw them, in order (``fingerprint``)
    now: float
    profile: list[Steps]  # every node's final step function, by node index
    held: dict[int, Held]  # job id -> its reservation, in walk order
    expected: dict[int, float]  # Decisions.expected_start
    reserved_nodes: dict[int, list[str]]  # Decisions.reserved_nodes
    releases: dict[int, Release] = field(default_factory=dict)  # running after the starts


def eligible(snapshot: Snapshot, config: SchedulerConfig) -> bool:
    """Whether the cycle is one whose plan this module can carry: backfill in priority order
    with a reservation for every job the walk looks at (conservative backfill), and none of the
    phases around the walk that change the profile or the order (limits, licenses, preemption,
    advance reservations, due jobs, predicted runtimes), nor the fragmentation measure
    (``Snapshot.gpu_history``: its starts depend on a workload the memo does not check)."""
    return (config.backfill and config.fill == "priority" and not config.bf_due_wait
            and not config.bf_overtake
            and not config.predict_runtime
            and config.bf_max_reservations > len(snapshot.pending)
            and config.bf_max_job_test >= len(snapshot.pending)
            and snapshot.limits is None and snapshot.preemption is None
            and not snapshot.reservations and not snapshot.licenses
            and snapshot.gpu_history is None)


def fingerprint(nodes: Sequence[NodeView]) -> tuple:
    """What of the nodes the plan depends on, to see that none changed in place."""
    return tuple((n.name, n.cpus, n.memory_mb, len(n.gpus), n.gpu_type, tuple(n.gpu_kinds.items()),
                  n.features, n.partitions, n.available) for n in nodes)


class Replan:
    """One cycle's walk, taking what it can from the last cycle's plan (``memo``)."""

    def __init__(self, snapshot: Snapshot, config: SchedulerConfig, walk: Walk) -> None:
        self.snapshot = snapshot
        self.config = config
        self.walk = walk
        self._fingerprint: tuple | None = None
        self.releases: dict[int, Release] | None = None  # the running jobs', once checked

    @property
    def fingerprint(self) -> tuple:
        if self._fingerprint is None:
            self._fingerprint = fingerprint(self.snapshot.nodes)
        return self._fingerprint

    def run(self, order: list[PendingJob]) -> Plan:
        """Walk ``order`` as ``Walk.run`` would, planning only what the memo cannot give."""
        memo = self.snapshot.memo
        if not isinstance(memo, PlanMemo) or not self._valid(memo, order):
            return self.walk.run(order)
        walk, now = self.walk, self.snapshot.now
        n = len(memo.held)
        starters = 0
        while starters < n and memo.expected[order[starters].job_id] == now:
            starters += 1
        for job in order[:starters]:
            walk.visit(job)
        pairs = list(zip(walk.timelines, memo.profile, strict=True))
        if not self._started_as_promised(order[:starters], memo) or not all(
                tl.agrees(steps) for tl, steps in pairs):
            return walk.run(order[starters:], tested=starters)  # walked for real from here
        for tl, steps in pairs:
            tl.adopt(steps)
        self._take(order[starters:n], memo)
        return walk.run(order[n:], tested=n)

    # --- checks -------------------------------------------------------------------------------

    def _valid(self, memo: PlanMemo, order: list[PendingJob]) -> bool:
        snapshot, now = self.snapshot, self.snapshot.now
        if not (memo.config is self.config or memo.config == self.config):
            return False
        if memo.fingerprint != self.fingerprint:
            return False
        if now < memo.now or snapshot.promised != memo.expected:
            return False
        if snapshot.promised_nodes != memo.reserved_nodes:
            return False
        n = len(memo.held)
        if len(order) < n:
            return False
        head = order[:n]
        try:  # the same job objects, all still pending: their requests are as planned
            if not all(map(is_, head, map(_JOB, map(memo.held.__getitem__, map(_JOB_ID, head))))):
                return False
        except KeyError:
            return False
        if n and memo.expected[head[0].job_id] < now:
            return False  # a promise for before now: the plan was not kept between cycles
        return self._same_running(memo)

    def _same_running(self, memo: PlanMemo) -> bool:
        """Whether the running jobs are those the memo expects now, with the releases it
        planned (as ``profile.build`` computes them)."""
        now, resolution = self.snapshot.now, self.config.bf_resolution
        soonest = round_up(now + 1, resolution)
        expected = memo.releases
        live = {job_id: r for job_id, r in expected.items() if r[0] > now}
        running = self.snapshot.running
        if len(live) != len(running):
            return False
        for run in running:
            release = live.get(run.job_id)
            if release is None or (release[1] is not run.allocation
                                   and release[1] != run.allocation):
                return False
            if max(round_up(planning_end(run, False), resolution), soonest) != release[0]:
                return False
        self.releases = live
        return True

    def _started_as_promised(self, starters: list[PendingJob], memo: PlanMemo) -> bool:
        """Whether every starter started, on the nodes it was promised (so the profile now is
        the memo's, cut at now)."""
        starts = self.walk.plan.starts
        if len(starts) != len(starters):
            return False
        for (job_id, allocation), job in zip(starts, starters, strict=True):
            if job_id != job.job_id or sorted(a.node for a in allocation) != \
                    memo.reserved_nodes[job_id]:
                return False
        return True

    # --- the carried part ---------------------------------------------------------------------

    def _take(self, kept: list[PendingJob], memo: PlanMemo) -> None:
        """What the walk would have recorded for the promised jobs that keep their slots (all
        but the starters): their expected starts, nodes, reasons (``Resources`` for the first
        job left waiting, ``Priority`` after it) and reservations."""
        if not kept:
            return
        walk, plan = self.walk, self.walk.plan
        ids = list(map(_JOB_ID, kept))
        if not plan.expected_start and len(ids) == len(memo.expected):  # no starter, none left
            plan.expected_start = dict(memo.expected)
            plan.reserved_nodes = dict(memo.reserved_nodes)
        else:
            plan.expected_start.update(zip(ids, map(memo.expected.__getitem__, ids), strict=True))
            plan.reserved_nodes.update(zip(ids, map(memo.reserved_nodes.__getitem__, ids),
                                           strict=True))
        plan.reasons.update(dict.fromkeys(ids, "Priority"))
        if not walk.blocked:
            plan.reasons[ids[0]] = "Resources"
        walk.blocked = True
        walk.reservations += len(ids)
        walk.planned_all = walk.reservations >= self.config.bf_max_reservations
        if walk.held is not None:
            walk.held.update(zip(ids, map(memo.held.__getitem__, ids), strict=True))

    # --- what this cycle leaves -------------------------------------------------------------

    def memo(self, expected: dict[int, float], reserved_nodes: dict[int, list[str]],
             ) -> PlanMemo | None:
        """The memo for the next cycle, from this cycle's finished walk; None when the plan
        holds no reservation (nothing to carry: the next cycle has no promised job)."""
        if not expected:
            return None
        walk, snapshot = self.walk, self.snapshot
        releases = self.releases
        if releases is None:
            releases = running_releases(snapshot.now, snapshot.running, self.config.bf_resolution)
        else:
            releases = dict(releases)
        for job_id, end, allocation in walk.began:
            releases[job_id] = (end, allocation)
        return PlanMemo(self.config, self.fingerprint, snapshot.now,
                        [tl.steps() for tl in walk.timelines], walk.held or {},
                        dict(expected), dict(reserved_nodes), releases)


def running_releases(now: float, running: Sequence[RunningJob], resolution: int,
                     ) -> dict[int, Release]:
    """Each running job's planned release, as ``profile.build`` plans it (prediction off)."""
    soonest = round_up(now + 1, resolution)
    return {run.job_id: (max(round_up(planning_end(run, False), resolution), soonest),
                         run.allocation) for run in running}
