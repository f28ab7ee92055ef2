"""restd's one way to schedd: the commands' client (``cli.core.client.Client``) over the local
socket, each request wrapped in ``act_for`` with who the HTTP caller is — a token (schedd
verifies it) or, for a peer of restd's unix socket, its uid and gid from the kernel (schedd
takes those only from a relay it lists, ``[schedd] rest_relays``). Blocking calls, run on a
small pool of threads, each thread with a connection of its own."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from cli.core.client import Client, ClientError
from kiln.wire import protocol
from restd.errors import RestError, from_schedd

THREADS = 16


@dataclass(frozen=True, slots=True)
class Who:
    """The HTTP caller: a token and the user it is said to be, or a local peer's uid/gid."""

    user: str
    token: str = ""
    uid: int | None = None
    gid: int | None = None

    def act_for(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        request = protocol.request(op, body, 1).decode("utf-8", "surrogateescape")
        if self.token:
            return {"token": self.token, "user": self.user, "request": request}
        return {"uid": self.uid, "gid": self.gid, "request": request}


class Upstream:
    def __init__(self, endpoint: str, timeout: float = 60.0, threads: int = THREADS):
        self.endpoint, self.timeout = endpoint, timeout
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="restd-schedd")
        self._local = threading.local()

    def _client(self) -> Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = Client(endpoint=self.endpoint, timeout=self.timeout)
        return client

    def call_sync(self, who: Who, op: str, body: dict[str, Any], source: str) -> dict[str, Any]:
        client = self._client()
        try:
            return client.call("act_for", who.act_for(op, body))
        except ClientError as exc:
            if exc.code == "unreachable":
                client.close()
            raise from_schedd(exc.code, exc.message, source) from None

    async def call(self, who: Who, op: str, body: dict[str, Any] | None = None,
                   source: str = "") -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, self.call_sync, who, op, body or {},
                                          source or op)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["Who", "Upstream", "RestError"]
