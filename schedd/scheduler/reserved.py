"""Advance reservations in the plan: blocked time for everyone else, the only capacity for
their own jobs.

A reservation (``snapshot.ReservationView``) holds, on each of its nodes, some CPUs, memory and
GPUs during ``[start, end)``. The cycle uses it in three places:

- ``Reserved.running_outside``: running jobs inside a reservation are not releases of the main
  profile (their use is part of the holding); every other running job is.
- ``Reserved.block``: the holdings are taken from the main profile over their windows, so the
  ordinary walk starts nobody who would still run into a reservation, and plans backfill
  reservations around it.
- ``Reserved.place_members``: the jobs that name a reservation get a walk of their own over a
  profile that is the reservation's holding inside its window (less its running members, and
  never more than the node really has) and nothing outside it; so a member job starts only
  inside the window, on the reserved resources, and must end by the reservation's end.

Reasons, as Slurm gives them: a member job waiting for its window is ``Reservation``; a job
outside that would fit now but for a reservation is ``ReqNodeNotAvail, May be reserved for other
job``. Association and QOS limits are not applied to member jobs (a reservation is a promise of
capacity made by an operator).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kiln.config import SchedulerConfig
from schedd.scheduler import placement
from schedd.scheduler.backfill import Plan, Walk
from schedd.scheduler.profile import Demand, NodeTimeline, round_up
from schedd.scheduler.snapshot import PendingJob, ReservationView, RunningJob, Snapshot

WAITING = "Reservation"
RESERVED_FOR_OTHER = "ReqNodeNotAvail, May be reserved for other job"

Use = tuple[int, int, int]  # CPUs, memory MiB, GPUs
Release = tuple[float, int, int, int]  # planned end, CPUs, memory, GPUs


class Reserved:
    """One cycle's reservations: built from the snapshot before the profile."""

    def __init__(self, snapshot: Snapshot, resolution: int) -> None:
        self.now = snapshot.now
        self.resolution = resolution
        self.views = {r.name: r for r in snapshot.reservations if r.end > snapshot.now}
        self.on_node: dict[str, list[ReservationView]] = {}
        for r in sorted(self.views.values(), key=lambda v: (v.start, v.name)):
            for node in r.holdings:
                self.on_node.setdefault(node, []).append(r)
        self.running_outside: list[RunningJob] = []
        self.members: dict[str, list[RunningJob]] = {}
        if not self.views:  # no reservation: every running job is an ordinary release
            self.running_outside = snapshot.running
            return
        for run in snapshot.running:
            if self._inside(run):
                self.members.setdefault(run.reservation, []).append(run)
            else:
                self.running_outside.append(run)

    def _inside(self, run: RunningJob) -> bool:
        """A running job counts inside its reservation when it ends by the reservation's end
        on reserved nodes; otherwise (reservation deleted or shortened) as an ordinary job."""
        r = self.views.get(run.reservation) if run.reservation else None
        return (r is not None and run.end_time <= round_up(r.end, self.resolution)
                and all(a.node in r.holdings for a in run.allocation))

    @property
    def active(self) -> bool:
        return bool(self.views)

    def _end(self, run: RunningJob) -> float:
        """A running job's planned release, rounded as ``profile.build`` rounds it."""
        return max(round_up(run.end_time, self.resolution),
                   round_up(self.now + 1, self.resolution))

    # --- the main profile ----------------------------------------------------------------------

    def block(self, timelines: Sequence[NodeTimeline]) -> None:
        """Take every holding from the main profile during its window; hide member jobs' GPU
        indices (their counts are inside the holding)."""
        if not self.views:
            return
        by_name = {tl.view.name: tl for tl in timelines}
        for r in self.views.values():
            end = round_up(r.end, self.resolution)
            for node, (c, m, g) in r.holdings.items():
                tl = by_name.get(node)
                if tl is not None:
                    tl.hold(Demand(c, m, g), max(r.start, self.now), end)
        for runs in self.members.values():
            for run in runs:
                for a in run.allocation:
                    tl = by_name.get(a.node)
                    if tl is not None:
                        taken = set(a.gpus)
                        tl.gpus_free = [i for i in tl.gpus_free if i not in taken]

    def split(self, order: list[PendingJob]) -> tuple[list[PendingJob], dict[str, list[PendingJob]]]:
        """The ordinary queue, and the jobs of each reservation (in the same order)."""
        if not any(j.reservation for j in order):
            return order, {}
        outside: list[PendingJob] = []
        members: dict[str, list[PendingJob]] = {}
        for job in order:
            if job.reservation:
                members.setdefault(job.reservation, []).append(job)
            else:
                outside.append(job)
        return outside, members

    def explain(self, order: Iterable[PendingJob], walk: Walk, plan: Plan) -> None:
        """``ReqNodeNotAvail, May be reserved for other job`` for a job that did not start
        although a reserved node has room for it now but for the reservation."""
        if not self.views:
            return
        reserved = [tl for tl in walk.timelines if tl.view.name in self.on_node]
        started = {job_id for job_id, _ in plan.starts}
        seen: dict[tuple, bool] = {}  # jobs of one shape and filter get one answer
        for job in order:
            if job.job_id in started or plan.reasons.get(job.job_id) not in ("Resources",
                                                                              "Priority"):
                continue
            key = (placement.filter_key(job), job.cpus_per_node, job.mem_per_node_mb,
                   job.gpus_per_node, job.shards_per_node, job.mps_per_node, job.exclusive, walk.duration(job))
            held = seen.get(key)
            if held is None:
                held = seen[key] = self._held_back(job, walk, reserved)
            if held:
                plan.reasons[job.job_id] = RESERVED_FOR_OTHER

    def _held_back(self, job: PendingJob, walk: Walk, reserved: list[NodeTimeline]) -> bool:
        end = self.now + walk.duration(job)
        cands = walk.candidates(job)
        for tl in reserved:
            if not (cands.every and tl.view.available) and tl.index not in cands.ids:
                continue
            rs = [r for r in self.on_node[tl.view.name] if r.start < end]
            if not rs:
                continue
            c, m, g = tl.free_at(self.now)
            for r in rs:
                if r.start <= self.now:  # its holding is already out of the first segment
                    hc, hm, hg = r.holdings[tl.view.name]
                    c, m, g = c + hc, m + hm, g + hg
            d = placement.demand_on(job, tl.view)
            if c >= d.cpus and m >= d.mem and g >= d.gpus:
                return True
        return False

    # --- the members' walks --------------------------------------------------------------------

    def place_members(self, members: dict[str, list[PendingJob]],
                      timelines: Sequence[NodeTimeline], config: SchedulerConfig,
                      plan: Plan) -> None:
        """Walk each reservation's jobs over its own profile; merge the outcome into ``plan``."""
        by_name = {tl.view.name: tl for tl in timelines}
        for name in sorted(members, key=lambda n: (self.views[n].start, n)
                           if n in self.views else (float("inf"), n)):
            jobs = members[name]
            r = self.views.get(name)
            if r is None:  # ended or deleted: nothing to run in
                for job in jobs:
                    plan.reasons[job.job_id] = WAITING
                continue
            own = [member_timeline(i, by_name[n], r, self, by_name[n].gpus_free)
                   for i, n in enumerate(sorted(h for h in r.holdings if h in by_name))]
            sub = Walk(own, self.now, config).run(jobs)
            for job_id, allocation in sub.starts:
                plan.starts.append((job_id, allocation))
                for a in allocation:
                    picked = set(a.gpus)
                    tl = by_name[a.node]
                    tl.gpus_free = [i for i in tl.gpus_free if i not in picked]
            started = {job_id for job_id, _ in sub.starts}
            for job in jobs:
                if job.job_id in started:
                    continue
                reason = sub.reasons.get(job.job_id, "Resources")
                plan.reasons[job.job_id] = WAITING if self.now < r.start else reason
            plan.expected_start.update(sub.expected_start)
            plan.reserved_nodes.update(sub.reserved_nodes)

    def releases(self, node: str, only: str | None = None,
                 outside: bool = False) -> list[Release]:
        """Planned releases on ``node``: of ordinary jobs (``outside``), or of one
        reservation's members (``only``)."""
        runs: Iterable[RunningJob] = (self.running_outside if outside
                                      else self.members.get(only or "", ()))
        out = []
        for run in runs:
            for a in run.allocation:
                if a.node == node:
                    out.append((self._end(run), a.cpus, a.memory_mb, len(a.gpus)))
        return out


