"""CURVE keys: kiln keygen's files, and a ROUTER that admits only authorised agents."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import zmq
from click.testing import CliRunner
from zmq.auth.thread import ThreadAuthenticator

from cli.keygen import keygen
from kiln import keys


def test_keygen_makes_pairs_and_authorises_nodes(tmp_path: Path) -> None:
    res = CliRunner().invoke(keygen, ["--dir", str(tmp_path), "--node", "n1", "--node", "n2"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "schedd.key").exists() and (tmp_path / "schedd.key_secret").exists()
    for node in ("n1", "n2"):
        secret = tmp_path / "agents" / f"{node}.key_secret"
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert (tmp_path / "authorized" / f"{node}.key").exists()
    before = (tmp_path / "schedd.key").read_bytes()
    CliRunner().invoke(keygen, ["--dir", str(tmp_path)])
    assert (tmp_path / "schedd.key").read_bytes() == before  # idempotent without --force
    bad = CliRunner().invoke(keygen, ["--dir", str(tmp_path), "--node", "../x"])
    assert bad.exit_code == 2 and "not a node name" in bad.output


def test_only_authorised_agents_get_through(tmp_path: Path, caplog) -> None:
    keys.generate_cluster(tmp_path, ["node1"])
    rogue_dir = tmp_path / "rogue"
    keys.generate(rogue_dir, "node1")
    keyring = keys.AgentKeyring(tmp_path, logging.getLogger("test.keys"))
    ctx = zmq.Context()
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve_callback("*", credentials_provider=keyring)
    server = ctx.socket(zmq.ROUTER)
    public, secret = keys.load_secret(keys.server_secret(tmp_path))
    server.curve_publickey, server.curve_secretkey, server.curve_server = public, secret, True
    port = server.bind_to_random_port("tcp://127.0.0.1")

    def agent(secret_file: Path) -> zmq.Socket:
        sock = ctx.socket(zmq.DEALER)
        sock.curve_publickey, sock.curve_secretkey = keys.load_secret(secret_file)
        sock.curve_serverkey = public
        sock.identity, sock.linger = b"node1", 0
        sock.connect(f"tcp://127.0.0.1:{port}")
        sock.send(b"hello")
        return sock

    try:
        good = agent(keys.agent_secret(tmp_path, "node1"))
        assert server.poll(5000)
        frames = server.recv_multipart(copy=False)
        assert frames[-1].bytes == b"hello"
        assert keyring.node_of(frames[-1].get("User-Id").encode()) == "node1"
        with caplog.at_level(logging.WARNING, logger="test.keys"):
            bad = agent(rogue_dir / "node1.key_secret")
            assert not server.poll(1500)
        assert "unknown CURVE key" in caplog.text
        for sock in (good, bad, server):
            sock.close(0)
    finally:
        auth.stop()
        ctx.term()


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_a_refused_key_retried_many_times_is_logged_once_then_counted(tmp_path: Path,
                                                                      caplog) -> None:
    keys.generate_cluster(tmp_path, ["node1"])
    rogue = keys.load_public(keys.generate(tmp_path / "rogue", "node1")[0])
    keyring = keys.AgentKeyring(tmp_path, logging.getLogger("test.keys.flood"))
    clock = _Clock()
    keyring.refusals.clock = clock
    with caplog.at_level(logging.WARNING, logger="test.keys.flood"):
        for _ in range(500):  # an agent with a stale key, reconnecting in a tight loop
            assert keyring.callback("*", rogue) is False
        assert len(_lines(caplog, "test.keys.flood")) == 1
        clock.now += 30
        keyring.callback("*", rogue)
        keyring.refusals.flush()
        assert len(_lines(caplog, "test.keys.flood")) == 1  # within the minute: counted only
        clock.now += 31
        keyring.refusals.flush()  # the flood stopped: its count is still written, once
        keyring.refusals.flush()
    lines = _lines(caplog, "test.keys.flood")
    assert len(lines) == 2
    assert "unknown CURVE key" in lines[0]
    assert "(500 times in the last 61 s)" in lines[1]


def test_the_repeat_limiter_bounds_the_peers_it_tracks(caplog) -> None:
    from kiln.logs import RepeatLimiter

    clock = _Clock()
    limiter = RepeatLimiter(logging.getLogger("test.keys.many"), max_peers=10, clock=clock)
    with caplog.at_level(logging.WARNING, logger="test.keys.many"):
        for i in range(1000):  # a fresh key every time
            limiter.warning(f"key{i}", "refused key%d", i)
    assert len(limiter._peers) == 11  # ten peers and the rest together
    assert len(_lines(caplog, "test.keys.many")) == 11
    clock.now += 60
    with caplog.at_level(logging.WARNING, logger="test.keys.many"):
        limiter.flush()
    assert "(989 times in the last 60 s)" in _lines(caplog, "test.keys.many")[-1]
