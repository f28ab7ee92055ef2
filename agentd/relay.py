"""The relay: on a node that is not the head, agentd serves the commands' endpoint.

Commands (sbatch, squeue, srun's client side, ``cli.core.client.Client``) connect to the path of
``client_endpoint`` wherever they run. On the head node schedd listens there; on a compute or
login node the agent does (``schedd/localsock.LocalServer``, the same server: ``SO_PEERCRED``
identity, length-prefixed frames, one reply per connection at a time) and forwards each
request to schedd over its CURVE channel as ``relay`` {node, uid, gid, pid, request}, the
identity being what the kernel said. schedd's reply comes back in chunks of at most 1 MiB,
each fetched when the last one arrived (``relay_next``), and goes to the waiting command.

- A relayed request is sent once. If schedd falls silent while it waits (no word for three
  heartbeat intervals) the command gets Slurm's "connection lost" (the request may or may not
  have been carried out): what was already handed to ZeroMQ may still reach schedd when the
  link comes back, once, but the agent never sends it again and its late reply is dropped.
- While schedd is unreachable (never heard, or silent as above) a command is told so at once.

Whether to serve (``[agent] serve_commands``): true, false, or "auto" (the default): serve
unless something listens on the path (the head's schedd) or a socket file this agent did not
leave is there (a crashed schedd's, on the head). The agent marks the path it serves with
``PATH.agent`` so that, after its own crash, it takes its stale socket back.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from kiln.identity import Caller
from kiln.wire import protocol
from kiln.wire.localsock import LocalServer, Work, socket_path

log = logging.getLogger("agentd.relay")

UNREACHABLE = "Unable to contact slurm controller (connect failure)"
LOST = ("Unable to contact slurm controller (connection lost; the request may or may not "
        "have been carried out)")
MAX_REPLY_BYTES = 1 << 30  # the most of a reply the agent holds for one command


def marker(path: str) -> str:
    return f"{path}.agent"


def _listening(path: str) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(2.0)
            probe.connect(path)
        return True
    except OSError:
        return False


def should_serve(setting: bool | str, endpoint: str) -> tuple[bool, str]:
    """(serve?, why) for ``[agent] serve_commands``."""
    path = socket_path(endpoint)
    if setting is True:
        return True, "serve_commands = true"
    if setting is False:
        return False, "serve_commands = false"
    if _listening(path):
        return False, f"something (schedd) listens on {path}: this is the head node"
    if os.path.lexists(path) and not os.path.exists(marker(path)):
        return False, f"{path} exists and is no agent's: a stopped schedd's (the head node)"
    return True, f"no schedd listens on {path}"


class Relayed(Work):
    """A command's request on its way to schedd and back; the agent completes it."""

    __slots__ = ("client_id", "data", "size", "sent")

    def __init__(self, client_id: Any):
        self.client_id = client_id
        self.data: bytearray | None = None
        self.size = 0
        self.sent = time.monotonic()

    def step(self) -> bytes | None:
        return None  # answered by Relay.on_reply, never stepped


