"""CURVE keys: kiln keygen's files, and a ROUTER that admits only authorised agents."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import zmq
from click.testing import CliRunner
from zmq.auth.thread import ThreadAuthenticator

from cli.keygen import keygen
from schedd import keys


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
