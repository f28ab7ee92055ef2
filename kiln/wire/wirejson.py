"""JSON for the wire through CPython's C accelerator (``_json``) alone.

``import json`` costs a command nearly as much as Python's own start: ``json.decoder`` imports
``re`` (and ``re`` imports ``enum``, ``functools``, ...) to compile two patterns. Every command
speaks JSON to schedd, so this module builds the same C encoder and scanner ``json`` builds,
without those imports. It produces and accepts exactly what ``json`` does:

- ``dumps`` is ``json.dumps(obj, separators=(",", ":"))`` (ASCII, NaN allowed, circular
  references refused), the C encoder ``json.dumps`` itself uses;
- ``loads`` reads a UTF-8 document with the C scanner ``json.loads`` itself uses; anything it
  does not take at once (a decoding error, surrounding whitespace, another encoding, malformed
  text) is handed to ``json.loads``, which then decides: the same result or the same error
  (``ValueError``), with json's own words.

Where ``_json`` is missing (not CPython), both are plain ``json``.
"""

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]

_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What the C scanner reads from a ``json.JSONDecoder``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__
    memo: "dict[str, str]" = {}


def _unserialisable(obj: object) -> None:
    raise TypeError(f"Object of type {obj.__class__.__name__} is not JSON serializable")


if _json is not None:
    _scan = _json.make_scanner(_Context())

    def _encoder() -> "Any":
        return _json.make_encoder({}, _unserialisable, _json.encode_basestring_ascii, None,
                                  ":", ",", False, False, True)

    def dumps(obj: "Any") -> str:
        """``json.dumps(obj, separators=(",", ":"))``."""
        if isinstance(obj, str):
            return _json.encode_basestring_ascii(obj)
        return "".join(_encoder()(obj, 0))

    def loads(data: "bytes | str") -> "Any":
        """``json.loads(data)``."""
        try:
            text = data.decode() if isinstance(data, (bytes, bytearray)) else data
            obj, end = _scan(text, 0)
            if end == len(text):
                return obj
        except (ValueError, StopIteration, RecursionError):
            pass
        return _slow_loads(data)
else:  # pragma: no cover
    def dumps(obj: "Any") -> str:
        return _slow_dumps(obj)

    def loads(data: "bytes | str") -> "Any":
        return _slow_loads(data)


def _slow_loads(data: "bytes | str") -> "Any":
    import json

    return json.loads(data)


def _slow_dumps(obj: "Any") -> str:  # pragma: no cover
    import json

    return json.dumps(obj, separators=(",", ":"))
