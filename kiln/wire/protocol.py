"""Wire messages between the CLI, schedd and agentd: one place both sides import.

A message is one ZeroMQ frame of JSON (after the ROUTER's identity frame)::

    request  {"v": 1, "op": "submit", "id": 7, "body": {...}}
    reply    {"v": 1, "id": 7, "ok": true, "body": {...}}
             {"v": 1, "id": 7, "ok": false, "error": {"code": "...", "message": "..."}}

Every request is size-capped and schema-checked on receipt (``decode_request``); anything wrong
raises ``ProtocolError`` whose code and message go back in an error reply, so no input can crash
a daemon. Here: the envelope, the limits and error codes, the check, and the names of the
fields a submission may set (``SUBMIT_FIELDS``, which sbatch needs); every op's schema (the
field types and bounds) is in ``kiln.wire.operations``, which only the daemons build. Standard
library only: ``sbatch`` pays for every import.
"""

from kiln.wire import wirejson

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from typing import Any

VERSION = 1
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a whole message, script included
MAX_SCRIPT_BYTES = 4 * 1024 * 1024
MAX_ENV_VALUE = 128 * 1024  # one environment variable
MAX_STRING = 4096  # any other string field
MAX_LIST = 100_000
MAX_OUTPUT_DATA = 96 * 1024  # step_output's base64 chunk (the agent sends 48 KiB of output)
MAX_ARRAY_SIZE = 1001  # Slurm's MaxArraySize default
MAX_ENV_VARS = 4096  # variables in one environment
MAX_ENV_BYTES = 1024 * 1024  # one job's environment, names and values together
MAX_KEY = 1024  # a variable's (or any map key's) name
MAX_SCRIPT_ARGS = 4096
MAX_JOB_REFS = 10_000  # ids in one request
MAX_TASKS = 100_000
NICE_LIMIT = 2147483645  # Slurm's NICE_OFFSET - 3: |--nice| at most this

# Error codes: stable words a client can branch on. Messages are Slurm's texts where one exists.
E_BAD_REQUEST = "bad_request"
E_UNKNOWN_OP = "unknown_op"
E_PERMISSION = "permission_denied"
E_INVALID_JOB = "invalid_job_id"
E_INVALID = "invalid"
E_INTERNAL = "internal"
E_AUTH = "auth_invalid"  # a token refused (forged, expired, another user's): HTTP 401
E_AGAIN = "again"  # Slurm's EAGAIN: not now (MaxJobCount), the same request may succeed later


class ProtocolError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# What a submission may set, by name: the Job fields (kiln.model.Job) sbatch parses, and
# nothing of what schedd decides (owner, state, priority, marks, the allocation). sbatch sends
# only these; their types and bounds are kiln.wire.operations.SUBMIT_SCHEMA's, which names the
# same fields (a unit test holds them equal): the schemas are not built in a command's start.
SUBMIT_FIELDS = frozenset({
    "account", "array_max_running", "array_spec", "begin_time", "command", "comment", "constraint",
    "cpus_per_task", "dependency", "environment", "exclude", "exclusive", "export", "gpu_type",
    "gpus", "gpus_per_node", "gpus_per_task", "held", "mail_type", "mail_user", "mem_per_cpu_mb",
    "mem_per_gpu_mb", "mem_per_node_mb", "name", "nice", "nodelist", "ntasks_per_node",
    "num_nodes", "num_nodes_max", "num_tasks", "open_mode", "partition", "qos", "requeue",
    "reservation", "script", "shards_per_node", "mps_per_node", "signal", "stderr", "stdout", "submit_host", "time_limit", "time_min",
    "workdir", "script_args", "alloc_sid", "restart_cost", "stdin", "wckey", "licenses",
    "interactive", "switches", "switch_wait", "segment", "exclusive_topo",
})

# --- envelope ------------------------------------------------------------------------------


def encode(obj: "dict[str, Any]") -> bytes:
    return wirejson.dumps(obj).encode()


def request(op: str, body: "dict[str, Any] | None" = None, msg_id: int = 0) -> bytes:
    return encode({"v": VERSION, "op": op, "id": msg_id, "body": body or {}})


def reply_ok(msg_id: "Any", body: "dict[str, Any] | None" = None) -> bytes:
    return encode({"v": VERSION, "id": msg_id, "ok": True, "body": body or {}})


def reply_error(msg_id: "Any", code: str, message: str) -> bytes:
    return encode({"v": VERSION, "id": msg_id, "ok": False,
                   "error": {"code": code, "message": message}})


def environment_bytes(environment: "dict[str, str]") -> int:
    """What an environment costs as ``NAME=value`` strings (sbatch checks this before sending,
    schedd at admission), in UTF-8 bytes. An ASCII environment (the usual one) is counted in
    characters without encoding each string (a submission's two counts took some 200 calls
    each); any other is encoded pair by pair, so a string UTF-8 cannot hold fails as before."""
    names, values = "".join(environment), "".join(environment.values())
    if names.isascii() and values.isascii():
        return len(names) + len(values) + 2 * len(environment)
    return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in environment.items())


def decode(frame: bytes) -> "dict[str, Any]":
    """Parse one frame into a dict, or raise ProtocolError (never anything else)."""
    if len(frame) > MAX_MESSAGE_BYTES:
        raise ProtocolError(E_BAD_REQUEST, f"message of {len(frame)} bytes is over the cap")
    try:
        msg = wirejson.loads(frame)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(E_BAD_REQUEST, f"malformed message: {exc}") from None
    except RecursionError:  # "[[[[..." deep enough to exhaust the parser's stack
        raise ProtocolError(E_BAD_REQUEST, "malformed message: nested too deeply") from None
    if not isinstance(msg, dict):
        raise ProtocolError(E_BAD_REQUEST, "message is not an object")
    return msg


