"""What a caller may leave out of a cycle, and vouch for, without changing a decision.

- ``Snapshot.explain = False`` (the simulator: nobody reads the reasons or the priorities shown)
  gives the same starts, plans and preemptions as ``True``, on random queues over a few cycles
  with every policy, nice values, admin priorities, advance reservations, limits and preemption;
  the reasons it still gives are a subset and the priorities are left out.
- ``Snapshot.plain_arrivals = True`` on a queue that is what it vouches (arrival order, one nice,
  no admin priority, no reservation named) is only an optimisation: every decision, reason and
  priority is the same as the core's own checks give.
- The simulator asks for no explanations and vouches for plain arrivals only when the trace is
  in (submit time, job id) order.
"""

from __future__ import annotations

import dataclasses
import random

from kiln.config import SchedulerConfig
from kiln.model import GPU, NodeAllocation
from schedd.scheduler.cycle import schedule
from schedd.scheduler.snapshot import (
    AssociationView,
    AssocLimits,
    Decisions,
    Limits,
    LimitTable,
    NodeView,
    PendingJob,
    PreemptPolicy,
    QOSLimits,
    ReservationView,
    RunningJob,
    Snapshot,
)
from simulator.machine import pool
from simulator.policy import policy_config
from simulator.replay import replay
from simulator.swf import Trace, TraceJob

NOW = 1_000_000.0
CONFIGS = [
    policy_config("fcfs"),
    policy_config("easy"),
    policy_config("conservative"),
    SchedulerConfig(),  # kiln's default: multifactor, fair share, short_area fill
    SchedulerConfig(weight_fairshare=0, max_age=3600),  # age alone varies
    SchedulerConfig(fill="priority", bf_max_job_test=3),  # a tail never looked at
    dataclasses.replace(policy_config("fcfs"), bf_max_job_test=2),
]
ACCOUNTS = ["a", "b"]


def _nodes(rng: random.Random) -> list[NodeView]:
    out = []
    for i in range(rng.randint(1, 3)):
        gpus = rng.choice([0, 4, 8])
        out.append(NodeView(f"n{i}", rng.choice([16, 64]), 64_000,
                            [GPU(g, f"n{i}-{g}", "H100", 1) for g in range(gpus)], "h100"))
    return out


