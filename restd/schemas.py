"""Slurm's published OpenAPI documents (``restd/openapi/``, vendored: SOURCES.md says from
where, with their sha256) and each response fitted to the schema its path publishes.

A response is built with what kiln knows, then fitted by the data_parser's own rules
(``cli.data_parser.conform``: every property the schema has, with its empty value where kiln
has none; keys the schema lacks dropped; numbers with flags as ``{set, infinite, number}``), to
the schema of the path's and method's 200 response in the version's document."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from cli import data_parser

DIR = Path(__file__).parent / "openapi"
VERSIONS = ("v0.0.40", "v0.0.41")


@lru_cache(maxsize=4)
def document(version: str) -> dict[str, Any]:
    with open(DIR / f"{version}.json", encoding="utf-8") as fh:
        return json.load(fh)


def _resolve(node: dict[str, Any], schemas: dict[str, Any], seen: tuple[str, ...]) -> dict:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in seen:  # a recursive type: left open
            return {"type": "object"}
        return _resolve(schemas[name], schemas, (*seen, name))
    out = {k: node[k] for k in ("type", "enum") if k in node}
    if "properties" in node:
        out["properties"] = {k: _resolve(v, schemas, seen)
                             for k, v in node["properties"].items()}
    if "items" in node:
        out["items"] = _resolve(node["items"], schemas, seen)
    if "allOf" in node:
        out.update({"type": "object", "properties": {}})
        for part in node["allOf"]:
            out["properties"].update(_resolve(part, schemas, seen).get("properties", {}))
    return out


@lru_cache(maxsize=256)
def response_schema(version: str, path: str, method: str) -> dict[str, Any]:
    """The resolved schema of ``path``'s (the document's template) 200 answer to ``method``."""
    doc = document(version)
    answer = doc["paths"][path][method]["responses"]["200"]["content"]["application/json"]
    return _resolve(answer["schema"], doc["components"]["schemas"], ())


@lru_cache(maxsize=64)
def schema(version: str, name: str) -> dict[str, Any]:
    """A component schema by its name without the version (``job_desc_msg``), resolved."""
    doc = document(version)
    return _resolve({"$ref": f"#/components/schemas/{version}_{name}"},
                    doc["components"]["schemas"], ())


def fit(version: str, path: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
    return data_parser.conform(response_schema(version, path, method), body)
