"""Command-line options the Slurm way: a getopt_long work-alike driven by tables, the value
parsers behind sbatch's options (times, memory, GPUs, arrays, dependencies, --begin, --signal),
and what Slurm refuses of a submission before it is sent (``check_request``).

One table serves sbatch's command line, its ``#SBATCH`` directives and its ``SBATCH_*``
environment variables, so the three can never disagree on a spelling. argparse is not used:
its error texts differ from getopt's, it does not stop at the script name, and it costs import
time that every ``sbatch`` pays.
"""

import os
import time

from cli.errors import fail, submit_failure

TYPE_CHECKING = False  # typing and collections cost every command ms to import: checkers only
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any

NO_ARG, REQUIRED, OPTIONAL = 0, 1, 2


def _match(pattern: str, text: str) -> "Any":
    """``re.match``, importing ``re`` on first use: most commands parse no time, size or date,
    and ``re`` (with ``enum``) costs a command a few ms of its start."""
    import re

    return re.match(pattern, text)


class OptionError(Exception):
    """A bad option or value; ``str(exc)`` is the line to print (``prefixed``: after
    ``<prog>: error: ``, else verbatim after ``<prog>: ``, as getopt prints)."""

    def __init__(self, message: str, prefixed: bool = True):
        super().__init__(message)
        self.message = message
        self.prefixed = prefixed


class Opt:
    """One option: ``long`` name without dashes, ``short`` letter or '', argument mode, and the
    key the parsed value is stored under (``dest``, default: the long name)."""

    __slots__ = ("long", "short", "arg", "dest")

    def __init__(self, long: str, short: str = "", arg: int = REQUIRED, dest: str = ""):
        self.long = long
        self.short = short
        self.arg = arg
        self.dest = dest or long


class OptionTable:
    def __init__(self, opts: "Iterable[Opt]"):
        self.by_long: dict[str, Opt] = {}
        self.by_short: dict[str, Opt] = {}
        for opt in opts:
            self.by_long[opt.long] = opt
            if opt.short:
                self.by_short[opt.short] = opt

    def find_long(self, name: str) -> "Opt":
        """Exact name, else a unique prefix (getopt_long accepts ``--part`` for --partition)."""
        opt = self.by_long.get(name)
        if opt is not None:
            return opt
        hits = [o for n, o in self.by_long.items() if name and n.startswith(name)]
        if not hits:
            raise OptionError(f"unrecognized option '--{name}'", prefixed=False)
        if len({o.dest for o in hits}) == 1:
            return hits[0]
        names = " ".join(f"'--{o.long}'" for o in hits)
        raise OptionError(f"option '--{name}' is ambiguous; possibilities: {names}", prefixed=False)


Parsed = list[tuple[Opt, str | None]]


def parse_argv(argv: "Sequence[str]", table: "OptionTable", *,
               stop_at_positional: bool) -> "tuple[Parsed, list[str]]":
    """Split ``argv`` into (option, value) pairs in order and positional arguments.

    ``stop_at_positional``: everything from the first positional on is positional (sbatch:
    the script and its own arguments). Otherwise positionals may sit between options (scancel).
    """
    found: Parsed = []
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            positional.extend(argv[i:])
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            opt = table.find_long(name)
            if opt.arg == NO_ARG:
                if eq:
                    raise OptionError(f"option '--{opt.long}' doesn't allow an argument",
                                      prefixed=False)
                found.append((opt, None))
            elif opt.arg == OPTIONAL:
                found.append((opt, value if eq else None))
            elif eq:
                found.append((opt, value))
            elif i < len(argv):
                found.append((opt, argv[i]))
                i += 1
            else:
                raise OptionError(f"option '--{opt.long}' requires an argument", prefixed=False)
        elif arg.startswith("-") and len(arg) > 1:
            i = _parse_short_cluster(arg, argv, i, table, found)
        elif stop_at_positional:
            positional.append(arg)
            positional.extend(argv[i:])
            break
        else:
            positional.append(arg)
    return found, positional


