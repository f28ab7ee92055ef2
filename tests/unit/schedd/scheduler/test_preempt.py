"""Preemption's pure decision (schedd/scheduler/preempt.py): the seed's victim scoring, sets that
really let the preemptor start, guarantees and burst reclaim."""

from __future__ import annotations

from kiln.config import SchedulerConfig
from kiln.model import NodeAllocation
from schedd.scheduler import preempt
from schedd.scheduler.cycle import schedule
from schedd.scheduler.snapshot import NodeView, PendingJob, PreemptPolicy, RunningJob, Snapshot
from tests.builders import node_view, running

NOW = 2_000_000.0
MIN = 60.0
QOS_POLICY = PreemptPolicy(preempts={"high": frozenset({"low"})})


node = node_view


def run(job_id: int, name: str, gpus: list[int], *, qos: str = "low", ran: float = 120 * MIN,
        checkpoint: float | None = None, restart: float | None = None,
        account: str = "a", preempting: bool = False) -> RunningJob:
    return running(job_id, name, gpus, cpus=1, start=NOW - ran, end=NOW + 86400,
                   account=account, qos=qos, checkpoint_age=checkpoint,
                   restart_cost=None if restart is None else int(restart), preempting=preempting)


def seed_cluster() -> tuple[list[NodeView], list[RunningJob]]:
    """The seed's X, Y, Z on a full cluster (W, of QOS normal, is nobody's victim)."""
    x = run(1, "n1", list(range(8)), ran=20 * 60 * MIN, checkpoint=60 * MIN, restart=30 * MIN)
    y = run(2, "n2", [0, 1, 2, 3], ran=120 * MIN, checkpoint=5 * MIN, restart=10 * MIN)
    z = run(3, "n2", [4, 5], ran=5 * MIN, restart=15 * MIN)
    w = run(4, "n2", [6, 7], qos="normal")
    return [node("n1"), node("n2")], [x, y, z, w]


def decide(nodes, running, pending, policy=QOS_POLICY, **config):
    snap = Snapshot(NOW, nodes, running, pending, preemption=policy)
    return schedule(snap, SchedulerConfig(**config)).preemptions


def test_seed_example_needing_4_gpus_takes_y() -> None:
    nodes, running = seed_cluster()
    got = decide(nodes, running, [PendingJob(10, qos="high", gpus_per_node=4)])
    assert [(p.job_id, p.victims, p.cause) for p in got] == [(10, [2], "qos")]


def test_seed_example_needing_8_gpus_takes_x() -> None:
    nodes, running = seed_cluster()
    got = decide(nodes, running, [PendingJob(10, qos="high", gpus_per_node=8)])
    assert [(p.job_id, p.victims) for p in got] == [(10, [1])]


def test_seed_scores_in_hours() -> None:
    # the seed's arithmetic, per hour: X 8/(1+0.5), Y 4/(0.08+0.17), Z 2/(0.08+0.25)
    hour = 3600
    assert round(preempt.score(8, 60 * MIN, 30 * MIN) * hour, 2) == 5.33
    assert round(preempt.score(4, 5 * MIN, 10 * MIN) * hour, 2) == 16
    assert round(preempt.score(2, 5 * MIN, 15 * MIN) * hour, 2) == 6
    # release value is capped at the need: X's 8 GPUs count as the 4 a 4-GPU job lacks; with
    # Y as dear as X (4/5400 each) the tie goes to the set that frees least beyond the need
    nodes, running = seed_cluster()
    running[1].checkpoint_age, running[1].restart_cost = 60 * MIN, 30 * 60
    got = decide(nodes, running, [PendingJob(10, qos="high", gpus_per_node=4)])
    assert [p.victims for p in got] == [[2]]


def test_checkpoint_age_is_run_time_without_checkpoint_and_capped_by_it() -> None:
    assert preempt.checkpoint_age(run(1, "n", [0], ran=300), NOW) == 300
    assert preempt.checkpoint_age(run(1, "n", [0], ran=300, checkpoint=30), NOW) == 30
    # a checkpoint older than this run (the one it restarted from): only this run is lost
    assert preempt.checkpoint_age(run(1, "n", [0], ran=300, checkpoint=9000), NOW) == 300
    assert preempt.cost_of(run(1, "n", [0], ran=300), NOW, 600) == 900


def test_never_preempts_when_it_would_not_let_the_job_start() -> None:
    nodes, running = seed_cluster()
    # wrong GPU type: the victims' nodes are h100
    assert decide(nodes, running, [PendingJob(10, qos="high", gpus_per_node=4,
                                              gpu_type="a100")]) == []
    # a gang of two 8-GPU nodes: n2 can never be emptied (W is not preemptible)
    assert decide(nodes, running, [PendingJob(10, qos="high", gpus_per_node=8,
                                              num_nodes=2)]) == []
    # -w n2 with 8 GPUs: same
    assert decide(nodes, running, [PendingJob(10, qos="high", gpus_per_node=8,
                                              nodelist=frozenset({"n2"}))]) == []
    # -w n1 with 4 GPUs: only X helps, although Y scores better
    got = decide(nodes, running, [PendingJob(10, qos="high", gpus_per_node=4,
                                             nodelist=frozenset({"n1"}))])
    assert [p.victims for p in got] == [[1]]


