"""Wire messages between the CLI, schedd and agentd: one place both sides import.

A message is one ZeroMQ frame of JSON (after the ROUTER's identity frame)::

    request  {"v": 1, "op": "submit", "id": 7, "body": {...}}
    reply    {"v": 1, "id": 7, "ok": true, "body": {...}}
             {"v": 1, "id": 7, "ok": false, "error": {"code": "...", "message": "..."}}

Every request is size-capped and schema-checked on receipt (``decode_request``); anything wrong
raises ``ProtocolError`` whose code and message go back in an error reply, so no input can crash
a daemon. Standard library only: ``sbatch`` pays for every import.
"""

from __future__ import annotations

import json
from typing import Any

VERSION = 1
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # a whole message, script included
MAX_SCRIPT_BYTES = 4 * 1024 * 1024
MAX_ENV_VALUE = 128 * 1024  # one environment variable
MAX_STRING = 4096  # any other string field
MAX_LIST = 100_000
MAX_OUTPUT_DATA = 96 * 1024  # step_output's base64 chunk (the agent sends 48 KiB of output)
MAX_ARRAY_SIZE = 1001  # Slurm's MaxArraySize default

# Error codes: stable words a client can branch on. Messages are Slurm's texts where one exists.
E_BAD_REQUEST = "bad_request"
E_UNKNOWN_OP = "unknown_op"
E_PERMISSION = "permission_denied"
E_INVALID_JOB = "invalid_job_id"
E_INVALID = "invalid"
E_INTERNAL = "internal"


class ProtocolError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# --- schemas -------------------------------------------------------------------------------
# A body schema maps field -> (type or tuple of types, required). Unknown fields are refused:
# a typo in a client must not be silently ignored.
Schema = dict[str, tuple[Any, bool]]

_INT = int
_NUM = (int, float)
_STR = str
_LIST = list
_DICT = dict
_BOOL = bool
_OPT_INT = (int, type(None))

# The Job fields (schedd.model.Job) a submission may set; everything else is schedd's to decide.
# A literal, not derived from the data class: sbatch needs it without importing the model.
SUBMIT_FIELDS = frozenset({
    "account", "array_max_running", "array_spec", "begin_time", "command", "comment",
    "constraint", "cpus_per_task", "dependency", "environment", "exclude", "exclusive", "export",
    "extra", "gpu_type", "gpus", "gpus_per_node", "gpus_per_task", "held", "mail_type",
    "mail_user", "mem_per_cpu_mb", "mem_per_gpu_mb", "mem_per_node_mb", "name", "nice",
    "nodelist", "ntasks_per_node", "num_nodes", "num_nodes_max", "num_tasks", "open_mode",
    "partition", "qos", "requeue", "reservation", "script", "signal", "stderr", "stdout",
    "submit_host", "time_limit", "time_min", "workdir",
})

JOB_FILTER: Schema = {
    "job_ids": (_LIST, False),  # of str: "123", "123_4", "123_[1-5]"
    "users": (_LIST, False),
    "accounts": (_LIST, False),
    "partitions": (_LIST, False),
    "qos": (_LIST, False),
    "states": (_LIST, False),
    "names": (_LIST, False),
    "nodes": (_LIST, False),
    "all_states": (_BOOL, False),  # include finished jobs still within MinJobAge
}

