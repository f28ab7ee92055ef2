"""schedd's side of the relay: commands on other nodes, asked through their node's agent.

A command on a compute or login node talks to its local agentd (the same socket path as on the
head, ``kiln/wire/localsock.py``); the agent forwards the request's frame over its CURVE channel
as ``relay`` with the uid, gid and pid it read from the kernel (``SO_PEERCRED``). schedd takes
that identity only

- on an authenticated agent connection (``curve = true``) whose key is the key of the node it
  speaks for (``keys/authorized/<node>.key``), and whose ``relay`` body names that node;
- for root (or schedd's own user) only when the node is in ``[schedd] relay_root_nodes``.

The caller is stamped from the relay body, never from the inner request. The inner request is
then dispatched exactly like a local one (the same ops, schemas and handlers).

Replies go back in chunks of at most ``CHUNK`` bytes, each only when the agent asks for it
(``relay_next``): schedd holds a large reply once (as the local socket does for its own
clients) and ZeroMQ's queue never holds more than one chunk of it. A long request's reply is
streamed (``localsock.Stream``): each chunk is encoded when the agent asks for it, its size
unknown until the last (``size`` 0). A reply nobody fetched for ``IDLE_SECONDS`` is dropped.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kiln.identity import Caller
from kiln.wire import protocol
from kiln.wire.localsock import WORK_BUDGET, Reply, Stream, Work, joined

log = logging.getLogger("schedd.relay")

CHUNK = 1 << 20  # bytes of a reply per relay message
IDLE_SECONDS = 60.0  # a reply whose next chunk nobody asked for this long is dropped
MAX_HELD = 4096  # replies held for agents at once
MAX_HELD_PER_NODE = 256  # ... for one node's agent (its socket has 1,024 connections at most)


@dataclass(slots=True)
class Held:
    route: list[bytes]  # the ROUTER's routing frames of the agent
    node: str
    data: bytes
    offset: int
    touched: float
    stream: Stream | None = None  # a streamed reply: its chunks made as they are fetched

    def take(self) -> tuple[bytes, bool]:
        """The next chunk, and whether more follow."""
        if self.stream is None:
            chunk = self.data[self.offset:self.offset + CHUNK]
            self.offset += len(chunk)
            return chunk, self.offset < len(self.data)
        parts: list[bytes] = []
        size = 0
        while size < CHUNK:
            piece = self.stream.next()
            if piece is None:
                return b"".join(parts), False
            parts.append(piece)
            size += len(piece)
        return b"".join(parts), True


@dataclass(slots=True)
class Pending:
    route: list[bytes]
    msg_id: Any
    node: str
    caller: Caller
    work: Work


class RelayError(Exception):
    pass


class Relays:
    """Relayed requests in progress: long ones being worked on, replies being fetched."""

    def __init__(self, root_nodes: list[str], send: Callable[[list[bytes]], None]):
        self.root_nodes = frozenset(root_nodes)
        self.send = send  # send_multipart on the agents' ROUTER
        self.held: dict[int, Held] = {}
        self.pending: list[Pending] = []
        self._handles = itertools.count(1)
        self._turn = 0

    # --- who may relay ---------------------------------------------------------------------

    def check_node(self, node: str | None, authenticated: bool, body: dict[str, Any]) -> None:
        """May this agent connection relay for the node its message names?"""
        if node is None:
            raise RelayError("this agent's CURVE key is not its node's: relay refused")
        if not authenticated:
            raise RelayError("commands are relayed only over CURVE-authenticated agent "
                             "connections (curve = true)")
        if body["node"] != node:
            raise RelayError(f"agent {node!r} may not relay for node {body['node']!r}")

    def caller(self, node: str | None, authenticated: bool, body: dict[str, Any]) -> Caller:
        """The identity a relay carries, or RelayError saying why it is refused."""
        self.check_node(node, authenticated, body)
        assert node is not None
        uid = body["uid"]
        if uid in (0, os.getuid()) and node not in self.root_nodes:
            raise RelayError(f"node {node!r} may not relay commands of uid {uid} "
                             "([schedd] relay_root_nodes)")
        return Caller(uid=uid, gid=body["gid"], pid=body.get("pid", 0))

    # --- replies ---------------------------------------------------------------------------

    def answer(self, route: list[bytes], msg_id: Any, node: str, reply: Reply,
               now: float | None = None) -> None:
        """Send a relayed request's reply: the first chunk now, the rest when asked."""
        if isinstance(reply, Stream):
            held = Held(route, node, b"", 0, now or time.monotonic(), stream=reply)
            chunk, more = held.take()
            if not more:
                self._send(route, msg_id, 0, chunk, len(chunk), more=False)
                return
            reply = b""
        else:
            reply, held = joined(reply), None
            if len(reply) <= CHUNK:
                self._send(route, msg_id, 0, reply, len(reply), more=False)
                return
        self._expire(now or time.monotonic())
        if len(self.held) >= MAX_HELD or sum(
                1 for h in self.held.values() if h.node == node) >= MAX_HELD_PER_NODE:
            self._send_error(route, msg_id, protocol.E_AGAIN,
                             "schedd holds too many relayed replies; try again")
            return
        handle = next(self._handles)
        if held is not None:  # streamed: the size is not known before the end
            self.held[handle] = held
            self._send(route, msg_id, handle, chunk, 0, more=True)
            return
        self.held[handle] = Held(route, node, reply, CHUNK, now or time.monotonic())
        self._send(route, msg_id, handle, reply[:CHUNK], len(reply), more=True)

    def next_chunk(self, route: list[bytes], msg_id: Any, node: str, handle: int) -> None:
        self._expire(time.monotonic())
        held = self.held.get(handle)
        if held is None or held.node != node:
            self._send_error(route, msg_id, protocol.E_INVALID,
                             f"no relayed reply {handle} is held for {node}")
            return
        chunk, more = held.take()
        held.touched = time.monotonic()
        if not more:
            del self.held[handle]
        self._send(route, msg_id, handle, chunk,
                   0 if held.stream is not None else len(held.data), more=more)

    def _send(self, route: list[bytes], msg_id: Any, handle: int, chunk: bytes, size: int,
              more: bool) -> None:
        header = protocol.reply_ok(msg_id, {"size": size, "handle": handle, "more": more})
        self.send([*route, header, chunk])

    def _send_error(self, route: list[bytes], msg_id: Any, code: str, message: str) -> None:
        self.send([*route, protocol.reply_error(msg_id, code, message)])

    def _expire(self, now: float) -> None:
        for handle, held in list(self.held.items()):
            if now - held.touched > IDLE_SECONDS:
                log.warning("dropping a relayed reply for %s: its agent stopped fetching it",
                            held.node)
                del self.held[handle]

    # --- long requests (sacct over a wide window: localsock.Work) ----------------------------

    def add(self, pending: Pending) -> None:
        self.pending.append(pending)

    @property
    def working(self) -> bool:
        """Is a relayed long request ready for a slice (parked ones wait: localsock.Work)?"""
        return any(not p.work.parked for p in self.pending)

    def step_work(self, budget: float = WORK_BUDGET) -> None:
        """Advance relayed long requests, one slice each in turn, for about ``budget``."""
        started = time.monotonic()
        while self.working and time.monotonic() - started < budget:
            self._turn = (self._turn + 1) % len(self.pending)
            item = self.pending[self._turn]
            if item.work.parked:
                continue
            reply = item.work.step()
            if reply is not None:
                self.pending.remove(item)
                self.answer(item.route, item.msg_id, item.node, reply)
