"""Fragmentation-aware placement in the live cycle (scheduler/fragment.py): a GPU job starts
on the feasible node the workload's fragmentation grows least on; a snapshot without a start
history keeps best fit."""

from __future__ import annotations

import pytest

from kiln.config import SchedulerConfig
from kiln.model import GPU, NodeAllocation
from schedd.scheduler import fragment
from schedd.scheduler.cycle import schedule
from schedd.scheduler.gpushare import WHOLE, Task
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot
from tests.builders import node_view, pending, running

NOW = 1_000_000.0
EIGHT_GPU_HISTORY = ((Task(8, 0, 8, WHOLE), 5.0),)  # recent starts: 8-GPU jobs


def placed(snapshot: Snapshot) -> dict[int, list[tuple[str, list[int], dict[int, int]]]]:
    decisions = schedule(snapshot, SchedulerConfig())
    return {s.job_id: [(a.node, a.gpus, a.shards) for a in s.allocation]
            for s in decisions.starts}


def test_one_gpu_job_keeps_the_eight_gpu_box_whole() -> None:
    """A box of 8 untouched GPUs and a 16-GPU node with 9 free: best fit takes the box (7
    left against 8), breaking the one place an 8-GPU job of the recent workload fits; the
    measure takes the big node, where 8 stay free."""
    box = node_view("box", 8)
    big = node_view("big", 16)
    busy = running(90, "big", range(7), start=NOW - 60, end=NOW + 7200)
    job = pending(1, gpus=1, cpus_per_node=1)
    snap = Snapshot(NOW, [box, big], [busy], [job], gpu_history=EIGHT_GPU_HISTORY)
    assert placed(snap)[1][0][0] == "big"
    # without a history: best fit, as before
    snap = Snapshot(NOW, [box, big], [busy], [job])
    assert placed(snap)[1][0][0] == "box"


def test_one_gpu_job_leaves_room_for_the_two_gpu_jobs_behind_it() -> None:
    """Two 8-GPU nodes with 2 and 3 GPUs free; a 1-GPU job and two 2-GPU jobs wait. Best fit
    puts the 1-GPU job where 2 are free (1 left there, 3 on the other: one 2-GPU job starts);
    the measure puts it where 3 are free (2 and 2 left: both 2-GPU jobs start)."""
    nodes = [node_view("a"), node_view("b")]
    busy = [running(90, "a", range(6), start=NOW - 60, end=NOW + 7200),
            running(91, "b", range(5), start=NOW - 60, end=NOW + 7200)]
    jobs = [pending(1, gpus=1, cpus_per_node=1),
            pending(2, gpus=2, cpus_per_node=1), pending(3, gpus=2, cpus_per_node=1)]
    got = placed(Snapshot(NOW, nodes, busy, jobs, gpu_history=()))
    assert sorted(got) == [1, 2, 3]
    assert got[1][0][0] == "b"
    assert len(placed(Snapshot(NOW, nodes, busy, jobs))) == 2  # best fit: one 2-GPU job waits


def test_memory_breaks_a_tie_towards_the_node_the_big_job_cannot_use() -> None:
    """Two untouched 8-GPU boxes alike in free GPUs and CPUs; one has little memory free. The
    1-GPU job takes that one, so the 8-GPU job that needs the memory starts beside it (the
    buckets of free GPUs and CPUs ignore memory: best fit took the first box)."""
    nodes = [node_view("a"), node_view("b")]
    busy = [running(90, "a", [], start=NOW - 60, end=NOW + 7200, cpus=1, memory_mb=1_000),
            running(91, "b", [], start=NOW - 60, end=NOW + 7200, cpus=1, memory_mb=400_000)]
    jobs = [pending(1, gpus=1, cpus_per_node=1, mem_per_node_mb=1_000),
            pending(2, gpus=8, cpus_per_node=8, mem_per_node_mb=300_000)]
    got = placed(Snapshot(NOW, nodes, busy, jobs, gpu_history=()))
    assert got == {1: [("b", [0], {})], 2: [("a", list(range(8)), {})]}
    assert sorted(placed(Snapshot(NOW, nodes, busy, jobs))) == [1]


