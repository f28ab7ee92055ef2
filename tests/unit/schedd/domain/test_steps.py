"""schedd.domain.steps: laying srun's tasks over an allocation, and a step's verdict from its nodes."""

from __future__ import annotations

import pytest

from kiln.model import Job, JobState, NodeAllocation
from schedd.domain.jobenv import job_ntasks, step_environment, task_overlay, tasks_per_node_text
from schedd.domain.steps import (
    LiveStep,
    StepError,
    StepShape,
    StepTable,
    TaskExit,
    in_nodelist_order,
    plan,
)


def _job(nodes: int = 2, gpus: int = 4, **kw) -> Job:
    alloc = [NodeAllocation(f"node{i + 1}", 8, 1000, list(range(gpus))) for i in range(nodes)]
    return Job(id=7, user="alice", uid=1000, gid=1000, state=JobState.RUNNING,
               allocation=alloc, num_nodes=nodes, **kw)


def _layout(shares) -> list[tuple[str, int, tuple[int, ...]]]:
    return [(s.node, s.index, s.procids) for s in shares]


def test_job_tasks_per_node_gives_the_default_layout() -> None:
    shares = plan(_job(ntasks_per_node=2), StepShape())
    assert _layout(shares) == [("node1", 0, (0, 1)), ("node2", 1, (2, 3))]


def test_a_job_without_tasks_gets_one_task_per_node() -> None:
    assert _layout(plan(_job(nodes=3), StepShape())) == [
        ("node1", 0, (0,)), ("node2", 1, (1,)), ("node3", 2, (2,))]


def test_block_distribution_fills_the_first_nodes_first() -> None:
    shares = plan(_job(num_tasks=5), StepShape())
    assert _layout(shares) == [("node1", 0, (0, 1, 2)), ("node2", 1, (3, 4))]


def test_fewer_tasks_than_nodes_use_the_first_nodes() -> None:
    assert _layout(plan(_job(ntasks_per_node=2), StepShape(ntasks=1))) == [("node1", 0, (0,))]


def test_explicit_node_count_and_tasks_per_node() -> None:
    assert _layout(plan(_job(), StepShape(nodes=1, ntasks=3))) == [("node1", 0, (0, 1, 2))]
    assert _layout(plan(_job(), StepShape(ntasks_per_node=3))) == [
        ("node1", 0, (0, 1, 2)), ("node2", 1, (3, 4, 5))]
    assert _layout(plan(_job(), StepShape(ntasks=3, ntasks_per_node=2))) == [
        ("node1", 0, (0, 1)), ("node2", 1, (2,))]


def test_more_nodes_than_allocated_is_refused() -> None:
    with pytest.raises(StepError, match="Only allocated 2 nodes asked for 3"):
        plan(_job(), StepShape(nodes=3))


def test_tasks_per_node_that_cannot_hold_the_tasks_is_refused() -> None:
    with pytest.raises(StepError, match="need more than"):
        plan(_job(), StepShape(ntasks=5, ntasks_per_node=2))


def test_gpus_come_from_what_the_job_holds_on_each_node() -> None:
    shares = plan(_job(ntasks_per_node=2), StepShape())
    assert [s.gpus for s in shares] == [(0, 1, 2, 3), (0, 1, 2, 3)]
    shares = plan(_job(ntasks_per_node=2), StepShape(gpus_per_task=1))
    assert [s.gpus for s in shares] == [(0, 1), (0, 1)]
    assert [s.gpus for s in plan(_job(), StepShape(gpus=2))] == [(0,), (0,)]
    assert [s.gpus for s in plan(_job(), StepShape(gpus_per_node=3))] == [(0, 1, 2), (0, 1, 2)]
    with pytest.raises(StepError, match="Requested 5 GPUs"):
        plan(_job(), StepShape(gpus_per_node=5))


def test_a_job_without_allocation_has_no_steps() -> None:
    with pytest.raises(StepError):
        plan(Job(id=1), StepShape())


def test_job_ntasks_reads_tasks_per_node_times_nodes() -> None:
    assert job_ntasks(_job(ntasks_per_node=4)) == 8
    assert job_ntasks(_job(num_tasks=3, ntasks_per_node=4)) == 3
    assert job_ntasks(_job()) == 1


