"""The local endpoint (kiln/wire/localsock.py) and its client (cli/core/client.py): identity from the
kernel, length-prefixed frames, one reply held per client, and failures said at once."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
import zmq

from cli.core.client import LOST, UNREACHABLE, Client, ClientError
from kiln.identity import Caller
from kiln.wire import operations, protocol
from kiln.wire.localsock import HEADER, LocalServer, Work


class Served:
    """A LocalServer driven by a zmq.Poller in a thread, as the daemon drives it."""

    def __init__(self, path: Path, dispatch=None):
        self.callers: list[Caller] = []
        self.server = LocalServer(f"ipc://{path}", dispatch or self._echo)
        self.poller = zmq.Poller()
        self.server.register(self.poller)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _echo(self, frame: bytes, caller: Caller) -> bytes:
        self.callers.append(caller)
        msg_id, op, body = protocol.decode_request(frame, operations.CLIENT_OPS)
        return protocol.reply_ok(msg_id, {"op": op, "uid": caller.uid})

    def _run(self) -> None:
        while not self._stop.is_set():
            self.server.ready(dict(self.poller.poll(0 if self.server.working else 20)), 0.0)
            self.server.step_work(budget=0.002)

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.server.close()


@pytest.fixture
def served(tmp_path: Path):
    s = Served(tmp_path / "schedd.sock")
    yield s
    s.close()


def test_the_caller_is_who_the_kernel_says(served: Served) -> None:
    with Client(endpoint=f"ipc://{served.server.path}") as client:
        assert client.call("ping") == {"op": "ping", "uid": os.getuid()}
        assert client.call("ping", {})["op"] == "ping"  # one connection, many requests
    assert [(c.uid, c.gid, c.pid) for c in served.callers] == [
        (os.getuid(), os.getgid(), os.getpid())] * 2
    assert oct(os.stat(served.server.path).st_mode & 0o777) == "0o777"


def test_no_socket_file_is_a_connect_failure(tmp_path: Path) -> None:
    with pytest.raises(ClientError, match="connect failure"):
        Client(endpoint=f"ipc://{tmp_path}/none.sock").call("ping")


def test_a_stale_socket_nobody_listens_on_fails_at_once(tmp_path: Path) -> None:
    """After a crash or `kiln down` the socket file may stay: connecting is refused by the
    kernel at once (ECONNREFUSED), not a wait for the timeout."""
    path = tmp_path / "schedd.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens
    with pytest.raises(ClientError) as err:
        Client(endpoint=f"ipc://{path}", timeout=600).call("ping")
    assert err.value.message == UNREACHABLE


def test_a_schedd_that_dies_mid_request_is_said_at_once(tmp_path: Path) -> None:
    path = tmp_path / "schedd.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)

    def take_and_die() -> None:
        conn, _ = listener.accept()
        conn.recv(100)
        conn.close()  # took the request, then "crashed"

    thread = threading.Thread(target=take_and_die)
    thread.start()
    with pytest.raises(ClientError) as err:
        Client(endpoint=f"ipc://{path}", timeout=600).call("ping")
    thread.join()
    listener.close()
    assert err.value.message == LOST


def test_an_over_long_frame_is_refused_without_reading_it(served: Served) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(served.server.path)
        sock.sendall(HEADER.pack(protocol.MAX_MESSAGE_BYTES + 1))
        (size,) = HEADER.unpack(sock.recv(4, socket.MSG_WAITALL))
        reply = sock.recv(size, socket.MSG_WAITALL)
        assert b"over the cap" in reply
        assert sock.recv(1) == b""  # and the connection is closed


def test_a_client_that_never_reads_holds_one_reply(tmp_path: Path) -> None:
    """Issue 12's 'replies nobody reads': 150 requests on a connection that never reads made
    schedd hold 900 MB. Now a client holds one reply: the next request is not even read until
    that reply is taken."""
    big = b"x" * (4 << 20)
    served = Served(tmp_path / "s.sock", lambda frame, caller: big)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(served.server.path)
            request = protocol.request("ping", {}, 1)
            sock.setblocking(False)
            sent = 0
            for _ in range(150):
                try:
                    sent += sock.send(HEADER.pack(len(request)) + request)
                except BlockingIOError:
                    break
            deadline = 200
            while served.server.buffered == 0 and deadline:
                served._stop.wait(0.01)
                deadline -= 1
            held = served.server.buffered
            assert 0 < held < len(big) + 2 * (4 << 20)  # one reply (and requests in flight)
    finally:
        served.close()


def test_per_user_connections_are_bounded(served: Served, monkeypatch) -> None:
    from kiln.wire import localsock

    monkeypatch.setattr(localsock, "MAX_PER_UID", 2)
    socks = []
    try:
        for _ in range(2):
            c = Client(endpoint=f"ipc://{served.server.path}")
            c.call("ping")
            socks.append(c)
        third = Client(endpoint=f"ipc://{served.server.path}")
        with pytest.raises(ClientError, match="too many connections"):
            third.call("ping")
    finally:
        for c in socks:
            c.close()


def test_header_is_four_bytes_big_endian() -> None:
    assert HEADER.pack(258) == struct.pack(">I", 258) == b"\x00\x00\x01\x02"


def test_a_request_sent_with_the_connect_is_answered_in_the_turn_that_accepts_it(
        tmp_path: Path) -> None:
    """A command connects and sends at once: the turn of the loop that accepts it also reads
    and answers it, instead of leaving it to the next turn (a scheduling cycle may run in
    between)."""
    server = LocalServer(f"ipc://{tmp_path}/t.sock", lambda f, c: protocol.reply_ok(1, {}))
    poller = zmq.Poller()
    server.register(poller)
    request = protocol.request("ping", {}, 1)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(server.path)
    client.sendall(HEADER.pack(len(request)) + request)
    server.ready({server.listener.fileno(): zmq.POLLIN}, 0.0)  # one turn
    client.settimeout(0)  # the reply is there already, or this raises
    (size,) = HEADER.unpack(client.recv(HEADER.size))
    assert protocol.decode(client.recv(size))["ok"] is True
    client.close()
    server.close()


def test_one_turn_answers_a_few_requests_of_each_user(tmp_path: Path) -> None:
    """A user with many connections cannot make another wait behind all of them: a turn of
    the loop answers at most PER_USER_TURN requests of each user."""
    from kiln.wire import localsock
    from kiln.wire.localsock import Connection

    answered: list[int] = []

    def dispatch(frame: bytes, caller: Caller) -> bytes:
        answered.append(caller.uid)
        return protocol.reply_ok(1, {})

    server = LocalServer(f"ipc://{tmp_path}/t.sock", dispatch)
    poller = zmq.Poller()
    server.register(poller)
    request = protocol.request("ping", {}, 1)
    events, theirs = {}, []
    for uid in [1001] * 6 + [1002]:
        ours, peer = socket.socketpair()
        ours.setblocking(False)
        peer.sendall(HEADER.pack(len(request)) + request)
        theirs.append(peer)
        conn = Connection(ours, Caller(uid=uid, gid=uid, pid=0))
        server.conns[conn.fd] = conn
        poller.register(conn.fd, localsock.POLLIN)
        events[conn.fd] = localsock.POLLIN
    server.ready(events, 0.0)
    assert sorted(answered) == [1001] * localsock.PER_USER_TURN + [1002]
    for _ in range(5):  # the rest in the next turns, as the poller reports them again
        server.ready(dict(poller.poll(0)), 0.0)
    assert answered.count(1001) == 6
    for peer in theirs:
        peer.close()
    server.close()


class Counting(Work):
    """A long request of ``total`` slices that records who ran when."""

    def __init__(self, name: str, total: int, log: list[str]):
        self.name, self.left, self.log = name, total, log

    def step(self) -> bytes | None:
        self.log.append(self.name)
        self.left -= 1
        if self.name == "long":
            time.sleep(0.0005)  # a slice of real work
        return None if self.left else protocol.reply_ok(1, {"done": self.name})


def test_long_requests_go_in_slices_one_user_at_a_time(tmp_path: Path) -> None:
    """Issue 12's expensive queries: four unfiltered sacct of one user pushed others' squeue
    to 2.4 s. Long requests now go in slices, and each user gets a slice in turn however many
    long requests it has in flight; of one user's, the two oldest are built at a time (in
    turn), the others wait, so that a user's sixteen sacct never hold sixteen bodies."""
    from kiln.wire.localsock import Connection

    served = Served(tmp_path / "s.sock")
    served.close()  # the thread is not needed: drive step_work by hand
    server = LocalServer(f"ipc://{tmp_path}/t.sock", lambda f, c: b"")
    poller = zmq.Poller()
    server.register(poller)
    log: list[str] = []
    pairs = []
    for order, (uid, name) in enumerate([(1001, "a1"), (1001, "a2"), (1001, "a3"),
                                         (1002, "b")]):
        ours, theirs = socket.socketpair()
        pairs.append(theirs)
        conn = Connection(ours, Caller(uid=uid, gid=uid, pid=0), work_order=order)
        conn.work = Counting(name, 6 if uid == 1001 else 3, log)
        server.conns[conn.fd] = conn
        poller.register(conn.fd, 0)
    server.step_work(budget=10.0)
    assert not server.working
    # b (the other user) had every other slice until its request was done
    assert log[:6] == ["a1", "b", "a2", "b", "a1", "b"]
    assert log.count("b") == 3 and len(log) == 21
    # a3 waited until one of the two oldest was done
    first_a3 = log.index("a3")
    assert log[:first_a3].count("a1") == 6 or log[:first_a3].count("a2") == 6
    for theirs in pairs:
        (size,) = HEADER.unpack(theirs.recv(4, socket.MSG_WAITALL))
        assert b'"done"' in theirs.recv(size, socket.MSG_WAITALL)
        theirs.close()
    server.close()


