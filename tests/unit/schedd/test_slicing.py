"""Issue 12's bystander: long requests hold schedd's loop a slice at a time (schedd/slicing.py)
and say exactly what they said in one piece; the loop watch names what held a slow turn."""

from __future__ import annotations

import copy
import gc
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from kiln.config import Config
from kiln.identity import Caller
from kiln.model import Job, JobState, NodeAllocation
from kiln.wire import operations, protocol
from kiln.wire.localsock import Stream, joined
from schedd import loopwatch, slicing
from schedd.daemon import Daemon, Slices
from schedd.handlers import insight
from schedd.ledger.store import Store
from schedd.routes import CLIENT_HANDLERS
from tests.builders import sqlite_ledger

T0 = 1_795_938_899.0
ROOT = Caller(uid=0, gid=0, pid=1)
USER = Caller(uid=4242, gid=4242, pid=2)


@pytest.fixture
def daemon(tmp_path: Path):
    url = sqlite_ledger(tmp_path)
    store = Store(url)  # finished jobs in the ledger only, as after MinJobAge
    store.insert_jobs([Job(id=i, name=f"old{i}", user="root", uid=0, gid=0, account="root",
                           partition="gpu", state=JobState.COMPLETED, submit_time=T0 - 100,
                           start_time=T0 - 90, end_time=T0 - 30, time_limit=3600,
                           node_list="node1", batch_host="node1", generation=1,
                           allocation=[NodeAllocation("node1", 1, 0, [0])])
                       for i in range(1, 121)])
    store.close()
    cfg = Config(home=tmp_path, db_url=url, client_endpoint=f"ipc://{tmp_path}/s.sock",
                 agent_endpoint="tcp://127.0.0.1:*")
    d = Daemon(cfg, clock=lambda: T0)
    job = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", "held": "user"}
    for n in range(30):
        answer = d._dispatch(protocol.request("submit", {"job": {**job, "name": f"j{n}"}}, 1),
                             operations.CLIENT_OPS, CLIENT_HANDLERS, USER)
        assert json.loads(answer)["ok"]
    yield d
    d.close()


def worked(d: Daemon, op: str, body: dict[str, Any], caller: Caller) -> tuple[bytes, int]:
    """The reply to a request run as the loop runs it, and how many slices it took (its
    handler's, and the pieces its streamed reply was encoded in)."""
    answer = d._dispatch(protocol.request(op, body, 5), operations.CLIENT_OPS, CLIENT_HANDLERS,
                         caller)
    slices = 0
    while isinstance(answer, Slices):
        slices += 1
        answer = answer.step() or answer
    data = joined(answer)
    return data, slices + (answer.made if isinstance(answer, Stream) else 0)


@pytest.mark.parametrize("body", [
    {}, {"rows": []}, {"rows": list(range(5)), "now": 1.5},
    {"jobs": [{"id": i, "name": f"é{i}\n", "alloc": [{"gpus": [0, 1]}]} for i in range(1001)],
     "now": T0, "more": None, "cluster": "c"},
    {"a": list(range(slicing.ENCODE_ITEMS + 1)), "b": list(range(2 * slicing.ENCODE_ITEMS))},
])
@pytest.mark.parametrize("msg_id", [7, "x", None])
def test_a_reply_encoded_in_pieces_is_reply_ok_byte_for_byte(body, msg_id) -> None:
    body = copy.deepcopy(body)
    expected = protocol.reply_ok(msg_id, body)
    pieces = slicing.encode_reply(msg_id, body)
    yields = 0
    while True:
        try:
            next(pieces)
            yields += 1
        except StopIteration as done:
            assert b"".join(done.value) == expected
            break
    longest = max([len(v) for v in body.values() if isinstance(v, list)] or [0])
    assert yields >= longest // slicing.ENCODE_ITEMS  # a long list goes a piece at a time
    for value in body.values():  # and its items were let go as they went
        if isinstance(value, list) and len(value) > slicing.ENCODE_ITEMS:
            assert set(value) == {None}


