"""Preemption: which running jobs make way for a pending one, and for whom (SPEC §4).

Pure, like the rest of the core: the cycle calls ``decide`` after the walk, with the snapshot
and the plan; the daemon (``schedd/lifecycle/preemption.py``) signals the victims, waits out their
GraceTime and requeues or cancels them. Two causes make a pending job a *preemptor*:

- **QOS** (Slurm's ``PreemptType=preempt/qos``): its QOS lists the QOS of the victims
  (``sacctmgr add qos high Preempt=low``); a QOS whose PreemptMode is OFF is never preempted.
- **Guarantee** (kiln): its account is under its guarantee (``sacctmgr modify account A set
  Guarantee=gres/gpu=4``) even with this job counted; then *burst* jobs (QOS ``burst_qos``) of
  accounts over their own guarantee are reclaimed, never below that guarantee, and at most
  ``reclaims_per_cycle`` preemptors per cycle do so, so the cluster does not thrash.

Victims: among the candidates, the set that lets the preemptor start now and has the best

    score = release_value / (checkpoint_age + restart_cost)

summed over the set (the seed's cost-aware preemption). ``release_value`` is what the set frees
*where the preemptor can use it* (GPUs on its eligible nodes for a GPU job, else CPUs), capped at
what the preemptor still lacks on that node: freeing more than needed earns nothing, so a 4-GPU job prefers a
fresh-checkpointed 4-GPU victim to a stale 8-GPU one, and an 8-GPU job takes the 8-GPU one when
no cheaper set frees 8 GPUs on one node. ``checkpoint_age`` is the time since the victim's last
checkpoint (the mtime of ``$KILN_CHECKPOINT_FILE``, as its agent reports), else its run time;
``restart_cost`` is ``--restart-cost`` (else the config default). Costs are seconds; a set that
would still not let the preemptor start (whole gang, GPU type, ``-w`` nodes, partition) is never
chosen: no preemption is better than a useless one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from kiln.config import SchedulerConfig
from schedd.scheduler import placement
from schedd.scheduler.profile import NodeTimeline
from schedd.scheduler.snapshot import (
    NodeView,
    PendingJob,
    Preemption,
    PreemptPolicy,
    RunningJob,
    Snapshot,
)

PREEMPTIBLE_REASONS = frozenset({"Resources", "Priority"})  # not limits, not bad requests
MIN_COST = 1.0  # seconds: a victim never costs nothing (a zero cost would score infinity)
GUARANTEE = "guarantee"
QOS = "qos"


@dataclass(slots=True)
class Candidate:
    """A running job that may be preempted, with what its loss would cost."""

    job: RunningJob
    release: int  # units (GPUs or CPUs) it frees on the preemptor's eligible nodes
    cost: float  # seconds: checkpoint age + restart cost


AllowedFn = Callable[[Sequence[Candidate]], bool]  # vetoes victim sets (a guarantee's floor)


def score(release_value: float, checkpoint_age: float, restart_cost: float) -> float:
    """The seed's preemption score: what is freed per unit of work lost and of restart."""
    return release_value / max(checkpoint_age + restart_cost, MIN_COST)


def checkpoint_age(run: RunningJob, now: float) -> float:
    """Work a victim loses, in seconds: since its last checkpoint, but never more than this run
    (a checkpoint of an earlier run is where this run began)."""
    ran = max(now - run.start_time, 0.0)
    if run.checkpoint_age is None:
        return ran
    return min(max(run.checkpoint_age, 0.0), ran)


def cost_of(run: RunningJob, now: float, default_restart: int) -> float:
    restart = run.restart_cost if run.restart_cost is not None else default_restart
    return checkpoint_age(run, now) + max(restart, 0)


# --- resources -------------------------------------------------------------------------------

Free = dict[str, list[int]]  # node -> [CPUs, memory MiB, GPUs] free now