def _parse_short_cluster(arg: str, argv: "Sequence[str]", i: int, table: "OptionTable",
                         found: "Parsed") -> int:
    """``-Hv``, ``-n4``, ``-n 4``, ``-kv``: returns the index of the next unread argv item."""
    j = 1
    while j < len(arg):
        letter = arg[j]
        opt = table.by_short.get(letter)
        if opt is None:
            raise OptionError(f"invalid option -- '{letter}'", prefixed=False)
        rest = arg[j + 1:]
        if opt.arg == NO_ARG:
            found.append((opt, None))
            j += 1
            continue
        if rest:
            found.append((opt, rest))
        elif opt.arg == OPTIONAL:
            found.append((opt, None))
        elif i < len(argv):
            found.append((opt, argv[i]))
            i += 1
        else:
            raise OptionError(f"option requires an argument -- '{letter}'", prefixed=False)
        break
    return i


# --- value parsers ---------------------------------------------------------------------------

# Patterns are kept as text and compiled (and cached by re) on first use: `sbatch --wrap`
# never pays for them.
_CLOCK = r"^(\d+)(?::(\d+))?(?::(\d+))?$"
_DAYS = r"^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$"


def parse_time_limit(text: str, option: str = "--time") -> "int | None":
    """Slurm's time formats to seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S. ``None`` means
    UNLIMITED (also for 0, as Slurm reads it). Unlike Slurm, which rounds up to whole minutes,
    kiln keeps seconds: its agents time jobs to the second (``-t 0:05`` is five seconds)."""
    s = text.strip()
    if s.lower() in ("-1", "infinite", "unlimited"):
        return None
    m = _match(_DAYS, s)
    if m:
        days, hours = int(m.group(1)), int(m.group(2))
        minutes, secs = int(m.group(3) or 0), int(m.group(4) or 0)
    else:
        m = _match(_CLOCK, s)
        if not m:
            raise OptionError(f"Invalid {option} specification")
        days = 0
        if m.group(3) is not None:
            hours, minutes, secs = int(m.group(1)), int(m.group(2)), int(m.group(3))
        else:
            hours, minutes, secs = 0, int(m.group(1)), int(m.group(2) or 0)
    total = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    if total == 0:
        return None
    return total


_MEMORY = r"^(\d+)\s*([KMGTkmgt]?)[Bb]?$"
_MEM_FACTORS = {"": 1.0, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}


