"""Command-line options the Slurm way: a getopt_long work-alike driven by tables
(``OptionTable``, ``parse_argv``), and the value parsers the commands' options share (times,
memory, counts, GPUs, arrays, dependencies, --begin, --signal, job states, list filters).

Which options a command has is the command's own (its table); sbatch's, shared by srun and
salloc, with what Slurm refuses of a submission, is ``cli/submit.py``. argparse is not used:
its error texts differ from getopt's, it does not stop at the script name, and it costs import
time that every ``sbatch`` pays. The value parsers live here with the engine, not in a module
of their own: each module costs a command's start ~0.3M instructions (docs/benchmarks.md).
"""

import os
import time

TYPE_CHECKING = False  # typing and collections cost every command ms to import: checkers only
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
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


def env_defaults(values: "dict[str, Any]", variables: "dict[str, str]",
                 flags: "frozenset[str]" = frozenset()) -> None:
    """A reporting command's input environment variables (SQUEUE_SORT, SINFO_PARTITION, ...):
    each fills its option's dest when the command line did not give it (the command line
    wins, as in Slurm); a flag's variable only has to be set."""
    for var, dest in variables.items():
        value = os.environ.get(var)
        if value is not None and dest not in values:
            values[dest] = None if dest in flags else value


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