def free_now(nodes: Sequence[NodeView], running: Iterable[RunningJob]) -> Free:
    free = {n.name: [n.cpus, n.memory_mb, len(n.gpus)] for n in nodes}
    shared: dict[str, set[int]] = {}
    for run in running:
        take(free, run, -1)
        for a in run.allocation:
            if a.shards:
                shared.setdefault(a.node, set()).update(a.shards)
    # a GPU in use by shards (scheduler/shares.py) is not free, and preempting some of its
    # share holders does not free it (``take`` gives back whole GPUs only): never counted on
    for name, gpus in shared.items():
        if name in free:
            free[name][2] -= len(gpus)
    return free


def take(free: Free, run: RunningJob, sign: int) -> None:
    """Add (``sign`` 1) or remove (-1) a running job's holdings."""
    for a in run.allocation:
        slot = free.get(a.node)
        if slot is not None:
            slot[0] += sign * a.cpus
            slot[1] += sign * a.memory_mb
            slot[2] += sign * len(a.gpus)


def fitting_nodes(job: PendingJob, free: Free, eligible: Sequence[NodeView]) -> list[NodeView]:
    out = []
    for view in eligible:
        d = placement.demand_on(job, view)
        c, m, g = free[view.name]
        if c >= d.cpus and m >= d.mem and g >= d.gpus:
            out.append(view)
    return out


def fits(job: PendingJob, free: Free, eligible: Sequence[NodeView]) -> bool:
    """Could the whole gang start now on ``free``? (-w nodes must be among its nodes.)"""
    ok = fitting_nodes(job, free, eligible)
    if job.nodelist and not job.nodelist <= {v.name for v in ok}:
        return False
    return len(ok) >= job.num_nodes


def claim(job: PendingJob, free: Free, eligible: Sequence[NodeView],
          prefer: Iterable[str] = ()) -> list[str]:
    """Hold the preemptor's share of ``free`` (best fit, -w first, then the nodes its victims
    free) for the rest of the cycle; the nodes it will run on."""
    ok = fitting_nodes(job, free, eligible)
    wanted = set(prefer)
    ok.sort(key=lambda v: (job.nodelist and v.name not in job.nodelist, v.name not in wanted,
                           free[v.name][2], free[v.name][0], v.name))
    for view in ok[:job.num_nodes]:
        d = placement.demand_on(job, view)
        slot = free[view.name]
        slot[0] -= d.cpus
        slot[1] -= d.mem
        slot[2] -= d.gpus
    return sorted(v.name for v in ok[:job.num_nodes])


def release_of(job: PendingJob, run: RunningJob, eligible: set[str]) -> int:
    gpu = job.total_gpus > 0
    return sum(len(a.gpus) if gpu else a.cpus for a in run.allocation if a.node in eligible)


# --- choosing victims --------------------------------------------------------------------------


def choose(job: PendingJob, candidates: Sequence[Candidate], free: Free,
           eligible: Sequence[NodeView], max_exhaustive: int = 12,
           allowed: AllowedFn | None = None) -> list[Candidate] | None:
    """The victim set with the best score that lets ``job`` start now, or None.

    Node by node: on each eligible node the best set among the victims there (every subset of
    the ``max_exhaustive`` best single scorers, smaller sets first, so of equal scores the
    smaller wins; else greedy by single score, pruned of members not needed). Then a job of one
    node takes the best node's set; a gang takes its ``-w`` nodes, the nodes that fit already,
    and the cheapest sets for the rest. ``allowed`` vetoes sets (a guarantee's floor)."""
    by_node: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.release > 0:
            for name in {a.node for a in c.job.allocation}:
                by_node.setdefault(name, []).append(c)
    ready = [v.name for v in fitting_nodes(job, free, eligible)]
    options = [opt for v in eligible if v.name not in ready and v.name in by_node
               and (opt := _best_on_node(job, v, by_node[v.name], free, max_exhaustive,
                                         allowed)) is not None]
    return _combine(job, ready, options, allowed)