def test_each_yields_when_its_time_is_spent_and_starts_again_on_resume(monkeypatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(slicing.time, "perf_counter", lambda: clock[0])
    done: list[int] = []

    def work(item: int) -> None:
        done.append(item)
        clock[0] += 0.002  # each item costs 2 ms

    slices = slicing.each(range(10), work, seconds=0.005)
    next(slices)
    assert done == [0, 1, 2]  # 6 ms >= 5 ms: it yielded
    clock[0] += 10.0  # the loop did other things meanwhile: not this slice's time
    next(slices)
    assert done == [0, 1, 2, 3, 4, 5]
    assert list(slices) == [None] and done == list(range(10))


def test_a_full_listing_goes_in_slices_and_says_what_it_said_in_one_piece(
        daemon: Daemon, monkeypatch) -> None:
    """The hostile user's 20 connections x 150 full listings held the loop for a whole
    listing each (22 ms to build, 45 ms to encode at 2,000 jobs on a loaded host)."""
    monkeypatch.setattr(slicing, "SLICE_SECONDS", 0.0)  # a slice per job
    monkeypatch.setattr(slicing, "ENCODE_ITEMS", 4)
    reply, slices = worked(daemon, "query_jobs", {"all_states": True}, USER)
    jobs = sorted(daemon.state.jobs.values(), key=lambda j: j.id)  # 120 ended, 30 held
    assert len(jobs) == 150 and slices >= 150 + 150 // 4
    expected = [j.to_wire(with_script=False, private=j.uid == USER.uid) for j in jobs]
    assert json.loads(reply) == json.loads(protocol.reply_ok(5, {"jobs": expected, "now": T0}))
    # squeue's column query stays a quick one, answered at once
    answer = daemon._dispatch(protocol.request("query_jobs", {"fields": ["id", "state"]}, 6),
                              operations.CLIENT_OPS, CLIENT_HANDLERS, USER)
    assert isinstance(answer, bytes) and json.loads(answer)["body"]["count"] == 30  # the queue


def test_sacct_builds_rows_a_slice_at_a_time_and_its_reply_does_not_change(
        daemon: Daemon, monkeypatch) -> None:
    """Four unfiltered sacct held the loop 270 ms a slice (a 1,000-job ledger page, then the
    whole reply's field filter and encoding in one go)."""
    body = {"start": 0.0, "fields": ["job_id", "state", "elapsed", "account"]}
    whole, few = worked(daemon, "acct_jobs", body, ROOT)
    monkeypatch.setattr(slicing, "SLICE_SECONDS", 0.0)
    monkeypatch.setattr(slicing, "ENCODE_ITEMS", 10)
    sliced, many = worked(daemon, "acct_jobs", body, ROOT)
    assert sliced == whole  # the same bytes, however it was cut
    rows = json.loads(sliced)["body"]["rows"]
    jobs = 120 + 30
    assert len([r for r in rows if r["kind"] == "job"]) == jobs
    assert set(rows[0]) == {"kind", "job_id", "job_id_raw", "step", "state", "elapsed",
                            "account"}
    # at least: each job's rows a slice of their own, and the encoding in pieces
    assert many >= jobs + len(rows) // 10 > few


def test_a_slow_turn_is_logged_with_what_held_it(caplog) -> None:
    watch = loopwatch.LoopWatch(0.0)
    gc.callbacks.remove(watch._collected)  # collections are not what this test is about
    watch.begin()
    since = loopwatch.time.perf_counter() - 0.3
    watch.add("op acct_jobs uid 1001", since)
    watch.add("cycle", loopwatch.time.perf_counter() - 0.01)
    with caplog.at_level(logging.INFO, logger="schedd.loop"):
        watch.end()
    line = caplog.messages[-1]
    assert line.startswith("slow turn ") and "op acct_jobs uid 1001 3" in line
    assert line.index("op acct_jobs") < line.index("cycle")  # longest first


def test_the_loop_watch_is_off_unless_asked(monkeypatch, caplog) -> None:
    monkeypatch.delenv(loopwatch.ENV, raising=False)
    assert not loopwatch.LoopWatch.from_env().on
    monkeypatch.setenv(loopwatch.ENV, "50")
    assert loopwatch.LoopWatch.from_env().threshold == 0.05
    monkeypatch.setenv(loopwatch.ENV, "fast")
    with caplog.at_level(logging.WARNING, logger="schedd.loop"):
        assert not loopwatch.LoopWatch.from_env().on
    assert "not a number" in caplog.messages[-1]


def test_kiln_stats_reads_the_ledger_a_page_a_slice_and_says_the_same(
        daemon: Daemon, monkeypatch) -> None:
    """Every ``kiln why`` of a pending job asks forecast_stats too, which read its 5,000
    started jobs in one go: 60-95 ms of the loop each time in the hostile bench."""
    daemon.state.store.insert_jobs([
        Job(id=1000 + i, name="f", user="root", uid=0, gid=0, account="root", partition="gpu",
            state=JobState.COMPLETED, submit_time=T0 - 500, start_time=T0 - 400 + i,
            end_time=T0 - 10, forecast_first=[T0 - 420 + 2 * i, T0 - 490],
            forecast_last=[T0 - 401 + i, T0 - 410],
            forecast_band=[T0 - 405, T0 - 380, T0 - 490, T0 - 405, T0 - 380])
        for i in range(40)])
    monkeypatch.setattr(insight, "STATS_PAGE", 10_000)
    whole, few = worked(daemon, "forecast_stats", {"since": 0.0}, USER)
    monkeypatch.setattr(insight, "STATS_PAGE", 7)
    sliced, many = worked(daemon, "forecast_stats", {"since": 0.0}, USER)
    assert sliced == whole
    body = json.loads(sliced)["body"]
    assert body["started"] == 120 + 40 and body["first"]["count"] == 40
    assert body["last"]["median_abs"] == 1.0 and body["quantiles"]["count"] == 40
    assert many >= (120 + 40) // 7 > few
    error = daemon._dispatch(protocol.request("forecast_stats", {"since": T0 + 1}, 9),
                             operations.CLIENT_OPS, CLIENT_HANDLERS, USER)
    while isinstance(error, Slices):
        error = error.step() or error
    assert json.loads(joined(error))["error"]["message"] == "the window starts in the future"
