"""``--json=v0.0.40`` and ``--json=v0.0.41``: squeue, sinfo and sacct in the shapes of Slurm
23.11's and 24.05's data_parser plugins, held to the published OpenAPI schemas.

``cli/openapi/v0.0.4x.json`` are those schemas' response types with every ``$ref`` resolved
(``bin/openapi-subset`` makes them from the published sources). A document is the schema's
skeleton (every property, with its empty value: ``""``, ``0``, ``false``, ``[]``, and
``{"set": false, "infinite": false, "number": 0}`` for a number with flags) with what kiln
knows laid over it: a key the schema does not have is left out, and a value is fitted to the
schema's type (a plain number becomes ``{"set": true, ...}``, and back), so the output has
every field of the version asked for and no other. Plain ``--json`` keeps v0.0.38
(Slurm 22.05)."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

VERSIONS = ("v0.0.40", "v0.0.41")
RELEASES = {"v0.0.40": ("23", "11", "0"), "v0.0.41": ("24", "05", "0")}
_DIR = Path(__file__).parent / "openapi"


class VersionError(ValueError):
    pass


def version_of(value: str | None) -> str:
    """The data_parser a ``--json[=...]`` value names: '' (v0.0.38), v0.0.40 or v0.0.41."""
    text = (value or "").strip()
    text = text.split("@", 1)[-1] if text.startswith("data_parser") else text
    text = text.removeprefix("data_parser/")
    if text in ("", "v0.0.38"):
        return ""
    if text not in VERSIONS:
        raise VersionError(f"Unknown data_parser plugin version: {value}")
    return text


@lru_cache(maxsize=16)
def schema(version: str, name: str) -> dict[str, Any]:
    """One command's resolved schema, read once (callers only read it)."""
    with open(_DIR / f"{version}.json", encoding="utf-8") as fh:
        return json.load(fh)[name]


def no_val(number: int | float | None, infinite: bool = False) -> dict[str, Any]:
    """Slurm's number with flags: ``None`` is unset."""
    return {"set": number is not None, "infinite": infinite,
            "number": 0 if number is None else number}


def skeleton(node: dict[str, Any]) -> Any:
    kind = node.get("type")
    if kind == "object":
        props = node.get("properties") or {}
        return {k: skeleton(v) for k, v in props.items()}
    if kind == "array":
        return []
    return {"string": "", "integer": 0, "number": 0, "boolean": False}.get(kind, None)


def _is_no_val(node: dict[str, Any]) -> bool:
    return set(node.get("properties") or {}) == {"set", "infinite", "number"}


# A schema's conformer is built once (per schema object, kept alive here so its id is never
# reused) and reused for every value: a closure per node of the schema, and each skeleton a
# compiled dict display, so fitting a value walks the value, not the schema.
_CONFORMERS: dict[int, tuple[dict[str, Any], Callable[[Any], Any]]] = {}


def conform(node: dict[str, Any], value: Any) -> Any:
    """``value`` fitted to the schema ``node`` (see the module's docstring)."""
    return conformer(node)(value)


def conformer(node: dict[str, Any]) -> Callable[[Any], Any]:
    """The function that fits a value to the schema ``node``, built on first use."""
    held = _CONFORMERS.get(id(node))
    if held is None or held[0] is not node:
        if len(_CONFORMERS) >= 512:  # schemas built per call by a caller: kept bounded
            _CONFORMERS.clear()
        held = _CONFORMERS[id(node)] = (node, _build(node))
    return held[1]