def decode_request(frame: bytes, ops: "dict[str, Schema]") -> "tuple[Any, str, dict[str, Any]]":
    """Check envelope and body of a request; returns (id, op, body)."""
    return check_request(decode(frame), ops)


def check_request(msg: "dict[str, Any]",
                  ops: "dict[str, Schema]") -> "tuple[Any, str, dict[str, Any]]":
    """decode_request for a frame already decoded (``decode``): envelope and body checked."""
    msg_id = msg.get("id")
    if msg.get("v") != VERSION:
        raise ProtocolError(E_BAD_REQUEST, f"unsupported protocol version {msg.get('v')!r}")
    op = msg.get("op")
    if not isinstance(op, str) or op not in ops:
        raise ProtocolError(E_UNKNOWN_OP, f"unknown operation {str(op)[:64]!r}")
    body = msg.get("body", {})
    check(body, ops[op], op)
    return msg_id, op, body


# --- the check -------------------------------------------------------------------------------
# ``check`` walks a body against its op's schema, a dict of ``Field`` (the schemas themselves,
# every op's, are kiln.wire.operations').


class Field:
    """One field's type and bounds. ``kind``: str, int, num, bool, list, obj (fixed keys:
    ``schema``), map (free string keys, values ``items``), tuple (fixed positions ``parts``).
    ``nullable``: None is allowed; ``lo``/``hi`` bound numbers; ``size`` bounds a string's
    length or a list's or map's items; ``choices`` lists the allowed strings."""

    __slots__ = ("kind", "required", "nullable", "lo", "hi", "size", "items", "schema",
                 "parts", "choices")

    def __init__(self, kind: str, required: bool = False, nullable: bool = False,
                 lo: "float | None" = None, hi: "float | None" = None, size: int = 0,
                 items: "Field | None" = None, schema: "Schema | None" = None,
                 parts: "tuple[Field, ...]" = (), choices: "frozenset[str] | None" = None):
        self.kind, self.required, self.nullable = kind, required, nullable
        self.lo, self.hi, self.size = lo, hi, size
        self.items, self.schema, self.parts, self.choices = items, schema, parts, choices


Schema = dict[str, Field]


def check(body: "Any", schema: "Schema", where: str) -> None:
    """Type-check and bound a body against its schema; raises ProtocolError naming the field."""
    _check_obj(body, schema, where)


def _check_obj(value: "Any", schema: "Schema", where: str) -> None:
    if not isinstance(value, dict):
        raise ProtocolError(E_BAD_REQUEST, f"{where}: not an object")
    for name in value:
        if name not in schema:
            raise ProtocolError(E_BAD_REQUEST, f"{where}: unknown field {str(name)[:64]!r}")
    for name, spec in schema.items():
        if name in value:
            _check_value(value[name], spec, f"{where}.{name}")
        elif spec.required:
            raise ProtocolError(E_BAD_REQUEST, f"{where}: missing field {name!r}")


def _wrong(where: str, what: str) -> "ProtocolError":
    return ProtocolError(E_BAD_REQUEST, f"{where}: {what}")


def _check_value(value: "Any", spec: "Field", where: str) -> None:
    if value is None:
        if spec.nullable:
            return
        raise _wrong(where, "may not be null")
    kind = spec.kind
    if kind == "str":
        if not isinstance(value, str):
            raise _wrong(where, "has the wrong type (a string is needed)")
        if len(value) > spec.size:
            raise _wrong(where, f"string longer than {spec.size}")
        if spec.choices is not None and value not in spec.choices:
            raise _wrong(where, f"{value[:64]!r} is not one of {', '.join(map(repr, sorted(spec.choices)))}")
    elif kind in ("int", "num"):
        if isinstance(value, bool) or not isinstance(value, int if kind == "int" else (int, float)):
            raise _wrong(where, "has the wrong type (a number is needed)")
        if value != value or not spec.lo <= value <= spec.hi:  # NaN fails the first test
            raise _wrong(where, "is out of range")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise _wrong(where, "has the wrong type (true or false is needed)")
    elif kind == "list":
        if not isinstance(value, list):
            raise _wrong(where, "has the wrong type (a list is needed)")
        if len(value) > spec.size:
            raise _wrong(where, f"list longer than {spec.size}")
        for item in value:
            _check_value(item, spec.items, where)  # type: ignore[arg-type]
    elif kind == "obj":
        _check_obj(value, spec.schema or {}, where)
    elif kind == "map":
        if not isinstance(value, dict):
            raise _wrong(where, "has the wrong type (an object is needed)")
        if len(value) > spec.size:
            raise _wrong(where, f"more than {spec.size} entries")
        items: Field = spec.items  # type: ignore[assignment]
        # a map of plain strings (an environment: tens of entries a submission) takes a string
        # within its size here, without a call and the entry's name for an error message each
        plain = items.size if items.kind == "str" and items.choices is None else -1
        for key, item in value.items():
            if not key or len(key) > MAX_KEY or "\0" in key:
                raise _wrong(where, f"bad key {str(key)[:64]!r}")
            if isinstance(item, str) and len(item) <= plain:
                continue
            _check_value(item, items, f"{where}.{key[:64]}")
    elif kind == "tuple":
        if not isinstance(value, list) or len(value) != len(spec.parts):
            raise _wrong(where, f"has the wrong type (a list of {len(spec.parts)} is needed)")
        for item, part in zip(value, spec.parts, strict=True):
            _check_value(item, part, where)
    else:  # pragma: no cover - a schema written wrong
        raise _wrong(where, f"unknown kind {kind}")
