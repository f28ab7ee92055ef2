"""``data_parser.conform`` builds each schema's conformer once (generated code per object
schema) instead of walking the schema for every value: its output must be the walk's, byte
for byte. ``walk`` below is the walk as it was (cli/data_parser.py before issue 39's load
fix), kept here as the reference."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli import data_parser, squeue_json
from cli.core.formats import Ctx
from cli.data_parser import no_val, skeleton
from restd import schemas
from tests.unit.cli.test_json_data_parser import JOBS
from tests.unit.cli.test_squeue import NOW


def _is_no_val(node: dict[str, Any]) -> bool:
    return set(node.get("properties") or {}) == {"set", "infinite", "number"}


def walk(node: dict[str, Any], value: Any) -> Any:
    kind = node.get("type")
    if kind == "object":
        if _is_no_val(node) and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = no_val(value)
        if not isinstance(value, dict):
            return skeleton(node)
        props = node.get("properties") or {}
        if not props:
            return value
        out = skeleton(node)
        for key, sub in value.items():
            if key in props:
                out[key] = walk(props[key], sub)
        return out
    if kind == "array":
        if not isinstance(value, list):
            value = [] if value in (None, "") else [value]
        return [walk(node.get("items") or {}, v) for v in value]
    if kind is None:
        return value
    if isinstance(value, dict):
        value = value.get("number", value.get("return_code", 0))
        value = value.get("number", 0) if isinstance(value, dict) else value
    if kind == "string":
        return "" if value is None else str(value)
    if kind in ("integer", "number"):
        try:
            return int(value) if kind == "integer" else float(value)
        except (TypeError, ValueError):
            return 0
    if kind == "boolean":
        return bool(value)
    return value


def same(node: dict[str, Any], value: Any) -> None:
    expected = json.dumps(walk(node, value))
    assert json.dumps(data_parser.conform(node, value)) == expected
    assert json.dumps(data_parser.conform(node, value)) == expected  # the built one, reused


def squeue_body(version: str, count: int) -> dict[str, Any]:
    jobs = []
    for i in range(count):
        job = dict(JOBS[i % len(JOBS)])
        job["id"] = 100 + i
        jobs.append(squeue_json.job_info(job, Ctx(NOW), "kiln", version, []))
    return {"jobs": jobs, "last_backfill": no_val(int(NOW)), "last_update": 7,
            "meta": data_parser.meta(version, ["squeue"], "kiln"), "errors": [],
            "warnings": [{"description": "w", "source": 3}], "extra": {"dropped": True}}


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41"])
def test_a_queue_comes_out_byte_identical(version: str) -> None:
    body = squeue_body(version, 60)
    same(data_parser.schema(version, "squeue"), body)
    same(schemas.response_schema(version, "/slurm/{v}/jobs/".replace("{v}", version), "get"),
         body)


def _paths() -> list[tuple[str, str, str]]:
    out = []
    for version in schemas.VERSIONS:
        for path, methods in schemas.document(version)["paths"].items():
            for method, op in methods.items():
                answer = (op.get("responses") or {}).get("200", {})
                if "application/json" in answer.get("content", {}):
                    out.append((version, path, method))
    return out


PATHS = _paths()


def _keys(node: Any, found: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, sub in (node.get("properties") or {}).items():
            found.add(key)
            _keys(sub, found)
        _keys(node.get("items"), found)
    return found


KEYS = sorted(_keys(schemas.schema("v0.0.41", "job_info"), set())
              | _keys(schemas.schema("v0.0.40", "node"), set()) | {"number", "return_code"})
scalars = (st.none() | st.booleans() | st.integers(-2**40, 2**40)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4)
           | st.sampled_from(["", "7", "1.5", "x"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=3), inner,
                                        max_size=6), max_leaves=40)


@settings(max_examples=150, deadline=None)
@given(where=st.sampled_from(PATHS), value=values)
def test_any_value_against_any_published_answer(where: tuple[str, str, str],
                                                value: Any) -> None:
    same(schemas.response_schema(*where), {"jobs": [value], "nodes": value, "meta": value,
                                           "errors": [value], "warnings": value})


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(["job_info", "node", "job_desc_msg", "stats_msg", "assoc",
                             "process_exit_code_verbose", "job_res", "partition_info"]),
       version=st.sampled_from(schemas.VERSIONS), value=values)
def test_any_value_against_the_types_kiln_fills(name: str, version: str, value: Any) -> None:
    same(schemas.schema(version, name), value)


@pytest.mark.parametrize("node,value", [
    ({"type": "object", "properties": {"set": {"type": "boolean"},
      "infinite": {"type": "boolean"}, "number": {"type": "integer"}}}, 5),
    ({"type": "object", "properties": {"set": {"type": "boolean"},
      "infinite": {"type": "boolean"}, "number": {"type": "number"}}}, 2.5),
    ({"type": "object", "properties": {"a": {}, "b": {"type": "weird"}}},
     {"a": {"x": 1}, "b": {"return_code": {"number": 3}}}),
    ({"type": "object", "properties": {"a": {"type": "object"}}}, {"a": 3}),
    ({"type": "array", "items": {"type": "string"}}, "one"),
    ({"type": "array", "items": {"type": "integer"}}, [1, "2", True, None, {"number": 4}]),
    ({"type": "object"}, {"kept": ["as", "is"]}),
    ({"type": "string"}, {"number": 12}),
])
def test_each_rule(node: dict[str, Any], value: Any) -> None:
    same(node, value)
