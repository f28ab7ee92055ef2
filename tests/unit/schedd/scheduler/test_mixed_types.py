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


# --- the plan by type (the backfill plan counted GPUs, not types) ---------------------------

def _mixed(layout: list[str], name: str = "n1") -> NodeView:
    gpus = [GPU(i, f"MIG-{name}-{i}", f"NVIDIA A100-SXM4-80GB MIG {p}", 1, island=0)
            for i, p in enumerate(layout)]
    return NodeView(name, 16, 64000, gpus, "", gpu_kinds=kinds_of(gpus))


def _running(job_id: int, gpus: list[int], end: float, node: str = "n1") -> RunningJob:
    return RunningJob(job_id, [NodeAllocation(node, 1, 0, gpus)], 0.0, end)


def _long(job_id: int, kind: str = "", gpus: int = 1, limit: int = 3600) -> PendingJob:
    return PendingJob(job_id, f"j{job_id}", cpus_per_node=1, gpus_per_node=gpus,
                      gpu_type=kind, time_limit=limit, submit_time=job_id)


def test_a_typed_job_is_promised_when_its_type_is_free() -> None:
    """The 3g.40gb is held until 1000 and three GPUs of other types are free now: the plan
    counted 3 >= 1 free now (no promise at all); it is promised 1000, when its type frees."""
    out = schedule(Snapshot(0.0, [_mixed(LAYOUT)], running=[_running(9, [0], 1000.0)],
                            pending=[_long(1, "3g.40gb")]),
                   SchedulerConfig(bf_resolution=1))
    assert not out.starts
    assert out.expected_start[1] == 1000.0


def test_a_typed_gang_of_one_type_waits_for_both() -> None:
    """Two 1g.10gb end at 500 and 2000; the 3g.40gb is free. gpu:1g.10gb:2 was promised 500
    (two GPUs free then, counting the 3g.40gb); its type has two free only at 2000."""
    layout = ["3g.40gb", "1g.10gb", "1g.10gb"]
    out = schedule(Snapshot(0.0, [_mixed(layout)],
                            running=[_running(8, [1], 500.0), _running(9, [2], 2000.0)],
                            pending=[_long(1, "1g.10gb", 2)]),
                   SchedulerConfig(bf_resolution=1))
    assert out.expected_start[1] == 2000.0


def test_backfill_keeps_the_type_a_reservation_needs() -> None:
    """Job 1 (gpu:3g.40gb:2) is reserved at 1000, when the second 3g.40gb frees. Job 2 asks
    for one GPU of any type for 5000 s: it backfills, but on the 1g.10gb; given the free
    3g.40gb (counts: 3 free now, 2 reserved at 1000, 1 left) it broke job 1's promise."""
    layout = ["3g.40gb", "3g.40gb", "1g.10gb"]
    node = _mixed(layout)
    config = SchedulerConfig(bf_resolution=1, fill="priority")
    snap = Snapshot(0.0, [node], running=[_running(9, [0], 1000.0)],
                    pending=[_long(1, "3g.40gb", 2), _long(2, "", 1, 5000)])
    out = schedule(snap, config)
    assert out.expected_start[1] == 1000.0
    assert [(s.job_id, s.allocation[0].gpus) for s in out.starts] == [(2, [2])]
    # at 1000 the promise is kept: job 1 starts on both 3g.40gb
    later = schedule(Snapshot(1000.0, [node], running=[
        RunningJob(2, out.starts[0].allocation, 0.0, 5000.0)], pending=[snap.pending[0]],
        promised=out.expected_start, promised_nodes=out.reserved_nodes), config)
    assert [(s.job_id, s.allocation[0].gpus) for s in later.starts] == [(1, [0, 1])]


def test_an_untyped_job_needs_one_type_free_for_its_whole_run() -> None:
    """One 3g.40gb and one 1g.10gb. Job 1 (15 CPUs, gpu:3g.40gb:1) is reserved at 1000, when a
    CPU job ends; the 1g.10gb is busy until 1000. Job 2 asks for one GPU of any type for
    2000 s: by counts one GPU is free in every segment from now (the 3g.40gb, then the
    1g.10gb), so it started now on the 3g.40gb and broke job 1's promise. No GPU is free for
    all of [0, 2000): it does not start now, and job 1 keeps its promise."""
    layout = ["3g.40gb", "1g.10gb"]
    cpu_job = RunningJob(8, [NodeAllocation("n1", 8, 0, [])], 0.0, 1000.0)
    big = PendingJob(1, "j1", cpus_per_node=15, gpus_per_node=1, gpu_type="3g.40gb",
                     time_limit=3600, submit_time=1)
    out = schedule(Snapshot(0.0, [_mixed(layout)], running=[cpu_job, _running(9, [1], 1000.0)],
                            pending=[big, _long(2, "", 1, 2000)]),
                   SchedulerConfig(bf_resolution=1, fill="priority"))
    assert not out.starts
    assert out.expected_start[1] == 1000.0
