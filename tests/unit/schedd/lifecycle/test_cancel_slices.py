"""A big scancel is a long request: its jobs are ended a slice at a time
(``transitions.cancel_in_slices``), the loop answering others between slices, with the same
reply after the last; the pending jobs still to cancel are never offered to the cycle
meanwhile, and an scancel whose client goes away mid-way is still done whole."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import zmq

from kiln.config import Config
from kiln.identity import Caller
from kiln.model import JobState
from kiln.wire import operations, protocol
from kiln.wire.localsock import Connection, LocalServer, Work, joined
from schedd.daemon import Daemon, Slices
from schedd.ledger.migrate import upgrade
from schedd.lifecycle import transitions
from schedd.routes import CLIENT_HANDLERS

T0 = 1_795_938_899.0
USER = Caller(uid=4242, gid=4242, pid=2)
OTHER = Caller(uid=4343, gid=4343, pid=3)
TASKS = 2 * transitions.CANCEL_SLICE + 50  # three slices


def _call(d: Daemon, op: str, body: dict[str, Any], caller: Caller) -> Any:
    return d._dispatch(protocol.request(op, body, 9), operations.CLIENT_OPS, CLIENT_HANDLERS,
                       caller)


def _finish(answer: Any) -> tuple[dict[str, Any], int]:
    """The reply of a request run as the loop runs it, and how many slices it took."""
    slices = 0
    while isinstance(answer, Slices):
        slices += 1
        answer = answer.step() or answer
    return json.loads(joined(answer)), slices


@pytest.fixture
def daemon(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/kiln.db"
    upgrade(url)
    cfg = Config(home=tmp_path, db_url=url, client_endpoint=f"ipc://{tmp_path}/s.sock",
                 agent_endpoint="tcp://127.0.0.1:*")
    d = Daemon(cfg, clock=lambda: T0)
    job = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", "array_spec": f"0-{TASKS - 1}"}
    reply, _ = _finish(_call(d, "submit", {"job": job}, USER))  # a big array: in slices
    assert reply["ok"], reply
    d.array = reply["body"]["job_id"]
    yield d
    d.close()


def _states(d: Daemon) -> dict[str, int]:
    out: dict[str, int] = {}
    for job in d.state.jobs.values():
        out[job.state.value] = out.get(job.state.value, 0) + 1
    return out


def test_a_big_cancel_goes_in_slices_and_others_are_answered_between(daemon) -> None:
    offered = {p.job_id for p in daemon.services.planner.snapshot(T0)[0].pending}
    assert len(offered) == TASKS  # the cycle would consider every task
    answer = _call(daemon, "cancel", {"job_ids": [str(daemon.array)]}, USER)
    assert isinstance(answer, Slices)  # a long request, not one turn of the loop
    assert answer.step() is None  # the first slice
    assert _states(daemon) == {"CANCELLED": transitions.CANCEL_SLICE,
                               "PENDING": TASKS - transitions.CANCEL_SLICE}
    # between slices: another user's listing is answered at once, and the cycle is offered
    # none of the jobs this cancel has still to end
    listing, _ = _finish(_call(daemon, "query_jobs", {"all_states": True}, OTHER))
    assert listing["ok"] and len(listing["body"]["jobs"]) == TASKS
    assert answer.step() is None and _states(daemon)["PENDING"] == TASKS - 2 * \
        transitions.CANCEL_SLICE  # the cancel goes on where it was
    assert daemon.services.planner.snapshot(T0)[0].pending == []
    reply, slices = _finish(answer)
    assert slices == 1  # the last slice, and with it the reply
    assert reply["ok"] and reply["body"]["errors"] == []
    assert len(reply["body"]["cancelled"]) == TASKS
    assert _states(daemon) == {"CANCELLED": TASKS}
    assert daemon.services.planner.withheld == set()
    stored = daemon.state.store.load_jobs(active_only=False)
    assert {j.state for j in stored} == {JobState.CANCELLED}
    assert all(j.cancelled_by == USER.uid for j in stored)


def test_the_reply_is_the_one_a_cancel_in_one_go_gives(daemon, monkeypatch) -> None:
    body = {"job_ids": [str(daemon.array), "999999", f"{daemon.array}_0"]}
    sliced, _ = _finish(_call(daemon, "cancel", body, USER))
    # the same request on a fresh array, in one go
    job = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", "array_spec": f"0-{TASKS - 1}"}
    again = _finish(_call(daemon, "submit", {"job": job}, USER))[0]["body"]["job_id"]
    monkeypatch.setattr(transitions, "CANCEL_SLICE", 10 * TASKS)
    body = {"job_ids": [str(again), "999999", f"{again}_0"]}
    whole = json.loads(_call(daemon, "cancel", body, USER))
    assert len(whole["body"]["cancelled"]) == TASKS
    names = str(again)
    assert json.loads(json.dumps(sliced).replace(f'"{daemon.array}_', f'"{names}_')) == whole


def test_a_cancel_whose_client_went_away_is_still_done_whole(daemon) -> None:
    answer = _call(daemon, "cancel", {"job_ids": [str(daemon.array)]}, USER)
    assert answer.step() is None
    assert _states(daemon)["PENDING"] == TASKS - transitions.CANCEL_SLICE
    answer.cancel()
    del answer  # the server lets the request go: the generator is closed
    assert _states(daemon) == {"CANCELLED": TASKS}
    assert daemon.services.planner.withheld == set()


class _Counting(Work):
    def __init__(self, name: str, total: int, log: list[str], light: bool = False):
        self.name, self.left, self.log, self._light = name, total, log, light

    @property
    def light(self) -> bool:
        return self._light

    def step(self) -> bytes | None:
        self.log.append(self.name)
        self.left -= 1
        return None if self.left else protocol.reply_ok(1, {"done": self.name})


def test_a_cancel_in_slices_is_stepped_beside_the_users_long_reads(daemon, tmp_path) -> None:
    """Of one user's long requests only the two oldest are built at a time; a light one (a
    big scancel holds no body) is not queued behind them but takes its turn beside them."""
    assert _call(daemon, "cancel", {"job_ids": [str(daemon.array)]}, USER).light
    assert not _call(daemon, "acct_jobs", {}, USER).light
    server = LocalServer(f"ipc://{tmp_path}/t.sock", lambda f, c: b"")
    poller = zmq.Poller()
    server.register(poller)
    log: list[str] = []
    pairs = []
    for order, (name, light) in enumerate([("sacct1", False), ("sacct2", False),
                                           ("sacct3", False), ("cancel", True)]):
        ours, theirs = socket.socketpair()
        pairs.append(theirs)
        conn = Connection(ours, Caller(uid=1001, gid=1001, pid=0), work_order=order)
        conn.work = _Counting(name, 3 if light else 6, log, light)
        server.conns[conn.fd] = conn
        poller.register(conn.fd, 0)
    server.step_work(budget=10.0)
    assert log.index("cancel") < 3  # not after sacct1 or sacct2 was done
    assert log.count("cancel") == 3
    for theirs in pairs:
        theirs.close()
    server.close()
