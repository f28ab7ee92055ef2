"""Every operation each side of the wire accepts, with its body's schema: what a command may
ask schedd (``CLIENT_OPS``), what an agent may tell it (``AGENT_OPS``) and what schedd may tell an
agent (``SCHEDD_TO_AGENT_OPS``, ``LAUNCH_FIELDS``, ``STEP_LAUNCH_FIELDS``).

The trust boundary is an allow-list: every field a client (or an agent) may send in every op
is named here, with its type and bounds (``Field``). ``kiln.wire.protocol.check`` refuses anything
else with a one-line error that names the field; nothing is silently dropped. State the server
owns (admin priority, the limit an agent enforces, lifecycle marks, restart counts, samples) is
named in no client schema, so no request can write it.

The envelope, the limits and the check are ``kiln.wire.protocol``'s; the schemas are here, built
only where requests are checked (schedd, agentd): building them cost every command's start some
2.5M instructions, ~0.4 ms (docs/benchmarks.md, issue 13). Standard library only.
"""

from __future__ import annotations

from typing import Any

from kiln.slurm.gpufaults import FAKE_ACTIONS, KINDS
from kiln.wire.protocol import (
    MAX_ENV_VALUE,
    MAX_ENV_VARS,
    MAX_JOB_REFS,
    MAX_LIST,
    MAX_MESSAGE_BYTES,
    MAX_OUTPUT_DATA,
    MAX_SCRIPT_ARGS,
    MAX_SCRIPT_BYTES,
    MAX_STRING,
    MAX_TASKS,
    NICE_LIMIT,
    Field,
    Schema,
)

_BIG = 2**62  # any stored integer stays well inside 64 bits


def Str(size: int = MAX_STRING, required: bool = False, nullable: bool = False,
        choices: Any = None) -> Field:
    return Field("str", required, nullable, size=size,
                 choices=frozenset(choices) if choices is not None else None)


def Int(lo: int = -_BIG, hi: int = _BIG, required: bool = False, nullable: bool = False) -> Field:
    return Field("int", required, nullable, lo=lo, hi=hi)


def Num(lo: float = -1e18, hi: float = 1e18, required: bool = False,
        nullable: bool = False) -> Field:
    return Field("num", required, nullable, lo=lo, hi=hi)


def Bool(required: bool = False) -> Field:
    return Field("bool", required)


def List(items: Field, size: int = MAX_LIST, required: bool = False) -> Field:
    return Field("list", required, size=size, items=items)


def Obj(schema: Schema, required: bool = False, nullable: bool = False) -> Field:
    return Field("obj", required, nullable, schema=schema)


def Map(items: Field, size: int = MAX_LIST, required: bool = False) -> Field:
    return Field("map", required, size=size, items=items)


def Tuple(*parts: Field, required: bool = False) -> Field:
    return Field("tuple", required, parts=parts)


# The field types several schemas share.
NAME = Str(256)  # a user, account, partition, QOS, node or reservation name
TIME = Num(0, 1e13)  # a POSIX time, seconds
INT32 = 2**31 - 1  # what the ledger's INTEGER columns hold (PostgreSQL's int4)
LIMIT = Int(1, INT32, nullable=True)  # a time limit, seconds; None = UNLIMITED
COUNT = Int(0, INT32)  # a resource count (0 = not given)
MEM = Int(0, INT32)  # MiB
ENVIRONMENT = Map(Str(MAX_ENV_VALUE), size=MAX_ENV_VARS)

