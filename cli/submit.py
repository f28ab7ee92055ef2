"""sbatch's options, shared by srun and salloc: the table of every sbatch 22.05 option, the
``SBATCH_*`` environment, the handlers that turn options into a job's settings, the options
kiln ignores or refuses, the ``#SBATCH`` directives, ``--export``, and what Slurm refuses of
a submission before it is sent (``check_request``).

One table serves sbatch's command line, its ``#SBATCH`` directives and its ``SBATCH_*``
environment variables, so the three can never disagree on a spelling. On the hot path of
every submission: standard library and the ground modules only.
"""

import os

from cli.core import fail, submit_failure
from cli.core.options import (
    NO_ARG,
    OPTIONAL,
    REQUIRED,
    Opt,
    OptionError,
    OptionTable,
    Parsed,
    parse_array,
    parse_begin,
    parse_dependency,
    parse_gpu_count,
    parse_gres,
    parse_memory_mb,
    parse_node_count,
    parse_positive_int,
    parse_signal_spec,
    parse_time_limit,
)

TYPE_CHECKING = False  # typing and collections cost every command ms to import: checkers only
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# --- sbatch's option table -------------------------------------------------------------------

# Every option sbatch 22.05 accepts: "long:mode[:short]" with mode n(o arg), r(equired),
# o(ptional). Those kiln acts on have a handler below; the rest are warned about and dropped.
SBATCH_OPTION_NAMES = """
account:r:A acctg-freq:r array:r:a batch:r bbf:r begin:r:b bb:r cluster-constraint:r chdir:r:D
clusters:r:M cluster:r comment:r constraint:r:C container:r context:r contiguous:n core-spec:r:S
cores-per-socket:r cpu-freq:r cpus-per-gpu:r cpus-per-task:r:c deadline:r delay-boot:r
dependency:r:d distribution:r:m error:r:e exclude:r:x exclusive:o export:r export-file:r
extra-node-info:r:B get-user-env:o gid:r gpu-bind:r gpu-freq:r gpus:r:G gpus-per-node:r
gpus-per-socket:r gpus-per-task:r gres:r gres-flags:r help:n:h hint:r hold:n:H ignore-pbs:n
input:r:i job-name:r:J kill-on-invalid-dep:r licenses:r:L mail-type:r mail-user:r mcs-label:r
mem:r mem-bind:r mem-per-cpu:r mem-per-gpu:r mincpus:r network:r nice:o no-kill:o:k
no-requeue:n nodefile:r:F nodelist:r:w nodes:r:N ntasks:r:n ntasks-per-core:r
ntasks-per-node:r ntasks-per-socket:r ntasks-per-tres:r ntasks-per-gpu:r open-mode:r output:r:o
overcommit:n:O oversubscribe:n:s parsable:n partition:r:p power:r prefer:r priority:r profile:r
propagate:o qos:r:q quiet:n:Q reboot:n requeue:n reservation:r signal:r sockets-per-node:r
spread-job:n switches:r tasks-per-node:r test-only:n thread-spec:r threads-per-core:r time:r:t
time-min:r tmp:r uid:r use-min-nodes:n usage:n verbose:n:v version:n:V wait:n:W
wait-all-nodes:r wckey:r wrap:r tres-per-task:r oom-kill-step:o segment:r
restart-cost:r
"""
_MODES = {"n": NO_ARG, "r": REQUIRED, "o": OPTIONAL}
_ALIASES = {"tasks-per-node": "ntasks-per-node"}


def _sbatch_table() -> "OptionTable":
    opts = []
    for entry in SBATCH_OPTION_NAMES.split():
        long, mode, *short = entry.split(":")
        opts.append(Opt(long, short[0] if short else "", _MODES[mode],
                        _ALIASES.get(long, long)))
    return OptionTable(opts)


SBATCH_TABLE = _sbatch_table()

