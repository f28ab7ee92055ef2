"""kiln restd for a test: started beside a cluster, asked over TCP (urllib) or over its unix
socket as any user (curl --unix-socket under runuser), each answer checked by an independent
validator (openapi-core) against Slurm's published document of its version."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from tests.integration.cluster import BIN, Cluster

DOCS = Path(__file__).resolve().parents[2] / "restd" / "openapi"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _no_path_names(node: Any) -> Any:
    """The document with each ``required`` list's names holding a ``/`` left out: Slurm
    24.05's generator lists a nested field of an object as ``"cpus/count"`` in the object's
    ``required`` (v0.0.41's job_res_node, stats_rec's rollups), a key no JSON object has,
    slurmrestd's own answers included; the nested objects' own ``required`` still hold."""
    if isinstance(node, dict):
        out = {k: _no_path_names(v) for k, v in node.items()}
        if isinstance(out.get("required"), list):
            out["required"] = [n for n in out["required"] if "/" not in str(n)]
        return out
    if isinstance(node, list):
        return [_no_path_names(v) for v in node]
    return node


@lru_cache(maxsize=4)
def openapi(version: str) -> Any:
    """openapi-core over the vendored document (as ``_no_path_names`` reads it). Its own
    check of the document is off: Slurm's generated documents write ``"required": []``,
    which OpenAPI 3.0 forbids (minItems 1); responses are validated against every schema."""
    from openapi_core import Config, OpenAPI

    doc = json.loads((DOCS / f"{version}.json").read_text())
    return OpenAPI.from_dict(_no_path_names(doc), config=Config(spec_validator_cls=None))


def validate(method: str, path: str, status: int, body: bytes) -> None:
    """Raise unless ``body`` is what the document publishes for this path's answer."""
    from openapi_core.testing import MockRequest, MockResponse

    version = path.split("/")[2]
    path_only, _, query = path.partition("?")
    args = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
    from openapi_core.templating.paths.exceptions import PathNotFound

    response = MockResponse(body, status_code=status, content_type="application/json")
    # the document writes most paths with a trailing slash (/slurm/v0.0.40/jobs/), a few
    # without (job/submit); slurmrestd and restd answer both
    other = path_only[:-1] if path_only.endswith("/") else path_only + "/"
    for candidate in (path_only, other):
        request = MockRequest("http://localhost", method.lower(), candidate, args=args)
        try:
            openapi(version).validate_response(request, response)
            return
        except PathNotFound:
            continue
    raise AssertionError(f"{path_only} is not a path of Slurm's {version} document")


@dataclass
class RestD:
    cluster: Cluster
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def socket(self) -> str:
        return f"{self.cluster.home}/restd.sock"

    def start(self) -> None:
        log = open(self.cluster.home / "log" / "restd.out", "ab")
        self.proc = subprocess.Popen([str(BIN / "kiln"), "restd", "--listen",
                                      f"127.0.0.1:{self.port}"], env=self.cluster.env,
                                     stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"kiln restd exited {self.proc.returncode}: "
                                         + (self.cluster.home / "log" / "restd.out")
                                         .read_text()[-2000:]) from None
                time.sleep(0.1)
        raise AssertionError("kiln restd did not listen within 30 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def token(self, user: str | None = None, *args: str) -> str:
        res = self.cluster.run("scontrol", "token", *args, user=user)
        assert res.returncode == 0, res.stderr
        line = res.stdout.strip()
        assert line.startswith("SLURM_JWT="), line
        return line.removeprefix("SLURM_JWT=")

    def http(self, method: str, path: str, token: str = "", user: str = "",
             body: Any = None, raw: bytes | None = None, check: bool = True
             ) -> tuple[int, dict[str, Any]]:
        """Over TCP with a token (and X-SLURM-USER-NAME when ``user``)."""
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     method=method)
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("X-SLURM-USER-TOKEN", token)
        if user:
            req.add_header("X-SLURM-USER-NAME", user)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=60) as resp:
                status, payload = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        if check:
            validate(method, path, status, payload)
        return status, json.loads(payload)

    def local(self, method: str, path: str, as_user: str | None = None, body: Any = None,
              check: bool = True) -> tuple[int, dict[str, Any]]:
        """Over the unix socket, as ``as_user`` (root when None), no token: local auth."""
        argv = ["curl", "-s", "--unix-socket", self.socket, "-X", method, "-w", "\n%{http_code}",
                f"http://localhost{path}"]
        if body is not None:
            argv[1:1] = ["-H", "Content-Type: application/json", "--data-binary", "@-"]
        if as_user:
            argv = ["runuser", "-u", as_user, "--", *argv]
        res = subprocess.run(argv, input=None if body is None else json.dumps(body),
                             capture_output=True, text=True, timeout=60, cwd="/tmp")
        assert res.returncode == 0, res.stderr
        payload, _, code = res.stdout.rpartition("\n")
        if check:
            validate(method, path, int(code), payload.encode())
        return int(code), json.loads(payload)
