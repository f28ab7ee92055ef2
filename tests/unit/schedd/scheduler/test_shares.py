"""GPU shards (gres/shard) in the pure core: shares of one GPU, and Slurm's rule that a GPU is
used either whole or by shares, never both."""

from __future__ import annotations

import pytest

from kiln.config import SchedulerConfig
from kiln.model import GPU, Job, JobState, NodeAllocation
from schedd.reports import accounting
from schedd.reports.accounting import BillingPolicy
from schedd.scheduler import shares
from schedd.scheduler.cycle import schedule
from schedd.scheduler.limits import Enforcer
from schedd.scheduler.snapshot import (
    AssocLimits,
    Limits,
    LimitTable,
    NodeView,
    PendingJob,
    RunningJob,
    Snapshot,
)

NOW = 1_000_020.0


def node(name: str = "a", gpus: int = 1, per_gpu: int = 4) -> NodeView:
    return NodeView(name, 16, 64_000, [GPU(i, f"{name}-{i}", "A100", 80_000) for i in range(gpus)],
                    "a100", shards_per_gpu=per_gpu)


def shard_job(job_id: int, n: int = 1, **kw) -> PendingJob:
    return PendingJob(job_id, shards_per_node=n, submit_time=job_id, **kw)


def gpu_job(job_id: int, n: int = 1) -> PendingJob:
    return PendingJob(job_id, gpus_per_node=n, submit_time=job_id)


def running_shards(job_id: int, shards: dict[int, int], end: float = NOW + 3600,
                   name: str = "a") -> RunningJob:
    return RunningJob(job_id, [NodeAllocation(name, 1, 0, [], [], shards, 4)], NOW - 60, end)


def cycle(nodes, pending, running=()):
    return schedule(Snapshot(NOW, nodes, list(running), list(pending)), SchedulerConfig())


# --- the arithmetic -------------------------------------------------------------------------

def test_pick_best_fit_on_a_shared_gpu_before_a_fresh_one() -> None:
    assert shares.pick(1, 4, {0: 3, 1: 1}, [2, 3]) == ({1: 1}, [])
    assert shares.pick(2, 4, {1: 1}, [2, 3]) == ({2: 2}, [2])


def test_pick_spreads_when_no_one_gpu_holds_it() -> None:
    assert shares.pick(6, 4, {0: 3}, [1]) == ({0: 3, 1: 3}, [1])
    assert shares.pick(6, 4, {0: 3}, []) is None
    assert shares.pick(1, 0, {}, [0]) is None


def test_whole_gpus_and_share() -> None:
    assert shares.whole_gpus(5, 4) == 2
    assert shares.whole_gpus(0, 4) == 0
    assert shares.share_of_gpu(1, 4) == 0.25


# --- the cycle ------------------------------------------------------------------------------

def test_four_shard_jobs_share_one_gpu_and_the_fifth_waits() -> None:
    d = cycle([node()], [shard_job(i) for i in range(1, 6)])
    started = {s.job_id: s.allocation[0] for s in d.starts}
    assert sorted(started) == [1, 2, 3, 4]
    assert all(a.shards == {0: 1} and a.gpus == [] and a.devices == [0]
               for a in started.values())
    assert d.reasons[5] == "Resources"


def test_a_whole_gpu_job_waits_while_shards_are_in_use() -> None:
    d = cycle([node()], [gpu_job(1)], [running_shards(9, {0: 1})])
    assert not d.starts and d.reasons[1] == "Resources"
    # planned for when the last shard holder ends
    assert d.expected_start[1] == NOW + 3600


def test_a_whole_gpu_in_use_offers_no_shards() -> None:
    whole = RunningJob(9, [NodeAllocation("a", 1, 0, [0])], NOW - 60, NOW + 3600)
    d = cycle([node()], [shard_job(1)], [whole])
    assert not d.starts and d.reasons[1] == "Resources"


def test_shards_go_where_shards_already_are() -> None:
    d = cycle([node(gpus=2)], [shard_job(1), gpu_job(2)], [running_shards(9, {1: 2})])
    got = {s.job_id: s.allocation[0] for s in d.starts}
    assert got[1].shards == {1: 1}  # the shared GPU, not the free one
    assert got[2].gpus == [0]  # which stays whole for a whole-GPU job


def test_in_one_cycle_a_shard_job_keeps_the_whole_gpu_job_off_its_gpu() -> None:
    d = cycle([node()], [shard_job(1), gpu_job(2)])
    assert [s.job_id for s in d.starts] == [1]
    assert d.reasons[2] == "Resources"


def test_a_node_without_shards_never_fits_a_shard_job() -> None:
    d = cycle([node(per_gpu=0)], [shard_job(1)])
    assert not d.starts and d.reasons[1] == "BadConstraints"
    d = cycle([node(per_gpu=4)], [shard_job(1, n=5)])
    assert not d.starts and d.reasons[1] == "BadConstraints"


def test_a_longer_shard_job_holds_the_gpu_on_past_an_earlier_one() -> None:
    # job 9 holds a shard until NOW+600; a newcomer of an hour joins the GPU: the plan must
    # hold the GPU whole until the newcomer's end, so a whole-GPU job is planned after it
    d = cycle([node()], [shard_job(1, time_limit=3600), gpu_job(2)],
              [running_shards(9, {0: 1}, end=NOW + 600)])
    assert [s.job_id for s in d.starts] == [1]
    assert d.expected_start[2] >= NOW + 3600


