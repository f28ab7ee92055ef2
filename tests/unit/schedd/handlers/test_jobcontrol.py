"""scontrol's job control and the lifecycle's one door on schedd's side, without agents: a
requeue waits for the old run's end, a silent node does not leave it waiting forever, and a
mark never outlives the run it was set for (issue 11's second defect)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.identity import Caller
from kiln.model import Job, JobState, Node, NodeAllocation
from schedd.domain.steps import placed
from schedd.handlers import jobcontrol
from schedd.lifecycle import enforcement, health, transitions
from tests.builders import handler_context

NOW = 2_000_000.0


class Agents:
    def __init__(self) -> None:
        self.told: list[tuple[int, str]] = []
        self.launched: list[tuple[int, int]] = []
        self.confirmed: set[tuple[int, int]] = set()
        self.checkpoints: dict[int, float] = {}

    def terminate(self, job: Job, state: str) -> None:
        self.told.append((job.id, state))

    def launch(self, job: Job, array_ids: tuple[int, ...] = ()) -> None:
        self.launched.append((job.id, job.generation))

    def forget_run(self, job_id: int, generation: int) -> None:
        self.confirmed.discard((job_id, generation))


@pytest.fixture
def ctx(tmp_path: Path):
    c = handler_context(tmp_path, NOW, nodes=("n1",), partitions=(), accounts=False)
    c.agents = Agents()
    job = Job(id=5, user="root", uid=0, state=JobState.RUNNING, start_time=NOW - 10,
              time_limit=600, batch_host="n1", generation=1,
              allocation=[NodeAllocation("n1", 1, 100, [])])
    c.state.add_jobs([job], [])
    yield c
    c.close()


def _events(ctx, job_id: int = 5) -> list[str]:
    return [e.state for e in ctx.state.store.job_events(job_id)]


def test_requeue_stops_the_run_first_then_queues_it_again(ctx) -> None:
    reply = jobcontrol.requeue(ctx, Caller(0, 0), {"job_ids": ["5"]})
    job = ctx.state.jobs[5]
    assert reply == {"errors": []}
    assert (job.state, ctx.agents.told) == (JobState.COMPLETING, [(5, "REQUEUED")])
    assert job.stop is not None and job.stop.generation == 1
    # the agent reports whatever it saw; the stop mark says what the run is recorded as
    assert transitions.end_run(ctx, job, transitions.RunEnd(1, "CANCELLED", NOW + 1))
    assert (job.state, job.restart_count, job.id) == (JobState.PENDING, 1, 5)
    assert job.stop is None
    assert _events(ctx) == ["COMPLETING", "REQUEUED", "REQUEUED"]


def test_silent_node_settles_a_stalled_requeue(ctx) -> None:
    jobcontrol.requeue(ctx, Caller(0, 0), {"job_ids": ["5"], "hold": True})
    enforcement.stalled_stops(ctx, NOW + 1)
    assert ctx.state.jobs[5].state == JobState.COMPLETING  # the agent may still report
    ctx.state.nodes["n1"].last_heartbeat = NOW - 3600
    enforcement.stalled_stops(ctx, NOW + 2)
    job = ctx.state.jobs[5]
    assert (job.state, job.held, job.restart_count) == (JobState.PENDING, "user", 1)
    assert job.stop is None


def test_no_requeue_job_set_down_stays_node_fail(ctx) -> None:
    job = ctx.state.jobs[5]
    job.requeue = False
    assert jobcontrol.requeue(ctx, Caller(0, 0), {"job_ids": ["5"]})["errors"] == [
        {"job_id": "5", "message": jobcontrol.DISABLED}]
    jobcontrol.update_node(ctx, Caller(0, 0), {"names": ["n1"],
                                               "changes": {"state": "DOWN", "reason": "fan"}})
    assert ctx.agents.told == [(5, "NODE_FAIL")]
    transitions.end_run(ctx, job, transitions.RunEnd(1, "CANCELLED", NOW + 1))
    assert job.state == JobState.NODE_FAIL and job.stop is None


def test_requeue_mark_does_not_survive_a_node_failure(ctx) -> None:
    """Issue 11, defect 2: requeue a job, let its node go silent, let the next run end
    COMPLETED. Before, the mark (no generation, never cleared by the node failure) turned the
    successful run into REQUEUED and ran the job a third time."""
    jobcontrol.requeue(ctx, Caller(0, 0), {"job_ids": ["5"]})
    job = ctx.state.jobs[5]
    ctx.state.nodes["n1"].last_heartbeat = NOW - 3600  # the node goes silent
    health.check_nodes(ctx, NOW + 40)
    assert (job.state, job.restart_count, job.stop) == (JobState.PENDING, 1, None)
    ctx.state.save_node(Node("n1", 8, 1000, last_heartbeat=NOW + 50))  # back, and a new run
    started = transitions.start_runs(ctx, [(job, *placed([NodeAllocation("n1", 1, 100, [])]))], NOW + 60)
    assert started == [job] and job.generation == 2
    # the silent agent's stale report of the first run changes nothing
    assert not transitions.end_run(ctx, job, transitions.RunEnd(1, "REQUEUED", NOW + 61))
    assert transitions.end_run(ctx, job, transitions.RunEnd(2, "COMPLETED", NOW + 70))
    assert (job.state, job.restart_count) == (JobState.COMPLETED, 1)
    assert _events(ctx) == ["COMPLETING", "NODE_FAIL", "REQUEUED", "RUNNING", "COMPLETED"]


def test_the_agent_enforces_the_admitted_limit(ctx) -> None:
    job = Job(id=6, user="root", uid=0, time_limit=5)
    ctx.state.add_jobs([job], [])
    transitions.start_runs(ctx, [(job, *placed([NodeAllocation("n1", 1, 100, [])]))], NOW)
    assert job.launched_limit == 5


def test_a_lowered_limit_is_enforced_by_schedd(ctx) -> None:
    job = ctx.state.jobs[5]
    ctx.state.commit([(job, {"launched_limit": 600})])
    jobcontrol.update_job(ctx, Caller(0, 0), {"job_ids": ["5"], "changes": {"time_limit": 20}})
    enforcement.lowered_limits(ctx, NOW + 5)
    assert job.state == JobState.RUNNING
    enforcement.lowered_limits(ctx, NOW + 11)
    assert job.state == JobState.COMPLETING and ctx.agents.told == [(5, "TIMEOUT")]
    transitions.end_run(ctx, job, transitions.RunEnd(1, "TIMEOUT", NOW + 12))
    assert job.state == JobState.TIMEOUT