def test_only_the_listed_qos_and_not_when_it_fits() -> None:
    nodes, running = seed_cluster()
    assert decide(nodes, running, [PendingJob(10, qos="normal", gpus_per_node=4)]) == []
    exempt = PreemptPolicy(preempts=QOS_POLICY.preempts, exempt=frozenset({"low"}))
    assert decide(nodes, running, [PendingJob(10, qos="high", gpus_per_node=4)], exempt) == []
    # room enough already: the job starts, nobody is preempted
    free_nodes = nodes + [node("n3")]
    snap = Snapshot(NOW, free_nodes, running, [PendingJob(10, qos="high", gpus_per_node=4)],
                    preemption=QOS_POLICY)
    d = schedule(snap, SchedulerConfig())
    assert [s.job_id for s in d.starts] == [10] and d.preemptions == []


def test_victims_already_ending_belong_to_their_preemptor() -> None:
    nodes, running = seed_cluster()
    running[1].preempting = True  # Y is ending for job 10
    policy = PreemptPolicy(preempts=QOS_POLICY.preempts, in_flight=frozenset({10}))
    pending = [PendingJob(10, qos="high", gpus_per_node=4, submit_time=NOW - 10),
               PendingJob(11, qos="high", gpus_per_node=4, submit_time=NOW)]
    got = decide(nodes, running, pending, policy)
    # 10 waits for Y; 11 may not count on Y: Y's GPUs are 10's; 11 needs another victim
    assert [(p.job_id, p.victims) for p in got] == [(11, [1])]


def test_two_preemptors_in_one_cycle_do_not_share_victims() -> None:
    nodes, running = seed_cluster()
    pending = [PendingJob(10, qos="high", gpus_per_node=4, submit_time=NOW - 10),
               PendingJob(11, qos="high", gpus_per_node=4, submit_time=NOW)]
    got = decide(nodes, running, pending)
    assert [(p.job_id, p.victims) for p in got] == [(10, [2]), (11, [1])]


def test_in_flight_preemptor_goes_first() -> None:
    jobs = [PendingJob(1), PendingJob(2), PendingJob(3)]
    assert [j.job_id for j in preempt.first(jobs, frozenset({3}))] == [3, 1, 2]
    assert preempt.first(jobs, frozenset()) is jobs


# --- guarantees and burst --------------------------------------------------------------------

GUARANTEES = PreemptPolicy(guarantees={"a": {"gres/gpu": 4}, "b": {"gres/gpu": 4}})


def burst_cluster() -> tuple[list[NodeView], list[RunningJob]]:
    """Account a runs four 2-GPU burst jobs on the only 8-GPU node."""
    return [node("n1")], [run(i, "n1", [2 * i - 2, 2 * i - 1], qos="burst", ran=i * MIN,
                              account="a") for i in range(1, 5)]


def test_guarantee_reclaims_exactly_enough_burst_work() -> None:
    nodes, running = burst_cluster()
    got = decide(nodes, running, [PendingJob(10, account="b", gpus_per_node=4)], GUARANTEES)
    # two of a's four jobs: the two that lose least (the youngest runs)
    assert [(p.job_id, p.victims, p.cause) for p in got] == [(10, [1, 2], "guarantee")]


def test_guarantee_never_takes_a_donor_below_its_own() -> None:
    nodes, running = burst_cluster()
    policy = PreemptPolicy(guarantees={"a": {"gres/gpu": 6}, "b": {"gres/gpu": 4}})
    assert decide(nodes, running, [PendingJob(10, account="b", gpus_per_node=4)], policy) == []
    # a job of b beyond b's guarantee has no claim
    assert decide(nodes, running, [PendingJob(10, account="b", gpus_per_node=6)],
                  GUARANTEES) == []
    # nor a burst job, nor an account without a guarantee
    assert decide(nodes, running, [PendingJob(10, account="b", qos="burst", gpus_per_node=2)],
                  GUARANTEES) == []
    assert decide(nodes, running, [PendingJob(10, account="c", gpus_per_node=2)],
                  GUARANTEES) == []


def test_guarantee_reclaims_only_burst_jobs() -> None:
    nodes, running = burst_cluster()
    for r in running:
        r.qos = "normal"
    assert decide(nodes, running, [PendingJob(10, account="b", gpus_per_node=4)],
                  GUARANTEES) == []


def test_reclaims_are_bounded_per_cycle() -> None:
    nodes, running = burst_cluster()
    policy = PreemptPolicy(guarantees={"a": {"gres/gpu": 0}, "b": {"gres/gpu": 8}})
    pending = [PendingJob(10, account="b", gpus_per_node=2, submit_time=NOW - 10),
               PendingJob(11, account="b", gpus_per_node=2, submit_time=NOW)]
    assert [p.job_id for p in decide(nodes, running, pending, policy)] == [10]
    got = decide(nodes, running, pending, policy, reclaims_per_cycle=2)
    assert [(p.job_id, p.victims) for p in got] == [(10, [1]), (11, [2])]


