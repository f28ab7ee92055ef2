"""Network topology in placement: which of the nodes that fit a gang takes.

The rule (docs/scheduler.md, "Topology"), for a multi-node job on a cluster with a
``[topology]`` (each ``NodeView.topo`` a ``Place``: its groups bottom-up):

1. Group the nodes that fit by leaf (leaf switch or base block). With ``--segment=S`` a leaf
   offers only whole segments (its fitting nodes rounded down to a multiple of S); with
   ``--exclusive=topo`` only a leaf whose every node fits (the whole block free).
2. Go up the levels, leaf first: at the lowest level where one group holds the job, take the
   group that holds it with the least to spare (best fit: the emptiest blocks stay whole for
   the jobs that need them whole). The top is the whole cluster.
3. Inside that group take as few leaves as hold it: the fullest first, the last the smallest
   that completes it (best fit again); in each leaf its nodes in the caller's best-fit order.
4. ``--switches=N`` while the job has waited less than its ``switch_wait``: no choice with more
   than N leaves is taken (the job waits, ``Resources``); after it, what there is.

The placement calls ``choose`` instead of its plain best fit when ``applies``; the backfill
sweep calls it at each instant it tries, so a reservation obeys the same rule. Pure.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from schedd.scheduler.profile import Demand, NodeTimeline
from schedd.scheduler.snapshot import PendingJob, RunningJob


def applies(job: PendingJob, nodes: Sequence[NodeTimeline]) -> bool:
    """Whether the topology decides among ``nodes`` for ``job``: a gang (or an
    ``--exclusive=topo`` job) without ``-w``, on a cluster whose nodes have places."""
    return (job.num_nodes > 1 or job.exclusive_topo or job.segment > 0) \
        and not job.nodelist and bool(nodes) and nodes[0].view.topo is not None


def bound(job: PendingJob, t: float) -> int:
    """The most leaves the job may take at ``t``: ``--switches`` until its wait is over."""
    if job.switches and t < job.submit_time + job.switch_wait:
        return job.switches
    return 0


def choose(job: PendingJob, ranked: Sequence[NodeTimeline], t: float
           ) -> list[NodeTimeline] | None:
    """``num_nodes`` of ``ranked`` (nodes that fit, in best-fit order) by the rule above, or
    None when the rule finds none (segments, a whole block, the switch bound)."""
    need = job.num_nodes
    unit = job.segment or 1
    leaves: dict[str, list[NodeTimeline]] = {}
    for tl in ranked:
        place = tl.view.topo
        if place is None:
            continue
        leaves.setdefault(place.path[0], []).append(tl)
    caps: dict[str, int] = {}
    for leaf, nodes in leaves.items():
        if job.exclusive_topo and len(nodes) < nodes[0].view.topo.leaf_size:  # type: ignore
            continue
        cap = len(nodes) // unit * unit
        if cap:
            caps[leaf] = cap
    if sum(caps.values()) < need:
        return None
    limit = bound(job, t)
    depth = len(next(iter(leaves.values()))[0].view.topo.path)  # type: ignore
    order = {leaf: i for i, leaf in enumerate(leaves)}  # first seen: the best-fit order
    for level in range(depth + 1):
        groups: dict[str, list[str]] = {}
        for leaf in caps:
            key = leaves[leaf][0].view.topo.path[level] if level < depth else ""  # type: ignore
            groups.setdefault(key, []).append(leaf)
        fits = sorted((sum(caps[leaf] for leaf in members), order[members[0]], key)
                      for key, members in groups.items())
        for total, _, key in fits:
            if total < need:
                continue
            picked = _fewest(groups[key], caps, need, order)
            if limit and len(picked) > limit:
                continue
            out: list[NodeTimeline] = []
            for leaf in picked:
                out += leaves[leaf][:min(caps[leaf], need - len(out))]
            return out
    return None


def _fewest(members: list[str], caps: dict[str, int], need: int, order: dict[str, int]
            ) -> list[str]:
    """As few of ``members`` as hold ``need``: the fullest first; the last one taken the
    smallest that completes the job."""
    by_size = sorted(members, key=lambda leaf: (-caps[leaf], order[leaf]))
    taken: list[str] = []
    total = 0
    for i, leaf in enumerate(by_size):
        if total + caps[leaf] >= need:
            rest = need - total
            last = min(by_size[i:], key=lambda m: (caps[m] < rest, caps[m], order[m]))
            taken.append(last)
            return taken
        taken.append(leaf)
        total += caps[leaf]
    return taken


def leaves_of(chosen: Sequence[NodeTimeline]) -> set[str]:
    return {tl.view.topo.path[0] for tl in chosen if tl.view.topo is not None}


def peers(chosen: Sequence[NodeTimeline], timelines: Sequence[NodeTimeline]
          ) -> list[NodeTimeline]:
    """The nodes of ``chosen``'s leaves that are not in it: what ``--exclusive=topo`` holds
    beside its own nodes."""
    mine = leaves_of(chosen)
    ids = {tl.index for tl in chosen}
    return [tl for tl in timelines if tl.view.topo is not None
            and tl.view.topo.path[0] in mine and tl.index not in ids]


def whole(tl: NodeTimeline) -> Demand:
    return Demand(tl.view.cpus, tl.view.memory_mb, len(tl.view.gpus))


def hold_free(tl: NodeTimeline, start: float, end: float) -> Demand:
    """Hold what ``tl`` has free all through ``[start, end)`` (a peer of an exclusive job)."""
    times = tl.times
    k = max(bisect_right(times, start) - 1, 0)
    c, m, g = tl.cpus[k], tl.mem[k], tl.gpus[k]
    k += 1
    while k < len(times) and times[k] < end:
        c, m, g = min(c, tl.cpus[k]), min(m, tl.mem[k]), min(g, tl.gpus[k])
        k += 1
    d = Demand(max(c, 0), max(m, 0), max(g, 0))
    if d.cpus or d.mem or d.gpus:
        tl.hold(d, start, end)
    return d


def hold_running(timelines: Sequence[NodeTimeline], running: Sequence[RunningJob],
                 now: float) -> None:
    """The blocks of running ``--exclusive=topo`` jobs held for them until their end."""
    exclusive = [r for r in running if r.exclusive_topo]
    if not exclusive or not timelines or timelines[0].view.topo is None:
        return
    by_name = {tl.view.name: tl for tl in timelines}
    for run in exclusive:
        chosen = [by_name[a.node] for a in run.allocation if a.node in by_name]
        for tl in peers(chosen, timelines):
            hold_free(tl, now, max(run.end_time, now + 1))
