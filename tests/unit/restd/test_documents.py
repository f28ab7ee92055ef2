"""The vendored OpenAPI documents are Slurm's, byte for byte (restd/openapi/SOURCES.md)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

DIR = Path(__file__).resolve().parents[3] / "restd" / "openapi"


@pytest.mark.parametrize("name", ["v0.0.40.json", "v0.0.41.json"])
def test_checksums_are_the_recorded_ones(name: str) -> None:
    recorded = dict(re.findall(r"\| (v0\.0\.4\d\.json) \|[^|]*\| ([0-9a-f]{64}) \|",
                               (DIR / "SOURCES.md").read_text()))
    assert hashlib.sha256((DIR / name).read_bytes()).hexdigest() == recorded[name]


def test_every_route_is_a_published_path() -> None:
    from restd import schemas
    from restd.routing import ROUTES
    from restd.server import application  # noqa: F401  (registers the routes)

    for route in ROUTES:
        found = []
        for version in schemas.VERSIONS:
            paths = schemas.document(version)["paths"]
            path = route.path.replace("{v}", version)
            found += [p for p in (path, path.rstrip("/"), path + "/")
                      if p in paths and route.method.lower() in paths[p]]
        assert found, f"{route.method} {route.path} is in no published document"