# SBATCH_* input environment variables -> option (between directives and the command line).
SBATCH_ENV_VARS = {
    "SBATCH_ACCOUNT": "account", "SBATCH_ARRAY_INX": "array", "SBATCH_CONSTRAINT": "constraint",
    "SBATCH_EXCLUSIVE": "exclusive", "SBATCH_EXPORT": "export", "SBATCH_GRES": "gres",
    "SBATCH_GPUS": "gpus", "SBATCH_GPUS_PER_NODE": "gpus-per-node",
    "SBATCH_GPUS_PER_TASK": "gpus-per-task", "SBATCH_JOB_NAME": "job-name",
    "SBATCH_MEM_PER_CPU": "mem-per-cpu", "SBATCH_MEM_PER_GPU": "mem-per-gpu",
    "SBATCH_MEM_PER_NODE": "mem", "SBATCH_NO_REQUEUE": "no-requeue",
    "SBATCH_OPEN_MODE": "open-mode", "SBATCH_PARTITION": "partition", "SBATCH_QOS": "qos",
    "SBATCH_REQUEUE": "requeue", "SBATCH_RESERVATION": "reservation", "SBATCH_SIGNAL": "signal",
    "SBATCH_TIMELIMIT": "time", "SBATCH_WAIT": "wait", "SBATCH_WCKEY": "wckey",
    "SBATCH_ERROR": "error", "SBATCH_INPUT": "input", "SBATCH_OUTPUT": "output",
    # the rest of sbatch(1)'s INPUT ENVIRONMENT VARIABLES (22.05)
    "SBATCH_ACCTG_FREQ": "acctg-freq", "SBATCH_BATCH": "batch", "SBATCH_CLUSTERS": "clusters",
    "SLURM_CLUSTERS": "clusters", "SBATCH_CORE_SPEC": "core-spec",
    "SBATCH_CPUS_PER_GPU": "cpus-per-gpu", "SBATCH_DELAY_BOOT": "delay-boot",
    "SBATCH_DISTRIBUTION": "distribution", "SBATCH_GET_USER_ENV": "get-user-env",
    "SBATCH_GPU_BIND": "gpu-bind", "SBATCH_GPU_FREQ": "gpu-freq",
    "SBATCH_GRES_FLAGS": "gres-flags", "SBATCH_HINT": "hint", "SBATCH_IGNORE_PBS": "ignore-pbs",
    "SBATCH_MEM_BIND": "mem-bind", "SBATCH_NETWORK": "network", "SBATCH_NO_KILL": "no-kill",
    "SBATCH_OVERCOMMIT": "overcommit", "SBATCH_POWER": "power", "SBATCH_PROFILE": "profile",
    "SBATCH_REQ_SWITCH": "switches", "SBATCH_SPREAD_JOB": "spread-job",
    "SBATCH_THREAD_SPEC": "thread-spec", "SBATCH_USE_MIN_NODES": "use-min-nodes",
    "SBATCH_WAIT_ALL_NODES": "wait-all-nodes",
}

Settings = dict[str, "Any"]
Handler = "Callable[[Settings, str | None], None]"  # a handler of one option (see below)


def _store(field: str, parse: "Callable[[str], Any]" = str) -> "Handler":
    def handler(settings: "Settings", value: "str | None") -> None:
        settings[field] = parse(value or "")
    return handler


def _flag(field: str, value: "Any") -> "Handler":
    def handler(settings: "Settings", _value: "str | None") -> None:
        settings[field] = value
    return handler


def _nodes(settings: "Settings", value: "str | None") -> None:
    settings["num_nodes"], settings["num_nodes_max"] = parse_node_count(value or "")


def _gpus(field: str, option: str) -> "Handler":
    def handler(settings: "Settings", value: "str | None") -> None:
        count, gtype = parse_gpu_count(value or "", option)
        settings[field] = count
        if gtype:
            settings["gpu_type"] = gtype
    return handler


