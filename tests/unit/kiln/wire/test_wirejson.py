"""kiln.wire.wirejson writes and reads exactly what json does: same text, same values, and for a
bad document the same error with the same words."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kiln.wire import wirejson

DOCS = [
    {"v": 1, "op": "submit", "id": 7, "body": {"job": {"script": "#!/bin/sh\ntrue\n",
                                                      "environment": {"A": "é☃\"\\\t"}}}},
    [], {}, "text", 0, -12, 2**70, 1.5, -0.0, 1e300, None, True,
    {"inf": float("inf"), "nan": float("nan"), "lone": "\ud800", 3: "int key"},
]


@pytest.mark.parametrize("doc", DOCS, ids=range(len(DOCS)))
def test_the_same_text_and_values_as_json(doc: object) -> None:
    text = wirejson.dumps(doc)
    assert text == json.dumps(doc, separators=(",", ":"))
    assert repr(wirejson.loads(text.encode())) == repr(json.loads(text))


BAD = [b"", b"  ", b"{", b"[1,]", b'{"a":1} x', b"\xff", b'"\x01"', b"\xef\xbb\xbf{}",
       b'"\\ud8"', b"[" * 100_000, "{\"a\": 1}".encode("utf-16")]


@pytest.mark.parametrize("frame", BAD, ids=range(len(BAD)))
def test_a_bad_or_unusual_document_gets_jsons_own_answer(frame: bytes) -> None:
    def outcome(loads) -> tuple[str, str]:
        try:
            return "ok", repr(loads(frame))
        except (ValueError, RecursionError) as exc:
            return type(exc).__name__, str(exc)

    assert outcome(wirejson.loads) == outcome(json.loads)


def test_whitespace_around_a_document_is_read_as_json_reads_it() -> None:
    assert wirejson.loads(b' {"a": [1, 2]}\n') == {"a": [1, 2]}


def test_what_json_cannot_hold_is_refused_as_json_refuses_it() -> None:
    with pytest.raises(TypeError, match="Object of type object is not JSON serializable"):
        wirejson.dumps({"a": object()})
    loop: dict[str, object] = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="Circular reference detected"):
        wirejson.dumps(loop)


def test_a_command_talks_json_without_importing_json_or_re() -> None:
    """The point of the module: sbatch's imports (and the client's) add neither json nor re to
    what the interpreter loaded at its start (an editable install's finder loads re itself)."""
    code = ("import sys; before = set(sys.modules); import cli.sbatch, cli.core.client; "
            "print(sorted({'json', 're', 'typing', 'socket'} & (set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