# What a submission may set (protocol.SUBMIT_FIELDS names the same fields, for sbatch): the Job
# fields (kiln.model.Job) sbatch parses, and nothing of what schedd decides (owner, state,
# priority, marks, the allocation). A literal, not derived from the data class.
SUBMIT_SCHEMA: Schema = {
    "account": NAME, "array_max_running": COUNT, "array_spec": Str(),
    "begin_time": TIME, "command": Str(), "comment": Str(), "constraint": Str(),
    "cpus_per_task": COUNT, "dependency": Str(), "environment": ENVIRONMENT,
    "exclude": Str(), "exclusive": Bool(), "export": Str(MAX_ENV_VALUE),
    "gpu_type": Str(64), "gpus": COUNT, "gpus_per_node": COUNT, "gpus_per_task": COUNT,
    "shards_per_node": Int(0, 1 << 20), "mps_per_node": Int(0, 1 << 20), "held": Str(8, choices=("", "user")), "mail_type": Str(), "mail_user": Str(),
    "mem_per_cpu_mb": MEM, "mem_per_gpu_mb": MEM, "mem_per_node_mb": MEM,
    "name": Str(), "nice": Int(-NICE_LIMIT, NICE_LIMIT), "nodelist": Str(),
    "ntasks_per_node": COUNT, "num_nodes": COUNT, "num_nodes_max": COUNT,
    "num_tasks": COUNT, "open_mode": Str(16, choices=("truncate", "append")),
    "partition": NAME, "qos": NAME, "requeue": Bool(), "reservation": NAME,
    "script": Str(MAX_SCRIPT_BYTES), "signal": Str(64), "stderr": Str(), "stdout": Str(),
    "submit_host": NAME, "time_limit": LIMIT, "time_min": LIMIT, "workdir": Str(),
    "script_args": List(Str(), size=MAX_SCRIPT_ARGS), "alloc_sid": Int(0, INT32),
    "restart_cost": Int(0, INT32, nullable=True), "stdin": Str(), "wckey": NAME,
    # network topology: --switches=N[@max-time], --segment=N, --exclusive=topo
    "switches": Int(0, 1 << 16), "switch_wait": Int(0, INT32, nullable=True),
    "segment": Int(0, 1 << 16), "exclusive_topo": Bool(),
    "licenses": Str(), "interactive": Bool(),  # salloc: an allocation without a batch script
}


_ID = Str(64)  # a job id as a user writes it: "123", "123_4", "123_[1-5]"
_NAMES = List(NAME)

# What scontrol update job may change (who may change what: handlers/jobcontrol.py).
UPDATE_JOB_SCHEMA: Schema = {
    "time_limit": LIMIT, "time_min": LIMIT, "nice": Int(-NICE_LIMIT, NICE_LIMIT),
    "priority": Int(0, 2**32), "name": Str(), "comment": Str(), "requeue": Bool(),
    "account": NAME, "qos": NAME, "partition": NAME, "begin_time": TIME,
    "dependency": Str(), "num_nodes": COUNT, "num_tasks": COUNT, "cpus_per_task": COUNT,
    "mem_per_node_mb": MEM, "nodelist": Str(), "exclude": Str(), "constraint": Str(),
    "reservation": NAME,
}

# scontrol create/update reservation (schedd.domain.reservation.Request; +=/-= on update)
RESERVATION_SCHEMA: Schema = {
    "name": NAME, "start_time": Num(0, 1e13, nullable=True),
    "end_time": Num(0, 1e13, nullable=True), "duration": Int(0, 2**40, nullable=True),
    "nodes": _NAMES, "node_cnt": COUNT, "gpus": COUNT, "users": _NAMES,
    "accounts": _NAMES, "flags": List(Str(64), size=64), "partition": NAME,
}
RESERVATION_CHANGES: Schema = {
    **RESERVATION_SCHEMA, "add_users": _NAMES, "remove_users": _NAMES,
    "add_accounts": _NAMES, "remove_accounts": _NAMES,
}