CLIENT_OPS: dict[str, Schema] = {
    "ping": {},
    "submit": {
        "job": (_DICT, True),  # Job fields (see schedd.model.Job) as sbatch parsed them
        "test_only": (_BOOL, False),
    },
    "query_jobs": {**JOB_FILTER, "with_script": (_BOOL, False), "start_estimates": (_BOOL, False),
                   # Job attribute names: the reply is then {"columns", "values"}, not "jobs"
                   "fields": (_LIST, False)},
    "cancel": {**JOB_FILTER, "signal": (_STR, False), "batch_only": (_BOOL, False),
               "full": (_BOOL, False)},
    "hold": {"job_ids": (_LIST, True), "admin": (_BOOL, False)},
    "release": {"job_ids": (_LIST, True)},
    "update_job": {"job_ids": (_LIST, True), "changes": (_DICT, True)},
    "requeue": {"job_ids": (_LIST, True), "hold": (_BOOL, False)},
    "query_nodes": {"names": (_LIST, False)},
    "query_partitions": {"names": (_LIST, False)},
    "update_node": {"names": (_LIST, True), "changes": (_DICT, True)},
    # advance reservations (schedd/handlers/reservations.py); fields: schedd.domain.reservation.Request
    "create_reservation": {"reservation": (_DICT, True)},
    "update_reservation": {"name": (_STR, True), "changes": (_DICT, True)},
    "delete_reservation": {"name": (_STR, True)},
    "query_reservations": {"names": (_LIST, False)},
    "show_config": {},
    # sacct and sreport, answered from the ledger (schedd/handlers/accounting.py)
    "acct_jobs": {**JOB_FILTER, "start": ((int, float, type(None)), False),
                  "end": ((int, float, type(None)), False), "steps": (_BOOL, False),
                  "fields": (_LIST, False),  # row keys wanted (schedd.accounting); all if absent
                  "duplicates": (_BOOL, False)},  # sacct -D: a row per run of a requeued job
    "acct_report": {"start": (_NUM, True), "end": (_NUM, True)},
    # srun inside an allocation (job steps; see schedd/handlers/steps.py)
    "step_start": {"step": (_DICT, True)},  # see STEP_START_FIELDS
    # cursors: [[procid, "out"|"err", next offset wanted]] of forwarded output srun has written
    "step_wait": {"job_id": (_INT, True), "step_id": (_INT, True), "cursors": (_LIST, False)},
    # detach: srun leaves without reading the rest (its output is then discarded)
    "step_cancel": {"job_id": (_INT, True), "step_id": (_INT, True), "detach": (_BOOL, False)},
    # sacctmgr (verb add|modify|delete|show; entity account|user|qos|association) and sshare
    "sacctmgr": {"verb": (_STR, True), "entity": (_STR, True), "names": (_LIST, False),
                 "where": (_DICT, False), "set": (_DICT, False), "with_assoc": (_BOOL, False)},
    "sshare": {},
    # kiln why / kiln stats (schedd/handlers/insight.py)
    "job_why": {"job_id": (_STR, True)},
    "forecast_stats": {"since": (_NUM, False)},
}

# What srun asks for when it starts a step inside its job (identity from the socket).
STEP_START_FIELDS: Schema = {
    "job_id": (_INT, True),
    "argv": (_LIST, True),  # of str: the command and its arguments
    "environment": (_DICT, True),  # srun's own environment; schedd adds the per-task SLURM_*
    "cwd": (_STR, True),
    "ntasks": (_INT, False),  # 0/absent: the job's task count
    "nodes": (_INT, False),  # 0/absent: as many of the job's nodes as there are tasks
    "ntasks_per_node": (_INT, False),
    "cpus_per_task": (_INT, False),
    "gpus": (_INT, False),  # -G over the step
    "gpus_per_node": (_INT, False),
    "gpus_per_task": (_INT, False),
    "stdout": (_STR, False),  # --output pattern (%j %s %t %n %N %A %a %u %x %%); "" = forward
    "stderr": (_STR, False),
    "forward": (_BOOL, False),  # streams without a pattern go to srun (step_output/step_wait)
    "open_mode": (_STR, False),
    "name": (_STR, False),
}

