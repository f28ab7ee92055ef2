"""The commands' local endpoint: a Unix-domain stream socket that knows who is asking.

Every command (and the Python submit API, ``cli.core.client.Client``) connects here. The kernel
says who the peer is (``SO_PEERCRED``: pid, uid, gid), never the message. Frames are
length-prefixed (4 bytes, big-endian, then the versioned JSON envelope of
``kiln.wire.protocol``); one request is answered before the next one of the same connection is
read, so a client that sends and never reads holds at most one reply in schedd.

Bounds (no client can make schedd hold more):

- a request frame is at most ``protocol.MAX_MESSAGE_BYTES``; a longer announced length gets
  an error reply and the connection is closed, without reading the body;
- connections: at most ``MAX_CONNECTIONS`` in all and ``MAX_PER_UID`` per user (one more is
  accepted, told why and closed);
- a reply not taken within ``STALL_SECONDS`` (the client stopped reading) drops the client;
- the bytes of replies not yet taken are bounded, per user (``MAX_UNSENT_PER_UID``) and in
  all (``MAX_UNSENT_TOTAL``): a reply queued past either bound drops the slowest reader first
  (of that user, or of the user holding the most), the client whose reply has waited longest,
  with a logged reason; the reply just queued is kept (a reply larger than the bound itself
  still reaches a client that reads it), so many connections that never read hold no more
  than the bound and one reply.

The server is driven by the daemon's loop (``register``/``ready`` on a ``zmq.Poller``, which
polls plain file descriptors too): standard library only otherwise, no threads.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kiln.identity import Caller
from kiln.wire import protocol

log = logging.getLogger("kiln.wire.localsock")

HEADER = struct.Struct(">I")
PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
MAX_CONNECTIONS = 1024
MAX_PER_UID = 64
STALL_SECONDS = 30.0
MAX_UNSENT_TOTAL = 64 * 1024 * 1024  # bytes of replies not yet taken, all clients together
MAX_UNSENT_PER_UID = 32 * 1024 * 1024  # ... of one user's clients
READ_CHUNK = 256 * 1024
PER_USER_TURN = 2  # requests of one user answered per turn of the loop
LONG_PER_USER = 2  # long requests of one user built at once (the others wait their turn)
# seconds of long requests' slices per turn: then the loop polls again, so a quick request
# that came meanwhile waits this long (and one slice, schedd/slicing.py) at the most
WORK_BUDGET = 0.005
RELEASE_BUDGET = 0.002  # seconds per turn spent letting dropped replies' bodies go
RELEASE_ITEMS = 50  # list items let go at a time (200 sacct rows: up to 7 ms on a loaded host)
POLLIN, POLLOUT = 1, 2  # zmq.POLLIN, zmq.POLLOUT (the same values as poll(2)'s)

Dispatch = Callable[[bytes, Caller], Any]  # -> the reply, or a long request's Work
STREAMED = 0xFFFFFFFF  # a frame header: the payload follows in chunks (``Stream``)


class Stream:
    """A long reply made as its client reads: ``pieces`` yields the payload's bytes a piece
    at a time (schedd/slicing.py's ``stream_reply``), and the server asks for the next piece
    only once the last is nearly sent, so schedd holds about one piece of it for a slow reader
    instead of the whole reply. On the wire a streamed frame is the header ``STREAMED``, then
    chunks of a 4-byte length and that many bytes, ending with a chunk of length 0
    (cli/core/client.py reads both forms). ``left`` estimates the pieces still to come, for the
    bound on what unread replies may hold."""

    __slots__ = ("pieces", "left", "made", "largest", "done", "_ahead", "body")

    def __init__(self, pieces: Iterator[bytes], left: Callable[[int], int] | None = None,
                 body: dict[str, Any] | None = None):
        self.pieces, self.left = pieces, left
        # the body the pieces are made of, when they consume it: a stream dropped before its
        # end lets the rest of it go a slice at a time (``release``), not all at once
        self.body = body
        self.made = self.largest = 0
        self.done = False
        self._ahead: deque[bytes] = deque()  # made by ``prime``, not yet taken

    def _make(self) -> bytes | None:
        for piece in self.pieces:
            self.made += 1
            self.largest = max(self.largest, len(piece))
            return piece
        self.done = True
        return None

    def prime(self, count: int = 2) -> None:
        """Make the first pieces now (the head and the first of a long list's), so that
        ``held`` has a piece's size to go by when the reply is queued."""
        while len(self._ahead) < count and (piece := self._make()) is not None:
            self._ahead.append(piece)

    def next(self) -> bytes | None:
        """The next piece, or None at the end."""
        return self._ahead.popleft() if self._ahead else self._make()

    def held(self) -> int:
        """About how many bytes the rest of it will be (its largest piece so far times the
        pieces left, and those made ahead): what a reader that stopped keeps schedd holding
        in its body."""
        ahead = sum(map(len, self._ahead))
        if self.done or self.left is None:
            return ahead
        return ahead + self.largest * self.left(self.made)

    def release(self, seconds: float) -> bool:
        """Let go of what is left of the body for about ``seconds`` (one batch of
        ``RELEASE_ITEMS`` at least); True once all of it is.
        A slow reader dropped with 20,000 sacct rows unsent held them to the end: freeing
        them in one go took 13-40 ms of the loop (hundreds on a loaded host), the bystanders'
        squeue waiting meanwhile."""
        self.pieces = iter(())  # the generator's own reference goes (its frame is small)
        self.left = None
        started = time.perf_counter()
        for value in (self.body or {}).values():
            while isinstance(value, list) and value:
                del value[-RELEASE_ITEMS:]
                if value and time.perf_counter() - started >= seconds:
                    return False
        self.body = None
        return True

    def whole(self) -> bytes:
        """Every piece left, in one buffer (for a path that needs the reply whole)."""
        parts = []
        while (piece := self.next()) is not None:
            parts.append(piece)
        return b"".join(parts)


# a reply: one frame's payload, whole, in pieces (so that tens of MB are never copied into
# one buffer at once), or streamed (a long request's: schedd/slicing.py)
Reply = bytes | bytearray | list[bytes] | Stream


def joined(reply: Reply) -> bytes | bytearray:
    """A reply in one piece."""
    if isinstance(reply, Stream):
        return reply.whole()
    return b"".join(reply) if isinstance(reply, list) else reply


class Work:
    """A long request (sacct over a large window, ...): ``step()`` does one bounded slice of
    it and returns None, or returns the reply once it is done. The server interleaves the
    slices of every client's long request, one user at a time in turn, with everything else
    the daemon does, so one user's big query never stalls another's squeue."""

    def step(self) -> Reply | None:  # pragma: no cover - an interface
        raise NotImplementedError

    @property
    def parked(self) -> bool:
        """Waiting on something off the loop (``offload``): neither stepped nor polled for."""
        return False

    def cancel(self) -> None:
        """Its client went away: what it waits on off the loop need not be done."""

    @property
    def light(self) -> bool:
        """Holds no reply body while it runs (a big scancel's slices): not one of a user's
        ``LONG_PER_USER`` long requests being built, but stepped in turn beside them, so that
        it never waits for the user's own sacct to be built first."""
        return False


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload)) + payload


