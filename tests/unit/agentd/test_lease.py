"""The fence's clock (agentd/lease.py) through the agent's own message handling: only schedd's
answer to a heartbeat or registration sets it, to when that request was sent; the agent's own
sends and schedd's commands leave it alone (a link that fails one way: docs/robustness.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.daemon import Agent
from agentd.lease import Lease
from kiln import config as kconfig
from kiln.wire import protocol


@pytest.fixture
def agent(tmp_path: Path):
    cfg = kconfig.from_dict({
        "home": str(tmp_path), "curve": False,
        "agent": {"schedd": "tcp://127.0.0.1:9", "fake_gpus": "0", "serve_commands": False},
        "cgroup": {"enabled": False}})
    made = Agent(cfg, "node1", cpus=2, memory_mb=1024, spool_dir=str(tmp_path / "spool"))
    yield made
    made.sock.close(0)
    made.ctx.term()


def _clock(agent: Agent) -> float | None:
    try:
        return os.stat(agent.launcher.spool.heard_path).st_mtime
    except FileNotFoundError:
        return None


def _sent_at(agent: Agent, op: str, at: float, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr("agentd.daemon.time.time", lambda: at)
    msg_id = agent._send(op, {"node": "node1", "running": []})
    monkeypatch.undo()
    return msg_id


def test_only_an_answered_heartbeat_sets_the_clock_to_when_it_was_sent(agent, monkeypatch):
    beat = _sent_at(agent, "heartbeat", 1_000_000.0, monkeypatch)
    assert _clock(agent) is None  # sending is no proof schedd hears us
    agent._on_message(protocol.request("terminate_steps", {"job_id": 99, "state": "CANCELLED"}))
    assert _clock(agent) is None  # nor is a command from schedd
    agent._on_message(protocol.reply_ok(beat))
    assert _clock(agent) == 1_000_000.0  # its send time, not when the answer came


def test_the_clock_only_moves_forward_and_ignores_what_does_not_renew(agent, monkeypatch):
    old, new = (_sent_at(agent, "heartbeat", t, monkeypatch) for t in (2_000_000.0, 2_000_005.0))
    agent._on_message(protocol.reply_ok(new))
    agent._on_message(protocol.reply_ok(old))  # a late answer to an older heartbeat
    assert _clock(agent) == 2_000_005.0
    stranger = _sent_at(agent, "heartbeat", 2_000_009.0, monkeypatch)
    agent._on_message(protocol.reply_ok(stranger, {"register": True}))  # schedd does not know us
    refused = _sent_at(agent, "register", 2_000_010.0, monkeypatch)
    agent._on_message(protocol.reply_error(refused, "bad_request", "no"))
    ended = _sent_at(agent, "job_ended", 2_000_011.0, monkeypatch)
    agent._on_message(protocol.reply_ok(ended))  # schedd's node_timeout does not count it
    assert _clock(agent) == 2_000_005.0
    accepted = _sent_at(agent, "register", 2_000_012.0, monkeypatch)
    agent._on_message(protocol.reply_ok(accepted, {"heartbeat_interval": 1.0}))
    assert _clock(agent) == 2_000_012.0


def test_unanswered_heartbeats_are_remembered_within_a_bound():
    touched: list[float] = []
    lease = Lease(touched.append)
    for i in range(5000):
        lease.asked(i, float(i))
    lease.answered(0, True)  # too old to remember: no renewal
    lease.answered(4999, True)
    assert touched == [4999.0] and lease.renewed_at == 4999.0