AGENT_OPS: dict[str, Schema] = {
    # agent -> schedd
    "register": {"node": (_DICT, True), "running": (_LIST, True), "finished": (_LIST, False)},
    # running: [{"job_id", "generation", "checkpoint_age"?}]; checkpoint_age = seconds since
    # the job touched $KILN_CHECKPOINT_FILE (absent: never), for preemption's victim scores
    "heartbeat": {"node": (_STR, True), "running": (_LIST, False),
                  "steps": (_LIST, False)},  # ids of jobs with step tasks alive here
    "job_started": {"node": (_STR, True), "job_id": (_INT, True), "generation": (_INT, True),
                    "start_time": (_NUM, True), "pid": (_INT, False)},
    "job_ended": {"node": (_STR, True), "job_id": (_INT, True), "generation": (_INT, True),
                  "state": (_STR, True), "exit_code": (_INT, True), "exit_signal": (_INT, True),
                  "end_time": (_NUM, True), "stats": (_DICT, False)},
    # every task of a step on this node has ended; tasks: [[procid, exit_code, exit_signal]];
    # cpu: [user, system] seconds the node's tasks used, when the agent reaped them
    "step_ended": {"node": (_STR, True), "job_id": (_INT, True), "step_id": (_INT, True),
                   "state": (_STR, True), "tasks": (_LIST, True), "end_time": (_NUM, True),
                   "cpu": (_LIST, False)},
    # a chunk of a task's forwarded stdout ("out") or stderr ("err") at byte offset `offset`,
    # data base64; the reply says the offset schedd expects next ({"expected": N}), or
    # {"gone": true} when schedd no longer holds the step (the agent then drops the output)
    "step_output": {"node": (_STR, True), "job_id": (_INT, True), "step_id": (_INT, True),
                    "procid": (_INT, True), "stream": (_STR, True), "offset": (_INT, True),
                    "data": (_STR, True)},
}

SCHEDD_TO_AGENT_OPS: dict[str, Schema] = {
    "launch": {"launch": (_DICT, True)},  # see LAUNCH_FIELDS
    "signal": {"job_id": (_INT, True), "generation": (_INT, True), "signal": (_STR, True),
               "batch_only": (_BOOL, False)},
    "terminate": {"job_id": (_INT, True), "generation": (_INT, True), "state": (_STR, True)},
    "launch_step": {"step": (_DICT, True)},  # see STEP_LAUNCH_FIELDS
    # step_id absent: every step of the job on this node
    "terminate_steps": {"job_id": (_INT, True), "step_id": (_INT, False),
                        "state": (_STR, True)},
}

# One node's share of a step (agentd/steps.py runs it): its tasks, each with its own overlay
# of the environment (SLURM_PROCID, ...) and its output files, already expanded by schedd.
STEP_LAUNCH_FIELDS: Schema = {
    "job_id": (_INT, True),
    "step_id": (_INT, True),
    "user": (_STR, True),
    "uid": (_INT, True),
    "gid": (_INT, True),
    "argv": (_LIST, True),
    "cwd": (_STR, True),
    "environment": (_DICT, True),  # common to the node's tasks
    # of {"procid", "env", "stdout", "stderr", "append", "forward"?}; forward: the streams
    # ("out", "err") the agent sends to schedd (step_output) instead of writing to a path
    "tasks": (_LIST, True),
    "time_limit": (_OPT_INT, True),  # the job's, seconds from job_start; None = unlimited
    "job_start": (_NUM, True),
    "kill_wait": (_INT, True),
}

# The launch instruction schedd sends an agent: everything the node needs to start a batch job
# without asking again (the agent keeps it in its spool, so it survives a restart).
LAUNCH_FIELDS: Schema = {
    "job_id": (_INT, True),
    "generation": (_INT, True),
    "name": (_STR, True),
    "user": (_STR, True),
    "uid": (_INT, True),
    "gid": (_INT, True),
    "script": (_STR, True),
    "workdir": (_STR, True),
    "stdout": (_STR, True),  # already expanded to absolute paths by schedd (%j %x %u %A %a %N)
    "stderr": (_STR, True),
    "open_mode": (_STR, True),
    "environment": (_DICT, True),  # the full environment of the job, SLURM_* included
    "gpus": (_LIST, True),  # indices on this node
    "cpus": (_INT, True),
    "memory_mb": (_INT, True),
    "time_limit": (_OPT_INT, True),  # seconds, None = unlimited
    "kill_wait": (_INT, True),  # seconds between SIGTERM and SIGKILL
    "signal": (_STR, False),  # --signal as given, e.g. "B:USR1@120"
    "start_time": (_NUM, True),  # schedd's decision time; the agent measures its own limit
}