def _gres(settings: "Settings", value: "str | None") -> None:
    from kiln.slurm.gres import GresError, take_shares

    count, gtype, others = parse_gres(value or "")
    try:
        asked, rest = take_shares(others)
    except GresError:
        raise OptionError("Invalid --gres specification") from None
    if not (asked.get("mps") and count):  # gpu with mps: schedd refuses it as Slurm does
        others = rest                     # (Invalid generic resource), the mps item unknown
    else:
        asked = {}
    settings["shards_per_node"] = asked.get("shard", 0)
    settings["mps_per_node"] = asked.get("mps", 0)
    settings["gpus_per_node"] = count
    if gtype:
        settings["gpu_type"] = gtype
    if others:
        settings["gres"] = ",".join(others)


def _priority(settings: "Settings", value: "str | None") -> None:
    """--priority=N (operators): sent beside the job, not as a Job field (schedd checks who)."""
    text = (value or "").strip()
    if text.upper() == "TOP":
        raise OptionError("--priority=TOP is not supported: give a number")
    if not text.isdigit() or int(text) >= 2**32 - 1:
        raise OptionError(f"Invalid --priority value: {value}")
    settings["_priority"] = int(text)


def _array(settings: "Settings", value: "str | None") -> None:
    spec, throttle, _ids = parse_array(value or "", settings.get("_max_array_size", 1001))
    settings["array_spec"], settings["array_max_running"] = spec, throttle


def _exclusive(settings: "Settings", value: "str | None") -> None:
    mode = (value or "exclusive").lower()
    if mode not in ("exclusive", "oversubscribe", "user", "mcs", "topo"):
        raise OptionError("Invalid --exclusive specification")
    settings["exclusive"] = mode != "oversubscribe"
    settings["exclusive_topo"] = mode == "topo"  # its blocks to itself (scheduler/topology)
    if mode in ("user", "mcs"):
        settings["exclusive_mode"] = mode


def _switches(settings: "Settings", value: "str | None") -> None:
    """--switches=count[@max-time]: at most ``count`` leaf switches (or blocks), waited for up
    to max-time (Slurm's time format: ``@10`` is ten minutes, ``@0:10`` ten seconds)."""
    count, _, wait = (value or "").partition("@")
    if not count.strip().isdigit():
        raise OptionError("Invalid --switches specification")
    settings["switches"] = int(count)
    if wait:
        seconds = 0 if wait.strip() == "0" else parse_time_limit(wait, "--switches")
        settings["switch_wait"] = seconds if seconds is not None else 2**31 - 1


def _nice(settings: "Settings", value: "str | None") -> None:
    try:
        nice = int(value) if value is not None else 100
    except ValueError:
        raise OptionError("Invalid --nice value, out of range (+/- 2147483645)") from None
    if abs(nice) > 2147483645:
        raise OptionError("Invalid --nice value, out of range (+/- 2147483645)")
    settings["nice"] = nice


def _open_mode(settings: "Settings", value: "str | None") -> None:
    mode = (value or "").strip().lower()
    if mode not in ("append", "a", "truncate", "t"):
        raise OptionError("Invalid --open-mode specification")
    settings["open_mode"] = "append" if mode.startswith("a") else "truncate"


_MAIL_TYPES = {"NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
               "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS"}


def _mail_type(settings: "Settings", value: "str | None") -> None:
    types = [t.strip().upper() for t in (value or "").split(",")]
    if not all(t in _MAIL_TYPES for t in types):
        raise OptionError(f"--mail-type={value} invalid")  # slurm_opt.c's words
    settings["mail_type"] = ",".join(types)


def _nodefile(settings: "Settings", value: "str | None") -> None:
    try:
        with open(value or "") as fh:
            names = fh.read().split()
    except OSError:
        raise OptionError("Invalid --nodefile node file") from None
    settings["nodelist"] = ",".join(names)


def _chdir(settings: "Settings", value: "str | None") -> None:
    settings["workdir"] = os.path.abspath(os.path.expanduser(value or ""))


def _time(field: str, option: str) -> "Handler":
    def handler(settings: "Settings", value: "str | None") -> None:
        settings[field] = parse_time_limit(value or "", option)
    return handler


