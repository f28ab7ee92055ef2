"""A TCP relay between one agent and schedd whose two directions a test can hold apart: a link
that fails one way. Held bytes are kept, not dropped (the stream is CURVE-encrypted ZMTP: a
lost byte would break it), and pass once the direction is released, as TCP retransmits would
deliver them when a link comes back.

``up`` is agent -> schedd (heartbeats, reports), ``down`` schedd -> agent (replies, commands).
Threads only; it listens on 127.0.0.1 and connects only to the address it is given.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DIRECTIONS = ("up", "down")


class OneWay:
    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._held = {d: threading.Event() for d in DIRECTIONS}  # set: that way is cut
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = [self._listener]
        self._start(self._accept)

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def hold(self, direction: str) -> None:
        """Cut one way: its bytes wait here until ``release``."""
        self._held[direction].set()

    def release(self, direction: str) -> None:
        self._held[direction].clear()

    def close(self) -> None:
        self._closed.set()
        for sock in self._sockets:
            sock.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _start(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                agent, _ = self._listener.accept()
            except OSError:
                return
            try:
                schedd = socket.create_connection(self.target, timeout=5)
            except OSError:
                agent.close()
                continue
            self._sockets += [agent, schedd]
            self._start(self._pump, agent, schedd, "up")
            self._start(self._pump, schedd, agent, "down")

    def _pump(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        """Read ``src`` always (its sender never stalls), pass to ``dst`` while not held."""
        waiting = bytearray()
        held = self._held[direction]
        try:
            while not self._closed.is_set():
                readable, _, _ = select.select([src], [], [], 0.05)
                if readable:
                    data = src.recv(65536)
                    if not data:
                        break
                    waiting += data
                if waiting and not held.is_set():
                    dst.sendall(waiting)
                    waiting.clear()
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


@contextmanager
def one_way(target: tuple[str, int]) -> Iterator[OneWay]:
    relay = OneWay(target)
    try:
        yield relay
    finally:
        relay.close()
