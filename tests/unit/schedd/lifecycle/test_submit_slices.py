"""A big array's submission is a long request (``handlers/submit._in_slices``): its tasks
are made and their rows bound a slice at a time, the loop answering others between slices,
then stored in one transaction before the reply; meanwhile its ids are taken and what it adds
counts against the limits, and a client that goes away before the end leaves nothing stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kiln.config import Config
from kiln.identity import Caller
from kiln.wire import operations, protocol
from kiln.wire.localsock import joined
from schedd.daemon import Daemon, Slices
from schedd.handlers.submit import SUBMIT_SLICE
from schedd.ledger.migrate import upgrade
from schedd.routes import CLIENT_HANDLERS

T0 = 1_795_938_899.0
USER = Caller(uid=4242, gid=4242, pid=2)
OTHER = Caller(uid=4343, gid=4343, pid=3)
TASKS = 2 * SUBMIT_SLICE + 50  # three slices of tasks
JOB = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", "held": "user"}


def _call(d: Daemon, op: str, body: dict[str, Any], caller: Caller) -> Any:
    return d._dispatch(protocol.request(op, body, 9), operations.CLIENT_OPS, CLIENT_HANDLERS,
                       caller)


def _finish(answer: Any) -> dict[str, Any]:
    while isinstance(answer, Slices):
        answer = answer.step() or answer
    return json.loads(joined(answer))


@pytest.fixture
def daemon(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/kiln.db"
    upgrade(url)
    cfg = Config(home=tmp_path, db_url=url, client_endpoint=f"ipc://{tmp_path}/s.sock",
                 agent_endpoint="tcp://127.0.0.1:*", max_job_count=TASKS + 10)
    d = Daemon(cfg, clock=lambda: T0)
    yield d
    d.close()


def _stored(d: Daemon) -> int:
    return len(d.state.store.load_jobs(active_only=False))


def test_a_big_array_is_submitted_in_slices_and_stored_whole_at_the_end(daemon) -> None:
    answer = _call(daemon, "submit", {"job": {**JOB, "array_spec": f"0-{TASKS - 1}"}}, USER)
    assert isinstance(answer, Slices) and answer.light
    slices = 0
    while isinstance(answer, Slices):
        # between slices: nothing is stored or seen yet, and another user is answered
        assert _stored(daemon) == 0 and not daemon.state.jobs
        listing = _finish(_call(daemon, "query_jobs", {"all_states": True}, OTHER))
        assert listing["ok"] and listing["body"]["jobs"] == []
        answer = answer.step() or answer
        slices += 1
    reply = json.loads(joined(answer))
    assert slices == 4  # three slices of tasks, then the transaction
    assert reply["ok"] and reply["body"]["job_id"] == 1
    assert reply["body"]["array_task_ids"] == list(range(TASKS))
    assert _stored(daemon) == TASKS and len(daemon.state.jobs) == TASKS
    assert daemon.state.jobs[1].array_task_id == TASKS - 1  # the last task keeps the array's id
    assert daemon.state.jobs[2].array_task_id == 0
    assert not daemon.state.submitting
    # a small array is still answered in its own turn, after the big one's ids
    small = json.loads(_call(daemon, "submit", {"job": {**JOB, "array_spec": "0-3"}}, USER))
    assert small["body"]["job_id"] == TASKS + 1


def test_what_is_admitted_meanwhile_counts_the_submission_in_flight(daemon) -> None:
    answer = _call(daemon, "submit", {"job": {**JOB, "array_spec": f"0-{TASKS - 1}"}}, USER)
    assert answer.step() is None  # the first slice: nothing stored yet
    # MaxJobCount is TASKS + 10: eleven more would be over it with the array's tasks counted
    refused = json.loads(_call(daemon, "submit", {"job": {**JOB, "array_spec": "0-10"}}, OTHER))
    assert not refused["ok"] and refused["error"]["message"] == \
        "Resource temporarily unavailable"
    fits = json.loads(_call(daemon, "submit", {"job": {**JOB, "array_spec": "0-9"}}, OTHER))
    assert fits["ok"] and fits["body"]["job_id"] == TASKS + 1  # the array's ids are taken
    assert _finish(answer)["ok"]
    assert len(daemon.state.jobs) == TASKS + 10


def test_a_submission_whose_client_goes_away_stores_nothing(daemon) -> None:
    answer = _call(daemon, "submit", {"job": {**JOB, "array_spec": f"0-{TASKS - 1}"}}, USER)
    assert answer.step() is None and answer.step() is None
    answer.gen.close()  # the client went away: localsock drops its work
    assert _stored(daemon) == 0 and not daemon.state.jobs and not daemon.state.submitting
    again = _finish(_call(daemon, "submit", {"job": {**JOB, "array_spec": f"0-{TASKS - 1}"}},
                          USER))
    assert again["ok"] and len(daemon.state.jobs) == TASKS