def parse_memory_mb(text: str, option: str = "--mem") -> int:
    """'512MB', '1G', '954M', '1024K', '2g', '4000' (bare = MB) -> MiB, rounded up."""
    m = _match(_MEMORY, text.strip())
    if not m:
        raise OptionError(f"Invalid {option} specification")
    value = int(m.group(1)) * _MEM_FACTORS[m.group(2).upper()]
    return int(-(-value // 1))


def parse_positive_int(text: str, option: str, allow_zero: bool = False) -> int:
    """Slurm's parse_int: a whole number, positive unless ``allow_zero``."""
    s = text.strip()
    if not s.isdigit() or (int(s) == 0 and not allow_zero):
        raise OptionError(f'Invalid numeric value "{text}" for {option}.')
    return int(s)


def parse_node_count(text: str) -> "tuple[int, int]":
    """-N 2 or -N 2-4 -> (min, max); max 0 means 'same as min'."""
    lo, dash, hi = text.strip().partition("-")
    if not lo.isdigit() or int(lo) == 0:
        raise OptionError(f'"{text}" is not a valid node count')
    if not dash:
        return int(lo), 0
    if not hi.isdigit():
        raise OptionError(f'"{text}" is not a valid node count')
    if int(hi) < int(lo):
        raise OptionError(f"Maximum node count {hi} is less than minimum node count {lo}")
    return int(lo), int(hi)


def parse_gpu_count(text: str, option: str) -> "tuple[int, str]":
    """-G/--gpus/--gpus-per-node/--gpus-per-task '[type:]N' (also 'gpu:type:N') -> (N, type)."""
    parts = text.strip().split(":")
    if parts and parts[0] == "gpu" and len(parts) > 1:
        parts = parts[1:]
    if len(parts) == 1 and parts[0].isdigit():
        return int(parts[0]), ""
    if len(parts) == 2 and parts[0] and parts[1].isdigit():
        return int(parts[1]), parts[0]
    raise OptionError(f"Invalid {option} specification")


def parse_gres(text: str) -> "tuple[int, str, list[str]]":
    """--gres=gpu[:type][:N][,other...] -> (GPUs per node, type, the non-GPU gres as given)."""
    count, gtype, others = 0, "", []
    if text.strip().lower() == "none":
        return 0, "", []
    for item in text.split(","):
        item = item.strip()
        if item.startswith("gres:"):
            item = item[5:]
        parts = item.split(":")
        if parts[0] != "gpu":
            if not item:
                raise OptionError("Invalid --gres specification")
            others.append(item)
            continue
        if len(parts) == 1:
            count = 1
        elif len(parts) == 2:
            if parts[1].isdigit():
                count = int(parts[1])
            else:
                count, gtype = 1, parts[1]
        elif len(parts) == 3 and parts[1] and parts[2].isdigit():
            count, gtype = int(parts[2]), parts[1]
        else:
            raise OptionError("Invalid --gres specification")
    return count, gtype, others


ARRAY_SPEC_ERROR = "Batch job submission failed: Invalid job array specification"


def parse_array(text: str, max_array_size: int = 1001) -> "tuple[str, int, list[int]]":
    """--array=1-10, 1,3,5, 0-15:4, with %N throttle -> (spec, throttle, task ids).

    Like Slurm, every index must be below MaxArraySize (default 1001)."""
    from kiln.slurm import arrayspec

    spec = text.strip()
    try:
        parsed = arrayspec.parse(spec, max_array_size)
    except arrayspec.ArraySpecError:
        raise OptionError(ARRAY_SPEC_ERROR) from None
    return spec, parsed.max_running, list(parsed.task_ids)


DEPENDENCY_ERROR = "Batch job submission failed: Job dependency problem"


def parse_dependency(text: str) -> str:
    """Check -d/--dependency syntax (kiln.slurm.dependency's grammar); returns the text unchanged."""
    from kiln.slurm import dependency

    try:
        dependency.parse(text)
    except dependency.DependencyError:
        raise OptionError(DEPENDENCY_ERROR) from None
    return text.strip()


_BEGIN_UNITS = {"": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
                "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
                "h": 3600, "hour": 3600, "hours": 3600,
                "d": 86400, "day": 86400, "days": 86400,
                "w": 604800, "week": 604800, "weeks": 604800}
_NAMED_HOURS = {"midnight": 0, "noon": 12, "elevenses": 11, "fika": 15, "teatime": 16}


def parse_begin(text: str, now: "float | None" = None) -> float:
    """--begin / scontrol StartTime=: now[+N[unit]], HH:MM[:SS] (today, else tomorrow),
    YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], midnight/noon/fika/teatime, today/tomorrow.
    Returns POSIX seconds (local time, as Slurm reads it)."""
    now = time.time() if now is None else now
    s = text.strip().lower()
    if s.startswith("now"):
        rest = s[3:]
        if not rest:
            return now
        m = _match(r"^\+(\d+)([a-z]*)$", rest)
        if not m or m.group(2) not in _BEGIN_UNITS:
            raise OptionError("Invalid --begin specification")
        return now + int(m.group(1)) * _BEGIN_UNITS[m.group(2)]
    today = time.localtime(now)
    if s in ("today", "tomorrow"):
        midnight = _local(today.tm_year, today.tm_mon, today.tm_mday, 0, 0, 0)
        return midnight if s == "today" else _local(today.tm_year, today.tm_mon,
                                                     today.tm_mday + 1, 0, 0, 0)
    if s in _NAMED_HOURS:
        return _next_clock(now, today, _NAMED_HOURS[s], 0, 0)
    m = _match(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(am|pm)?$", s)
    if m:
        hour = int(m.group(1)) % 12 + (12 if m.group(4) == "pm" else 0) if m.group(4) \
            else int(m.group(1))
        return _next_clock(now, today, hour, int(m.group(2)), int(m.group(3) or 0))
    m = _match(r"^(\d{4})-(\d{2})-(\d{2})(?:t(\d{1,2}):(\d{2})(?::(\d{2}))?)?$", s)
    if m:
        y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
        return _checked_local(y, mo, d, int(m.group(4) or 0), int(m.group(5) or 0),
                              int(m.group(6) or 0))
    m = _match(r"^(\d{1,2})/(\d{1,2})(?:/(\d{2}|\d{4}))?$", s)
    if m:
        y = int(m.group(3)) if m.group(3) else today.tm_year
        y = y + 2000 if y < 100 else y
        return _checked_local(y, int(m.group(1)), int(m.group(2)), 0, 0, 0)
    raise OptionError("Invalid --begin specification")


def _local(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float:
    return time.mktime((y, mo, d, h, mi, s, 0, 0, -1))


def _checked_local(y: int, mo: int, d: int, h: int, mi: int, s: int) -> float:
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 60):
        raise OptionError("Invalid --begin specification")
    return _local(y, mo, d, h, mi, s)


def _next_clock(now: float, today: "time.struct_time", h: int, mi: int, s: int) -> float:
    if h > 23 or mi > 59 or s > 59:
        raise OptionError("Invalid --begin specification")
    t = _local(today.tm_year, today.tm_mon, today.tm_mday, h, mi, s)
    return t if t > now else _local(today.tm_year, today.tm_mon, today.tm_mday + 1, h, mi, s)


def signal_name(text: str) -> "str | None":
    """'USR1', 'SIGUSR1', 'usr1', '10' -> 'USR1'; None if no such signal (kiln.slurm.signals)."""
    from kiln.slurm import signals  # only paid when a signal is named

    try:
        return signals.signal_name(signals.parse_signal(text))
    except signals.SignalError:
        return None


def parse_signal_spec(text: str) -> str:
    """--signal=[{R|B}:]SIG[@secs] -> normalised 'B:USR1@90' (time default 60 like Slurm)."""
    from kiln.slurm import signals

    try:
        return signals.normalize_signal_option(text)
    except signals.SignalError:
        raise OptionError("Invalid --signal specification") from None


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


def parse_states(text: str) -> "tuple[list[str], bool]":
    """-t PD,R / pending,running / all -> (long state names, whether finished jobs are wanted)."""
    from kiln.slurm.states import JobState, StateError
    from kiln.slurm.states import parse_states as parse

    try:
        wanted = parse(text.split(","))
    except StateError as exc:
        raise OptionError(str(exc)) from None
    if wanted is None:
        return [], True
    return [str(s) for s in JobState if s in wanted], any(s.finished for s in wanted)


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
        settings["shards_per_node"], others = take_shares(others)
    except GresError:
        raise OptionError("Invalid --gres specification") from None
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
    if mode not in ("exclusive", "oversubscribe", "user", "mcs"):
        raise OptionError("Invalid --exclusive specification")
    settings["exclusive"] = mode != "oversubscribe"
    if mode in ("user", "mcs"):
        settings["exclusive_mode"] = mode


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
    "switches": "no network topology", "network": "no network options",
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
    "segment": "no network topology",
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


def env_defaults(values: "dict[str, Any]", variables: "dict[str, str]",
                 flags: "frozenset[str]" = frozenset()) -> None:
    """A reporting command's input environment variables (SQUEUE_SORT, SINFO_PARTITION, ...):
    each fills its option's dest when the command line did not give it (the command line
    wins, as in Slurm); a flag's variable only has to be set."""
    for var, dest in variables.items():
        value = os.environ.get(var)
        if value is not None and dest not in values:
            values[dest] = None if dest in flags else value


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


def list_filters(values: "dict[str, str | None]", dests: "dict[str, str]") -> "dict[str, Any]":
    """The comma-list filters squeue and scancel share (option dest -> request key), plus
    ``--me`` and ``-w/--nodelist`` (a hostlist). Raises OptionError for a bad node list."""
    body: dict[str, Any] = {}
    for key, dest in dests.items():
        if values.get(key):
            body[dest] = [v.strip() for v in values[key].split(",") if v.strip()]
    if "me" in values:
        import getpass

        body["users"] = [getpass.getuser()]
    if values.get("nodelist"):
        from kiln.slurm.hostlist import HostlistError, expand

        try:
            body["nodes"] = expand(values["nodelist"])
        except HostlistError:
            raise OptionError(f"'{values['nodelist']}' invalid entry for --nodelist") from None
    return body


def check_users(names: "list[str]") -> "list[str]":
    """``-u/--user`` names for squeue and sacct: each must be a user of this host (or a
    numeric uid), as Slurm's ``uid_from_string`` has it; otherwise OptionError with Slurm's
    ``Invalid user: NAME``."""
    import pwd

    for name in names:
        if name.isdigit():
            continue
        try:
            pwd.getpwnam(name)
        except KeyError:
            raise OptionError(f"Invalid user: {name}") from None
    return names
