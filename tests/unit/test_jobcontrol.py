"""scontrol's job control on schedd's side (schedd/handlers/jobcontrol.py), without agents:
a requeue waits for the old run's end, a silent node does not leave it waiting forever."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from schedd.config import Config
from schedd.handlers import jobcontrol
from schedd.identity import Caller
from schedd.ledger.migrate import upgrade
from schedd.ledger.store import Store
from schedd.model import Job, JobState, Node, NodeAllocation
from schedd.state import State

NOW = 2_000_000.0


class Agents:
    def __init__(self) -> None:
        self.told: list[tuple[int, str]] = []

    def terminate(self, job: Job, state: str) -> None:
        self.told.append((job.id, state))


@pytest.fixture
def ctx(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/kiln.db"
    upgrade(url)
    state = State(Config(home=tmp_path, db_url=url), Store(url))
    state.nodes["n1"] = Node("n1", 8, 1000, last_heartbeat=NOW)
    job = Job(id=5, user="root", uid=0, state=JobState.RUNNING, start_time=NOW - 10,
              time_limit=600, batch_host="n1", generation=1,
              allocation=[NodeAllocation("n1", 1, 100, [])])
    state.add_jobs([job], [])
    c = SimpleNamespace(state=state, agents=Agents(), cfg=state.cfg, now=lambda: NOW,
                        wake_scheduler=lambda: None, steps=None)
    yield c
    state.store.close()


def test_requeue_stops_the_run_first_then_queues_it_again(ctx, monkeypatch) -> None:
    monkeypatch.setattr(jobcontrol.job_steps, "job_finished", lambda c, j: None)
    reply = jobcontrol.requeue(ctx, Caller(0, 0), {"job_ids": ["5"]})
    job = ctx.state.jobs[5]
    assert reply == {"errors": []}
    assert (job.state, ctx.agents.told) == (JobState.COMPLETING, [(5, "REQUEUED")])
    assert jobcontrol.ended_state(job, "CANCELLED") == "REQUEUED"
    jobcontrol.after_end(ctx, job, NOW + 1)
    assert (job.state, job.restart_count, job.id) == (JobState.PENDING, 1, 5)
    assert jobcontrol.REQUEUE_KEY not in job.extra


def test_silent_node_settles_a_stalled_requeue(ctx, monkeypatch) -> None:
    monkeypatch.setattr(jobcontrol.job_steps, "job_finished", lambda c, j: None)
    jobcontrol.requeue(ctx, Caller(0, 0), {"job_ids": ["5"], "hold": True})
    jobcontrol.settle_stalled(ctx, NOW + 1)
    assert ctx.state.jobs[5].state == JobState.COMPLETING  # the agent may still report
    ctx.state.nodes["n1"].last_heartbeat = NOW - 3600
    jobcontrol.settle_stalled(ctx, NOW + 2)
    job = ctx.state.jobs[5]
    assert (job.state, job.held, job.restart_count) == (JobState.PENDING, "user", 1)


def test_no_requeue_job_set_down_stays_node_fail(ctx, monkeypatch) -> None:
    monkeypatch.setattr(jobcontrol.job_steps, "job_finished", lambda c, j: None)
    job = ctx.state.jobs[5]
    job.requeue = False
    assert jobcontrol.requeue(ctx, Caller(0, 0), {"job_ids": ["5"]})["errors"] == [
        {"job_id": "5", "message": jobcontrol.DISABLED}]
    jobcontrol.update_node(ctx, Caller(0, 0), {"names": ["n1"],
                                               "changes": {"state": "DOWN", "reason": "fan"}})
    assert ctx.agents.told == [(5, "NODE_FAIL")]
    assert jobcontrol.ended_state(job, "CANCELLED") == "NODE_FAIL"
    ctx.state.commit([(job, {"state": JobState.NODE_FAIL})])
    jobcontrol.after_end(ctx, job, NOW + 1)
    assert job.state == JobState.NODE_FAIL
