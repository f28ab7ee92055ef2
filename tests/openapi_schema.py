"""A validator of the OpenAPI subset kiln vendors (cli/openapi/v0.0.4x.json: type, properties,
items, enum): where a document departs from the schema of Slurm's published data_parser.

Stricter than OpenAPI where kiln promises more: every property of an object is present (the
data_parser CLI dumps every field), and no key the schema lacks. jsonschema is not a test
dependency; this is the whole of what the vendored subset can say."""

from __future__ import annotations

from typing import Any

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool,
          "integer": int, "number": (int, float)}


def schema_errors(node: dict[str, Any], value: Any, where: str = "") -> list[str]:
    """Every departure: a wrong type, a key the schema lacks, a key it has missing, a value
    that is not one of an enum's names."""
    kind = node.get("type")
    if kind in _TYPES and (not isinstance(value, _TYPES[kind]) or (
            kind in ("integer", "number") and isinstance(value, bool))):
        return [f"{where}: {type(value).__name__}, not {kind}"]
    if kind == "object" and node.get("properties"):
        props = node["properties"]
        errors = [f"{where}.{k}: not in the schema" for k in value if k not in props]
        errors += [f"{where}.{k}: missing" for k in props if k not in value]
        for k, sub in props.items():
            if k in value:
                errors += schema_errors(sub, value[k], f"{where}.{k}")
        return errors
    if kind == "array":
        return [e for i, v in enumerate(value)
                for e in schema_errors(node.get("items") or {}, v, f"{where}[{i}]")]
    if "enum" in node and value not in node["enum"]:
        return [f"{where}: {value!r} not one of the enum"]
    return []


def unknown_keys(node: dict[str, Any], value: Any, where: str = "") -> list[str]:
    """The keys of ``value`` (what kiln builds, before it is fitted to the schema) that the
    schema does not have: fitting drops them silently, so a misspelt key would be a field
    never filled."""
    props = node.get("properties") or {}
    if isinstance(value, dict) and node.get("type") == "object" and props:
        if set(props) == {"set", "infinite", "number"}:
            return []
        return [e for k, v in value.items() for e in (
            [f"{where}.{k}"] if k not in props else unknown_keys(props[k], v, f"{where}.{k}"))]
    if isinstance(value, list) and node.get("type") == "array":
        return [e for v in value for e in unknown_keys(node.get("items") or {}, v, f"{where}[]")]
    return []