@dataclass(slots=True)
class NodeOption:
    """The best victim set on one node: what it costs, what it is worth there."""

    node: str
    victims: list[Candidate]
    cost: float
    value: float
    freed: int  # GPUs (CPUs) it frees there: of equal scores, the one that wastes least wins


def _held_on(run: RunningJob, node: str) -> tuple[int, int, int]:
    c = m = g = 0
    for a in run.allocation:
        if a.node == node:
            c, m, g = c + a.cpus, m + a.memory_mb, g + len(a.gpus)
    return c, m, g


def _best_on_node(job: PendingJob, view: NodeView, cands: list[Candidate], free: Free,
                  cap: int, allowed: AllowedFn | None) -> NodeOption | None:
    d = placement.demand_on(job, view)
    slot = free[view.name]
    gpu = job.total_gpus > 0
    lack = max(d.gpus - slot[2] if gpu else d.cpus - slot[0], 1)
    held = {id(c): _held_on(c.job, view.name) for c in cands}
    unit = 2 if gpu else 0

    def worth(combo: Sequence[Candidate]) -> float:
        return score(min(sum(held[id(c)][unit] for c in combo), lack),
                     sum(c.cost for c in combo), 0)

    def frees(combo: Sequence[Candidate]) -> bool:
        c = sum(held[id(o)][0] for o in combo) + slot[0]
        m = sum(held[id(o)][1] for o in combo) + slot[1]
        g = sum(held[id(o)][2] for o in combo) + slot[2]
        return (c >= d.cpus and m >= d.mem and g >= d.gpus
                and (allowed is None or allowed(combo)))

    if not frees(cands) and allowed is None:
        return None  # not even all of them would do
    cands = sorted(cands, key=lambda c: (-worth([c]), c.job.job_id))
    best: tuple[float, list[Candidate]] | None = None
    pool = cands[:cap]
    for size in range(1, len(pool) + 1):
        for combo in combinations(pool, size):
            value = worth(combo)
            if (best is None or value > best[0]) and frees(combo):
                best = (value, list(combo))
    if best is None and len(cands) > len(pool):
        chosen = _greedy(cands, frees)
        best = (worth(chosen), chosen) if chosen else None
    if best is None:
        return None
    return NodeOption(view.name, best[1], sum(c.cost for c in best[1]), best[0],
                      sum(held[id(c)][unit] for c in best[1]))


def _greedy(cands: list[Candidate], frees: Callable[[Sequence[Candidate]], bool],
            ) -> list[Candidate] | None:
    chosen: list[Candidate] = []
    for c in cands:
        chosen.append(c)
        if frees(chosen):
            break
    else:
        return None
    for c in sorted(chosen, key=lambda c: c.cost, reverse=True):  # drop the dearest first
        rest = [o for o in chosen if o is not c]
        if rest and frees(rest):
            chosen = rest
    return chosen


def _combine(job: PendingJob, ready: list[str], options: list[NodeOption],
             allowed: AllowedFn | None) -> list[Candidate] | None:
    """The gang's nodes: its -w nodes, then nodes that fit already, then the best sets (one
    node: the best score; a gang: the cheapest sets, as its release value is fixed)."""
    by_name = {o.node: o for o in options}
    picked: list[NodeOption] = []
    count = 0
    for name in sorted(job.nodelist):
        if name in ready:
            count += 1
        elif name in by_name:
            picked.append(by_name[name])
            count += 1
        else:
            return None
    count += min(len([n for n in ready if n not in job.nodelist]), job.num_nodes - count)
    rest = [o for o in options if o.node not in job.nodelist]
    if job.num_nodes == 1:
        rest.sort(key=lambda o: (-o.value, len(o.victims), o.freed, o.node))
    else:
        rest.sort(key=lambda o: (o.cost, -o.value, o.freed, o.node))
    for option in rest:
        if count >= job.num_nodes:
            break
        union = _union(picked + [option])
        if allowed is None or allowed(union):
            picked.append(option)
            count += 1
    if count < job.num_nodes:
        return None
    victims = _union(picked)
    return victims or None


