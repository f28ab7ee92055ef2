"""Talk to schedd: one DEALER socket over ipc (or tcp), one request at a time.

This is also kiln's Python submit API: ``Client().call("submit", {...})`` on one connection.
schedd learns who is calling from the ipc peer credentials, never from the message.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
from typing import Any

import zmq

from schedd import paths, protocol

DEFAULT_TIMEOUT = 60.0
WATCH_INTERVAL = 0.5  # seconds between checks that the schedd asked is still the one there


class ClientError(Exception):
    """schedd answered with an error, or could not be reached. ``code`` is a protocol code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class Client:
    def __init__(self, endpoint: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                 cfg: Any = None):
        peers: list[str] = []
        if endpoint is None:
            endpoint = cfg.client_endpoint if cfg is not None else paths.client_endpoint()
            peers = list(cfg.client_peers) if cfg is not None else _peers()
        self.endpoint = endpoint
        self.endpoints = [endpoint, *peers]  # an HA pair's schedds, tried in order
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._peer_id: tuple[int, int, int] | None = None

    def _socket(self) -> zmq.Socket:
        if self._sock is None:
            if len(self.endpoints) > 1:  # HA: the first schedd that listens (standbys do not)
                live = next((e for e in self.endpoints if _listening(e)), None)
                if live is None:  # between a leader's death and its standby's takeover
                    raise ClientError("unreachable",
                                      "Unable to contact slurm controller (connect failure)")
                self.endpoint = live
            if self.endpoint.startswith("ipc://") and not os.path.exists(self.endpoint[6:]):
                raise ClientError("unreachable", "Unable to contact slurm controller (connect failure)")
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.endpoint)
            self._sock = sock
            self._peer_id = _socket_identity(self.endpoint)
        return self._sock

    def call(self, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and wait for its reply body; raises ClientError."""
        msg_id = next(self._ids)
        frame = protocol.request(op, body, msg_id)
        if len(frame) > protocol.MAX_MESSAGE_BYTES:
            # schedd's socket drops a message over its cap without a word (ZeroMQ's
            # MAXMSGSIZE closes the connection): say so now instead of waiting for a reply
            raise ClientError(protocol.E_BAD_REQUEST,
                              f"request of {len(frame)} bytes is over the limit of "
                              f"{protocol.MAX_MESSAGE_BYTES} bytes")
        sock = self._socket()
        sock.send(frame)
        waited = 0.0
        while True:
            if not sock.poll(int(WATCH_INTERVAL * 1000)):
                waited += WATCH_INTERVAL
                if waited >= self.timeout:
                    self.close()
                    raise ClientError("unreachable",
                                      "Unable to contact slurm controller (connect failure)")
                if _socket_identity(self.endpoint) != self._peer_id:
                    # the schedd we asked is gone (its socket file was removed or replaced):
                    # our request died with it, or was done just before; never resent
                    self.close()
                    raise ClientError("unreachable", "Unable to contact slurm controller "
                                      "(connection lost; the request may or may not have "
                                      "been carried out)")
                continue
            try:
                reply = _decode_reply(sock.recv())
            except protocol.ProtocolError as exc:
                raise ClientError(exc.code, exc.message) from None
            if reply.get("id") != msg_id:
                continue  # a late answer to a request that timed out earlier
            if reply.get("ok"):
                return reply.get("body") or {}
            err = reply.get("error") or {}
            raise ClientError(err.get("code", "error"), err.get("message", "unknown error"))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decode_reply(frame: bytes) -> dict[str, Any]:
    """A reply from schedd. Not held to MAX_MESSAGE_BYTES, which bounds what daemons accept:
    squeue over 20,000 jobs is a reply of some 20 MB, and it comes from our own controller."""
    try:
        reply = json.loads(frame)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise protocol.ProtocolError(protocol.E_BAD_REQUEST, f"malformed reply: {exc}") from None
    if not isinstance(reply, dict):
        raise protocol.ProtocolError(protocol.E_BAD_REQUEST, "reply is not an object")
    return reply


def _peers() -> list[str]:
    """``[schedd] client_peers`` of the cluster's kiln.toml: the other schedds of an HA pair."""
    try:
        peers = paths.schedd_setting(paths.read_raw()[1], "client_peers", [])
    except paths.ConfigError:
        return []
    return [p for p in peers if isinstance(p, str)] if isinstance(peers, list) else []


def _socket_identity(endpoint: str) -> tuple[int, int, int] | None:
    """(device, inode, change time) of an ipc endpoint's socket file: a restarted schedd makes
    a new one (the inode number alone may be reused). None for tcp endpoints and no file."""
    if not endpoint.startswith("ipc://"):
        return None
    try:
        st = os.stat(endpoint[6:])
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def _listening(endpoint: str) -> bool:
    """Does a schedd listen there now? A connect probe (a standby binds nothing; a dead
    leader's socket file refuses): cheap for ipc, a short TCP connect otherwise."""
    try:
        if endpoint.startswith("ipc://"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.connect(endpoint[6:])
            return True
        if endpoint.startswith("tcp://"):
            host, _, port = endpoint[6:].rpartition(":")
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1.0):
                return True
    except (OSError, ValueError):
        return False
    return False


def call(op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request from a short-lived command."""
    with Client() as client:
        return client.call(op, body)