class Relay:
    """The agent's local endpoint and its relayed requests in flight."""

    def __init__(self, endpoint: str, node: str, next_id: Callable[[], int],
                 send: Callable[[bytes], bool], window: Callable[[], float]):
        self.node = node
        self.next_id = next_id
        self.send = send  # one frame to schedd, without blocking; False when it cannot
        self.window = window  # seconds of silence after which schedd counts as lost
        self.pending: dict[int, Relayed] = {}  # the agent's msg id -> the command it serves
        self.heard_at = 0.0  # monotonic; 0 = schedd never heard
        path = socket_path(endpoint)
        os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
        self.server = LocalServer(endpoint, self.dispatch)
        with open(marker(path), "w") as fh:
            fh.write(f"{os.getpid()}\n")
        self.path = path

    def register(self, poller: Any) -> None:
        self.server.register(poller)

    def close(self) -> None:
        self.lost()
        self.server.close()
        try:
            os.unlink(marker(self.path))
        except OSError:
            pass

    # --- schedd's liveness -----------------------------------------------------------------

    def heard(self) -> None:
        self.heard_at = time.monotonic()

    def connected(self) -> bool:
        return self.heard_at > 0 and time.monotonic() - self.heard_at <= self.window()

    # --- commands --------------------------------------------------------------------------

    def dispatch(self, frame: bytes, caller: Caller) -> Any:
        client_id = _peek_id(frame)
        if not self.connected():
            return protocol.reply_error(client_id, "unreachable", UNREACHABLE)
        body = {"node": self.node, "uid": caller.uid, "gid": caller.gid, "pid": caller.pid,
                "request": frame.decode("utf-8", "surrogateescape")}
        msg_id = self.next_id()
        message = protocol.request("relay", body, msg_id)
        if len(message) > protocol.MAX_MESSAGE_BYTES:
            return protocol.reply_error(
                client_id, protocol.E_BAD_REQUEST,
                f"message of {len(frame)} bytes is too large to relay (at most "
                f"{protocol.MAX_MESSAGE_BYTES} bytes, once quoted)")
        if not self.send(message):
            return protocol.reply_error(client_id, "unreachable", UNREACHABLE)
        work = Relayed(client_id)
        self.pending[msg_id] = work
        return work

    def on_reply(self, msg: dict[str, Any], more_frames: list[bytes]) -> bool:
        """A reply to a relay op? Then take it (and True)."""
        msg_id = msg.get("id")
        work = self.pending.pop(msg_id, None) if isinstance(msg_id, int) else None
        if work is None:
            return False
        if not msg.get("ok"):
            err = msg.get("error") or {}
            self._finish(work, protocol.reply_error(
                work.client_id, str(err.get("code", protocol.E_INTERNAL)),
                str(err.get("message", "relay refused"))))
            return True
        body = msg.get("body") or {}
        chunk = more_frames[0] if more_frames else b""
        if work.data is None:
            work.size = int(body.get("size", 0))
            if work.size > MAX_REPLY_BYTES:
                self._finish(work, protocol.reply_error(
                    work.client_id, protocol.E_INVALID,
                    f"the reply ({work.size} bytes) is larger than a relay carries "
                    f"({MAX_REPLY_BYTES} bytes); narrow the request"))
                return True
            work.data = bytearray()
        work.data += chunk
        if len(work.data) > MAX_REPLY_BYTES:  # a streamed reply: its size said by no header
            self._finish(work, protocol.reply_error(
                work.client_id, protocol.E_INVALID,
                f"the reply is larger than a relay carries ({MAX_REPLY_BYTES} bytes); "
                f"narrow the request"))
            return True
        if not body.get("more"):
            self._finish(work, work.data)  # copied once, into the command's outbox
            return True
        if not self.server.waiting(work):
            return True  # the command went away: schedd drops the rest in a while
        next_id = self.next_id()
        if not self.send(protocol.request("relay_next", {"node": self.node,
                                                         "handle": body.get("handle", 0)},
                                          next_id)):
            self._finish(work, protocol.reply_error(work.client_id, "unreachable", LOST))
            return True
        self.pending[next_id] = work
        return True

    def lost(self) -> None:
        """schedd went away: every command still waiting is told so (nothing is resent)."""
        works, self.pending = list(self.pending.values()), {}
        for work in works:
            self._finish(work, protocol.reply_error(work.client_id, "unreachable", LOST))

    def _finish(self, work: Relayed, reply: bytes | bytearray) -> None:
        work.data = None
        self.server.complete(work, reply)


def _peek_id(frame: bytes) -> Any:
    try:
        msg_id = protocol.decode(frame).get("id")
    except protocol.ProtocolError:
        return None
    return msg_id if isinstance(msg_id, (int, str)) else None
