"""Hostile input against live daemons: random, huge, truncated and deeply nested frames, wrong
types, unknown operations and broken envelopes, from an ipc client and from agent-socket clients
(with an authorised CURVE key, with an unknown key, with none); and generated ``#SBATCH``
directives and scripts through sbatch's own parsing. Afterwards the daemons still answer, every
bad request got an error reply (where one is possible), and the ledger has no stray rows.

Each fuzz is bounded by its example count (and each request by a reply timeout)."""

from __future__ import annotations

import itertools
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli import sbatch
from cli.core import CommandError
from cli.core.client import Client, ClientError
from cli.submit import SBATCH_TABLE
from kiln import keys
from kiln.wire import operations, protocol
from kiln.wire.localsock import HEADER
from tests.integration.cluster import Cluster, cleanup, world_tempdir
from tests.integration.conftest import BACKENDS, _cluster

pytestmark = pytest.mark.timeout(300)  # seconds, each test: the fuzz's outer bound

REPLY_TIMEOUT_MS = 10_000
EXAMPLES = 150
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])
ERROR_CODES = {protocol.E_BAD_REQUEST, protocol.E_UNKNOWN_OP, protocol.E_PERMISSION,
               protocol.E_INVALID_JOB, protocol.E_INVALID}


@pytest.fixture(scope="module", params=BACKENDS)
def target(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _cluster(request, request.param, nodes=1, fake_gpus="2xA100", kill_wait=2)


# --- clients -----------------------------------------------------------------------------------


class Raw:
    """A bare DEALER: sends any frames, waits for one reply (or none)."""

    def __init__(self, endpoint: str, identity: bytes | None = None,
                 curve: tuple[bytes, bytes, bytes] | None = None):
        self.endpoint, self.identity, self.curve = endpoint, identity, curve
        self.ctx = zmq.Context.instance()
        self.sock = self._open()

    def _open(self) -> zmq.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.identity:
            sock.setsockopt(zmq.IDENTITY, self.identity)
        if self.curve:
            sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = self.curve
        sock.connect(self.endpoint)
        return sock

    def ask(self, frames: list[bytes], timeout_ms: int = REPLY_TIMEOUT_MS) -> dict | None:
        # A refused CURVE handshake can leave the DEALER with no pipe at all, and a DEALER
        # without a pipe blocks in send: bound the send as well as the wait.
        self.sock.setsockopt(zmq.SNDTIMEO, timeout_ms)
        try:
            self.sock.send_multipart(frames)
        except zmq.Again:
            self.reset()
            return None
        if not self.sock.poll(timeout_ms):
            self.reset()  # nothing came (or ever will): start clean for the next request
            return None
        return json.loads(self.sock.recv_multipart()[-1])  # after any envelope frames

    def reset(self) -> None:
        self.sock.close(0)
        self.sock = self._open()

    def close(self) -> None:
        self.sock.close(0)


def _ipc(cluster: Cluster) -> str:
    return f"ipc://{cluster.home}/schedd.sock"


class Local:
    """A bare client of the commands' local socket: sends any frame, reads one reply."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.client = Client(endpoint=endpoint, timeout=REPLY_TIMEOUT_MS / 1000)

    def ask(self, frames: list[bytes], timeout_ms: int = REPLY_TIMEOUT_MS) -> dict | None:
        try:
            return json.loads(self.client.exchange(b"".join(frames)))
        except ClientError:
            self.client.close()  # closed on us: start clean for the next request
            return None

    def close(self) -> None:
        self.client.close()


def _agent_endpoint(cluster: Cluster) -> str:
    text = (cluster.home / "kiln.toml").read_text()
    return next(line.split('"')[1] for line in text.splitlines()
                if line.startswith("agent_endpoint"))


def _ping(cluster: Cluster) -> None:
    client = Local(_ipc(cluster))
    try:
        reply = client.ask([protocol.request("ping", {}, 1)])
        assert reply is not None and reply["ok"] is True, reply
    finally:
        client.close()


def _rows(cluster: Cluster) -> dict[str, int]:
    engine = sa.create_engine(cluster.db_url)
    try:
        with engine.connect() as conn:
            return {t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                    for t in ("jobs", "job_events", "nodes")}
    finally:
        engine.dispose()


# --- what a hostile peer sends -------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=6),
    max_leaves=25)


def _envelope(op: Any, body: Any, msg_id: Any = 7, v: Any = protocol.VERSION) -> bytes:
    return json.dumps({"v": v, "op": op, "id": msg_id, "body": body}).encode()


def _deep(depth: int) -> bytes:
    """A request whose body nests ``depth`` lists (past the parser's stack when large)."""
    return (b'{"v":1,"op":"query_jobs","id":1,"body":{"job_ids":' + b"[" * depth
            + b"]" * depth + b"}}")


def frames(ops: dict[str, protocol.Schema]) -> st.SearchStrategy[tuple[str, bytes]]:
    """(kind, frame): every kind is a bad request; 'typed' may be valid but must not crash."""
    names = sorted(ops)
    valid = st.sampled_from(names).map(lambda op: protocol.request(op, {}, 3))
    return st.one_of(
        st.binary(max_size=3000).map(lambda b: ("bad", b)),
        JSON.map(lambda v: ("bad", json.dumps(v).encode())),
        st.builds(_envelope, JSON, JSON, JSON, JSON).map(lambda f: ("bad", f)),
        st.builds(_envelope, st.text(max_size=30).filter(lambda s: s not in ops), JSON)
        .map(lambda f: ("bad", f)),
        st.builds(_envelope, st.sampled_from(names),
                  st.dictionaries(st.text(max_size=12), JSON, min_size=1, max_size=5))
        .map(lambda f: ("typed", f)),
        st.tuples(valid, st.integers(min_value=1, max_value=40))
        .map(lambda t: ("bad", t[0][:-t[1]] if t[1] < len(t[0]) else b"")),
        st.integers(min_value=9, max_value=200_000).map(lambda d: ("bad", _deep(d))),
        st.sampled_from(names).map(
            lambda op: ("bad", _envelope(op, {"x" * 20: "y" * (protocol.MAX_STRING + 1)}))),
    )


def _check_reply(kind: str, frame: bytes, reply: dict | None) -> None:
    assert reply is not None, f"no reply to {frame[:200]!r}"
    if kind == "bad":
        assert reply["ok"] is False, (frame[:200], reply)
    if not reply["ok"]:
        assert reply["error"]["code"] in ERROR_CODES, (frame[:200], reply)
        assert isinstance(reply["error"]["message"], str) and reply["error"]["message"]


# --- the client socket (ipc) -------------------------------------------------------------------


def test_fuzzed_client_frames_get_error_replies(target: Cluster) -> None:
    before = _rows(target)
    client = Local(_ipc(target))
    ops = {k: v for k, v in operations.CLIENT_OPS.items()
           if k not in ("update_node", "sacctmgr", "step_wait", "reconfigure", "reboot_nodes",
                        "cancel_reboot")}  # admin changes; a long wait

    @FUZZ
    @given(frames(ops))
    def fuzz(case: tuple[str, bytes]) -> None:
        kind, frame = case
        if kind == "typed" and b'"submit"' in frame:
            kind = "bad"  # a random dict is never a job: the job field must be there and whole
        _check_reply(kind, frame, client.ask([frame]))

    try:
        fuzz()
        # junk glued together in one frame
        _check_reply("bad", b"", client.ask([b"junk", b"more junk", b"{"]))
    finally:
        client.close()
    _ping(target)
    assert _rows(target) == before


def test_oversized_frame_drops_the_connection_not_the_daemon(target: Cluster) -> None:
    client = Local(_ipc(target))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:  # past the client's check
            raw.connect(str(target.home / "schedd.sock"))
            raw.sendall(HEADER.pack(protocol.MAX_MESSAGE_BYTES + 1) + b"x" * 1000)
            (size,) = HEADER.unpack(raw.recv(4, socket.MSG_WAITALL))
            refused = json.loads(raw.recv(size, socket.MSG_WAITALL))
            assert refused["ok"] is False and "over the cap" in refused["error"]["message"]
            assert raw.recv(1) == b""  # said once, then cut off
        big_script = _envelope("submit", {"job": {"script": "#!/bin/sh\n" + "x" * (
            protocol.MAX_SCRIPT_BYTES + 1), "workdir": "/tmp"}})
        reply = client.ask([big_script])
        assert reply is not None and reply["ok"] is False
        assert reply["error"]["code"] == protocol.E_BAD_REQUEST
    finally:
        client.close()
    _ping(target)


# --- the agent socket (tcp, CURVE) -------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_key(target: Cluster) -> tuple[bytes, bytes, bytes]:
    """A key pair schedd accepts, for a node named ``fuzz1`` that runs nothing."""
    keys_dir = target.home / "keys"
    public, _ = keys.generate(keys_dir / "agents", "fuzz1")
    keys.authorize(keys_dir, public)
    pub, secret = keys.load_secret(keys.agent_secret(keys_dir, "fuzz1"))
    return pub, secret, keys.load_public(keys.server_public(keys_dir))


def test_fuzzed_agent_frames_get_error_replies(target: Cluster, fuzz_key) -> None:
    before = _rows(target)
    agent = Raw(_agent_endpoint(target), identity=b"fuzz1", curve=fuzz_key)
    ids = itertools.count(100)

    @FUZZ
    @given(frames(operations.AGENT_OPS))
    def fuzz(case: tuple[str, bytes]) -> None:
        kind, frame = case
        _check_reply(kind, frame, agent.ask([frame]))

    try:
        fuzz()
        # well-formed, but about another node: refused
        reply = agent.ask([protocol.request("heartbeat", {"node": "node1"}, next(ids))])
        assert reply is not None and reply["ok"] is False
    finally:
        agent.close()
    _ping(target)
    after = _rows(target)
    assert (after["jobs"], after["job_events"]) == (before["jobs"], before["job_events"])
    nodes = target.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
    assert "node1 idle" in nodes


def test_agent_socket_without_a_listed_key_gets_nothing(target: Cluster) -> None:
    endpoint = _agent_endpoint(target)
    server = keys.load_public(keys.server_public(target.home / "keys"))
    stranger_pub, stranger_secret = zmq.curve_keypair()
    strangers = [Raw(endpoint, identity=b"node1", curve=(stranger_pub, stranger_secret, server)),
                 Raw(endpoint, identity=b"node1")]  # no CURVE at all
    try:
        for client in strangers:
            for frame in (protocol.request("heartbeat", {"node": "node1"}, 1), b"\x00" * 64):
                assert client.ask([frame], timeout_ms=1500) is None
    finally:
        for client in strangers:
            client.close()
    log = (target.home / "log" / "schedd.log").read_text()
    assert stranger_pub.decode() in log  # "refused an agent with an unknown CURVE key ..."
    _ping(target)
    assert "node1 idle" in target.run("sinfo", "-h", "-N", "-o", "%N %T").stdout


# --- sbatch's front end ------------------------------------------------------------------------


class _Accepting:
    """Stands in for schedd: checks the submit body as schedd's envelope check would."""

    submitted: list[dict[str, Any]] = []

    def __init__(self, *args: Any, **kwargs: Any):
        pass

    def __enter__(self) -> _Accepting:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def call(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        protocol.check(body, operations.CLIENT_OPS[op], op)
        assert set(body["job"]) <= protocol.SUBMIT_FIELDS
        json.dumps(body)  # it must travel
        _Accepting.submitted.append(body)
        return {"job_id": 1}


OPTION_NAMES = sorted(SBATCH_TABLE.by_long)
VALUE = st.one_of(st.text(max_size=30), st.integers(-10**6, 10**12).map(str),
                  st.sampled_from(["1", "0", "-1", "1:00", "0:03", "1-00:00:00", "gpu:2",
                                   "a100:1", "4G", "1-5%2", "afterok:1", "now+1hour", "USR1@60",
                                   "node[1-3]", "ALL,NONE", "", "=", "\\", "'", '"']))
DIRECTIVE = st.one_of(
    st.builds(lambda o, v: f"#SBATCH --{o}={v}", st.sampled_from(OPTION_NAMES), VALUE),
    st.builds(lambda o: f"#SBATCH --{o}", st.sampled_from(OPTION_NAMES)),
    st.builds(lambda s, v: f"#SBATCH -{s} {v}", st.sampled_from(sorted(SBATCH_TABLE.by_short)),
              VALUE),
    st.text(max_size=60).map(lambda t: f"#SBATCH {t}"),
    st.text(max_size=60),
)
SCRIPT = st.builds(lambda shebang, lines, tail: shebang + "\n".join(lines) + tail,
                   st.sampled_from(["#!/bin/bash\n", "#!/bin/sh\n", "", "#!", "\n#!/bin/sh\n"]),
                   st.lists(DIRECTIVE, max_size=8),
                   st.sampled_from(["\nsleep 1\n", "", "\r\n", "\0", "\n"]))


def test_generated_directives_and_scripts_fail_cleanly(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.setattr(sbatch, "Client", _Accepting)
    monkeypatch.chdir(tmp_path)
    for name in [k for k in os.environ if k.startswith(("SBATCH_", "SLURM_"))]:
        monkeypatch.delenv(name)
    script_file = tmp_path / "job.sh"
    outcomes = {"accepted": 0, "refused": 0}

    @FUZZ
    @given(SCRIPT, st.lists(st.sampled_from([("--hold",), ("--parsable",), ("-t", "5"),
                                             ("--test-only",), ("-J", "x y"), ("--gres=gpu:1",),
                                             ("-a", "1-3"), ("--time=x",)]), max_size=4))
    def fuzz(script: str, options: list[tuple[str, ...]]) -> None:
        script_file.write_bytes(script.encode("utf-8", errors="surrogatepass"))
        argv = [word for option in options for word in option]
        try:
            sbatch.submit_command([*argv, str(script_file)])
            outcomes["accepted"] += 1
        except CommandError as err:  # the one-line refusal run_command prints
            assert err.lines and all(isinstance(line, str) for line in err.lines)
            assert "Traceback" not in "".join(err.lines)
            outcomes["refused"] += 1

    fuzz()
    assert outcomes["accepted"] > 0 and outcomes["refused"] > 0, outcomes


@pytest.mark.parametrize("script", [
    "#!/bin/bash\n#SBATCH --time=\n#SBATCH --gres=gpu:-1\ntrue\n",
    "#!/bin/bash\n#SBATCH --array=1-99999999\ntrue\n",
    "#!/bin/bash\n#SBATCH --mem=1ZB\ntrue\n",
    "#!/bin/bash\n#SBATCH \"--job-name=unterminated\ntrue\n",
    "#!/bin/bash\n#SBATCH --dependency=afterok:notanumber\ntrue\n",
    "#!/bin/bash\n#SBATCH --begin=2026-13-45T99:99\ntrue\n",
])
def test_hostile_scripts_through_the_real_sbatch(target: Cluster, script: str) -> None:
    workdir = world_tempdir("kiln-fuzz-")
    try:
        before = _rows(target)
        (workdir / "job.sh").write_text(script)
        res = target.run("sbatch", "job.sh", cwd=workdir)
        assert res.returncode == 1, res.stdout
        assert res.stdout == ""
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert res.stderr.startswith("sbatch: error: "), res.stderr
        assert "Traceback" not in res.stderr
        assert _rows(target)["jobs"] == before["jobs"]
    finally:
        cleanup(workdir)
    _ping(target)