def _mem(field: str, option: str) -> "Handler":
    def handler(settings: "Settings", value: "str | None") -> None:
        settings[field] = parse_memory_mb(value or "", option)
    return handler


def _count(field: str, option: str) -> "Handler":
    def handler(settings: "Settings", value: "str | None") -> None:
        settings[field] = parse_positive_int(value or "", option)
    return handler


# dest -> handler. Keys that are Job fields go to the job, keys starting with "_" stay in
# sbatch; what is neither is not sent (kiln.wire.protocol.SUBMIT_FIELDS is the allow-list).
SBATCH_HANDLERS: "dict[str, Handler]" = {
    "account": _store("account"),
    "array": _array,
    "begin": lambda s, v: s.__setitem__("begin_time", parse_begin(v or "")),
    "chdir": _chdir,
    "comment": _store("comment"),
    "constraint": _store("constraint"),
    "cpus-per-task": _count("cpus_per_task", "--cpus-per-task"),
    "dependency": lambda s, v: s.__setitem__("dependency", parse_dependency(v or "")),
    "error": _store("stderr"),
    "exclude": _store("exclude"),
    "exclusive": _exclusive,
    "export": _store("export"),
    "gpus": _gpus("gpus", "--gpus"),
    "gpus-per-node": _gpus("gpus_per_node", "--gpus-per-node"),
    "gpus-per-task": _gpus("gpus_per_task", "--gpus-per-task"),
    "gres": _gres,
    "priority": _priority,
    "hold": _flag("held", "user"),
    "job-name": _store("name"),
    "mail-type": _mail_type,
    "mail-user": _store("mail_user"),
    "mem": _mem("mem_per_node_mb", "--mem"),
    "mem-per-cpu": _mem("mem_per_cpu_mb", "--mem-per-cpu"),
    "mem-per-gpu": _mem("mem_per_gpu_mb", "--mem-per-gpu"),
    "nice": _nice,
    "no-requeue": _flag("requeue", False),
    "nodefile": _nodefile,
    "nodelist": _store("nodelist"),
    "nodes": _nodes,
    "ntasks": _count("num_tasks", "--ntasks"),
    "ntasks-per-node": _count("ntasks_per_node", "--ntasks-per-node"),
    "open-mode": _open_mode,
    "output": _store("stdout"),
    "parsable": _flag("_parsable", True),
    "partition": _store("partition"),
    "qos": _store("qos"),
    "quiet": _flag("_quiet", True),
    "requeue": _flag("requeue", True),
    "reservation": _store("reservation"),
    "signal": lambda s, v: s.__setitem__("signal", parse_signal_spec(v or "")),
    "test-only": _flag("_test_only", True),
    "time": _time("time_limit", "--time"),
    "time-min": _time("time_min", "--time-min"),
    "wait": _flag("_wait", True),
    "wrap": _store("_wrap"),
    "help": _flag("_help", True),
    "usage": _flag("_usage", True),
    "version": _flag("_version", True),
    "verbose": _flag("_verbose", True),
    "mem-bind": _store("mem_bind"),
    "input": _store("stdin"),
    "tres-per-task": lambda s, v: s.update(parse_tres_per_task(v or "")),
    "cpus-per-gpu": _count("_cpus_per_gpu", "--cpus-per-gpu"),
    "oversubscribe": _flag("exclusive", False),
    "wckey": _store("wckey"),
    "switches": _switches,
    "segment": _count("segment", "--segment"),
    "restart-cost": lambda s, v: s.__setitem__("restart_cost", parse_restart_cost(v or "")),
}


def parse_restart_cost(text: str) -> int:
    """kiln's --restart-cost=MIN (Slurm time format: minutes, or [[D-]HH:]MM:SS) -> seconds:
    what restarting the job costs, for choosing preemption victims (docs/preemption.md)."""
    seconds = 0 if text.strip() == "0" else parse_time_limit(text, "--restart-cost")
    if seconds is None:
        raise OptionError("Invalid --restart-cost specification")
    return seconds