# --- envelope ------------------------------------------------------------------------------


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def request(op: str, body: dict[str, Any] | None = None, msg_id: int = 0) -> bytes:
    return encode({"v": VERSION, "op": op, "id": msg_id, "body": body or {}})


def reply_ok(msg_id: Any, body: dict[str, Any] | None = None) -> bytes:
    return encode({"v": VERSION, "id": msg_id, "ok": True, "body": body or {}})


def reply_error(msg_id: Any, code: str, message: str) -> bytes:
    return encode({"v": VERSION, "id": msg_id, "ok": False,
                   "error": {"code": code, "message": message}})


def decode(frame: bytes) -> dict[str, Any]:
    """Parse one frame into a dict, or raise ProtocolError (never anything else)."""
    if len(frame) > MAX_MESSAGE_BYTES:
        raise ProtocolError(E_BAD_REQUEST, f"message of {len(frame)} bytes is over the cap")
    try:
        msg = json.loads(frame)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(E_BAD_REQUEST, f"malformed message: {exc}") from None
    except RecursionError:  # "[[[[..." deep enough to exhaust the parser's stack
        raise ProtocolError(E_BAD_REQUEST, "malformed message: nested too deeply") from None
    if not isinstance(msg, dict):
        raise ProtocolError(E_BAD_REQUEST, "message is not an object")
    return msg


def decode_request(frame: bytes, ops: dict[str, Schema]) -> tuple[Any, str, dict[str, Any]]:
    """Check envelope and body of a request; returns (id, op, body)."""
    msg = decode(frame)
    msg_id = msg.get("id")
    if msg.get("v") != VERSION:
        raise ProtocolError(E_BAD_REQUEST, f"unsupported protocol version {msg.get('v')!r}")
    op = msg.get("op")
    if not isinstance(op, str) or op not in ops:
        raise ProtocolError(E_UNKNOWN_OP, f"unknown operation {str(op)[:64]!r}")
    body = msg.get("body", {})
    check(body, ops[op], op)
    return msg_id, op, body


def check(body: Any, schema: Schema, where: str) -> None:
    """Type-check and bound a body against its schema; raises ProtocolError."""
    if not isinstance(body, dict):
        raise ProtocolError(E_BAD_REQUEST, f"{where}: body is not an object")
    for name in body:
        if name not in schema:
            raise ProtocolError(E_BAD_REQUEST, f"{where}: unknown field {str(name)[:64]!r}")
    for name, (typ, required) in schema.items():
        if name not in body:
            if required:
                raise ProtocolError(E_BAD_REQUEST, f"{where}: missing field {name!r}")
            continue
        value = body[name]
        if isinstance(value, bool) and typ in (_INT, _NUM, _OPT_INT):
            raise ProtocolError(E_BAD_REQUEST, f"{where}: field {name!r} has the wrong type")
        if not isinstance(value, typ):
            raise ProtocolError(E_BAD_REQUEST, f"{where}: field {name!r} has the wrong type")
        bound(value, f"{where}.{name}")


def bound(value: Any, where: str, depth: int = 0) -> None:
    """Refuse over-long strings, huge lists and deep nesting anywhere inside a value."""
    if depth > 8:
        raise ProtocolError(E_BAD_REQUEST, f"{where}: nested too deeply")
    if isinstance(value, str):
        if where.endswith(".script"):
            limit = MAX_SCRIPT_BYTES
        elif where == "step_output.data":
            limit = MAX_OUTPUT_DATA
        elif ".environment" in where:
            limit = MAX_ENV_VALUE
        else:
            limit = MAX_STRING
        if len(value) > limit:
            raise ProtocolError(E_BAD_REQUEST, f"{where}: string longer than {limit}")
    elif isinstance(value, list):
        if len(value) > MAX_LIST:
            raise ProtocolError(E_BAD_REQUEST, f"{where}: list longer than {MAX_LIST}")
        for item in value:
            bound(item, where, depth + 1)
    elif isinstance(value, dict):
        if len(value) > MAX_LIST:
            raise ProtocolError(E_BAD_REQUEST, f"{where}: object too large")
        for k, v in value.items():
            bound(v, f"{where}.{k}", depth + 1)