def _union(options: Sequence[NodeOption]) -> list[Candidate]:
    seen: dict[int, Candidate] = {}
    for option in options:
        for c in option.victims:
            seen.setdefault(c.job.job_id, c)
    return list(seen.values())


# --- the cycle's phase -------------------------------------------------------------------------


def decide(snapshot: Snapshot, started: Iterable[tuple[int, list]], reasons: dict[int, str],
           order: Sequence[PendingJob], config: SchedulerConfig) -> list[Preemption]:
    """Preemptions for the pending jobs the walk left waiting for resources, in queue order.

    ``started``: the walk's starts (their resources are taken); ``reasons``: its reasons.
    Victims already ending (``RunningJob.preempting``) are nobody's candidates; their resources
    stay with the preemptor that chose them."""
    policy = snapshot.preemption
    if policy is None:
        return []
    waiting = [j for j in order if reasons.get(j.job_id) in PREEMPTIBLE_REASONS
               and j.job_id not in policy.in_flight]
    if not waiting:
        return []
    free = free_now(snapshot.nodes, snapshot.running)
    for _, allocation in started:
        take(free, RunningJob(0, allocation, 0.0, 0.0), -1)
    static: list[NodeTimeline] = []  # built for the first job that may preempt
    taken: set[int] = {r.job_id for r in snapshot.running if r.preempting}
    usage = account_usage(snapshot.running)
    out: list[Preemption] = []
    reclaims = 0
    for job in waiting:
        causes = _causes(job, policy, usage, reclaims < config.reclaims_per_cycle)
        if not causes:
            continue
        if not static:
            static = [NodeTimeline(i, v, snapshot.now) for i, v in enumerate(snapshot.nodes)]
        eligible = [t.view for t in placement.candidates(job, static).nodes]
        if not eligible or fits(job, free, eligible):
            continue  # not a matter of running jobs (or waiting for a reservation's turn)
        names = {v.name for v in eligible}
        victims, cause = None, ""
        for cause in causes:
            cands = [Candidate(r, release_of(job, r, names),
                               cost_of(r, snapshot.now, config.preempt_restart_cost))
                     for r in snapshot.running
                     if r.job_id not in taken and not exempt(r, snapshot.now, config)
                     and _may_preempt(job, r, policy, cause, usage)]
            allowed = _floor(policy, usage) if cause == GUARANTEE else None
            victims = choose(job, cands, free, eligible, config.preempt_max_candidates, allowed)
            if victims is not None:
                break
        if victims is None:
            continue
        for c in victims:
            taken.add(c.job.job_id)
            take(free, c.job, 1)
            _charge(usage, c.job, -1)
        nodes = claim(job, free, eligible, {a.node for c in victims for a in c.job.allocation})
        if cause == GUARANTEE:
            reclaims += 1
        out.append(Preemption(job.job_id, sorted(c.job.job_id for c in victims), cause, nodes))
    return out


def exempt(run: RunningJob, now: float, config: SchedulerConfig) -> bool:
    """PreemptExemptTime: a run younger than this is nobody's victim (counted from its last
    start, so a requeued victim is not preempted again at once)."""
    return now - run.start_time < config.preempt_exempt_time


def hold_for(plan_nodes: dict[int, list[str]], preemptions: Iterable[Preemption]) -> None:
    """What a preemption frees is held for its preemptor: its nodes become the promise the
    next cycles keep it to (``Walk.promised_nodes``), so neither another job nor a requeued
    victim takes them, and the preemptor is not planned elsewhere meanwhile."""
    for p in preemptions:
        if p.nodes:
            plan_nodes[p.job_id] = list(p.nodes)