# Options that mean nothing on kiln: accepted (scripts written for Slurm keep working), stored in
# nowhere, and announced with one warning line each. dest -> what the user should know.
SBATCH_IGNORED: "dict[str, str]" = {
    "acctg-freq": "agents sample every [agent] sample_interval seconds",
    "bb": "no burst buffers", "bbf": "no burst buffers",
    "container": "no OCI container support", "context": "no SELinux contexts",
    "core-spec": "no core specialisation", "thread-spec": "no core specialisation",
    "cores-per-socket": "kiln allocates CPUs, not sockets or cores",
    "sockets-per-node": "kiln allocates CPUs, not sockets or cores",
    "threads-per-core": "kiln allocates CPUs, not sockets or cores",
    "extra-node-info": "kiln allocates CPUs, not sockets or cores",
    "ntasks-per-core": "kiln allocates CPUs, not sockets or cores",
    "ntasks-per-socket": "kiln allocates CPUs, not sockets or cores",
    "hint": "kiln allocates CPUs, not sockets or cores",
    "cpu-freq": "no CPU frequency control", "gpu-freq": "no GPU frequency control",
    "power": "no power management", "reboot": "nodes are not rebooted for jobs",
    "delay-boot": "nodes are not rebooted for jobs",
    "network": "no network options",
    "mcs-label": "no MCS labels", "profile": "no HDF5 profiling (see seff and sacct)",
"tmp": "temporary disk is not scheduled",
    "deadline": "recorded, not enforced", "get-user-env": "the submit environment is used",
    "propagate": "resource limits are not propagated", "gres-flags": "GPUs are placed by NVLink island",
    "oom-kill-step": "a job over its memory is ended as a whole",
    "x11": "no X11 forwarding",
    "resv-ports": "no MPI port reservation (no PMI server)",
    "accel-bind": "tasks see the job's GPUs (CUDA_VISIBLE_DEVICES)",
    "tres-bind": "tasks see the job's GPUs (CUDA_VISIBLE_DEVICES)",
    "external-launcher": "kiln's srun launches every step itself",
    "stepmgr": "schedd manages every step",
    "spread-job": "nodes are chosen by the placement policy",
    "use-min-nodes": "nodes are chosen by the placement policy",
    "wait-all-nodes": "the batch script starts when its nodes are allocated",
    "cluster-constraint": "kiln schedules one cluster", "ignore-pbs": "#PBS lines are never read",
    "batch": "the batch script runs on the first node of the allocation",
    "contiguous": "nodes are chosen by the placement policy",
    "distribution": "srun places tasks in block order",
    "export-file": "use --export=VAR=value",
    "gpu-bind": "tasks see the job's GPUs (CUDA_VISIBLE_DEVICES)",
    "kill-on-invalid-dep": "a job whose dependency can never be met stays pending with "
                           "reason DependencyNeverSatisfied; scancel it",
    "mincpus": "use -c/--cpus-per-task",
    "no-kill": "a job on a failed node ends as NODE_FAIL",
    "ntasks-per-gpu": "use -n with --gpus-per-task", "ntasks-per-tres": "use -n with --gpus-per-task",
    "overcommit": "kiln allocates at least one CPU per task",
    "prefer": "a soft preference, not honoured",
    "mem-bind": "no memory binding",
}


# Options whose meaning kiln cannot honour and that change what runs or as whom: refused.
SBATCH_REFUSED: "dict[str, str]" = {
    "uid": "jobs run as the submitting user",
    "gid": "jobs run with the submitting user's group",
    "container": "kiln runs no OCI containers; start one from the script (apptainer exec ...)",
    "gpus-per-socket": "kiln does not model sockets; use --gpus-per-node",
}


# salloc's and srun's --x11 (sbatch 22.05 has none)
X11_REFUSED = "--x11 is not supported by kiln: no X11 forwarding (use ssh -X to a node)"


