"""Wire messages between the CLI, schedd and agentd: one place both sides import.

A message is one ZeroMQ frame of JSON (after the ROUTER's identity frame)::

    request  {"v": 1, "op": "submit", "id": 7, "body": {...}}
    reply    {"v": 1, "id": 7, "ok": true, "body": {...}}
             {"v": 1, "id": 7, "ok": false, "error": {"code": "...", "message": "..."}}

Every request is size-capped and schema-checked on receipt (``decode_request``); anything wrong
raises ``ProtocolError`` whose code and message go back in an error reply, so no input can crash
a daemon. Standard library only: ``sbatch`` pays for every import.
"""

from schedd import wirejson

# Annotations are written as strings rather than through `from __future__ import annotations`:
# importing `__future__` costs every command ~0.1 ms of CPU (docs/benchmarks.md, issue 13).
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
E_AGAIN = "again"  # Slurm's EAGAIN: not now (MaxJobCount), the same request may succeed later


class ProtocolError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# --- schemas -------------------------------------------------------------------------------
# The trust boundary is an allow-list: every field a client (or an agent) may send in every op
# is named here, with its type and bounds. ``check`` refuses anything else with a one-line
# error that names the field; nothing is silently dropped. State the server owns (admin
# priority, the limit an agent enforces, lifecycle marks, restart counts, samples) is named in
# no client schema, so no request can write it.


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

_BIG = 2**62  # any stored integer stays well inside 64 bits


def Str(size: int = MAX_STRING, required: bool = False, nullable: bool = False,
        choices: "Any" = None) -> "Field":
    return Field("str", required, nullable, size=size,
                 choices=frozenset(choices) if choices is not None else None)


def Int(lo: int = -_BIG, hi: int = _BIG, required: bool = False, nullable: bool = False) -> "Field":
    return Field("int", required, nullable, lo=lo, hi=hi)


def Num(lo: float = -1e18, hi: float = 1e18, required: bool = False,
        nullable: bool = False) -> "Field":
    return Field("num", required, nullable, lo=lo, hi=hi)


def Bool(required: bool = False) -> "Field":
    return Field("bool", required)


def List(items: "Field", size: int = MAX_LIST, required: bool = False) -> "Field":
    return Field("list", required, size=size, items=items)


def Obj(schema: "Schema", required: bool = False, nullable: bool = False) -> "Field":
    return Field("obj", required, nullable, schema=schema)


def Map(items: "Field", size: int = MAX_LIST, required: bool = False) -> "Field":
    return Field("map", required, size=size, items=items)


def Tuple(*parts: "Field", required: bool = False) -> "Field":
    return Field("tuple", required, parts=parts)


_ID = Str(64)  # a job id as a user writes it: "123", "123_4", "123_[1-5]"
_NAME = Str(256)  # a user, account, partition, QOS, node or reservation name
_NAMES = List(_NAME)
_UINT = Int(0)
_TIME = Num(0, 1e13)  # a POSIX time, seconds
_INT32 = 2**31 - 1  # what the ledger's INTEGER columns hold (PostgreSQL's int4)
_LIMIT = Int(1, _INT32, nullable=True)  # a time limit, seconds; None = UNLIMITED
_COUNT = Int(0, _INT32)  # a resource count (0 = not given)
_MEM = Int(0, _INT32)  # MiB
ENVIRONMENT = Map(Str(MAX_ENV_VALUE), size=MAX_ENV_VARS)

