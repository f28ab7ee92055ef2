"""Issue 13, the relay, in schedd: a ``relay`` op dispatched as if from an agent connection
(a fake authenticated identity), and agentd's side against a fake schedd."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from agentd import relay as agent_relay
from kiln.config import Config
from kiln.wire import operations, protocol
from schedd import relay, slicing
from schedd.daemon import Daemon
from schedd.routes import AGENT_HANDLERS
from tests.builders import sqlite_ledger

USER = 4242


@pytest.fixture
def daemon(tmp_path: Path):
    url = sqlite_ledger(tmp_path)
    cfg = Config(home=tmp_path, db_url=url, client_endpoint=f"ipc://{tmp_path}/s.sock",
                 agent_endpoint="tcp://127.0.0.1:*", relay_root_nodes=["trusted"])
    d = Daemon(cfg)
    d.keyring = object()  # stands for curve = true: the identity frame was authenticated
    sent: list[list[bytes]] = []
    d.relays.send = sent.append
    d.sent = sent  # type: ignore[attr-defined]
    yield d
    d.keyring = None
    d.close()


def _relay(d: Daemon, inner: bytes, node: str | None = "node2", uid: int = USER,
           body_node: str = "node2", msg_id: int = 7) -> bytes | None:
    frame = protocol.request("relay", {"node": body_node, "uid": uid, "gid": uid, "pid": 99,
                                       "request": inner.decode()}, msg_id)
    return d._dispatch(frame, operations.AGENT_OPS, AGENT_HANDLERS, node,
                       denied="this agent's CURVE key is not its node's",
                       route=[(node or "x").encode()])


def _reply(d: Daemon) -> tuple[dict, bytes]:
    frames = d.sent.pop(0)  # type: ignore[attr-defined]
    assert frames[0] == b"node2"
    return json.loads(frames[1]), frames[2]


def _submit_frame(**extra) -> bytes:
    job = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", **extra}
    return protocol.request("submit", {"job": job}, 3)


def test_a_relayed_request_acts_as_the_relayed_uid(daemon: Daemon) -> None:
    assert _relay(daemon, protocol.request("ping", {}, 5)) is None  # answered by relay.py
    header, chunk = _reply(daemon)
    assert header["id"] == 7 and header["ok"] and header["body"]["more"] is False
    inner = json.loads(chunk)
    assert inner["id"] == 5 and inner["body"]["pong"] is True
    _relay(daemon, _submit_frame())
    _, chunk = _reply(daemon)
    job_id = json.loads(chunk)["body"]["job_id"]
    job = daemon.state.jobs[job_id]
    assert (job.uid, job.gid) == (USER, USER)


def test_a_uid_in_the_inner_request_is_not_an_identity(daemon: Daemon) -> None:
    _relay(daemon, _submit_frame(uid=0))
    _, chunk = _reply(daemon)
    inner = json.loads(chunk)
    assert not inner["ok"] and "unknown field 'uid'" in inner["error"]["message"]
    # and a caller field beside the body is nobody's word either
    frame = json.dumps({"v": 1, "op": "ping", "id": 1, "body": {}, "uid": 0}).encode()
    _relay(daemon, frame, uid=USER)
    _, chunk = _reply(daemon)
    assert json.loads(chunk)["ok"]


def test_root_is_relayed_only_from_nodes_allowed_to(daemon: Daemon) -> None:
    reply = json.loads(_relay(daemon, protocol.request("ping"), uid=0))
    assert not reply["ok"] and reply["error"]["code"] == protocol.E_PERMISSION
    assert "relay_root_nodes" in reply["error"]["message"]
    assert not daemon.sent  # type: ignore[attr-defined]
    own = json.loads(_relay(daemon, protocol.request("ping"), uid=os.getuid()))
    assert not own["ok"]  # schedd's own user is an administrator too
    frame = protocol.request("relay", {"node": "trusted", "uid": 0, "gid": 0,
                                       "request": protocol.request("ping").decode()}, 1)
    assert daemon._dispatch(frame, operations.AGENT_OPS, AGENT_HANDLERS, "trusted",
                            route=[b"node2"]) is None
    assert json.loads(_reply(daemon)[1])["ok"]


def test_a_relay_for_another_node_or_with_another_nodes_key_is_refused(daemon: Daemon) -> None:
    reply = json.loads(_relay(daemon, protocol.request("ping"), body_node="node1"))
    assert not reply["ok"] and "may not relay for node 'node1'" in reply["error"]["message"]
    reply = json.loads(_relay(daemon, protocol.request("ping"), node=None))
    assert not reply["ok"] and "CURVE key is not its node's" in reply["error"]["message"]
    daemon.keyring = None  # curve = false: nobody's identity is authenticated
    reply = json.loads(_relay(daemon, protocol.request("ping")))
    assert not reply["ok"] and "curve = true" in reply["error"]["message"]
    assert not daemon.sent  # type: ignore[attr-defined]


def test_a_large_reply_is_fetched_chunk_by_chunk(daemon: Daemon, monkeypatch) -> None:
    """A long request's reply is streamed: each chunk is encoded when the agent fetches it
    (whole pieces of slicing.ENCODE_ITEMS jobs, at least CHUNK bytes but the last), and its
    size is not known before the end (``size`` 0)."""
    monkeypatch.setattr(relay, "CHUNK", 100)
    monkeypatch.setattr(slicing, "ENCODE_ITEMS", 1)
    for _ in range(5):
        _relay(daemon, _submit_frame(comment="x" * 200))
        _reply(daemon)
    _relay(daemon, protocol.request("query_jobs", {}, 9))
    while daemon.relays.working:  # a full listing is a long request (schedd/slicing.py)
        daemon.relays.step_work()
    header, data = _reply(daemon)
    assert header["body"]["more"] and header["body"]["size"] == 0
    handle = header["body"]["handle"]
    assert len(daemon.relays.held) == 1
    stream = next(iter(daemon.relays.held.values())).stream
    assert stream is not None and stream.made == 2  # its head, one job: the rest not yet made
    chunks = 1
    while header["body"]["more"]:
        frame = protocol.request("relay_next", {"node": "node2", "handle": handle}, 8)
        assert daemon._dispatch(frame, operations.AGENT_OPS, AGENT_HANDLERS, "node2",
                                route=[b"node2"]) is None
        header, chunk = _reply(daemon)
        data += chunk
        chunks += 1
    assert chunks >= 6 and not daemon.relays.held
    assert len(json.loads(data)["body"]["jobs"]) == 5
    # another node cannot fetch it, nor a handle nobody holds
    frame = protocol.request("relay_next", {"node": "node2", "handle": handle}, 8)
    reply = json.loads(daemon._dispatch(frame, operations.AGENT_OPS, AGENT_HANDLERS, "node2",
                                        route=[b"node2"]) or b"{}")
    assert reply == {} or not reply.get("ok")


# --- agentd's side ------------------------------------------------------------------------


class _Poller:
    def register(self, *a):
        pass

    modify = unregister = register


def _client(path: str, frame: bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    sock.sendall(len(frame).to_bytes(4, "big") + frame)
    return sock


def _read(sock: socket.socket) -> dict:
    sock.settimeout(5)
    size = int.from_bytes(sock.recv(4), "big")
    data = b""
    while len(data) < size:
        data += sock.recv(size - len(data))
    return json.loads(data)


def _serve(r: agent_relay.Relay) -> None:
    r.server.ready({r.server.listener.fileno(): 1}, 0)
    r.server.ready({fd: 1 for fd in list(r.server.conns)}, 0)


def test_the_agent_relays_with_the_kernels_identity_and_says_when_schedd_is_gone(
        tmp_path: Path) -> None:
    out: list[bytes] = []
    ids = iter(range(100, 200))
    r = agent_relay.Relay(f"ipc://{tmp_path}/run/s.sock", "node2", lambda: next(ids),
                          lambda f: out.append(f) or True, lambda: 3.0)
    r.register(_Poller())
    try:
        sock = _client(r.path, protocol.request("ping", {}, 1))
        _serve(r)  # schedd never heard: at once
        reply = _read(sock)
        assert reply["error"]["message"] == agent_relay.UNREACHABLE and reply["id"] == 1
        r.heard()
        sock.sendall(len(protocol.request("ping", {}, 2)).to_bytes(4, "big")
                     + protocol.request("ping", {}, 2))
        _serve(r)
        relayed = protocol.decode_request(out.pop(), operations.AGENT_OPS)
        assert relayed[1] == "relay"
        body = relayed[2]
        assert (body["uid"], body["gid"], body["node"]) == (os.getuid(), os.getgid(), "node2")
        assert json.loads(body["request"])["id"] == 2
        # the reply in two chunks: the agent asks for the second
        inner = protocol.reply_ok(2, {"pong": True})
        r.on_reply({"id": relayed[0], "ok": True,
                    "body": {"size": len(inner), "handle": 4, "more": True}}, [inner[:10]])
        nxt = protocol.decode_request(out.pop(), operations.AGENT_OPS)
        assert nxt[1] == "relay_next" and nxt[2]["handle"] == 4
        r.on_reply({"id": nxt[0], "ok": True,
                    "body": {"size": len(inner), "handle": 4, "more": False}}, [inner[10:]])
        assert _read(sock)["body"]["pong"] is True
        # schedd lost mid-request: told, not resent
        sock.sendall(len(protocol.request("ping", {}, 3)).to_bytes(4, "big")
                     + protocol.request("ping", {}, 3))
        _serve(r)
        assert len(out) == 1
        r.lost()
        assert _read(sock)["error"]["message"] == agent_relay.LOST
        assert not r.pending and len(out) == 1
    finally:
        r.close()
    assert not os.path.exists(agent_relay.marker(r.path))


def test_auto_serves_only_where_no_schedd_is(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    assert agent_relay.should_serve("auto", f"ipc://{path}")[0]  # nothing there: a node
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    assert not agent_relay.should_serve("auto", f"ipc://{path}")[0]  # schedd listens: head
    listener.close()
    assert not agent_relay.should_serve("auto", f"ipc://{path}")[0]  # a dead schedd's file
    Path(agent_relay.marker(str(path))).write_text("1\n")
    assert agent_relay.should_serve("auto", f"ipc://{path}")[0]  # our own, from a crash
    assert not agent_relay.should_serve(False, f"ipc://{path}")[0]
    assert agent_relay.should_serve(True, f"ipc://{path}")[0]


def test_a_relayed_long_request_is_worked_in_slices(daemon: Daemon) -> None:
    _relay(daemon, _submit_frame())
    _reply(daemon)
    assert _relay(daemon, protocol.request("acct_jobs", {"start": 0}, 11)) is None
    assert daemon.relays.working and not daemon.sent  # type: ignore[attr-defined]
    for _ in range(1000):
        if not daemon.relays.working:
            break
        daemon.relays.step_work()
    header, chunk = _reply(daemon)
    assert header["ok"] and json.loads(chunk)["id"] == 11 and json.loads(chunk)["ok"]


def test_a_relay_only_agent_says_hello(daemon: Daemon) -> None:
    frame = protocol.request("relay_hello", {"node": "node2"}, 3)
    reply = json.loads(daemon._dispatch(frame, operations.AGENT_OPS, AGENT_HANDLERS, "node2",
                                        route=[b"node2"]))
    assert reply["ok"] and reply["body"]["heartbeat_interval"] == daemon.cfg.heartbeat_interval
    frame = protocol.request("relay_hello", {"node": "node1"}, 3)
    reply = json.loads(daemon._dispatch(frame, operations.AGENT_OPS, AGENT_HANDLERS, "node2",
                                        route=[b"node2"]))
    assert not reply["ok"]
    assert "node2" not in daemon.state.nodes  # a hello registers nothing


def test_serve_commands_and_relay_root_nodes_are_checked(tmp_path: Path) -> None:
    from kiln.config import ConfigError, from_dict

    cfg = from_dict({"agent": {"serve_commands": "auto", "relay_only": True},
                     "schedd": {"relay_root_nodes": ["gpu01"]}}, tmp_path / "kiln.toml")
    assert cfg.agent.relay_only and cfg.relay_root_nodes == ["gpu01"]
    with pytest.raises(ConfigError, match="serve_commands"):
        from_dict({"agent": {"serve_commands": "sometimes"}}, tmp_path / "kiln.toml")
    with pytest.raises(ConfigError, match="relay_root_nodes"):
        from_dict({"schedd": {"relay_root_nodes": "gpu01"}}, tmp_path / "kiln.toml")
