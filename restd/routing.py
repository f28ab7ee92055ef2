"""The table of paths (``route``) and what a path's handler is handed (``Req``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kiln.config import Config
from restd.errors import ESLURM_REST_FAIL_PARSING, RestError
from restd.upstream import Upstream, Who

MAX_BODY = 16 * 1024 * 1024  # a submission's script is at most 4 MiB (kiln/wire/protocol.py)


@dataclass(slots=True)
class Req:
    version: str
    match: dict[str, str]
    query: dict[str, str]
    who: Who
    cfg: Config
    upstream: Upstream
    body: bytes = b""
    warnings: list[str] = field(default_factory=list)

    async def call(self, op: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.upstream.call(self.who, op, body, op)

    async def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise RestError(ESLURM_REST_FAIL_PARSING, f"Rejecting request. Unable to parse "
                            f"the body as JSON: {exc}", "http", 400) from None


Handler = Callable[[Req], Awaitable[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # the document's template, version as {v}: /slurm/{v}/jobs/
    handler: Handler
    fitted: bool  # the handler's answer is already in the version's shape


ROUTES: list[Route] = []


def route(method: str, path: str, fitted: bool = False) -> Callable[[Handler], Handler]:
    def add(handler: Handler) -> Handler:
        ROUTES.append(Route(method, path, handler, fitted))
        return handler
    return add