def _sum_after(releases: Iterable[Release], t: float) -> Use:
    """What the jobs of ``releases`` still hold at instant ``t``."""
    c = m = g = 0
    for end, dc, dm, dg in releases:
        if end > t:
            c, m, g = c + dc, m + dm, g + dg
    return c, m, g


def member_timeline(index: int, main: NodeTimeline, r: ReservationView, reserved: Reserved,
                    gpus_free: list[int]) -> NodeTimeline:
    """The profile a member job of ``r`` sees on one node: zero outside the window; inside it
    the holding less the members' use, never more than the node has beside ordinary jobs and
    the other reservations of the node."""
    node, now = main.view.name, reserved.now
    cap = (main.view.cpus, main.view.memory_mb, len(main.view.gpus))
    held = r.holdings[node]
    outside = reserved.releases(node, outside=True)
    own = reserved.releases(node, only=r.name)
    others = [(o, reserved.releases(node, only=o.name))
              for o in reserved.on_node.get(node, ()) if o.name != r.name]
    end = round_up(r.end, reserved.resolution)
    points = {now, end}
    if r.start > now:
        points.add(r.start)
    points.update(t for t, *_ in outside + own if t > now)
    for o, rel in others:
        points.update(t for t in (o.start, round_up(o.end, reserved.resolution)) if t > now)
        points.update(t for t, *_ in rel if t > now)
    tl = NodeTimeline(index, main.view, now)
    tl.times = sorted(t for t in points if t >= now)
    tl.cpus, tl.mem, tl.gpus = [], [], []
    for t in tl.times:
        free = _free_at(t, node, r, end, cap, held, outside, own, others, reserved.resolution)
        tl.cpus.append(free[0])
        tl.mem.append(free[1])
        tl.gpus.append(free[2])
    tl.monotone = False
    tl.gpus_free = list(gpus_free)
    return tl


def _free_at(t: float, node: str, r: ReservationView, end: float, cap: Use, held: Use,
             outside: list[Release], own: list[Release],
             others: list[tuple[ReservationView, list[Release]]], resolution: int) -> Use:
    """Free for ``r``'s members at ``t``: min(holding - members, node - everything else)."""
    if t < r.start or t >= end:
        return (0, 0, 0)
    m = _sum_after(own, t)
    taken = list(_sum_after(outside, t))
    for o, rel in others:
        mo = _sum_after(rel, t)
        inside = o.start <= t < round_up(o.end, resolution)
        oh = o.holdings[node]
        for k in range(3):
            taken[k] += max(mo[k], oh[k] if inside else 0)
    c, mem, g = (max(0, min(held[k] - m[k], cap[k] - taken[k] - m[k])) for k in range(3))
    return c, mem, g
