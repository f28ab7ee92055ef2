"""kiln why's priority factors are the core's own sums, one weight at a time."""

from __future__ import annotations

import pytest

from kiln.config import SchedulerConfig
from kiln.model import GPU
from schedd.reports import explain
from schedd.scheduler import priority
from schedd.scheduler.fairshare import FairShareTree
from schedd.scheduler.snapshot import NodeView, PendingJob


def _nodes() -> list[NodeView]:
    return [NodeView("n1", 64, 512_000, [GPU(i, f"u{i}", "H100", 81920) for i in range(8)])]


def _pending() -> list[PendingJob]:
    return [
        PendingJob(1, user="a", account="ml", submit_time=0.0, gpus_per_node=4, nice=50,
                   partition_priority=2, qos_priority=10),
        PendingJob(2, user="b", account="phys", submit_time=3600.0, gpus_per_node=1,
                   qos_priority=5),
        PendingJob(3, user="c", account="ml", submit_time=100.0, admin_priority=42),
    ]


@pytest.mark.parametrize("cfg", [
    SchedulerConfig(),
    SchedulerConfig(weight_job_size=500, weight_assoc=0, favor_small=True),
])
def test_factors_add_up_to_the_cores_priority(cfg: SchedulerConfig) -> None:
    pending, now = _pending(), 7200.0
    shares = {("ml", ""): 0.25, ("ml", "a"): 0.4, ("phys", ""): 0.75, ("phys", "b"): 0.9}
    table = explain.factor_breakdown(pending, now, cfg, _nodes(), shares)
    full = priority.priorities(pending, now, cfg, priority.ClusterSize.of(_nodes()), shares)
    for job in pending[:2]:
        assert sum(table[job.job_id].values()) == pytest.approx(full[job.job_id])
    assert table[1]["nice"] == -50.0
    assert table[1]["partition"] == pytest.approx(cfg.weight_partition)  # the larger tier
    assert table[2]["partition"] == pytest.approx(cfg.weight_partition / 2)
    assert table[3] == {"admin": 42.0}
    assert ("job_size" in table[1]) == bool(cfg.weight_job_size)


def test_without_an_association_tree_fair_share_weighs_as_in_the_cycle() -> None:
    """No association tree: the cycle gives every job fair share 1 (``shares`` None), so kiln
    why and sprio show the whole weight, and the factors still add up to the priority."""
    pending, now, cfg = _pending(), 7200.0, SchedulerConfig()
    shares = FairShareTree().cycle_factors()
    assert shares is None
    table = explain.factor_breakdown(pending, now, cfg, _nodes(), shares)
    full = priority.priorities(pending, now, cfg, priority.ClusterSize.of(_nodes()), shares)
    for job in pending[:2]:
        assert table[job.job_id]["fairshare"] == pytest.approx(cfg.weight_fairshare)
        assert sum(table[job.job_id].values()) == pytest.approx(full[job.job_id])


def test_every_reason_kiln_sets_reads_as_a_sentence() -> None:
    for reason in ("Priority", "Resources", "Dependency", "JobHeldUser", "AssocGrpGRES",
                   "BeginTime", "JobArrayTaskLimit", "QOSMaxJobsPerUserLimit"):
        assert not explain.reason_text(reason).startswith("Slurm reason")
    assert explain.reason_text("SomethingNew") == "Slurm reason SomethingNew"