# What a submission may set: the Job fields (schedd.model.Job) sbatch parses, and nothing of
# what schedd decides (owner, state, priority, marks, the allocation). A literal, not derived
# from the data class: sbatch needs it without importing the model.
SUBMIT_SCHEMA: "Schema" = {
    "account": _NAME, "array_max_running": _COUNT, "array_spec": Str(),
    "begin_time": _TIME, "command": Str(), "comment": Str(), "constraint": Str(),
    "cpus_per_task": _COUNT, "dependency": Str(), "environment": ENVIRONMENT,
    "exclude": Str(), "exclusive": Bool(), "export": Str(MAX_ENV_VALUE),
    "gpu_type": Str(64), "gpus": _COUNT, "gpus_per_node": _COUNT, "gpus_per_task": _COUNT,
    "held": Str(8, choices=("", "user")), "mail_type": Str(), "mail_user": Str(),
    "mem_per_cpu_mb": _MEM, "mem_per_gpu_mb": _MEM, "mem_per_node_mb": _MEM,
    "name": Str(), "nice": Int(-NICE_LIMIT, NICE_LIMIT), "nodelist": Str(),
    "ntasks_per_node": _COUNT, "num_nodes": _COUNT, "num_nodes_max": _COUNT,
    "num_tasks": _COUNT, "open_mode": Str(16, choices=("truncate", "append")),
    "partition": _NAME, "qos": _NAME, "requeue": Bool(), "reservation": _NAME,
    "script": Str(MAX_SCRIPT_BYTES), "signal": Str(64), "stderr": Str(), "stdout": Str(),
    "submit_host": _NAME, "time_limit": _LIMIT, "time_min": _LIMIT, "workdir": Str(),
    "script_args": List(Str(), size=MAX_SCRIPT_ARGS), "alloc_sid": Int(0, _INT32),
    "restart_cost": Int(0, _INT32, nullable=True), "stdin": Str(), "wckey": _NAME,
    "licenses": Str(), "interactive": Bool(),  # salloc: an allocation without a batch script
}
SUBMIT_FIELDS = frozenset(SUBMIT_SCHEMA)

# What scontrol update job may change (who may change what: handlers/jobcontrol.py).
UPDATE_JOB_SCHEMA: "Schema" = {
    "time_limit": _LIMIT, "time_min": _LIMIT, "nice": Int(-NICE_LIMIT, NICE_LIMIT),
    "priority": Int(0, 2**32), "name": Str(), "comment": Str(), "requeue": Bool(),
    "account": _NAME, "qos": _NAME, "partition": _NAME, "begin_time": _TIME,
    "dependency": Str(), "num_nodes": _COUNT, "num_tasks": _COUNT, "cpus_per_task": _COUNT,
    "mem_per_node_mb": _MEM, "nodelist": Str(), "exclude": Str(), "constraint": Str(),
    "reservation": _NAME,
}

# scontrol create/update reservation (schedd.domain.reservation.Request; +=/-= on update)
RESERVATION_SCHEMA: "Schema" = {
    "name": _NAME, "start_time": Num(0, 1e13, nullable=True),
    "end_time": Num(0, 1e13, nullable=True), "duration": Int(0, 2**40, nullable=True),
    "nodes": _NAMES, "node_cnt": _COUNT, "gpus": _COUNT, "users": _NAMES,
    "accounts": _NAMES, "flags": List(Str(64), size=64), "partition": _NAME,
}
RESERVATION_CHANGES: "Schema" = {
    **RESERVATION_SCHEMA, "add_users": _NAMES, "remove_users": _NAMES,
    "add_accounts": _NAMES, "remove_accounts": _NAMES,
}

JOB_FILTER: "Schema" = {
    "job_ids": List(_ID, size=MAX_JOB_REFS),  # "123", "123_4", "123_[1-5]"
    "users": _NAMES,
    "accounts": _NAMES,
    "partitions": _NAMES,
    "qos": _NAMES,
    "states": List(Str(32), size=64),
    "names": List(Str()),
    "nodes": _NAMES,
    "all_states": Bool(),  # include finished jobs still within MinJobAge
}