def held_back(order: list[PendingJob], policy: PreemptPolicy) -> tuple[list[PendingJob],
                                                                       list[int]]:
    """A requeued victim never starts ahead of the job that preempted it: while that one is
    in flight (and so pending), the victim is not planned. (The queue, the ids held.)"""
    if not policy.held_back:
        return order, []
    pending = {j.job_id for j in order}
    held = {v for v, by in policy.held_back.items() if by in pending and by in policy.in_flight}
    if not held:
        return order, []
    return [j for j in order if j.job_id not in held], sorted(held & pending)


def first(order: list[PendingJob], in_flight: frozenset[int]) -> list[PendingJob]:
    """Preemptors whose victims are ending go first in the walk: what was freed for them must
    not go to a job that happened to hold an earlier promise."""
    if not in_flight:
        return order
    return ([j for j in order if j.job_id in in_flight]
            + [j for j in order if j.job_id not in in_flight])


def _causes(job: PendingJob, policy: PreemptPolicy, usage: Usage,
            may_reclaim: bool) -> list[str]:
    """Why the job may preempt: its QOS first, then (if that frees nothing) its guarantee."""
    out = [QOS] if policy.preempts.get(job.qos) else []
    if may_reclaim and _under_guarantee(job, policy, usage):
        out.append(GUARANTEE)
    return out


def _may_preempt(job: PendingJob, run: RunningJob, policy: PreemptPolicy, cause: str,
                 usage: Usage) -> bool:
    if run.qos in policy.exempt or run.account == job.account and cause == GUARANTEE:
        return False
    if cause == QOS:
        return run.qos in policy.preempts.get(job.qos, frozenset())
    if run.qos != policy.burst_qos:
        return False
    guarantee = policy.guarantees.get(run.account, {})
    held = usage.get(run.account, {})
    return any(held.get(k, 0.0) > g for k, g in guarantee.items()) if guarantee else True


# --- guarantees --------------------------------------------------------------------------------

Usage = dict[str, dict[str, float]]  # account -> TRES its running jobs hold


def run_tres(run: RunningJob) -> dict[str, float]:
    return {"cpu": float(sum(a.cpus for a in run.allocation)),
            "mem": float(sum(a.memory_mb for a in run.allocation)),
            "gres/gpu": float(sum(len(a.gpus) for a in run.allocation)),
            "node": float(len(run.allocation))}


def pending_tres(job: PendingJob) -> dict[str, float]:
    return {"cpu": float(job.cpus_per_node * job.num_nodes),
            "mem": float(job.mem_per_node_mb * job.num_nodes),
            "gres/gpu": float(job.total_gpus), "node": float(job.num_nodes)}


def account_usage(running: Iterable[RunningJob]) -> Usage:
    usage: Usage = {}
    for run in running:
        _charge(usage, run, 1)
    return usage


def _charge(usage: Usage, run: RunningJob, sign: int) -> None:
    held = usage.setdefault(run.account, {})
    for key, value in run_tres(run).items():
        held[key] = held.get(key, 0.0) + sign * value


def _under_guarantee(job: PendingJob, policy: PreemptPolicy, usage: Usage) -> bool:
    """Does the job, counted with what its account holds, stay within the account's
    guarantee? (Only the TRES the guarantee names count; no guarantee, no claim.)"""
    guarantee = policy.guarantees.get(job.account)
    if not guarantee or job.qos == policy.burst_qos:
        return False
    held = usage.get(job.account, {})
    want = pending_tres(job)
    return all(held.get(k, 0.0) + want.get(k, 0.0) <= g for k, g in guarantee.items())


def _floor(policy: PreemptPolicy, usage: Usage) -> AllowedFn:
    """A veto on victim sets that would take a donor account below its own guarantee."""
    def allowed(victims: Sequence[Candidate]) -> bool:
        lost: Usage = {}
        for c in victims:
            _charge(lost, c.job, 1)
        for account, tres in lost.items():
            guarantee = policy.guarantees.get(account, {})
            held = usage.get(account, {})
            if any(held.get(k, 0.0) - tres.get(k, 0.0) < g for k, g in guarantee.items()):
                return False
        return True
    return allowed