JOB_FILTER: Schema = {
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
STEP_START_FIELDS: Schema = {
    "job_id": Int(0, required=True),
    "argv": List(Str(MAX_ENV_VALUE), size=MAX_SCRIPT_ARGS, required=True),
    "environment": Map(Str(MAX_ENV_VALUE), size=MAX_ENV_VARS, required=True),
    "cwd": Str(required=True),
    "ntasks": COUNT,  # 0/absent: the job's task count
    "nodes": COUNT,  # 0/absent: as many of the job's nodes as there are tasks
    "ntasks_per_node": COUNT,
    "cpus_per_task": COUNT,
    "gpus": COUNT,  # -G over the step
    "gpus_per_node": COUNT,
    "gpus_per_task": COUNT,
    "stdout": Str(),  # --output pattern (%j %s %t %n %N %A %a %u %x %%); "" = forward
    "stderr": Str(),
    "forward": Bool(),  # streams without a pattern go to srun (step_output/step_wait)
    "open_mode": Str(16, choices=("truncate", "append")),
    "name": Str(),
    "pty": Bool(),  # srun --pty: task 0 under a pseudo-terminal, its input from srun
    "winsize": WINSIZE,  # the terminal's [rows, columns] at the start
    # srun --task-prolog / --task-epilog: absolute paths, run as the user around each task
    "task_prolog": Str(4096),
    "task_epilog": Str(4096),
}

CLIENT_OPS: dict[str, Schema] = {
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
    "update_node": {"names": List(NAME, required=True),
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
                    "tap": Int(0, INT32)},
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
    # kiln fake-gpu NODE GPU --xid N|--ecc|--lost|--util PCT|--clear (operators; fake GPUs)
    "fake_gpu": {"node": Str(256, required=True), "gpu": Int(0, 4096, required=True),
                 "action": Str(16, required=True, choices=FAKE_ACTIONS), "value": Int(0, 1000)},
    # scontrol reconfigure (operators): schedd and every agent re-read kiln.toml
    "reconfigure": {},
    # scontrol reboot [ASAP] [nextstate=resume|down] [reason=...] NODES; cancel_reboot NODES
    # (operators; schedd/lifecycle/reboot.py)
    "reboot_nodes": {"names": List(NAME, size=MAX_LIST, required=True), "asap": Bool(),
                     "next_state": Str(16, choices=("", "resume", "down")),
                     "reason": Str(256)},
    "cancel_reboot": {"names": List(NAME, size=MAX_LIST, required=True)},
    # kiln events: the nodes' audit history (GPU faults, drains, resumes)
    "node_events": {"names": _NAMES, "limit": Int(1, 10_000)},
    # scontrol token [lifespan=S] [username=U]: an auth/jwt token (kiln/tokens.py); another
    # user's only for operators
    "auth_token": {"lifespan": Int(1, INT32), "username": Str(256)},
    # kiln restd (docs/rest.md, "Who is asking"): `request` (a client frame, as text) answered
    # as the user a token names (`token` and `user`: the X-SLURM-USER-* headers; schedd
    # verifies it), or as the uid/gid of a peer of restd's unix socket (`uid`, `gid`): taken
    # only from a caller listed in [schedd] rest_relays. Never nested.
    "act_for": {"token": Str(4096), "user": Str(256), "uid": Int(0, 2**32 - 1),
                "gid": Int(0, 2**32 - 1), "request": Str(MAX_MESSAGE_BYTES, required=True)},
}

_GPU = Obj({"index": Int(0, 4096, required=True), "uuid": Str(128, required=True),
            "model": Str(128, required=True), "memory_mb": MEM, "island": Int(0, 4096),
            # the CPU ids near it (NVML's affinity); the scheduler prefers them
            "cpus": List(Int(0, 2**20), size=4096)})
_NODE = {"name": Str(256, required=True), "cpus": Int(0, 2**20, required=True),
         "memory_mb": Int(0, INT32, required=True), "gpus": List(_GPU, size=4096),
         "features": List(Str(256), size=256), "address": Str(256), "boot_time": TIME,
         # containment (agentd/cgroups.py): scontrol's line, and what is not enforced
         "cgroup": Str(256), "cgroup_reason": Str(256),
         "slurmd_start_time": TIME,
         "fake_gpus": Bool(),  # its GPUs are --fake-gpus (kiln fake-gpu may inject)
         "shards_per_gpu": Int(0, 4096),  # gres/shard: shards each GPU offers
         "mps_per_gpu": Int(0, 4096)}  # gres/mps: MPS units each GPU offers
# checkpoint_age = seconds since the job touched $KILN_CHECKPOINT_FILE (absent: never), for
# preemption's victim scores
# usage = the batch step's live figures (kiln.slurm.stats.USAGE_KEYS), for sstat
# gpu_util = the latest sample's utilisation (percent) of each of the job's GPUs on the node,
# in its allocation's order, for the idle-GPU watch (schedd/lifecycle/idlegpu.py)
_USAGE = Map(Num(0), size=64)
_RUNNING = Obj({"job_id": Int(0, required=True), "generation": Int(0, required=True),
                "checkpoint_age": Num(0), "usage": _USAGE,
                "gpu_util": List(Num(0, 100), size=4096),
                # its prolog runs: allocated here, nothing of it started yet (CONFIGURING)
                "configuring": Bool()})
_ENDED: Schema = {"node": Str(256, required=True), "job_id": Int(0, required=True),
                  "generation": Int(0, required=True), "state": Str(32, required=True),
                  "exit_code": Int(0, 255, required=True),
                  "exit_signal": Int(0, 128, required=True),
                  "end_time": Num(0, 1e13, required=True),
                  "stats": Map(Num(0), size=64),
                  "error": Str(512),  # why the agent could not start the job
                  # the node's prolog or epilog failed (agentd/prolog.py): schedd drains the
                  # node with this reason ("Prolog error", "Epilog error") first
                  "drain": Str(256),
                  # the run never started: its prolog failed (requeued held, as Slurm)
                  "prolog_failed": Bool()}

AGENT_OPS: dict[str, Schema] = {
    # agent -> schedd
    "register": {"node": Obj(_NODE, required=True), "running": List(_RUNNING, required=True),
                 "finished": List(Obj(_ENDED))},
    "heartbeat": {"node": Str(256, required=True), "running": List(_RUNNING),
                  "steps": List(Int(0)),  # ids of jobs with step tasks alive here
                  # a job's processes outlived UnkillableStepTimeout: drain with this reason
                  "drain": Str(256),
                  # GPU faults NVML reported since the last heartbeat (agentd/gpuhealth.py);
                  # schedd decides which drain the GPU (kiln.slurm.gpufaults)
                  "gpu_faults": List(Obj({"index": Int(0, 4096, required=True),
                                          "kind": Str(16, required=True, choices=KINDS),
                                          "xid": Int(0, 2**31), "detail": Str(256)}), size=64),
                  # the health check's latest verdict: "" passed, else the Reason to drain with
                  "health": Str(256),
                  # its health check runs only in some node states (health_check_node_state):
                  # the reply says the node's (schedd/handlers/agent.py)
                  "want_state": Bool(),
                  # it holds jobs' private /tmp (agentd/jobtmp.py): the reply lists the jobs
                  # schedd still counts on the node, the others' are removed
                  "want_jobs": Bool(),
                  # srun steps' live figures on this node, for sstat
                  "step_usage": List(Obj({"job_id": Int(0, required=True),
                                          "step_id": Int(0, required=True),
                                          "usage": _USAGE}), size=MAX_JOB_REFS)},
    "job_started": {"node": Str(256, required=True), "job_id": Int(0, required=True),
                    "generation": Int(0, required=True), "start_time": Num(required=True),
                    "pid": Int(0)},
    "job_ended": _ENDED,
    # a node of a multi-node job, not its batch host, has run its prolog (job_prolog): ok,
    # or why not (schedd drains the node and requeues the job held)
    "prolog_done": {"node": Str(256, required=True), "job_id": Int(0, required=True),
                    "generation": Int(0, required=True), "ok": Bool(required=True),
                    "error": Str(512)},
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
STEP_LAUNCH_FIELDS: Schema = {
    "job_id": Int(0, required=True),
    "step_id": Int(0, required=True),
    "user": Str(256, required=True),
    "uid": Int(0, 2**32, required=True),
    "gid": Int(0, 2**32, required=True),
    "argv": List(Str(MAX_ENV_VALUE), size=MAX_SCRIPT_ARGS, required=True),
    "cwd": Str(required=True),
    "environment": Map(Str(MAX_ENV_VALUE), size=MAX_ENV_VARS, required=True),
    "tasks": List(_TASK, size=MAX_TASKS, required=True),
    "time_limit": Int(0, INT32, required=True, nullable=True),  # from job_start; None = none
    "job_start": Num(required=True),
    "kill_wait": Int(-1, INT32, required=True),
    "pty": Bool(),  # task 0 (this node's first) under a pseudo-terminal
    "winsize": WINSIZE,
    # what the job holds on this node: the cgroup's limits (its cpuset, memory, GPUs) where
    # no batch script of the job runs (the job's other nodes); absent from an older schedd
    "allocation": Obj({"cpus": Int(0, 2**20, required=True),
                       "memory_mb": Int(0, INT32, required=True),
                       "gpus": List(Int(0, 4096), size=4096),
                       "cpu_ids": List(Int(0, 2**20), size=4096)}),
    # srun --task-prolog / --task-epilog (agentd/task_wrapper.py runs them as the user)
    "task_prolog": Str(4096),
    "task_epilog": Str(4096),
    # gres/mps: the GPUs of this node the job holds MPS units on (agentd/mps.py: the pipe
    # directory, and the control daemon); absent for other jobs
    "mps_gpus": List(Int(0, 4096), size=64),
}

# The launch instruction schedd sends an agent: everything the node needs to start a batch job
# without asking again (the agent keeps it in its spool, so it survives a restart).
LAUNCH_FIELDS: Schema = {
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
    "memory_mb": Int(0, INT32, required=True),
    # the limit schedd admitted for this run (Job.launched_limit); None = unlimited
    "time_limit": Int(0, INT32, required=True, nullable=True),
    "kill_wait": Int(-1, INT32, required=True),  # seconds between SIGTERM and SIGKILL
    "signal": Str(64),  # --signal as given, e.g. "B:USR1@120"
    "start_time": Num(required=True),  # schedd's decision time; the agent measures its own
    # fencing: the job's partition's on_isolation ("kill" or "keep") and fence_timeout (s)
    "on_isolation": Str(8),
    "fence_timeout": Num(0, 1e9),
    "args": List(Str(), size=MAX_SCRIPT_ARGS),  # the script's arguments (sbatch script.sh a b)
    "fence_kill_wait": Int(0, INT32),  # seconds from a fence's SIGTERM to its SIGKILL
    # gres/mps: the GPUs the job holds MPS units on (agentd/mps.py); absent for other jobs
    "mps_gpus": List(Int(0, 4096), size=64),
}

# The prolog of a multi-node job on a node that is not its batch host (agentd/prolog.py): the
# job's identity, that node's GPUs and the job's SLURM_* variables there.
PROLOG_FIELDS: Schema = {
    "job_id": Int(0, required=True),
    "generation": Int(0, required=True),
    "name": Str(required=True),
    "user": Str(256, required=True),
    "uid": Int(0, 2**32, required=True),
    "gid": Int(0, 2**32, required=True),
    "gpus": List(Int(0, 4096), size=4096, required=True),
    "environment": Map(Str(MAX_ENV_VALUE), size=MAX_ENV_VARS, required=True),
}

SCHEDD_TO_AGENT_OPS: dict[str, Schema] = {
    "launch": {"launch": Obj(LAUNCH_FIELDS, required=True)},
    "job_prolog": {"prolog": Obj(PROLOG_FIELDS, required=True)},
    # the job has ended: its epilog on a node other than the batch host, once no step task
    # of the job is left there (a failure drains the node through the heartbeat's drain)
    "job_epilog": {"epilog": Obj({**PROLOG_FIELDS, "exit_code": Int(0, 255),
                                  "exit_signal": Int(0, 128)}, required=True)},
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
    # kiln fake-gpu, relayed: inject into the agent's fake NVML (agentd/gpuhealth.py)
    "fake_gpu": {"gpu": Int(0, 4096, required=True),
                 "action": Str(16, required=True, choices=FAKE_ACTIONS), "value": Int(0, 1000)},
    # scontrol update State=RESUME: the agent's GPU watch forgets what it reported of these
    "gpu_reset": {"gpus": List(Int(0, 4096), size=4096, required=True)},
    # scontrol reboot, issued: run [agent] reboot_program, then register again
    "reboot": {},
    # scontrol reconfigure: re-read kiln.toml, take its live [agent] keys (kiln/reconfig.py)
    "reconfigure": {},
}
