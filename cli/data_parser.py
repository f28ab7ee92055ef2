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


def schema(version: str, name: str) -> dict[str, Any]:
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


def conform(node: dict[str, Any], value: Any) -> Any:
    """``value`` fitted to the schema ``node`` (see the module's docstring)."""
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
                out[key] = conform(props[key], sub)
        return out
    if kind == "array":
        if not isinstance(value, list):
            value = [] if value in (None, "") else [value]
        return [conform(node.get("items") or {}, v) for v in value]
    if kind is None:  # the schema leaves it open (v0.0.40's job_res_nodes items)
        return value
    if isinstance(value, dict):  # a flagged number or an exit code where a plain one is due
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