@pytest.mark.parametrize("n", [4, 8])
def test_a_request_of_whole_gpus_in_shards_spans_gpus(n: int) -> None:
    d = cycle([node(gpus=2)], [shard_job(1, n=n)])
    (alloc,) = d.starts[0].allocation
    assert sum(alloc.shards.values()) == n and alloc.gpus == []


# --- limits and accounting ------------------------------------------------------------------

def _limits(shards: int) -> LimitTable:
    table = LimitTable()
    table.assocs[("root", "")] = AssocLimits("root")
    table.assocs[("physics", "")] = AssocLimits("physics", parent=("root", ""),
                                                limits=Limits(grp_tres={"gres/shard": shards}))
    return table


def test_grp_tres_gres_shard_counts_running_and_pending_shards() -> None:
    running = [RunningJob(9, [NodeAllocation("a", 1, 0, [], [], {0: 2}, 4)], NOW - 60,
                          NOW + 3600, "ann", "physics")]
    enforcer = Enforcer(_limits(3), running, [node()], NOW)
    assert enforcer.blocked(shard_job(1, account="physics", user="ann")) == ""
    assert enforcer.blocked(shard_job(2, n=2, account="physics", user="ann")) == "AssocGrpGRES"
    d = schedule(Snapshot(NOW, [node()], running,
                          [shard_job(1, account="physics", user="ann"),
                           shard_job(2, account="physics", user="ann")],
                          limits=_limits(3)), SchedulerConfig())
    assert [s.job_id for s in d.starts] == [1] and d.reasons[2] == "AssocGrpGRES"


def test_sacct_tres_and_gpu_hours_count_shards_as_their_share() -> None:
    job = Job(id=1, shards_per_node=2, num_nodes=1, start_time=1000.0, end_time=4600.0,
              state=JobState.COMPLETED,
              allocation=[NodeAllocation("a", 1, 0, [], [], {0: 2}, 4)])
    policy = BillingPolicy()
    assert accounting.alloc_tres(job, policy, {})["gres/shard"] == 2
    assert "gres/gpu" not in accounting.alloc_tres(job, policy, {})
    assert accounting.req_tres(job, policy)["gres/shard"] == 2
    assert accounting.gpu_hours(job, 5000.0) == pytest.approx(0.5)


def test_preemption_never_counts_a_shared_gpu_as_free() -> None:
    from schedd.scheduler.preempt import free_now

    runs = [running_shards(9, {0: 1}), running_shards(8, {0: 2})]
    assert free_now([node(gpus=2)], runs)["a"][2] == 1  # GPU 1; GPU 0 is shared


def test_a_share_job_does_not_hold_a_shared_gpu_on_into_a_later_promise() -> None:
    """Hypothesis's example (tests/property/test_shares_props.py, seed 59 of a 400-seed run):
    job 7 (6 shards) started on n1 put one shard on GPU 2, shared until 7200, and opened two
    fresh GPUs: three GPUs held on to 7230 where the plan counted two, so job 5's promise at
    7200 (two GPUs on each node) was broken. Two fresh GPUs hold all 6 shards alone."""
    import heapq

    def node(i: int, gpus: int) -> NodeView:
        return NodeView(f"n{i}", 4, 1000, [GPU(k, f"n{i}-{k}", "A100", 1) for k in range(gpus)],
                        "a100", shards_per_gpu=4)

    nodes = [node(0, 2), node(1, 4), node(2, 2)]
    config = SchedulerConfig(backfill=True, bf_max_reservations=3, bf_resolution=1,
                             fill="priority")
    shapes = [(0, 1, 1, 0, 0), (0, 1, 3, 0, 0), (30, 2, 1, 2, 0), (30, 2, 1, 0, 3),
              (30, 3, 1, 2, 0), (30, 1, 1, 0, 0), (30, 1, 1, 0, 6)]
    specs = {j: PendingJob(j, f"j{j}", num_nodes=n, cpus_per_node=c, gpus_per_node=g,
                           shards_per_node=s, time_limit=3600, submit_time=t)
             for j, (t, n, c, g, s) in enumerate(shapes, 1)}
    events = [(job.submit_time, 1, j) for j, job in specs.items()]
    heapq.heapify(events)
    pending: dict[int, PendingJob] = {}
    running: dict[int, RunningJob] = {}
    promised: dict[int, float] = {}
    promised_nodes: dict[int, list[str]] = {}
    first: dict[int, float] = {}
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _t, kind, j = heapq.heappop(events)
            if kind:
                pending[j] = specs[j]
            else:
                del running[j]
        out = schedule(Snapshot(now, nodes, list(running.values()), list(pending.values()),
                                promised=promised, promised_nodes=promised_nodes), config)
        for start in out.starts:
            pending.pop(start.job_id)
            assert now <= first.get(start.job_id, now), f"job {start.job_id}'s promise broken"
            running[start.job_id] = RunningJob(start.job_id, start.allocation, now, now + 3600)
            heapq.heappush(events, (now + 3600, 0, start.job_id))
        for j, at in out.expected_start.items():
            first.setdefault(j, at)
        promised, promised_nodes = out.expected_start, out.reserved_nodes
    assert not pending and first[5] == 7200
