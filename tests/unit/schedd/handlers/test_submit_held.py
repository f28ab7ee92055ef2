"""A held submission (``sbatch --hold``) owes the scheduler no cycle: it cannot start, and its
reason is JobHeldUser from the start, as ``scontrol hold`` would set it. A burst of them (a
queue filled by parallel sbatch loops) would otherwise pay a cycle over the whole queue each
(docs/benchmarks.md, issue 13). Every other submission still wakes the scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.identity import Caller
from schedd import snapshots
from schedd.handlers import control, submit
from tests.builders import handler_context

NOW = 2_000_000.0
USER = Caller(4242, 4242)


@pytest.fixture
def ctx(tmp_path: Path):
    c = handler_context(tmp_path, NOW, nodes=("node1",))
    yield c
    c.close()


def _submit(ctx, **fields) -> int:
    spec = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", **fields}
    return submit.submit(ctx, USER, {"job": spec})["job_id"]


def test_a_held_submission_wakes_no_cycle_and_says_why_it_waits(ctx) -> None:
    job_id = _submit(ctx, held="user")
    assert ctx.wakes == []
    assert ctx.state.jobs[job_id].reason == "JobHeldUser"
    stored = {j.id: j for j in ctx.state.store.load_jobs()}[job_id]
    assert stored.reason == "JobHeldUser" and stored.held == "user"
    _, blocked = snapshots.build(ctx.state, NOW)
    assert blocked[job_id] == "JobHeldUser"  # what the next periodic cycle sets: the same


def test_a_held_array_wakes_no_cycle(ctx) -> None:
    _submit(ctx, held="user", array_spec="1-3")
    assert ctx.wakes == []
    assert {j.reason for j in ctx.state.jobs.values()} == {"JobHeldUser"}


def test_other_submissions_and_the_release_wake_the_scheduler(ctx) -> None:
    job_id = _submit(ctx)
    assert ctx.wakes == ["wake"] and ctx.state.jobs[job_id].reason == "None"
    held = _submit(ctx, held="user")
    assert ctx.wakes == ["wake"]
    control.release(ctx, USER, {"job_ids": [str(held)]})
    assert ctx.wakes == ["wake", "wake"] and ctx.state.jobs[held].reason == "None"