def socket_path(endpoint: str) -> str:
    """``ipc:///run/kiln/schedd.sock`` or a bare path -> the path."""
    return endpoint[6:] if endpoint.startswith("ipc://") else endpoint


@dataclass(slots=True)
class Connection:
    sock: socket.socket
    caller: Caller
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    later: deque[bytes] = field(default_factory=deque)  # a reply's pieces not yet in outbox
    stream: Stream | None = None  # a streamed reply still being made (after outbox, later)
    stalled_since: float = 0.0  # when the pending reply was queued (0: nothing pending)
    closing: bool = False  # close once the outbox is written
    work: Any = None  # a long request in progress (Work); nothing more is read meanwhile
    work_order: int = 0  # when it came, among the server's long requests

    @property
    def fd(self) -> int:
        return self.sock.fileno()

    @property
    def sending(self) -> bool:
        """Is a reply waiting for the client to take it?"""
        return bool(self.outbox or self.later or self.stream)

    @property
    def unsent(self) -> int:
        """Bytes of the reply not yet taken by the client (a stream's still to be made
        counted as estimated: they are held as its body until then)."""
        held = self.stream.held() if self.stream is not None else 0
        return len(self.outbox) + sum(map(len, self.later)) + held


class LocalServer:
    def __init__(self, endpoint: str, dispatch: Dispatch, mode: int = 0o777,
                 max_unsent_total: int = 0, max_unsent_per_uid: int = 0):
        self.path = socket_path(endpoint)
        # the bounds on replies not yet taken (0: this module's defaults)
        self.max_unsent_total = max_unsent_total
        self.max_unsent_per_uid = max_unsent_per_uid
        self.dispatch = dispatch
        self.conns: dict[int, Connection] = {}
        self._poller: Any = None
        # uid -> which of its long requests goes next; -uid - 1 -> which connection reads next
        self._turn: dict[int, int] = {}
        self._work_order = 0
        self._dropped: deque[Stream] = deque()  # streams cut short: bodies let go in slices
        # timing of the server's own parts for the daemon's loop watch (name, since)
        self.timed: Callable[[str, float], None] = lambda name, since: None
        if os.path.exists(self.path) or os.path.islink(self.path):
            os.unlink(self.path)  # a stale socket of a dead schedd
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        os.chmod(self.path, mode)  # every user may ask; identity from the kernel
        self.listener.listen(128)
        self.listener.setblocking(False)

    # --- the daemon's poller --------------------------------------------------------------

    def register(self, poller: Any) -> None:
        self._poller = poller
        poller.register(self.listener.fileno(), POLLIN)

    def ready(self, events: dict[Any, int], now: float) -> None:
        """Act on what the poller reported: accept, write, and read and answer — at most
        ``PER_USER_TURN`` requests of each user per turn, so one user with many connections
        never makes another wait behind all of them (the rest stay readable: the poller
        reports them again at once, in the next turn)."""
        readable: dict[int, list[Connection]] = {}
        if events.get(self.listener.fileno()):
            # a command sends its request right after connecting: read it in this turn (under
            # the same per-user turns), rather than one turn of the loop later
            for conn in self._accept():
                readable.setdefault(conn.caller.uid, []).append(conn)
        for fd, flags in list(events.items()):
            conn = self.conns.get(fd) if isinstance(fd, int) else None
            if conn is None:
                continue
            if flags & POLLOUT:
                self._write(conn)
            if flags & POLLIN and fd in self.conns:
                readable.setdefault(conn.caller.uid, []).append(conn)
        for uid, conns in readable.items():
            start = self._turn.get(-uid - 1, 0)  # rotate which of a user's connections goes
            self._turn[-uid - 1] = start + PER_USER_TURN
            for i in range(min(PER_USER_TURN, len(conns))):
                conn = conns[(start + i) % len(conns)]
                if conn.fd in self.conns:
                    self._read(conn)
        self._drop_stalled(now)

    def close(self) -> None:
        for conn in list(self.conns.values()):
            self._close(conn)
        self.listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    # --- connections ------------------------------------------------------------------------

    def _accept(self) -> list[Connection]:
        """Accept the clients waiting (64 at most a turn); the new connections that may ask."""
        accepted: list[Connection] = []
        for _ in range(64):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # EMFILE and friends: try again at the next turn
                log.warning("cannot accept a client: %s", exc.strerror)
                break
            sock.setblocking(False)
            pid, uid, gid = PEERCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEERCRED.size))
            conn = Connection(sock, Caller(uid=uid, gid=gid, pid=pid))
            problem = self._over_limit(uid)
            self.conns[conn.fd] = conn
            self._poller.register(conn.fd, POLLIN)
            if problem:
                conn.closing = True
                self._reply(conn, protocol.reply_error(None, protocol.E_PERMISSION, problem))
            else:
                accepted.append(conn)
        return accepted

    def _over_limit(self, uid: int) -> str:
        if len(self.conns) >= MAX_CONNECTIONS:
            return "schedd has too many client connections; try again"
        if sum(1 for c in self.conns.values() if c.caller.uid == uid) >= MAX_PER_UID:
            return f"too many connections of uid {uid} (at most {MAX_PER_UID})"
        return ""

    def _read(self, conn: Connection) -> None:
        try:
            data = conn.sock.recv(READ_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.inbox += data
        self._serve(conn)

    def _serve(self, conn: Connection) -> None:
        """Answer the next whole request, if there is one and no reply is waiting."""
        while (not conn.sending and not conn.closing and conn.work is None
               and len(conn.inbox) >= HEADER.size):
            (size,) = HEADER.unpack_from(conn.inbox)
            if size > protocol.MAX_MESSAGE_BYTES:
                conn.closing = True  # said once, then the connection goes
                conn.inbox.clear()
                self._reply(conn, protocol.reply_error(
                    None, protocol.E_BAD_REQUEST,
                    f"message of {size} bytes is over the cap of {protocol.MAX_MESSAGE_BYTES}"))
                return
            if len(conn.inbox) < HEADER.size + size:
                return
            request = bytes(conn.inbox[HEADER.size:HEADER.size + size])
            del conn.inbox[:HEADER.size + size]
            answer = self.dispatch(request, conn.caller)
            if isinstance(answer, Work):
                conn.work = answer
                self._work_order += 1
                conn.work_order = self._work_order
                self._poller.modify(conn.fd, 0)  # nothing read until it is answered
                return
            self._reply(conn, answer)

    # --- long requests --------------------------------------------------------------------

    @property
    def working(self) -> bool:
        """Is a long request ready for a slice (so the loop must not sleep in its poll)?"""
        return any(c.work is not None and not c.work.parked for c in self.conns.values())

    def step_work(self, budget: float = WORK_BUDGET) -> None:
        """Advance the long requests for about ``budget`` seconds: one slice per user in
        turn (fair share between users, whatever their number of connections), and of a
        user's long requests only the ``LONG_PER_USER`` oldest, in turn: sixteen sacct of one
        user built side by side held sixteen bodies at once (1.4 GB in bench-hostile's
        slow-reader attack); two at a time, schedd holds the two being built and the replies
        queued, which the bound on unsent bytes keeps in check, and a user's quick listing
        still overtakes their own long sacct."""
        started = time.monotonic()
        while time.monotonic() - started < budget:
            by_user: dict[int, list[Connection]] = {}
            for conn in self.conns.values():
                if conn.work is not None and not conn.work.parked:
                    by_user.setdefault(conn.caller.uid, []).append(conn)
            if not by_user:
                return
            for uid in sorted(by_user):
                mine = sorted(by_user[uid], key=lambda c: c.work_order)
                oldest = ([c for c in mine if not c.work.light][:LONG_PER_USER]
                          + [c for c in mine if c.work.light][:LONG_PER_USER])
                conn = oldest[self._turn.get(uid, 0) % len(oldest)]
                self._turn[uid] = self._turn.get(uid, 0) + 1
                reply = conn.work.step()
                if reply is not None:
                    conn.work = None
                    self._poller.modify(conn.fd, POLLIN)
                    self._reply(conn, reply)

    def waiting(self, work: Work) -> bool:
        """Is a client still waiting for this long request?"""
        return any(c.work is work for c in self.conns.values())

    def complete(self, work: Work, reply: Reply) -> None:
        """Answer a long request finished elsewhere (agentd's relay: schedd's reply came);
        dropped if its client went away meanwhile."""
        for conn in self.conns.values():
            if conn.work is work:
                conn.work = None
                self._poller.modify(conn.fd, POLLIN)
                self._reply(conn, reply)
                return

    def _reply(self, conn: Connection, payload: Reply) -> None:
        """Queue a reply; nothing more is read from this client until it has taken it (so it
        holds one reply and one request in schedd at the most)."""
        if isinstance(payload, Stream):  # made as the client reads (``_write``)
            payload.prime()
            conn.outbox += HEADER.pack(STREAMED)
            conn.stream = payload
        elif isinstance(payload, list):  # in pieces: moved to the outbox as it drains
            conn.outbox += HEADER.pack(sum(map(len, payload)))
            conn.later.extend(payload)
        else:
            conn.outbox += HEADER.pack(len(payload))
            conn.outbox += payload  # no concatenated copy of a large reply
        conn.stalled_since = time.monotonic()
        self._write(conn)
        if conn.fd in self.conns and conn.sending:
            self._bound_unsent(conn)

    def _bound_unsent(self, keep: Connection) -> None:
        """Drop the slowest readers until the replies not yet taken are within the bounds,
        per user and in all; ``keep`` (the reply just queued) is never dropped here."""
        uid = keep.caller.uid
        per_uid = self.max_unsent_per_uid or MAX_UNSENT_PER_UID
        total = self.max_unsent_total or MAX_UNSENT_TOTAL
        while True:
            sending = [c for c in self.conns.values() if c.sending]
            by_user: dict[int, int] = {}
            for c in sending:
                by_user[c.caller.uid] = by_user.get(c.caller.uid, 0) + c.unsent
            if by_user.get(uid, 0) > per_uid:
                order = [uid]
                why = f"its user's unread replies are over {per_uid} bytes"
            elif sum(by_user.values()) > total:
                order = sorted(by_user, key=lambda u: (-by_user[u], u != uid))
                why = f"unread replies of all clients are over {total} bytes"
            else:
                return
            candidates: list[Connection] = []
            for victim_uid in order:  # the user holding the most first
                candidates = [c for c in sending
                              if c.caller.uid == victim_uid and c is not keep]
                if candidates:
                    break
            if not candidates:
                return
            victim = min(candidates, key=lambda c: c.stalled_since)
            log.warning("dropping client uid %d pid %d: it is the slowest reader and %s "
                        "(%d bytes waiting)", victim.caller.uid, victim.caller.pid, why,
                        victim.unsent)
            self._close(victim)

    def _write(self, conn: Connection) -> None:
        started = time.monotonic()
        while conn.outbox or conn.later or conn.stream:
            while conn.later and len(conn.outbox) < READ_CHUNK:
                conn.outbox += conn.later.popleft()
            if conn.stream is not None and not conn.later and len(conn.outbox) < READ_CHUNK:
                if conn.outbox == b"" and time.monotonic() - started > WORK_BUDGET:
                    # a fast reader: the rest in later turns, the loop serves others first
                    self._poller.modify(conn.fd, POLLOUT)
                    return
                self._stream_more(conn)
                if not conn.outbox:
                    continue
            try:
                sent = conn.sock.send(conn.outbox)
            except (BlockingIOError, InterruptedError):
                self._poller.modify(conn.fd, POLLOUT)  # no reading until it is taken
                return
            except OSError as exc:
                if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
                    log.warning("client uid %d: %s", conn.caller.uid, exc.strerror)
                self._close(conn)
                return
            del conn.outbox[:sent]
            if sent:
                conn.stalled_since = time.monotonic()  # it reads: the stall clock restarts
        conn.stalled_since = 0.0
        if conn.closing:
            self._close(conn)
            return
        self._poller.modify(conn.fd, POLLIN)
        if conn.inbox:
            self._serve(conn)  # a request that arrived while the last reply was going out

    @staticmethod
    def _stream_more(conn: Connection) -> None:
        """The stream's next piece as a chunk in the outbox (its end: the empty chunk)."""
        assert conn.stream is not None
        piece = conn.stream.next()
        if piece is None:
            conn.outbox += HEADER.pack(0)
            conn.stream = None
        elif piece:
            conn.outbox += HEADER.pack(len(piece))
            conn.outbox += piece

    def _drop_stalled(self, now: float) -> None:
        clock = time.monotonic()
        for conn in list(self.conns.values()):
            if conn.sending and clock - conn.stalled_since > STALL_SECONDS:
                log.warning("dropping client uid %d pid %d: it stopped reading its reply "
                            "(%d bytes waiting)", conn.caller.uid, conn.caller.pid,
                            conn.unsent)
                self._close(conn)

    def release_dropped(self, budget: float = RELEASE_BUDGET) -> None:
        """Let go of the bodies of replies cut short, for about ``budget`` seconds a turn (a
        batch of ``RELEASE_ITEMS`` at least, so that it always gets on)."""
        if not self._dropped:
            return
        since = time.perf_counter()
        while self._dropped:
            if not self._dropped[0].release(budget - (time.perf_counter() - since)):
                break
            self._dropped.popleft()
        self.timed("release", since)

    def _close(self, conn: Connection) -> None:
        since = time.perf_counter()
        if conn.stream is not None and conn.stream.body is not None:
            self._dropped.append(conn.stream)  # its body: let go in later turns' slices
            conn.stream = None
        if conn.work is not None:
            conn.work.cancel()
        self.conns.pop(conn.fd, None)
        try:
            self._poller.unregister(conn.fd)
        except (KeyError, ValueError):
            pass
        conn.sock.close()
        self.timed("close", since)

    @property
    def buffered(self) -> int:
        """Bytes schedd holds for clients (replies not yet taken, requests not yet read)."""
        return sum(c.unsent + len(c.inbox) for c in self.conns.values())