def test_a_quick_request_is_answered_while_a_long_one_runs(tmp_path: Path) -> None:
    log: list[str] = []
    long = Counting("long", 10_000, log)

    def dispatch(frame: bytes, caller: Caller):
        msg_id, op, body = protocol.decode_request(frame, operations.CLIENT_OPS)
        return long if op == "acct_jobs" else protocol.reply_ok(msg_id, {"left": long.left})

    served = Served(tmp_path / "s.sock", dispatch)
    try:
        slow = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        slow.connect(served.server.path)
        request = protocol.request("acct_jobs", {}, 1)
        slow.sendall(HEADER.pack(len(request)) + request)
        while not log:  # the long request has started
            served._stop.wait(0.001)
        with Client(endpoint=f"ipc://{served.server.path}", timeout=60) as client:
            assert client.call("ping")["left"] > 0  # answered before the long one ended
        slow.close()
    finally:
        served.close()


class Pieces(Work):
    """A long request whose reply comes in pieces (schedd/slicing.py's encode_reply)."""

    def __init__(self, msg_id: int, rows: int):
        self.parts = [b'{"v":1,"id":%d,"ok":true,"body":{"rows":[' % msg_id]
        self.parts += [b'%s"%s"' % (b"," if i else b"", b"r" * 50_000) for i in range(rows)]
        self.parts.append(b"]}}")

    def step(self) -> list[bytes]:
        return self.parts


def test_a_reply_in_pieces_reaches_the_client_whole(tmp_path: Path) -> None:
    """3 MB in 60 pieces, far more than the socket holds: the client gets one frame, whole,
    and schedd never held it in one buffer."""

    def dispatch(frame: bytes, caller: Caller):
        msg_id, op, body = protocol.decode_request(frame, operations.CLIENT_OPS)
        return Pieces(msg_id, 60) if op == "acct_jobs" else protocol.reply_ok(msg_id, {})

    served = Served(tmp_path / "s.sock", dispatch)
    try:
        with Client(endpoint=f"ipc://{served.server.path}", timeout=60) as client:
            rows = client.call("acct_jobs", {})["rows"]
            assert len(rows) == 60 and rows[-1] == "r" * 50_000
            assert client.call("ping") == {}  # the next request on the same connection
    finally:
        served.close()