def _job(rng: random.Random, job_id: int, submit: float, nodes: list[NodeView],
         plain: bool) -> PendingJob:
    node = rng.choice(nodes)
    return PendingJob(
        job_id, f"j{job_id}", user=rng.choice(["u1", "u2", "u3"]), account=rng.choice(ACCOUNTS),
        qos=rng.choice(["normal", "normal", "high"]),
        num_nodes=rng.choice([1, 1, 1, len(nodes)]), cpus_per_node=rng.randint(1, node.cpus // 2),
        gpus_per_node=rng.randint(0, min(len(n.gpus) for n in nodes)),
        time_limit=rng.choice([60, 600, 3600, 7200]), submit_time=submit,
        nice=0 if plain else rng.choice([0, 0, 0, 10]),
        admin_priority=None if plain or rng.random() < 0.9 else rng.randint(0, 5000),
        reservation="" if plain or rng.random() < 0.85 else rng.choice(["maint", "gone"]),
    )


def _arrivals(rng: random.Random, nodes: list[NodeView], n: int, plain: bool,
              first_id: int, latest: float, spread: list[int]) -> list[PendingJob]:
    """Jobs in arrival order: (submit time, job id) rising, ids not always rising with it."""
    ids = rng.sample(range(first_id, first_id + 3 * n), n)
    submits = [latest - rng.choice(spread) for _ in range(n)]
    jobs = [_job(rng, i, s, nodes, plain) for i, s in zip(ids, submits, strict=True)]
    return sorted(jobs, key=lambda j: (j.submit_time, j.job_id))


def _extras(rng: random.Random, nodes: list[NodeView], plain: bool) -> dict:
    """Associations, and for a queue that is not plain, sometimes a reservation, limits and
    preemption."""
    out: dict = {"associations": [AssociationView(a, shares=s, usage=u) for a, s, u in
                                  [("a", 1, 5000.0), ("b", 3, 100.0)]]}
    if plain:
        return out
    if rng.random() < 0.5:
        node = nodes[0]
        out["reservations"] = [ReservationView("maint", NOW + rng.choice([-60, 0, 300]),
                                               NOW + 4000, {node.name: (node.cpus // 2, 0, 0)})]
    if rng.random() < 0.4:
        table = LimitTable()
        table.assocs[("a", "")] = AssocLimits("a", limits=Limits(grp_tres={"cpu": 24}))
        table.qos["normal"] = QOSLimits("normal")
        out["limits"] = table
    if rng.random() < 0.4:
        out["preemption"] = PreemptPolicy(preempts={"high": frozenset({"normal"})})
    return out


def _running(rng: random.Random, nodes: list[NodeView]) -> list[RunningJob]:
    out = []
    for k, node in enumerate(nodes):
        if rng.random() < 0.7:
            gpus = list(range(rng.randint(0, len(node.gpus))))
            out.append(RunningJob(900_000 + k, [NodeAllocation(node.name, node.cpus // 4, 0, gpus)],
                                  NOW - 100, NOW + rng.choice([50, 900, 5000]),
                                  "u9", rng.choice(ACCOUNTS)))
    return out


def _cycles(rng: random.Random, config: SchedulerConfig, plain: bool):
    """A few cycles over one random cluster, the daemon's way (starts run, plans fed back):
    yields each snapshot with the decisions the core gives it as the daemon asks."""
    nodes = _nodes(rng)
    snap = Snapshot(NOW, nodes, _running(rng, nodes),
                    _arrivals(rng, nodes, rng.randint(1, 40), plain, 1, NOW, [0, 5, 30, 400]),
                    **_extras(rng, nodes, plain))
    for cycle in range(4):
        decisions = schedule(snap, config)
        yield snap, decisions
        started = {s.job_id: s for s in decisions.starts}
        by_id = {j.job_id: j for j in snap.pending}
        now = snap.now + rng.choice([1, 60, 600])
        running = [r for r in snap.running if r.end_time > now] + [
            RunningJob(j, s.allocation, snap.now, snap.now + by_id[j].time_limit)
            for j, s in started.items() if snap.now + by_id[j].time_limit > now]
        newcomers = _arrivals(rng, nodes, rng.randint(0, 8), plain, 1000 * (cycle + 2), now,
                              [0, 0, 1])  # after every job before them
        snap = dataclasses.replace(
            snap, now=now, running=running,
            pending=[j for j in snap.pending if j.job_id not in started] + newcomers,
            promised=decisions.expected_start, promised_nodes=decisions.reserved_nodes)


def _plan(d: Decisions) -> tuple:
    return d.starts, d.expected_start, d.reserved_nodes, d.preemptions


def test_no_explanations_same_decisions() -> None:
    rng = random.Random(5)
    for case in range(150):
        config = CONFIGS[case % len(CONFIGS)]
        for snap, full in _cycles(rng, config, plain=case % 3 == 0):
            quiet = schedule(dataclasses.replace(snap, explain=False), config)
            assert _plan(quiet) == _plan(full)
            assert quiet.priorities == {}
            assert quiet.reasons.keys() <= full.reasons.keys()
            assert set(full.priorities) == {j.job_id for j in snap.pending}


def test_plain_arrivals_is_only_an_optimisation() -> None:
    rng = random.Random(8)
    for case in range(150):
        config = CONFIGS[case % len(CONFIGS)]
        for snap, full in _cycles(rng, config, plain=True):
            vouched = dataclasses.replace(snap, plain_arrivals=True)
            assert schedule(vouched, config) == full
            quiet = schedule(dataclasses.replace(vouched, explain=False), config)
            assert _plan(quiet) == _plan(full)


def _seen_by_core(jobs: list[TraceJob]) -> list[Snapshot]:
    seen: list[Snapshot] = []

    def core(snapshot: Snapshot, config: SchedulerConfig) -> Decisions:
        seen.append(snapshot)
        return schedule(snapshot, config)

    replay(Trace("t", 4, jobs), pool(4), policy_config("fcfs"), schedule=core)
    return seen


def test_the_simulator_vouches_only_for_a_trace_in_order() -> None:
    in_order = [TraceJob(1, 0, 10, 4, 10), TraceJob(5, 0, 10, 2, 10), TraceJob(2, 3, 5, 1, 5)]
    seen = _seen_by_core(in_order)
    assert seen and all(s.plain_arrivals and not s.explain for s in seen)
    tie_out_of_order = [TraceJob(5, 0, 10, 4, 10), TraceJob(1, 0, 10, 2, 10)]
    seen = _seen_by_core(tie_out_of_order)
    assert seen and not any(s.plain_arrivals or s.explain for s in seen)
