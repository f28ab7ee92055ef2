"""A held submission (``sbatch --hold``) owes the scheduler no cycle: it cannot start, and its
reason is JobHeldUser from the start, as ``scontrol hold`` would set it. A burst of them (a
queue filled by parallel sbatch loops) would otherwise pay a cycle over the whole queue each
(docs/benchmarks.md, issue 13). Every other submission still wakes the scheduler."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kiln.config import Config
from kiln.identity import Caller
from kiln.model import Node
from schedd import snapshots
from schedd.handlers import control, submit
from schedd.ledger.migrate import upgrade
from schedd.ledger.store import Store
from schedd.state import State

NOW = 2_000_000.0
USER = Caller(4242, 4242)


@pytest.fixture
def ctx(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/kiln.db"
    upgrade(url)
    state = State(Config(home=tmp_path, db_url=url), Store(url))
    state.load_accounts(NOW)
    state.nodes["node1"] = Node("node1", 8, 1000, last_heartbeat=NOW, partitions=["gpu"])
    wakes: list[str] = []
    c = SimpleNamespace(state=state, cfg=state.cfg, now=lambda: NOW,
                        wake_scheduler=lambda: wakes.append("wake"), wakes=wakes)
    yield c
    state.store.close()


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