# A terminal's size, [rows, columns] (srun --pty; TIOCSWINSZ on the node).
WINSIZE = Tuple(Int(1, 9999), Int(1, 9999))
MAX_INPUT_BYTES = 64 * 1024  # of terminal input per step_input (base64: 4/3 of that)
_INPUT = Str(MAX_INPUT_BYTES * 4 // 3 + 4)

# What srun asks for when it starts a step inside its job (identity from the socket).
STEP_START_FIELDS: "Schema" = {
    "job_id": Int(0, required=True),
    "argv": List(Str(MAX_ENV_VALUE), size=MAX_SCRIPT_ARGS, required=True),
    "environment": Map(Str(MAX_ENV_VALUE), size=MAX_ENV_VARS, required=True),
    "cwd": Str(required=True),
    "ntasks": _COUNT,  # 0/absent: the job's task count
    "nodes": _COUNT,  # 0/absent: as many of the job's nodes as there are tasks
    "ntasks_per_node": _COUNT,
    "cpus_per_task": _COUNT,
    "gpus": _COUNT,  # -G over the step
    "gpus_per_node": _COUNT,
    "gpus_per_task": _COUNT,
    "stdout": Str(),  # --output pattern (%j %s %t %n %N %A %a %u %x %%); "" = forward
    "stderr": Str(),
    "forward": Bool(),  # streams without a pattern go to srun (step_output/step_wait)
    "open_mode": Str(16, choices=("truncate", "append")),
    "name": Str(),
    "pty": Bool(),  # srun --pty: task 0 under a pseudo-terminal, its input from srun
    "winsize": WINSIZE,  # the terminal's [rows, columns] at the start
}

CLIENT_OPS: "dict[str, Schema]" = {
    "ping": {},
    "submit": {
        "job": Obj(SUBMIT_SCHEMA, required=True),  # Job fields as sbatch parsed them
        "test_only": Bool(),
        # sbatch --priority: an operator's fixed priority (Job.admin_priority, server-owned:
        # the handler checks the caller); not a Job field a submission writes
        "priority": Int(0, 2**32 - 1),
    },
    "query_jobs": {**JOB_FILTER, "with_script": Bool(), "start_estimates": Bool(),
                   # Job attribute names: the reply is then {"columns", "values"}, not "jobs"
                   "fields": List(Str(64), size=200)},
    "cancel": {**JOB_FILTER, "signal": Str(32), "batch_only": Bool(), "full": Bool()},
    "hold": {"job_ids": List(_ID, size=MAX_JOB_REFS, required=True), "admin": Bool()},
    "release": {"job_ids": List(_ID, size=MAX_JOB_REFS, required=True)},
    "update_job": {"job_ids": List(_ID, size=MAX_JOB_REFS, required=True),
                   "changes": Obj(UPDATE_JOB_SCHEMA, required=True)},
    "requeue": {"job_ids": List(_ID, size=MAX_JOB_REFS, required=True), "hold": Bool()},
    "query_nodes": {"names": _NAMES},
    "query_partitions": {"names": _NAMES},
    "query_licenses": {"names": _NAMES},
    "update_node": {"names": List(_NAME, required=True),
                    "changes": Obj({"state": Str(32), "reason": Str()}, required=True)},
    # advance reservations (schedd/handlers/resv.py)
    "create_reservation": {"reservation": Obj(RESERVATION_SCHEMA, required=True)},
    "update_reservation": {"name": Str(256, required=True),
                           "changes": Obj(RESERVATION_CHANGES, required=True)},
    "delete_reservation": {"name": Str(256, required=True)},
    "query_reservations": {"names": _NAMES},
    "show_config": {},
    # sacct and sreport, answered from the ledger (schedd/handlers/sacct.py)
    "acct_jobs": {**JOB_FILTER, "start": Num(nullable=True), "end": Num(nullable=True),
                  "steps": Bool(),
                  "fields": List(Str(64), size=200),  # row keys wanted; all if absent
                  "duplicates": Bool()},  # sacct -D: a row per run of a requeued job
    "acct_report": {"start": Num(required=True), "end": Num(required=True)},
    # srun inside an allocation (job steps; see schedd/handlers/srun.py)
    "step_start": {"step": Obj(STEP_START_FIELDS, required=True)},
    # cursors: [[procid, "out"|"err", next offset wanted]] of forwarded output srun has written
    "step_wait": {"job_id": Int(0, required=True), "step_id": Int(0, required=True),
                  "cursors": List(Tuple(Int(0), Str(8, choices=("out", "err")), Int(0)),
                                  size=MAX_TASKS * 2),
                  # peek: the batch script of an srun outside an allocation waits for its
                  # step; it reads the step's end, never its output (srun's to take)
                  "peek": Bool()},
    # detach: srun leaves without reading the rest (its output is then discarded)
    "step_cancel": {"job_id": Int(0, required=True), "step_id": Int(0, required=True),
                    "detach": Bool()},
    # sattach: a running step's output from now on, through a tap of its own (0: attach)
    "step_attach": {"job_id": Int(0, required=True), "step_id": Int(0, required=True),
                    "tap": Int(0, _INT32)},
    # srun --pty: terminal input (base64) at its offset in the input stream, and/or a new size
    "step_input": {"job_id": Int(0, required=True), "step_id": Int(0, required=True),
                   "offset": Int(0, 2**62), "data": _INPUT, "winsize": WINSIZE},
    # salloc (schedd/handlers/salloc.py): the granted allocation's environment, and its end
    # with the exit status of salloc's command
    "allocation": {"job_id": Int(0, required=True)},
    "relinquish": {"job_id": Int(0, required=True), "exit_code": Int(0, 255),
                   "exit_signal": Int(0, 128)},
    # sacctmgr (verb add|modify|delete|show; entity account|user|qos|association) and sshare
    "sacctmgr": {"verb": Str(16, required=True), "entity": Str(32, required=True),
                 "names": _NAMES, "where": Map(Str(), size=64), "set": Map(Str(), size=64),
                 "with_assoc": Bool()},
    "sshare": {},
    # kiln why / kiln stats (schedd/handlers/insight.py)
    "job_why": {"job_id": Str(64, required=True)},
    # sstat: running steps' live usage; sprio: pending jobs' priority factors; sdiag
    "job_stat": {"job_ids": List(_ID, size=MAX_JOB_REFS, required=True)},
    "job_priority": {"job_ids": List(_ID, size=MAX_JOB_REFS), "users": _NAMES},
    "sched_diag": {},
    "forecast_stats": {"since": Num()},
}

_GPU = Obj({"index": Int(0, 4096, required=True), "uuid": Str(128, required=True),
            "model": Str(128, required=True), "memory_mb": _MEM, "island": Int(0, 4096),
            # the CPU ids near it (NVML's affinity); the scheduler prefers them
            "cpus": List(Int(0, 2**20), size=4096)})
_NODE = {"name": Str(256, required=True), "cpus": Int(0, 2**20, required=True),
         "memory_mb": Int(0, _INT32, required=True), "gpus": List(_GPU, size=4096),
         "features": List(Str(256), size=256), "address": Str(256), "boot_time": _TIME,
         # containment (agentd/cgroups.py): scontrol's line, and what is not enforced
         "cgroup": Str(256), "cgroup_reason": Str(256),
         "slurmd_start_time": _TIME}
# checkpoint_age = seconds since the job touched $KILN_CHECKPOINT_FILE (absent: never), for
# preemption's victim scores
# usage = the batch step's live figures (schedd.slurm.stats.USAGE_KEYS), for sstat
_USAGE = Map(Num(0), size=64)
_RUNNING = Obj({"job_id": Int(0, required=True), "generation": Int(0, required=True),
                "checkpoint_age": Num(0), "usage": _USAGE})
_ENDED: "Schema" = {"node": Str(256, required=True), "job_id": Int(0, required=True),
                  "generation": Int(0, required=True), "state": Str(32, required=True),
                  "exit_code": Int(0, 255, required=True),
                  "exit_signal": Int(0, 128, required=True),
                  "end_time": Num(0, 1e13, required=True),
                  "stats": Map(Num(0), size=64),
                  "error": Str(512)}  # why the agent could not start the job

AGENT_OPS: "dict[str, Schema]" = {
    # agent -> schedd
    "register": {"node": Obj(_NODE, required=True), "running": List(_RUNNING, required=True),
                 "finished": List(Obj(_ENDED))},
    "heartbeat": {"node": Str(256, required=True), "running": List(_RUNNING),
                  "steps": List(Int(0)),  # ids of jobs with step tasks alive here
                  # a job's processes outlived UnkillableStepTimeout: drain with this reason
                  "drain": Str(256),
                  # srun steps' live figures on this node, for sstat
                  "step_usage": List(Obj({"job_id": Int(0, required=True),
                                          "step_id": Int(0, required=True),
                                          "usage": _USAGE}), size=MAX_JOB_REFS)},
    "job_started": {"node": Str(256, required=True), "job_id": Int(0, required=True),
                    "generation": Int(0, required=True), "start_time": Num(required=True),
                    "pid": Int(0)},
    "job_ended": _ENDED,
    # every task of a step on this node has ended; tasks: [[procid, exit_code, exit_signal]];
    # cpu: [user, system] seconds the node's tasks used, when the agent reaped them
    "step_ended": {"node": Str(256, required=True), "job_id": Int(0, required=True),
                   "step_id": Int(0, required=True), "state": Str(32, required=True),
                   "tasks": List(Tuple(Int(0), Int(-1, 255), Int(0, 128)), size=MAX_TASKS,
                                 required=True),
                   "end_time": Num(required=True), "cpu": Tuple(Num(0), Num(0))},
    # a chunk of a task's forwarded stdout ("out") or stderr ("err") at byte offset `offset`,
    # data base64; the reply says the offset schedd expects next ({"expected": N}), or
    # {"gone": true} when schedd no longer holds the step (the agent then drops the output)
    "step_output": {"node": Str(256, required=True), "job_id": Int(0, required=True),
                    "step_id": Int(0, required=True), "procid": Int(0, required=True),
                    "stream": Str(8, required=True, choices=("out", "err")),
                    "offset": Int(0, required=True), "data": Str(MAX_OUTPUT_DATA, required=True)},
    # the relay (agentd/relay.py, schedd/relay.py): a command on this node asked `request` (its
    # frame, as text); uid/gid/pid are what the agent's socket read from the kernel. The reply
    # is {"size": bytes of the whole reply, "handle": N, "more": bool} and, as a second frame,
    # the reply's first chunk; `relay_next` asks for the next chunk of reply `handle`
    "relay": {"node": Str(256, required=True), "uid": Int(0, 2**32 - 1, required=True),
              "gid": Int(0, 2**32 - 1, required=True), "pid": Int(0, 2**32 - 1),
              "request": Str(MAX_MESSAGE_BYTES, required=True)},
    "relay_next": {"node": Str(256, required=True), "handle": Int(0, required=True)},
    # a relay-only agent (a login node) saying it is there: the reply is its liveness
    "relay_hello": {"node": Str(256, required=True)},
}

# One node's share of a step (agentd/step_tasks.py runs it): its tasks, each with its own
# overlay of the environment (SLURM_PROCID, ...) and its output files, already expanded.
_TASK = Obj({"procid": Int(0, required=True), "env": Map(Str(MAX_ENV_VALUE), size=64),
             "stdout": Str(required=True), "stderr": Str(required=True),
             "append": Bool(), "forward": List(Str(8, choices=("out", "err")), size=2)})
STEP_LAUNCH_FIELDS: "Schema" = {
    "job_id": Int(0, required=True),
    "step_id": Int(0, required=True),
    "user": Str(256, required=True),
    "uid": Int(0, 2**32, required=True),
    "gid": Int(0, 2**32, required=True),
    "argv": List(Str(MAX_ENV_VALUE), size=MAX_SCRIPT_ARGS, required=True),
    "cwd": Str(required=True),
    "environment": Map(Str(MAX_ENV_VALUE), size=MAX_ENV_VARS, required=True),
    "tasks": List(_TASK, size=MAX_TASKS, required=True),
    "time_limit": Int(0, _INT32, required=True, nullable=True),  # from job_start; None = none
    "job_start": Num(required=True),
    "kill_wait": Int(-1, _INT32, required=True),
    "pty": Bool(),  # task 0 (this node's first) under a pseudo-terminal
    "winsize": WINSIZE,
    # what the job holds on this node: the cgroup's limits (its cpuset, memory, GPUs) where
    # no batch script of the job runs (the job's other nodes); absent from an older schedd
    "allocation": Obj({"cpus": Int(0, 2**20, required=True),
                       "memory_mb": Int(0, _INT32, required=True),
                       "gpus": List(Int(0, 4096), size=4096),
                       "cpu_ids": List(Int(0, 2**20), size=4096)}),
}

# The launch instruction schedd sends an agent: everything the node needs to start a batch job
# without asking again (the agent keeps it in its spool, so it survives a restart).
LAUNCH_FIELDS: "Schema" = {
    "job_id": Int(0, required=True),
    "generation": Int(0, required=True),
    "name": Str(required=True),
    "user": Str(256, required=True),
    "uid": Int(0, 2**32, required=True),
    "gid": Int(0, 2**32, required=True),
    "script": Str(MAX_SCRIPT_BYTES, required=True),
    "workdir": Str(required=True),
    "stdout": Str(required=True),  # already expanded to absolute paths by schedd
    "stderr": Str(required=True),
    "open_mode": Str(16, required=True),
    "environment": Map(Str(MAX_ENV_VALUE), size=MAX_ENV_VARS, required=True),
    "gpus": List(Int(0, 4096), size=4096, required=True),  # indices on this node
    "cpus": Int(0, 2**20, required=True),
    # the CPU ids the scheduler chose on this node (the job's cpuset); absent or [] from a
    # schedd that does not choose them: the agent then picks its own
    "cpu_ids": List(Int(0, 2**20), size=4096),
    "memory_mb": Int(0, _INT32, required=True),
    # the limit schedd admitted for this run (Job.launched_limit); None = unlimited
    "time_limit": Int(0, _INT32, required=True, nullable=True),
    "kill_wait": Int(-1, _INT32, required=True),  # seconds between SIGTERM and SIGKILL
    "signal": Str(64),  # --signal as given, e.g. "B:USR1@120"
    "start_time": Num(required=True),  # schedd's decision time; the agent measures its own
    # fencing: the job's partition's on_isolation ("kill" or "keep") and fence_timeout (s)
    "on_isolation": Str(8),
    "fence_timeout": Num(0, 1e9),
    "args": List(Str(), size=MAX_SCRIPT_ARGS),  # the script's arguments (sbatch script.sh a b)
    "fence_kill_wait": Int(0, _INT32),  # seconds from a fence's SIGTERM to its SIGKILL
}

SCHEDD_TO_AGENT_OPS: "dict[str, Schema]" = {
    "launch": {"launch": Obj(LAUNCH_FIELDS, required=True)},
    "signal": {"job_id": Int(0, required=True), "generation": Int(0, required=True),
               "signal": Str(32, required=True), "batch_only": Bool(), "full": Bool()},
    "terminate": {"job_id": Int(0, required=True), "generation": Int(0, required=True),
                  "state": Str(32, required=True)},
    "launch_step": {"step": Obj(STEP_LAUNCH_FIELDS, required=True)},
    # step_id absent: every step of the job on this node
    "terminate_steps": {"job_id": Int(0, required=True), "step_id": Int(0),
                        "state": Str(32, required=True)},
    # srun --pty's input for a step's terminal (at its offset), and/or the terminal's new size
    "step_input": {"job_id": Int(0, required=True), "step_id": Int(0, required=True),
                   "offset": Int(0, 2**62), "data": _INPUT, "winsize": WINSIZE},
}


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
    schedd at admission), in UTF-8 bytes."""
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
        for key, item in value.items():
            if not key or len(key) > MAX_KEY or "\0" in key:
                raise _wrong(where, f"bad key {str(key)[:64]!r}")
            _check_value(item, spec.items, f"{where}.{key[:64]}")  # type: ignore[arg-type]
    elif kind == "tuple":
        if not isinstance(value, list) or len(value) != len(spec.parts):
            raise _wrong(where, f"has the wrong type (a list of {len(spec.parts)} is needed)")
        for item, part in zip(value, spec.parts, strict=True):
            _check_value(item, part, where)
    else:  # pragma: no cover - a schema written wrong
        raise _wrong(where, f"unknown kind {kind}")