def test_greedy_beyond_the_exhaustive_pool_still_frees_enough() -> None:
    nodes = [node("n1", gpus=16)]
    running = [run(i, "n1", [i - 1], ran=i * MIN) for i in range(1, 17)]
    got = decide(nodes, running, [PendingJob(99, qos="high", gpus_per_node=6)],
                 preempt_max_candidates=4)
    assert len(got) == 1 and len(got[0].victims) == 6
    assert got[0].victims == [1, 2, 3, 4, 5, 6]  # the six that lose least


def test_a_gang_takes_the_cheapest_nodes_and_a_wide_victim_counts_once() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    dear = run(1, "n1", list(range(8)), ran=600 * MIN)
    cheap = run(2, "n2", list(range(8)), ran=5 * MIN)
    mid = run(3, "n3", list(range(8)), ran=30 * MIN)
    got = decide(nodes, [dear, cheap, mid], [PendingJob(10, qos="high", gpus_per_node=8,
                                                        num_nodes=2)])
    assert [p.victims for p in got] == [[2, 3]]
    # one victim spanning n2 and n3 frees both nodes at once
    wide = RunningJob(4, [NodeAllocation("n2", 1, 0, list(range(8))),
                          NodeAllocation("n3", 1, 0, list(range(8)))], NOW - 5 * MIN,
                      NOW + 3600, qos="low")
    got = decide(nodes, [dear, wide], [PendingJob(10, qos="high", gpus_per_node=8,
                                                  num_nodes=2)])
    assert [p.victims for p in got] == [[4]]


# --- no livelock (issue 12, item 7) ------------------------------------------------------------


def test_the_livelock_as_found_the_preemptor_is_kept_to_its_victims_node() -> None:
    """n1: a job nobody may preempt, ending first; n2: the victim. The walk promises the
    preemptor n1 (the earliest end); the preemption must move that promise to n2."""
    nodes = [node("n1", gpus=4), node("n2", gpus=4)]
    steady = RunningJob(1, [NodeAllocation("n1", 1, 0, [0, 1, 2, 3])], NOW - MIN, NOW + 300,
                        qos="normal")
    victim = RunningJob(2, [NodeAllocation("n2", 1, 0, [0, 1, 2, 3])], NOW - MIN, NOW + 3600,
                        qos="low")
    job = PendingJob(10, qos="high", gpus_per_node=4, time_limit=600)
    d = schedule(Snapshot(NOW, nodes, [steady, victim], [job], preemption=QOS_POLICY),
                 SchedulerConfig(preempt_exempt_time=0))
    assert [(p.job_id, p.victims, p.nodes) for p in d.preemptions] == [(10, [2], ["n2"])]
    assert d.reserved_nodes[10] == ["n2"]
    # the victim has ended and is back in the queue (older, same shape): the preemptor, in
    # flight and kept to n2, starts there; the victim is held back behind it
    requeued = PendingJob(2, qos="low", gpus_per_node=4, time_limit=3600,
                          submit_time=NOW - 7200)
    policy = PreemptPolicy(preempts=QOS_POLICY.preempts, in_flight=frozenset({10}),
                           held_back={2: 10})
    snap = Snapshot(NOW + 5, nodes, [steady], [requeued, job], preemption=policy,
                    promised_nodes=dict(d.reserved_nodes))
    after = schedule(snap, SchedulerConfig(preempt_exempt_time=0))
    assert [(s.job_id, [a.node for a in s.allocation]) for s in after.starts] == [(10, ["n2"])]
    assert after.reasons[2] == "Priority" and after.preemptions == []


def test_a_held_back_victim_is_free_once_its_preemptor_is_not_in_flight() -> None:
    nodes = [node("n1", gpus=4)]
    requeued = PendingJob(2, qos="low", gpus_per_node=4)
    policy = PreemptPolicy(preempts=QOS_POLICY.preempts, held_back={2: 10})
    d = schedule(Snapshot(NOW, nodes, [], [requeued], preemption=policy), SchedulerConfig())
    assert [s.job_id for s in d.starts] == [2]  # its preemptor is gone: nothing to wait for


def test_preempt_exempt_time_counts_from_the_last_start() -> None:
    nodes = [node("n1", gpus=4)]
    young = run(1, "n1", [0, 1, 2, 3], ran=30)
    job = PendingJob(10, qos="high", gpus_per_node=4)
    assert decide(nodes, [young], [job], preempt_exempt_time=60) == []
    assert [p.victims for p in decide(nodes, [young], [job], preempt_exempt_time=20)] == [[1]]
    assert SchedulerConfig().preempt_exempt_time > 0  # kiln's default keeps the loop away
