"""A node of several GPU types (a MIG GPU of mixed profiles, issue 33): a typed request gets
GPUs of its type only, waits while they are in use though GPUs of other types are free, and
is BadConstraints where the node has too few of its type; an untyped one takes any."""

from __future__ import annotations

from kiln.config import SchedulerConfig
from kiln.model import GPU, NodeAllocation
from kiln.slurm.gres import GpuTypes, allocation_types, kinds_of
from kiln.slurm.tres import to_string
from schedd.scheduler.cycle import schedule
from schedd.scheduler.limits import allocation_tres
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot

LAYOUT = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def _node(name: str = "n1") -> NodeView:
    gpus = [GPU(i, f"MIG-{i}", f"NVIDIA A100-SXM4-80GB MIG {p}", 1, island=0)
            for i, p in enumerate(LAYOUT)]
    return NodeView(name, 16, 64000, gpus, "", gpu_kinds=kinds_of(gpus))


def _job(job_id: int, kind: str = "", gpus: int = 1) -> PendingJob:
    return PendingJob(job_id, f"j{job_id}", cpus_per_node=1, gpus_per_node=gpus,
                      gpu_type=kind, submit_time=job_id)


def test_kinds_only_for_several_types() -> None:
    assert kinds_of(_node().gpus) == dict(enumerate(LAYOUT))
    assert kinds_of([GPU(0, "u", "NVIDIA A100-SXM4-80GB", 1)] * 2) == {}


def test_each_typed_job_gets_its_own_type() -> None:
    jobs = [_job(1, "1g.10gb"), _job(2, "3g.40gb"), _job(3, "1g.10gb"), _job(4, "1g.10gb")]
    out = schedule(Snapshot(0.0, [_node()], pending=jobs), SchedulerConfig())
    got = {s.job_id: s.allocation[0].gpus for s in out.starts}
    assert got == {1: [2], 2: [0], 3: [3]}
    assert out.reasons[4] == "Resources"  # the 2g.20gb is free, but not of its type


def test_too_many_of_a_type_never_fits_and_untyped_take_any() -> None:
    out = schedule(Snapshot(0.0, [_node()], pending=[_job(1, "3g.40gb", 2), _job(2, "", 4)]),
                   SchedulerConfig())
    assert out.reasons[1] == "BadConstraints"
    assert [s.allocation[0].gpus for s in out.starts] == [[0, 1, 2, 3]]


def test_a_held_type_waits_while_others_start() -> None:
    run = RunningJob(9, [NodeAllocation("n1", 1, 0, [0])], 0.0, 3600.0)
    out = schedule(Snapshot(0.0, [_node()], running=[run],
                            pending=[_job(1, "3g.40gb"), _job(2, "2g.20gb")]),
                   SchedulerConfig())
    assert [(s.job_id, s.allocation[0].gpus) for s in out.starts] == [(2, [1])]
    assert out.reasons[1] in ("Resources", "Priority")


def test_typed_tres_of_a_mixed_node() -> None:
    types = GpuTypes({"n1": "", "n2": "a100"}, {"n1": dict(enumerate(LAYOUT))})
    assert allocation_types("n1", [0, 2, 3], types) == {"3g.40gb": 1, "1g.10gb": 2}
    assert allocation_types("n2", [0, 1], types) == {"a100": 2}
    held = allocation_tres([NodeAllocation("n1", 1, 0, [2, 3])], types)
    assert held["gres/gpu"] == 2 and held["gres/gpu:1g.10gb"] == 2
    # sacct's order: the 'name=value' strings sorted (Slurm's slurm_char_list_to_xstr)
    assert to_string({"cpu": 1, "gres/gpu": 3, "gres/gpu:1g.10gb": 2, "gres/gpu:3g.40gb": 1,
                      "node": 1}, by_name=True) == (
        "cpu=1,gres/gpu:1g.10gb=2,gres/gpu:3g.40gb=1,gres/gpu=3,node=1")