def shard_node(name: str) -> NodeView:
    return NodeView(name, 64, 512_000, [GPU(i, f"{name}-{i}", "A100", 80_000)
                                        for i in range(8)], "a100", shards_per_gpu=4)


def test_shard_job_packs_onto_a_shared_gpu_rather_than_opening_a_whole_one() -> None:
    """Node a: 2 GPUs held whole, 6 free. Node b: GPU 0 shared (1 of its 4 shards taken), 7
    whole GPUs free. Best fit plans a share job on fresh GPUs, so a leaves fewer whole GPUs
    (5 against 6) and the job opens a whole GPU there. With a workload of 1-GPU jobs, opening
    a GPU turns a whole one they could use into a part they cannot: the measure packs the
    shards on b's shared GPU."""
    nodes = [shard_node("a"), shard_node("b")]
    busy = [RunningJob(90, [NodeAllocation("a", 2, 0, [0, 1])], NOW - 60, NOW + 7200),
            RunningJob(91, [NodeAllocation("b", 1, 0, [], [], {0: 1}, 4)], NOW - 60, NOW + 7200)]
    job = PendingJob(1, shards_per_node=2, cpus_per_node=1, submit_time=1.0)
    history = ((Task(1, 0, 1, WHOLE), 5.0), *EIGHT_GPU_HISTORY)
    got = placed(Snapshot(NOW, nodes, busy, [job], gpu_history=history))
    assert got == {1: [("b", [], {0: 2})]}
    assert placed(Snapshot(NOW, nodes, busy, [job])) == {1: [("a", [], {2: 2})]}


def test_nvlink_islands_still_decide_the_gpus_inside_the_node() -> None:
    """The measure chooses the node; inside it the GPUs keep islands whole: a 2-GPU job on
    a node whose islands are {0-3} with 1 taken and {4-7} free goes in the first island."""
    node = node_view("a", per_island=4)
    busy = running(90, "a", [0], start=NOW - 60, end=NOW + 7200)
    got = placed(Snapshot(NOW, [node], [busy], [pending(1, gpus=2)], gpu_history=()))
    assert got == {1: [("a", [1, 2], {})]}


def test_history_decays_by_half_life() -> None:
    history = fragment.StartHistory(half_life=100.0)
    history.record([NodeAllocation("a", 4, 10, [0, 1])], 0.0)
    history.record([NodeAllocation("a", 1, 0, [], [], {3: 1}, 4)], 100.0)
    got = dict(history.snapshot(200.0))
    assert got == {Task(4, 10, 2, WHOLE): pytest.approx(0.25),
                   Task(1, 0, 1, 250): pytest.approx(0.5)}
    history.record([NodeAllocation("a", 1, 0, [])], 200.0)  # CPU-only: a task too
    assert dict(history.snapshot(200.0))[Task(1, 0, 0, 0)] == 1.0
    with pytest.raises(ValueError, match="half-life must be positive"):
        fragment.StartHistory(half_life=0)


def test_history_keeps_the_heaviest_shapes() -> None:
    history = fragment.StartHistory(keep=2)
    for t, gpus in enumerate((1, 2, 2, 3)):
        history.record([NodeAllocation("a", 1, 0, list(range(gpus)))], float(t))
    assert {task.gpus for task, _ in history.snapshot(4.0)} == {2, 3}


def test_asks_in_the_measures_terms() -> None:
    per_gpu = {"shards_per_gpu": 4}
    assert fragment.ask_of(PendingJob(1, cpus_per_node=2, gpus_per_node=3), per_gpu) == \
        Task(2, 0, 3, WHOLE)
    assert fragment.ask_of(PendingJob(1, shards_per_node=1), per_gpu) == Task(1, 0, 1, 250)
    assert fragment.ask_of(PendingJob(1, shards_per_node=6), per_gpu) == Task(1, 0, 2, WHOLE)
    assert fragment.ask_of(PendingJob(1), per_gpu) == Task(1, 0, 0, 0)
    # no GPU asked anywhere: no measure, best fit
    assert fragment.workload((), [PendingJob(1)], per_gpu) is None
