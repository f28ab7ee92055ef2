"""gres/mps in the pure core: N of a GPU's mps_per_gpu units on ONE GPU of a node, several jobs
on one GPU, and a GPU shared one way at a time (whole, by shards or by MPS)."""

from __future__ import annotations

import pytest

from kiln.config import SchedulerConfig
from kiln.model import GPU, Job, JobState, NodeAllocation
from schedd.reports import accounting
from schedd.reports.accounting import BillingPolicy
from schedd.scheduler import shares
from schedd.scheduler.cycle import schedule
from schedd.scheduler.limits import Enforcer
from schedd.scheduler.preempt import free_now
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


def node(name: str = "a", gpus: int = 1, mps: int = 100, shards: int = 0) -> NodeView:
    return NodeView(name, 16, 64_000, [GPU(i, f"{name}-{i}", "A100", 80_000) for i in range(gpus)],
                    "a100", shards_per_gpu=shards, mps_per_gpu=mps)


def mps_job(job_id: int, n: int = 50, **kw) -> PendingJob:
    return PendingJob(job_id, mps_per_node=n, submit_time=job_id, **kw)


def running_mps(job_id: int, units: dict[int, int], end: float = NOW + 3600) -> RunningJob:
    return RunningJob(job_id, [NodeAllocation("a", 1, 0, [], [], units, 100, "mps")],
                      NOW - 60, end, "ann", "physics")


def cycle(nodes, pending, running=()):
    return schedule(Snapshot(NOW, nodes, list(running), list(pending)), SchedulerConfig())


# --- the arithmetic -------------------------------------------------------------------------

def test_asked_per_gpu_and_most_on_a_node() -> None:
    assert shares.asked(mps_job(1, 30)) == ("mps", 30)
    assert shares.asked(PendingJob(1, shards_per_node=2)) == ("shard", 2)
    assert shares.asked(PendingJob(1)) == ("", 0)
    assert shares.per_gpu(node(mps=100, shards=4), "mps") == 100
    assert shares.per_gpu(node(mps=100, shards=4), "shard") == 4
    # MPS stays on one GPU of a node; shards span them
    assert shares.most_on_node("mps", 100, 4) == 100
    assert shares.most_on_node("shard", 4, 4) == 16
    assert shares.most_on_node("mps", 100, 0) == 0


def test_pick_on_one_gpu_never_spreads() -> None:
    assert shares.pick(60, 100, {0: 50, 1: 50}, [], one_gpu=True) is None
    assert shares.pick(60, 100, {0: 50, 1: 50}, []) == ({0: 50, 1: 10}, [])
    assert shares.pick(60, 100, {0: 50}, [1], one_gpu=True) == ({1: 60}, [1])
    assert shares.pick(40, 100, {0: 50, 1: 70}, [2], one_gpu=True) == ({0: 40}, [])


# --- the cycle ------------------------------------------------------------------------------

def test_two_halves_share_a_gpu_and_a_third_waits() -> None:
    d = cycle([node()], [mps_job(1), mps_job(2), mps_job(3)])
    got = {s.job_id: s.allocation[0] for s in d.starts}
    assert sorted(got) == [1, 2]
    for a in got.values():
        assert a.shards == {0: 50} and a.share_kind == "mps" and a.gpus == []
        assert a.devices == [0] and a.mps_gpus == [0] and a.shards_per_gpu == 100
    assert d.reasons[3] == "Resources"


def test_a_whole_gpu_job_waits_while_mps_is_in_use() -> None:
    d = cycle([node()], [PendingJob(1, gpus_per_node=1, submit_time=1)],
              [running_mps(9, {0: 50})])
    assert not d.starts and d.reasons[1] == "Resources"
    assert d.expected_start[1] == NOW + 3600


def test_a_whole_gpu_in_use_offers_no_mps() -> None:
    whole = RunningJob(9, [NodeAllocation("a", 1, 0, [0])], NOW - 60, NOW + 3600)
    d = cycle([node()], [mps_job(1)], [whole])
    assert not d.starts and d.reasons[1] == "Resources"


def test_a_gpu_shared_by_shards_offers_no_mps_and_back() -> None:
    shard_run = RunningJob(9, [NodeAllocation("a", 1, 0, [], [], {0: 1}, 4)], NOW - 60,
                           NOW + 3600)
    d = cycle([node(mps=100, shards=4)], [mps_job(1)], [shard_run])
    assert not d.starts and d.reasons[1] == "Resources"
    d = cycle([node(mps=100, shards=4)], [PendingJob(1, shards_per_node=1, submit_time=1)],
              [running_mps(9, {0: 50})])
    assert not d.starts and d.reasons[1] == "Resources"
    # a second GPU takes the other kind
    d = cycle([node(gpus=2, mps=100, shards=4)], [mps_job(1)], [shard_run])
    assert d.starts[0].allocation[0].shards == {1: 50}


def test_mps_goes_where_mps_already_is() -> None:
    d = cycle([node(gpus=2)], [mps_job(1, 30), PendingJob(2, gpus_per_node=1, submit_time=2)],
              [running_mps(9, {1: 50})])
    got = {s.job_id: s.allocation[0] for s in d.starts}
    assert got[1].shards == {1: 30} and got[2].gpus == [0]


def test_mps_never_spans_gpus_of_a_node() -> None:
    # 50 free on each of two GPUs: 60 fits on neither, so the job waits for a fresh GPU
    d = cycle([node(gpus=2)], [mps_job(1, 60)], [running_mps(8, {0: 50}),
                                                 running_mps(9, {1: 50})])
    assert not d.starts and d.reasons[1] == "Resources"


def test_a_node_without_mps_or_too_little_never_fits() -> None:
    d = cycle([node(mps=0)], [mps_job(1)])
    assert not d.starts and d.reasons[1] == "BadConstraints"
    d = cycle([node(gpus=4, mps=100)], [mps_job(1, 150)])  # one GPU of 100, never 150
    assert not d.starts and d.reasons[1] == "BadConstraints"


# --- preemption, limits and accounting ------------------------------------------------------

def test_preemption_never_counts_an_mps_gpu_as_free() -> None:
    assert free_now([node(gpus=2)], [running_mps(9, {0: 50})])["a"][2] == 1


def test_grp_tres_gres_mps() -> None:
    table = LimitTable()
    table.assocs[("root", "")] = AssocLimits("root")
    table.assocs[("physics", "")] = AssocLimits("physics", parent=("root", ""),
                                                limits=Limits(grp_tres={"gres/mps": 60}))
    running = [running_mps(9, {0: 50})]
    enforcer = Enforcer(table, running, [node(gpus=2)], NOW)
    assert enforcer.blocked(mps_job(1, 10, account="physics", user="ann")) == ""
    assert enforcer.blocked(mps_job(2, 20, account="physics", user="ann")) == "AssocGrpGRES"


def test_sacct_tres_and_gpu_hours_count_mps_as_its_share() -> None:
    job = Job(id=1, mps_per_node=50, num_nodes=1, start_time=1000.0, end_time=4600.0,
              state=JobState.COMPLETED,
              allocation=[NodeAllocation("a", 1, 0, [], [], {0: 50}, 100, "mps")])
    policy = BillingPolicy()
    alloc = accounting.alloc_tres(job, policy, {})
    assert alloc["gres/mps"] == 50 and "gres/shard" not in alloc and "gres/gpu" not in alloc
    assert accounting.req_tres(job, policy)["gres/mps"] == 50
    assert accounting.gpu_hours(job, 5000.0) == pytest.approx(0.5)