def refused_option(parsed: "Parsed") -> str:
    """The error line for the first refused option given, or ''."""
    for opt, _ in parsed:
        why = SBATCH_REFUSED.get(opt.dest)
        if why is not None:
            return f"--{opt.long} is not supported by kiln: {why}"
    return ""


def parse_tres_per_task(text: str) -> "dict[str, Any]":
    """--tres-per-task=cpu:4,gres/gpu:2 (also 'gres/gpu:a100:2', '=' for ':') -> settings."""
    out: dict[str, Any] = {}
    for item in text.replace("=", ":").split(","):
        parts = [p.strip() for p in item.strip().split(":")]
        if parts[0] == "cpu" and len(parts) == 2 and parts[1].isdigit():
            out["cpus_per_task"] = int(parts[1])
        elif parts[0] in ("gres/gpu", "gpu") and len(parts) in (2, 3) and parts[-1].isdigit():
            out["gpus_per_task"] = int(parts[-1])
            if len(parts) == 3:
                out["gpu_type"] = parts[1]
        else:
            raise OptionError("Invalid --tres-per-task specification")
    return out


def resolve_cpus_per_gpu(settings: "Settings") -> None:
    """--cpus-per-gpu=N without -c: give each task enough CPUs for N per GPU on its node
    (kiln allocates CPUs per task; the GPU count per node comes from the other options)."""
    per_gpu = settings.pop("_cpus_per_gpu", None)
    if per_gpu is None or "cpus_per_task" in settings:
        return
    nodes = max(int(settings.get("num_nodes") or 1), 1)
    tasks = int(settings.get("ntasks_per_node") or -(-int(settings.get("num_tasks") or 1)
                                                     // nodes))
    gpus = int(settings.get("gpus_per_node") or -(-int(settings.get("gpus") or 0) // nodes)
               or int(settings.get("gpus_per_task") or 0) * tasks)
    if gpus:
        settings["cpus_per_task"] = max(-(-per_gpu * gpus // max(tasks, 1)), 1)


# --- what Slurm refuses at submit time -------------------------------------------------------
# Before a job exists, with its messages: shared by sbatch and srun (each passes its lead,
# ``Batch job submission failed`` or ``Unable to allocate resources``). schedd checks the rest
# (partition, nodes, shape, account) at admission. Here, not in a module of their own: each
# module costs a command's start ~0.3M instructions to find and load (docs/benchmarks.md).

INVALID_GRES = "Invalid generic resource (gres) specification"
GPUS_PER_TASK = ("Failed to validate job spec. --gpus-per-task used without either --gpus or "
                 "-n/--ntasks is not allowed.")


def check_request(settings: "dict[str, Any]", lead: str) -> None:
    """Raise the CommandError Slurm's client or controller answers a request with, if any."""
    check_clusters(settings.get("clusters") or settings.get("cluster"))
    gpus = any(settings.get(k) for k in ("gpus", "gpus_per_node", "gpus_per_task"))
    if settings.get("gres"):  # a generic resource other than gpu: none is configured
        fail(*submit_failure(INVALID_GRES, lead))
    if settings.get("mem_per_gpu_mb") and not gpus:
        fail(*submit_failure(INVALID_GRES, lead))
    tasks = "num_tasks" in settings or settings.get("ntasks_per_node")  # sbatch: N x per node
    if settings.get("gpus_per_task") and not settings.get("gpus") and not tasks:
        fail(*submit_failure(f"{GPUS_PER_TASK}\n{INVALID_GRES}", lead))


def check_clusters(value: "str | None") -> None:
    """-M/--clusters: kiln is one cluster; another name is what slurmdbd does not know."""
    if not value:
        return
    from kiln.config import load

    here = load().cluster_name
    for name in value.split(","):
        if name not in (here, "all"):
            fail(f"'{value}' can't be reached now, or it is an invalid entry for --cluster.  "
                 "Use 'sacctmgr list clusters' to see available clusters.")


def ignored_warnings(parsed: "Parsed") -> "list[str]":
    """One warning per ignored option given (in the order first given)."""
    seen: dict[str, str] = {}
    for opt, _ in parsed:
        why = SBATCH_IGNORED.get(opt.dest)
        if why is not None and opt.long not in seen:
            seen[opt.long] = f"--{opt.long} is ignored: {why}"
    return list(seen.values())


def apply_options(settings: "Settings", parsed: "Parsed") -> None:
    """Apply (option, value) pairs in order: a later one overrides an earlier one."""
    for opt, value in parsed:
        handler = SBATCH_HANDLERS.get(opt.dest)
        if handler is not None:
            handler(settings, value)
        else:
            settings[opt.dest.replace("-", "_")] = True if value is None else value


def env_options(environ: "dict[str, str]", env_vars: "dict[str, str] | None" = None,
                table: "OptionTable | None" = None) -> "Parsed":
    """The input environment variables that are set (sbatch's ``SBATCH_*`` unless another
    command's map and table are given: salloc's ``SALLOC_*``, srun's ``SLURM_*``), as
    (option, value) pairs in the map's order; the caller puts its command line after them,
    so the command line wins, as in Slurm."""
    env_vars = SBATCH_ENV_VARS if env_vars is None else env_vars
    table = SBATCH_TABLE if table is None else table
    parsed: Parsed = []
    for var, long in env_vars.items():
        value = environ.get(var)
        if value is None:
            continue
        opt = table.by_long[long]
        parsed.append((opt, None if opt.arg == NO_ARG else value))
    return parsed


# --- #SBATCH directives ----------------------------------------------------------------------


def directive_tokens(script: str, source: str = "sbatch") -> "list[str]":
    """The option words of a script's ``#SBATCH`` lines, read as Slurm's get_argument does:
    until the first line that is neither blank nor a comment; words split on blanks; quotes
    group and are removed; backslash escapes; an unquoted ``#`` starts a comment."""
    tokens: list[str] = []
    for lineno, line in enumerate(script.split("\n"), 1):
        if line.startswith("#SBATCH"):
            rest = line[7:]
        else:
            stripped = line.lstrip()
            if stripped and not stripped.startswith("#"):
                break
            continue
        tokens.extend(_line_words(rest, source, lineno, line))
    return tokens


def _line_words(rest: str, source: str, lineno: int, line: str) -> "list[str]":
    words: list[str] = []
    word: list[str] | None = None
    quote = ""
    escape = False
    for ch in rest:
        if escape:
            escape = False
        elif ch == "\\":
            escape = True
            word = word if word is not None else []
            continue
        elif quote:
            if ch == quote:
                quote = ""
                continue
        elif ch in "\"'":
            quote = ch
            word = word if word is not None else []
            continue
        elif ch == "#":
            break
        elif ch.isspace():
            if word is not None:
                words.append("".join(word))
                word = None
            continue
        word = word if word is not None else []
        word.append(ch)
    if quote:
        raise OptionError(f"{source}: line {lineno}: Unmatched `{quote}` in [{line}]")
    if word is not None:
        words.append("".join(word))
    return words



def build_environment(export: str, environ: "dict[str, str]") -> "dict[str, str]":
    """--export: ALL (default), NONE, [ALL,]VAR[=value],... -> the environment to send.

    A list without ALL carries the SLURM_* variables plus the named ones, as Slurm does."""
    spec = export.strip()
    if not spec or spec.upper() == "ALL":
        return dict(environ)
    if spec.upper() == "NONE":
        return {}
    items = [i for i in spec.split(",") if i]
    env: dict[str, str]
    if any(i.upper() == "ALL" for i in items):
        env = dict(environ)
    else:
        env = {k: v for k, v in environ.items() if k.startswith("SLURM_")}
    for item in items:
        if item.upper() in ("ALL", "NONE"):
            continue
        name, eq, value = item.partition("=")
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    return env
