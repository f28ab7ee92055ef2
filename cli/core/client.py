"""Talk to schedd: one Unix-domain stream socket, one request at a time.

This is also kiln's Python submit API: ``Client().call("submit", {...})`` on one connection.
schedd learns who is calling from the kernel (``SO_PEERCRED``), never from the message.
Frames are length-prefixed JSON (``kiln/wire/localsock.py``). Only the standard library: a
command's cost is Python's start plus its own work. The socket is ``_socket``'s, the C type
under ``socket.socket``: what a Unix stream needs (connect, sendall, recv, timeouts) without
``socket.py``'s imports (selectors, enum classes), a few ms of every command's start.
"""

import _socket

from kiln import paths
from kiln.wire import protocol, wirejson

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from typing import Any

DEFAULT_TIMEOUT = 60.0
HEADER_BYTES = 4  # a frame's length, big-endian (int.to_bytes: `struct` is one more import)
STREAMED = 0xFFFFFFFF  # the length of a streamed frame: chunks follow (kiln/wire/localsock.py)
UNREACHABLE = "Unable to contact slurm controller (connect failure)"
LOST = ("Unable to contact slurm controller (connection lost; the request may or may not "
        "have been carried out)")


class ClientError(Exception):
    """schedd answered with an error, or could not be reached. ``code`` is a protocol code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class Client:
    def __init__(self, endpoint: "str | None" = None, timeout: float = DEFAULT_TIMEOUT,
                 cfg: "Any" = None):
        peers: list[str] = []
        if endpoint is None and cfg is not None:
            endpoint, peers = cfg.client_endpoint, list(cfg.client_peers)
        elif endpoint is None:
            endpoint, peers = _configured()
        self.endpoint = endpoint
        self.endpoints = [endpoint, *peers]  # an HA pair's schedds, tried in order
        self.timeout = timeout
        self._last_id = 0
        self._sock: _socket.socket | None = None

    def _connected(self) -> "_socket.socket":
        """Connected to the first schedd that listens (a standby binds nothing; a dead one's
        socket file refuses at once: no waiting out a timeout)."""
        if self._sock is None:
            for endpoint in self.endpoints:
                sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                sock.settimeout(self.timeout)
                try:
                    sock.connect(_path(endpoint))
                except OSError:
                    sock.close()
                    continue
                self.endpoint, self._sock = endpoint, sock
                break
            else:
                raise ClientError("unreachable", UNREACHABLE)
        return self._sock

    def call(self, op: str, body: "dict[str, Any] | None" = None) -> "dict[str, Any]":
        """Send one request and wait for its reply body; raises ClientError."""
        self._last_id = msg_id = self._last_id + 1
        reply = self.exchange(protocol.request(op, body, msg_id))
        try:
            decoded = _decode_reply(reply)
        except protocol.ProtocolError as exc:
            raise ClientError(exc.code, exc.message) from None
        if decoded.get("ok"):
            return decoded.get("body") or {}
        err = decoded.get("error") or {}
        raise ClientError(err.get("code", "error"), err.get("message", "unknown error"))

    def exchange(self, request: bytes) -> bytes:
        """One raw frame out, one back (the fuzz tests send malformed ones on purpose)."""
        if len(request) > protocol.MAX_MESSAGE_BYTES:
            raise ClientError(protocol.E_BAD_REQUEST,
                              f"request of {len(request)} bytes is over the limit of "
                              f"{protocol.MAX_MESSAGE_BYTES} bytes")
        sock = self._connected()
        try:
            try:
                sock.sendall(len(request).to_bytes(HEADER_BYTES, "big") + request)
            except BrokenPipeError:
                pass  # schedd may have said why it closed (too many connections): read it
            size = int.from_bytes(self._recv(sock, HEADER_BYTES), "big")
            if size != STREAMED:
                return self._recv(sock, size)
            chunks = []  # a streamed reply (kiln/wire/localsock.py's Stream): chunks until b""
            while size := int.from_bytes(self._recv(sock, HEADER_BYTES), "big"):
                chunks.append(self._recv(sock, size))
            return b"".join(chunks)
        except TimeoutError:
            self.close()
            raise ClientError("unreachable", UNREACHABLE) from None
        except OSError:
            # the schedd we asked went away mid-request: never resent
            self.close()
            raise ClientError("unreachable", LOST) from None

    @staticmethod
    def _recv(sock: "_socket.socket", size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionResetError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _path(endpoint: str) -> str:
    if endpoint.startswith("ipc://"):
        return endpoint[6:]
    if "://" in endpoint:
        raise ClientError("unreachable", f"{UNREACHABLE}: commands reach schedd over a local "
                                         f"socket (ipc://PATH), not {endpoint}")
    return endpoint


def _decode_reply(frame: bytes) -> "dict[str, Any]":
    """A reply from schedd. Not held to MAX_MESSAGE_BYTES, which bounds what daemons accept:
    squeue over 20,000 jobs is a reply of some 20 MB, and it comes from our own controller."""
    try:
        reply = wirejson.loads(frame)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise protocol.ProtocolError(protocol.E_BAD_REQUEST, f"malformed reply: {exc}") from None
    if not isinstance(reply, dict):
        raise protocol.ProtocolError(protocol.E_BAD_REQUEST, "reply is not an object")
    return reply


def _configured() -> "tuple[str, list[str]]":
    """The cluster's kiln.toml, read once: schedd's endpoint, and ``[schedd] client_peers``,
    the other schedds of an HA pair."""
    path, raw = paths.read_raw()
    peers = paths.schedd_setting(raw, "client_peers", [])
    peers = [p for p in peers if isinstance(p, str)] if isinstance(peers, list) else []
    return paths.endpoint_of(path, raw), peers


def listening(endpoint: str) -> bool:
    """Does a schedd listen there now? A connect probe."""
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        probe.connect(_path(endpoint))
        return True
    except (OSError, ClientError):
        return False
    finally:
        probe.close()


def call(op: str, body: "dict[str, Any] | None" = None) -> "dict[str, Any]":
    """One request from a short-lived command."""
    with Client() as client:
        return client.call(op, body)