def test_step_environment_is_the_nodes_view_over_sruns() -> None:
    job = _job(ntasks_per_node=2)
    base = {"PATH": "/bin", "SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0,1,2,3",
            "SLURMD_NODENAME": "node1"}
    env = step_environment(base, job, 3, 1, "node2", 8, [2, 3], [2, 3], ["node1", "node2"],
                           [2, 2], 1)
    assert env["PATH"] == "/bin"
    assert env["SLURM_STEP_ID"] == env["SLURM_STEPID"] == "3"
    assert env["SLURM_NODEID"] == "1"
    assert env["SLURMD_NODENAME"] == "node2"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["SLURM_NTASKS"] == env["SLURM_STEP_NUM_TASKS"] == "4"
    assert env["SLURM_STEP_NODELIST"] == "node[1-2]"
    assert env["SLURM_STEP_TASKS_PER_NODE"] == "2(x2)"
    assert env["SLURM_GTIDS"] == "2,3"
    no_gpus = step_environment(base, job, 0, 0, "node1", 8, [], [0], ["node1"], [1], 1)
    assert "CUDA_VISIBLE_DEVICES" not in no_gpus
    assert task_overlay(3, 1) == {"SLURM_PROCID": "3", "SLURM_LOCALID": "1"}
    assert tasks_per_node_text([3, 3, 2]) == "3(x2),2"


def test_a_step_ends_with_its_worst_task() -> None:
    step = LiveStep(7, 0, ["node1", "node2"], 4, 100.0, waiting={"node1", "node2"})
    assert not step.node_ended("node3", "COMPLETED", [], 101.0)
    assert not step.node_ended("node1", "COMPLETED",
                               [TaskExit(0, "node1", 0, 0), TaskExit(1, "node1", 3, 0)], 101.0)
    assert step.state == "RUNNING"
    assert step.node_ended("node2", "COMPLETED",
                           [TaskExit(2, "node2", 1, 0), TaskExit(3, "node2", 0, 9)], 102.0)
    assert (step.state, step.exit_code, step.exit_signal, step.end_time) == ("FAILED", 3, 9, 102.0)


def test_a_step_state_prefers_the_most_telling_node_state() -> None:
    step = LiveStep(7, 0, ["a", "b"], 2, 0.0, waiting={"a", "b"})
    step.node_ended("a", "COMPLETED", [TaskExit(0, "a", 0, 0)], 1.0)
    step.node_ended("b", "TIMEOUT", [TaskExit(1, "b", 0, 15)], 2.0)
    assert step.state == "TIMEOUT"
    ok = LiveStep(7, 1, ["a"], 1, 0.0, waiting={"a"})
    ok.node_ended("a", "COMPLETED", [TaskExit(0, "a", 0, 0)], 1.0)
    assert ok.state == "COMPLETED"


def test_an_abandoned_step_ends_as_its_job_did() -> None:
    step = LiveStep(7, 0, ["a", "b"], 2, 0.0, waiting={"a", "b"})
    step.node_ended("a", "COMPLETED", [TaskExit(0, "a", 0, 0)], 1.0)
    step.abandon("CANCELLED", 5.0)
    assert step.done and step.state == "CANCELLED" and step.end_time == 5.0


def test_step_ids_count_per_job_and_survive_a_restart_through_the_ledger() -> None:
    table = StepTable()
    assert [table.next_id(7, -1) for _ in range(3)] == [0, 1, 2]
    assert table.next_id(8, 4) == 5  # schedd restarted: the ledger knew steps 0-4
    assert table.known(7) and not table.known(9)
    table.add(LiveStep(7, 0, ["a"], 1, 0.0))
    table.add(LiveStep(7, 1, ["a"], 1, 0.0))
    assert [s.step_id for s in table.of_job(7)] == [0, 1]
    table.forget(7, 0)
    assert table.get(7, 0) is None and table.get(7, 1) is not None
    table.forget(7)
    assert table.of_job(7) == [] and not table.known(7)


def test_tasks_follow_the_nodelist_order_not_the_placement_order() -> None:
    job = _job(ntasks_per_node=1)
    job.allocation.reverse()  # best fit put node2 first
    assert _layout(plan(job, StepShape())) == [("node1", 0, (0,)), ("node2", 1, (1,))]
    names = ["node10", "node9", "node2"]
    alloc = [NodeAllocation(n, 1, 1) for n in names]
    assert [a.node for a in in_nodelist_order(alloc)] == ["node2", "node9", "node10"]