def _literal(value: Any) -> str:
    """Python source for a skeleton (dicts, empty lists, str, int, bool, None)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[]"
    return repr(value)


def _skeleton_maker(node: dict[str, Any]) -> Callable[[], Any]:
    """A function returning a fresh ``skeleton(node)`` each call."""
    shape = skeleton(node)
    if not isinstance(shape, (dict, list)):
        return lambda: shape
    return eval("lambda: " + _literal(shape), {})  # noqa: S307 (built from the schema's keys)


def _scalar(value: Any) -> Any:
    """A flagged number or an exit code where a plain one is due."""
    value = value.get("number", value.get("return_code", 0))
    return value.get("number", 0) if isinstance(value, dict) else value


def _build(node: dict[str, Any]) -> Callable[[Any], Any]:
    kind = node.get("type")
    if kind == "object":
        return _build_object(node)
    if kind == "array":
        items = node.get("items") or {}
        item = _build(items)
        same = _SCALARS.get(items.get("type"))  # a scalar of the right type is kept as is

        def fit_array(value: Any) -> Any:
            if not isinstance(value, list):
                value = [] if value in (None, "") else [value]
            if same is not None:
                return [v if type(v) is same else item(v) for v in value]
            return [item(v) for v in value]
        return fit_array
    if kind is None:  # the schema leaves it open (v0.0.40's job_res_nodes items)
        return _identity
    if kind == "string":
        def fit_string(value: Any) -> Any:
            if type(value) is str:
                return value
            if isinstance(value, dict):
                value = _scalar(value)
            return "" if value is None else str(value)
        return fit_string
    if kind in ("integer", "number"):
        cast = int if kind == "integer" else float

        def fit_number(value: Any) -> Any:
            if type(value) is cast:
                return value
            if isinstance(value, dict):
                value = _scalar(value)
            try:
                return cast(value)
            except (TypeError, ValueError):
                return 0
        return fit_number
    if kind == "boolean":
        def fit_boolean(value: Any) -> Any:
            if isinstance(value, dict):
                value = _scalar(value)
            return bool(value)
        return fit_boolean

    def fit_other(value: Any) -> Any:
        return _scalar(value) if isinstance(value, dict) else value
    return fit_other


def _identity(value: Any) -> Any:
    return value


_MISSING = object()
_SCALARS = {"string": str, "integer": int, "number": float, "boolean": bool}


def _build_object(node: dict[str, Any]) -> Callable[[Any], Any]:
    """A function compiled for this object schema: one dict display with every property in
    the schema's order, each the value's own fitted (a plain scalar of the right type as it
    is) or the property's skeleton where the value lacks it; the value's other keys left out.
    The same output as walking the schema per value, key for key and in the same order."""
    props = node.get("properties") or {}
    empty = _literal(skeleton(node))
    flagged = _is_no_val(node)
    if not props:
        return eval(f"lambda value: value if isinstance(value, dict) else {empty}", {})  # noqa: S307
    names: dict[str, Any] = {"M": _MISSING, "no_val": no_val}
    parts = []
    for i, (key, sub) in enumerate(props.items()):
        kind = sub.get("type")
        names[f"c{i}"] = _build(sub)
        get = f"(v := g({key!r}, M))"
        if kind in _SCALARS:
            names[f"t{i}"] = _SCALARS[kind]
            parts.append(f"{key!r}: (v if type({get}) is t{i} else "
                         f"({_literal(skeleton(sub))} if v is M else c{i}(v)))")
        elif kind is None:
            parts.append(f"{key!r}: (v if {get} is not M else None)")
        else:
            parts.append(f"{key!r}: ({_literal(skeleton(sub))} if {get} is M else c{i}(v))")
    head = ("    if flagged and isinstance(value, (int, float)) and not isinstance(value, bool):\n"
            "        value = no_val(value)\n") if flagged else ""
    source = (f"def fit(value):\n{head}"
              f"    if not isinstance(value, dict):\n        return {empty}\n"
              f"    g = value.get\n    return {{{', '.join(parts)}}}\n")
    names["flagged"] = flagged
    exec(compile(source, "<data_parser conformer>", "exec"), names)  # noqa: S102 (the schema's keys, repr'd)
    return names["fit"]


def meta(version: str, command: list[str], cluster: str) -> dict[str, Any]:
    major, minor, micro = RELEASES[version]
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return {"plugin": {"type": "", "name": "kiln", "data_parser": f"data_parser/{version}",
                       "accounting_storage": "accounting_storage/kiln"},
            "client": {"source": os.ttyname(0) if os.isatty(0) else "", "user": user,
                       "group": str(os.getgid())},
            "command": command,
            "slurm": {"version": {"major": major, "minor": minor, "micro": micro},
                      "release": f"{major}.{minor}.{micro}", "cluster": cluster}}


def document(version: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """The whole response of command ``name`` (squeue, sacct, nodes, partitions)."""
    return conform(schema(version, name), body)


def exit_code(code: int, signal: int = 0) -> dict[str, Any]:
    """A verbose exit code as DUMP_FUNC(PROCESS_EXIT_CODE) makes it: exited, its return code
    (SUCCESS or ERROR) and no signal; killed by a signal, SIGNALED with the signal's number
    and name (sig_num2name: 'KILL') and no return code."""
    if signal:
        return {"status": ["SIGNALED"], "return_code": no_val(None),
                "signal": {"id": no_val(signal), "name": signal_name(signal)}}
    return {"status": ["ERROR" if code else "SUCCESS"], "return_code": no_val(code),
            "signal": {"id": no_val(None), "name": ""}}


def signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


def tres_list(text: str) -> list[dict[str, Any]]:
    """'cpu=2,mem=200M,gres/gpu=1' -> [{"type": "cpu", "name": "", "id": 1, "count": 2}, ...]."""
    ids = {"cpu": 1, "mem": 2, "energy": 3, "node": 4, "billing": 5, "gres": 1001}
    out = []
    for part in (text or "").split(","):
        name, eq, count = part.partition("=")
        if not eq:
            continue
        kind, _, sub = name.partition("/")
        amount = count
        if kind == "mem":
            amount = _mem_mb(count)
        try:
            number = int(amount)
        except ValueError:
            number = 0
        out.append({"type": kind, "name": sub, "id": ids.get(kind, 0), "count": number})
    return out


def _mem_mb(text: str) -> int:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    if text and text[-1].upper() in units:
        try:
            return int(float(text[:-1]) * units[text[-1].upper()])
        except ValueError:
            return 0
    return int(text) if text.isdigit() else 0
