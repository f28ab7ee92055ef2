"""restd's HTTP side (aiohttp): the listeners, the table of paths for each version, and who
each request is (docs/rest.md, "Who is asking").

- A token: ``X-SLURM-USER-TOKEN`` (or ``Authorization: Bearer``), with ``X-SLURM-USER-NAME``
  when given; passed to schedd, which verifies it (restd holds no key). On TCP, nothing else.
- On restd's unix socket without a token: the peer's uid and gid from the kernel
  (``SO_PEERCRED``), slurmrestd's rest_auth/local; schedd takes them only from a restd that
  runs as a user of ``[schedd] rest_relays``.

Every answer is Slurm's envelope (``meta``, ``errors``, ``warnings``) fitted to the schema the
version's document publishes for the path (restd/schemas.py)."""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
from typing import Any

from aiohttp import web

from cli import data_parser
from kiln.config import Config
from kiln.identity import user_name
from restd import schemas, slurmctld, slurmdbd  # noqa: F401  (their routes)
from restd.errors import (
    ESLURM_REST_FAIL_PARSING,
    ESLURM_REST_UNKNOWN_URL,
    SLURM_ERROR,
    SLURM_PROTOCOL_AUTHENTICATION_ERROR,
    RestError,
    error_entry,
)
from restd.routing import MAX_BODY, ROUTES, Req, Route
from restd.upstream import Upstream, Who

log = logging.getLogger("kiln.restd")
PEERCRED = struct.Struct("3i")


def _peer(request: web.Request) -> tuple[int, int] | None:
    """The uid and gid of a unix-socket peer (None on TCP)."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    _, uid, gid = PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                  PEERCRED.size))
    return uid, gid


def caller(request: web.Request) -> Who:
    """Who is asking, or RestError (401)."""
    name = request.headers.get("X-SLURM-USER-NAME", "")
    token = request.headers.get("X-SLURM-USER-TOKEN", "")
    bearer = request.headers.get("Authorization", "")
    if not token and bearer.lower().startswith("bearer "):
        token = bearer[7:].strip()
    if token:
        return Who(user=name, token=token)
    if name:
        raise RestError(SLURM_PROTOCOL_AUTHENTICATION_ERROR, "X-SLURM-USER-NAME given "
                        "without X-SLURM-USER-TOKEN: authentication failure", "auth", 401)
    peer = _peer(request)
    if peer is None:
        raise RestError(SLURM_PROTOCOL_AUTHENTICATION_ERROR, "Authentication required: "
                        "X-SLURM-USER-TOKEN (scontrol token) on TCP; the unix socket "
                        "takes local users without one", "auth", 401)
    uid, gid = peer
    return Who(user=user_name(uid), uid=uid, gid=gid)


def envelope(version: str, cfg: Config, who: Who | None, body: dict[str, Any],
             errors: list[dict[str, Any]], warnings: list[str], source: str,
             source_path: str = "") -> dict[str, Any]:
    meta = data_parser.meta(version, [], cfg.cluster_name)
    plugin = "slurmdbd" if source_path.startswith("/slurmdb/") else "slurmctld"
    meta["plugin"].update(type=f"openapi/{plugin}", name=f"Slurm OpenAPI {plugin}")
    meta["client"] = {"source": source, "user": who.user if who else "", "group": ""}
    return {**body, "meta": meta, "errors": errors,
            "warnings": [{"description": w, "source": ""} for w in warnings]}


def _answer(status: int, doc: dict[str, Any]) -> web.Response:
    return web.Response(status=status, body=json.dumps(doc).encode(),
                        content_type="application/json")


def endpoint(route: Route, version: str, doc_path: str, cfg: Config, upstream: Upstream):
    method = route.method.lower()

    async def serve(request: web.Request) -> web.Response:
        source = request.remote or "unix"
        who: Who | None = None
        warnings: list[str] = []
        try:
            who = caller(request)
            body = b""
            if request.can_read_body:
                if (request.content_length or 0) > MAX_BODY:
                    raise RestError(ESLURM_REST_FAIL_PARSING, f"Rejecting request. Body "
                                    f"of {request.content_length} bytes is over the limit "
                                    f"of {MAX_BODY}", "http", 413)
                body = await request.read()
            req = Req(version, dict(request.match_info), dict(request.query), who, cfg,
                      upstream, body, warnings)
            answer = await route.handler(req)
            doc = envelope(version, cfg, who, answer, [], warnings, source, doc_path)
            if not route.fitted:
                doc = schemas.fit(version, doc_path, method, doc)
            return _answer(200, doc)
        except RestError as exc:
            doc = envelope(version, cfg, who, {}, [exc.entry()], warnings, source, doc_path)
            return _answer(exc.status, schemas.fit(version, doc_path, method, doc))
        except Exception as exc:  # no request takes restd down, nor shows a traceback
            log.exception("%s %s failed", request.method, request.path)
            doc = envelope(version, cfg, who, {}, [error_entry(
                SLURM_ERROR, f"internal error: {type(exc).__name__}", doc_path)], warnings,
                source, doc_path)
            return _answer(500, schemas.fit(version, doc_path, method, doc))
    return serve


def application(cfg: Config, upstream: Upstream) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    # literal paths before templated ones: job/submit before job/{job_id}
    for route in sorted(ROUTES, key=lambda r: r.path.count("{")):
        for version in schemas.VERSIONS:
            paths = schemas.document(version)["paths"]
            doc_path = route.path.replace("{v}", version)
            if doc_path not in paths:
                doc_path = doc_path.rstrip("/") if doc_path.endswith("/") else doc_path + "/"
            if doc_path not in paths or route.method.lower() not in paths[doc_path]:
                continue  # this version publishes no such path
            serve = endpoint(route, version, doc_path, cfg, upstream)
            bare = doc_path.rstrip("/")
            app.router.add_route(route.method, bare, serve)
            app.router.add_route(route.method, bare + "/", serve)

    async def openapi(request: web.Request) -> web.Response:
        return _answer(200, schemas.document(schemas.VERSIONS[-1]))
    app.router.add_get("/openapi/v3", openapi)

    @web.middleware
    async def unknown(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return _answer(404, {"errors": [error_entry(
                ESLURM_REST_UNKNOWN_URL, f"Unable to find requested URL endpoint "
                f"{request.path}", request.path)], "warnings": []})
        except web.HTTPMethodNotAllowed:
            return _answer(405, {"errors": [error_entry(
                ESLURM_REST_UNKNOWN_URL, f"Unknown HTTP method {request.method} for "
                f"{request.path}", request.path)], "warnings": []})
    app.middlewares.append(unknown)
    return app


async def serve(cfg: Config, listen: str, unix_path: str, endpoint_: str | None = None
                ) -> web.AppRunner:
    """Start the listeners (the unix socket at ``unix_path`` unless empty, TCP ``HOST:PORT``
    when ``listen``); the runner, for cleanup."""
    upstream = Upstream(endpoint_ or cfg.client_endpoint)
    app = application(cfg, upstream)
    app.on_cleanup.append(lambda _app: _close(upstream))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    if unix_path:
        if os.path.exists(unix_path):
            os.unlink(unix_path)
        site = web.UnixSite(runner, unix_path)
        await site.start()
        os.chmod(unix_path, 0o777)  # every user may ask; who they are from the kernel
    if listen:
        host, _, port = listen.rpartition(":")
        await web.TCPSite(runner, host or "127.0.0.1", int(port)).start()
    return runner


async def _close(upstream: Upstream) -> None:
    upstream.close()
