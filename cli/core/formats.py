"""Output the Slurm way: time spellings, squeue's ``%`` and ``-O`` field engine, column layout.

Jobs arrive as wire dictionaries (``Job.to_wire()``) and stay dictionaries: building 10,000
``Job`` objects would cost more than printing them, and ``squeue -h`` is on every poller's
path. A field is (header, getter, cut): ``cut`` False means the value is never truncated to
the column width (Slurm does that for node lists and NODELIST(REASON)). ``JOB_ATTRS`` names the
Job attributes each field reads: squeue asks schedd for just those, column by column, and prints
from that Table a whole column at a time (the end of this module).
"""

from __future__ import annotations

import os
import time

from kiln.slurm.compact import COMPACT_CODES
from kiln.slurm.text import has_control, printable, printable_lines

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

YEAR_SECONDS = 365 * 86400
COMPACT = COMPACT_CODES


# --- times -----------------------------------------------------------------------------------


def _clock(t: int) -> tuple[int, int, int, int]:
    """(days, hours, minutes, seconds) of ``t`` seconds."""
    days, rem = divmod(t, 86400)
    hours, rem = divmod(rem, 3600)
    return (days, hours, *divmod(rem, 60))


def fmt_secs(secs: float | None) -> str:
    """squeue/sinfo durations: M:SS, H:MM:SS, D-HH:MM:SS (Slurm's _print_secs)."""
    if secs is None:
        return "UNLIMITED"
    t = int(secs)
    if t < 0 or t > YEAR_SECONDS:
        return "INVALID"
    days, hours, minutes, seconds = _clock(t)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{seconds:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{seconds:02d}"
    return f"{minutes}:{seconds:02d}"


def fmt_duration(secs: float | None, unlimited: str = "UNLIMITED") -> str:
    """scontrol's durations: HH:MM:SS, D-HH:MM:SS (RunTime=00:00:03, TimeLimit=00:10:00)."""
    if secs is None:
        return unlimited
    days, hours, minutes, seconds = _clock(max(int(secs), 0))
    clock = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    return f"{days}-{clock}" if days else clock


def fmt_cpu_time(secs: float | None) -> str:
    """sacct's CPU times (TotalCPU, UserCPU, SystemCPU), as Slurm's ``_elapsed_time``: [D-]HH:MM:SS
    from an hour up, else MM:SS.mmm, or 00:MM:SS when there are no milliseconds to show; ''
    when unknown."""
    if secs is None:
        return ""
    secs = max(float(secs), 0.0)
    whole = int(secs)
    millis = int((secs - whole) * 1000 + 1e-6)  # truncated, as Slurm's usecs / 1000
    days, hours, minutes, seconds = _clock(whole)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{seconds:02d}"
    if hours:
        return f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    if millis:
        return f"{minutes:02d}:{seconds:02d}.{millis:03d}"
    return f"00:{minutes:02d}:{seconds:02d}"


def fmt_time(t: float | None, none: str = "N/A") -> str:
    """An instant as Slurm prints it: local ISO 8601 without zone, 2026-11-29T08:06:38, or as
    SLURM_TIME_FORMAT says (a strftime format; ``standard`` and ``relative`` keep ISO 8601)."""
    if not t:
        return none
    custom = os.environ.get("SLURM_TIME_FORMAT", "")
    fmt = custom if custom and custom not in ("standard", "relative") else "%Y-%m-%dT%H:%M:%S"
    return time.strftime(fmt, time.localtime(t))


def fmt_limit_minutes(secs: int | None, unlimited: str = "infinite") -> str:
    """sinfo TIMELIMIT: 'infinite' or the squeue spelling."""
    return unlimited if secs is None else fmt_secs(secs)


# --- columns ---------------------------------------------------------------------------------


class Column:
    """One output field: what to print, how wide (0 = as is), justification, and the text that
    follows it in the format (Slurm's "suffix", printed verbatim on every line)."""

    __slots__ = ("key", "width", "right", "suffix")

    def __init__(self, key: str, width: int = 0, right: bool = False, suffix: str = ""):
        self.key = key
        self.width = width
        self.right = right
        self.suffix = suffix


def pad(value: str, width: int, right: bool, cut: bool = True) -> str:
    """Slurm's _print_str: cut to ``width`` (when ``cut``), then pad left or right."""
    if not width:
        return value
    if cut:
        value = value[:width]
    return value.rjust(width) if right else value.ljust(width)


def parse_percent_format(fmt: str, letters: dict[str, str]) -> tuple[str, list[Column], list[str]]:
    """'%.18i %.9P ...' -> (prefix text, columns, unknown letters). Text after a field is that
    field's suffix; ``%%``-split empties are skipped, as Slurm's strtok does."""
    prefix, _, rest = fmt.partition("%")
    if not _:
        return fmt, [], []
    columns: list[Column] = []
    unknown: list[str] = []
    for token in rest.split("%"):
        if not token:
            continue
        i = 0
        right = token.startswith(".")
        if right:
            i = 1
        start = i
        while i < len(token) and token[i].isdigit():
            i += 1
        width = int(token[start:i]) if i > start else 0
        if i >= len(token):
            continue
        letter, suffix = token[i], token[i + 1:]
        key = letters.get(letter)
        if key is None:
            unknown.append(letter)
            continue
        columns.append(Column(key, width, right, suffix))
    return prefix, columns, unknown


def parse_long_format(fmt: str, names: dict[str, str],
                      prefixes: dict[str, str] | None = None) -> tuple[list[Column], list[str]]:
    """-O 'JobID,State:10,Name:.20|' -> columns (default width 20, left). A name matches
    case-insensitively and whole, as Slurm's ``xstrcasecmp``; ``prefixes`` are the few that
    Slurm matches by their first letters instead (``xstrncasecmp``: squeue takes any name
    starting ``numtask`` for NumTasks)."""
    columns: list[Column] = []
    unknown: list[str] = []
    for token in fmt.split(","):
        if not token:
            continue
        name, colon, spec = token.partition(":")
        width, right, suffix = 20, False, ""
        if colon:
            right = spec.startswith(".")
            spec = spec[1:] if right else spec
            digits = len(spec) - len(spec.lstrip("0123456789"))
            width = int(spec[:digits]) if digits else 0
            suffix = spec[digits:]
        key = names.get(name.lower())
        if key is None and prefixes:
            key = next((k for p, k in prefixes.items() if name.lower().startswith(p)), None)
        if key is None:
            unknown.append(name)
            continue
        columns.append(Column(key, width, right, suffix))
    return columns, unknown


Getter = "Callable[[dict[str, Any], Ctx], str]"


class Ctx:
    """What a getter may need beyond the record: the reference time and display options."""

    __slots__ = ("now", "start_estimates")

    def __init__(self, now: float, start_estimates: bool = False):
        self.now = now
        self.start_estimates = start_estimates


def _literal(text: str) -> str:
    return text.replace("%", "%%")


def line_template(prefix: str, columns: list[Column],
                  fields: dict[str, tuple[str, Getter, bool]],
                  fixed: dict[int, str] | None = None) -> str:
    """The whole line as one ``%`` template: ``%18.18s`` is pad()'s cut-then-justify done in
    C, so a record costs one format operation instead of a pad() per column. ``fixed``:
    columns (by position) whose text is the same on every line, padded into the template."""
    parts = [_literal(prefix)]
    for i, c in enumerate(columns):
        cut = fields[c.key][2]
        spec = f"%{'' if c.right else '-'}{c.width}{f'.{c.width}' if cut else ''}s" if c.width \
            else "%s"
        parts.append(_literal(spec % fixed[i]) if fixed and i in fixed else spec)
        parts.append(_literal(c.suffix))
    return "".join(parts)


def render(records: list[dict[str, Any]], prefix: str, columns: list[Column],
           fields: dict[str, tuple[str, Getter, bool]], ctx: Ctx, header: bool) -> list[str]:
    """Lines of output: the header built from the format's own text, then one per record."""
    line = line_template(prefix, columns, fields)
    getters = [fields[c.key][1] for c in columns]
    lines = [line % tuple(fields[c.key][0] for c in columns)] if header else []
    body = [line % tuple([get(rec, ctx) for get in getters]) for rec in records]
    if body and has_control("".join(body)):  # another user's text: its controls show as ?
        body = [line % tuple([printable(str(get(rec, ctx))) for get in getters])
                for rec in records]
    return lines + body


# --- squeue's job fields ---------------------------------------------------------------------


def _null(value: Any) -> str:
    return str(value) if value not in (None, "") else "(null)"


def job_display_id(job: dict[str, Any]) -> str:
    if job.get("array_job_id") is not None and job.get("array_task_id") is not None:
        return f"{job['array_job_id']}_{job['array_task_id']}"
    return job.get("display_id") or str(job["id"])


def job_time_used(job: dict[str, Any], now: float) -> int:
    return time_used(job["state"], job.get("start_time"), job.get("end_time"), now)


def time_used(state: str, start: float | None, end: float | None, now: float) -> int:
    if not start or state == "PENDING":
        return 0
    if state in ("RUNNING", "SUSPENDED") or not end:
        end = now
    return max(int(end - start), 0)


def job_num_nodes(job: dict[str, Any]) -> int:
    alloc = job.get("allocation") or []
    return len(alloc) if alloc else int(job.get("num_nodes") or 1)


def job_num_cpus(job: dict[str, Any]) -> int:
    alloc = job.get("allocation") or []
    if alloc:
        return sum(int(a.get("cpus", 0)) for a in alloc)
    return int(job.get("num_tasks") or 1) * int(job.get("cpus_per_task") or 1)


def job_tres_per_node(job: dict[str, Any]) -> str:
    """%b TRES_PER_NODE: 'gres:gpu:2' or 'gres:gpu:a100:2', 'gres:shard:2' for GPU shards,
    'gres:mps:50' for MPS (N/A without any per node)."""
    n = job.get("gpus_per_node") or 0
    shards, mps = job.get("shards_per_node") or 0, job.get("mps_per_node") or 0
    parts = [f"gres:shard:{shards}"] * bool(shards) + [f"gres:mps:{mps}"] * bool(mps)
    if not n:
        return ",".join(parts) or "N/A"
    gtype = job.get("gpu_type") or ""
    return ",".join([f"gres:gpu:{gtype}:{n}" if gtype else f"gres:gpu:{n}", *parts])


def mem_str(mb: int) -> str:
    """Slurm's exact unit conversion: 2048 -> '2G', 16000 -> '16000M'."""
    if mb and mb % (1024 * 1024) == 0:
        return f"{mb // (1024 * 1024)}T"
    if mb and mb % 1024 == 0:
        return f"{mb // 1024}G"
    return f"{mb}M"


def job_tres(job: dict[str, Any]) -> str:
    cpus, nodes = job_num_cpus(job), job_num_nodes(job)
    alloc = job.get("allocation") or []
    if alloc:
        mem = sum(int(a.get("memory_mb", 0)) for a in alloc)
        gpus = sum(len(a.get("gpus") or []) for a in alloc)
    else:
        mem = int(job.get("mem_per_node_mb") or 0) * nodes or \
            int(job.get("mem_per_cpu_mb") or 0) * cpus
        gpus = (int(job.get("gpus") or 0) or int(job.get("gpus_per_task") or 0)
                * int(job.get("num_tasks") or 1) or int(job.get("gpus_per_node") or 0) * nodes)
    parts = [f"cpu={cpus}"]
    if mem:
        parts.append(f"mem={mem_str(mem)}")
    parts += [f"node={nodes}", f"billing={cpus}"]
    if gpus:
        parts.append(f"gres/gpu={gpus}")
    return ",".join(parts)


_REASON_STATES = frozenset({"PENDING", "TIMEOUT", "FAILED", "OUT_OF_MEMORY"})


def job_reason_list(job: dict[str, Any]) -> str:
    state = job["state"]
    if state in _REASON_STATES:
        return f"({job.get('reason') or 'None'})"
    return job.get("node_list") or ""


def job_start(job: dict[str, Any], ctx: Ctx) -> str:
    if job["state"] == "PENDING":
        return fmt_time(job.get("expected_start") or job.get("start_time"))
    return fmt_time(job.get("start_time"))


def job_end(job: dict[str, Any], ctx: Ctx) -> str:
    end = job.get("end_time") or 0
    limit = job.get("time_limit")
    if job["state"] in ("RUNNING", "SUSPENDED") and job.get("start_time"):
        if limit is None:
            return "NONE"
        end = end or job["start_time"] + limit
    elif job["state"] == "PENDING":
        start = job.get("expected_start") or 0
        end = start + limit if start and limit is not None else 0
    return fmt_time(end)


def job_time_left(job: dict[str, Any], ctx: Ctx) -> str:
    limit = job.get("time_limit")
    if limit is None:
        return "UNLIMITED"
    return fmt_secs(max(limit - job_time_used(job, ctx.now), 0))


def job_min_memory(job: dict[str, Any]) -> str:
    if job.get("mem_per_node_mb"):
        return f"{job['mem_per_node_mb']}M"
    if job.get("mem_per_cpu_mb"):
        return f"{job['mem_per_cpu_mb']}M"
    return "0"


def _gname(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except (KeyError, OverflowError):
        return str(gid)


def command_text(job: dict[str, Any]) -> str:
    cmd = job.get("command") or ""
    return "(null)" if not cmd or cmd in ("(wrap)", "(stdin)") else cmd


# key -> (header, getter, cut)
JOB_FIELDS: dict[str, tuple[str, Getter, bool]] = {
    "account": ("ACCOUNT", lambda j, c: _null(j.get("account")), True),
    "jobid_raw": ("JOBID", lambda j, c: str(j["id"]), True),
    "tres_per_node": ("TRES_PER_NODE", lambda j, c: job_tres_per_node(j), True),
    "batch_host": ("EXEC_HOST", lambda j, c: j.get("batch_host") or "n/a", True),
    "min_cpus": ("MIN_CPUS", lambda j, c: str(j.get("cpus_per_task") or 1), True),
    "cpus": ("CPUS", lambda j, c: str(job_num_cpus(j)), True),
    "nodes_count": ("NODES", lambda j, c: str(job_num_nodes(j)), True),
    "end_time": ("END_TIME", job_end, True),
    "dependency": ("DEPENDENCY", lambda j, c: _null(j.get("dependency")), True),
    "features": ("FEATURES", lambda j, c: _null(j.get("constraint")), True),
    "array_job_id": ("ARRAY_JOB_ID",
                     lambda j, c: str(j.get("array_job_id") or j["id"]), True),
    "group": ("GROUP", lambda j, c: _gname(int(j.get("gid", -1))), True),
    "gid": ("GROUP", lambda j, c: str(j.get("gid", "")), True),
    "over_subscribe": ("OVER_SUBSCRIBE", lambda j, c: "NO" if j.get("exclusive") else "OK", True),
    "jobid": ("JOBID", lambda j, c: job_display_id(j), True),
    "name": ("NAME", lambda j, c: j.get("name") or "", True),
    "comment": ("COMMENT", lambda j, c: _null(j.get("comment")), True),
    "array_task_id": ("ARRAY_TASK_ID", lambda j, c: "N/A" if j.get("array_task_id") is None
                      else str(j["array_task_id"]), True),
    "time_limit": ("TIME_LIMIT", lambda j, c: fmt_secs(j.get("time_limit")), True),
    "time_left": ("TIME_LEFT", job_time_left, True),
    "min_memory": ("MIN_MEMORY", lambda j, c: job_min_memory(j), True),
    "time_used": ("TIME", lambda j, c: fmt_secs(job_time_used(j, c.now)), False),
    "req_nodes": ("REQ_NODES", lambda j, c: j.get("nodelist") or "", True),
    "nodelist": ("NODELIST", lambda j, c: j.get("node_list") or "", False),
    "command": ("COMMAND", lambda j, c: command_text(j), True),
    "contiguous": ("CONTIGUOUS", lambda j, c: "0", True),
    "priority": ("PRIORITY", lambda j, c: f"{int(j.get('priority') or 0) / 4294967295:.8f}", True),
    "partition": ("PARTITION", lambda j, c: j.get("partition") or "", True),
    "qos": ("QOS", lambda j, c: _null(j.get("qos")), True),
    "priority_long": ("PRIORITY", lambda j, c: str(j.get("priority") or 0), True),
    "reason": ("REASON", lambda j, c: j.get("reason") or "None", True),
    "reason_list": ("NODELIST(REASON)", lambda j, c: job_reason_list(j), False),
    "start_time": ("START_TIME", job_start, True),
    "state_compact": ("ST", lambda j, c: COMPACT.get(j["state"], j["state"]), True),
    "state": ("STATE", lambda j, c: j["state"], True),
    "uid": ("UID", lambda j, c: str(j.get("uid", "")), True),
    "user": ("USER", lambda j, c: j.get("user") or str(j.get("uid", "")), True),
    "reservation": ("RESERVATION", lambda j, c: _null(j.get("reservation")), True),
    "submit_time": ("SUBMIT_TIME", lambda j, c: fmt_time(j.get("submit_time")), True),
    "wckey": ("WCKEY", lambda j, c: _null(j.get("wckey")), True),
    "licenses": ("LICENSES", lambda j, c: _null(j.get("licenses")), True),
    "exc_nodes": ("EXC_NODES", lambda j, c: j.get("exclude") or "", True),
    "nice": ("NICE", lambda j, c: str(j.get("nice") or 0), True),
    "schednodes": ("SCHEDNODES", lambda j, c: _null(j.get("sched_nodes")),
                   False),
    "sct": ("S:C:T", lambda j, c: "*:*:*", True),
    "work_dir": ("WORK_DIR", lambda j, c: j.get("workdir") or "", True),
    "num_tasks": ("TASKS", lambda j, c: str(j.get("num_tasks") or 1), True),
    "cpus_per_task": ("CPUS_PER_TASK", lambda j, c: str(j.get("cpus_per_task") or 1), True),
    "exit_code": ("EXIT_CODE", lambda j, c: f"{j.get('exit_code', 0)}:{j.get('exit_signal', 0)}",
                  True),
    "eligible_time": ("ELIGIBLE_TIME", lambda j, c: fmt_time(j.get("eligible_time")), True),
    "requeue": ("REQUEUE", lambda j, c: "1" if j.get("requeue", True) else "0", True),
    "restart_cnt": ("RESTART_COUNT", lambda j, c: str(j.get("restart_count") or 0), True),
    "stdout": ("STDOUT", lambda j, c: j.get("stdout") or "", True),
    "stderr": ("STDERR", lambda j, c: j.get("stderr") or j.get("stdout") or "", True),
    "time_min": ("TIME_MIN", lambda j, c: fmt_secs(j["time_min"]) if j.get("time_min")
                 else "N/A", True),
    "pending_time": ("PENDING_TIME", lambda j, c: str(int(
        ((j.get("start_time") or c.now) if j["state"] != "PENDING" else c.now)
        - (j.get("submit_time") or c.now))), True),
}

# key -> the Job attributes its getter (and its -S sort key) reads: what squeue asks schedd for
# (query_jobs "fields") instead of whole jobs. tests/unit/schedd/handlers/test_query_rows.py holds every getter
# to it.
_RUN = ("state", "start_time", "end_time")
JOB_ATTRS: dict[str, tuple[str, ...]] = {
    "account": ("account",), "jobid_raw": ("id",),
    "tres_per_node": ("gpus_per_node", "gpu_type", "shards_per_node", "mps_per_node"), "batch_host": ("batch_host",),
    "min_cpus": ("cpus_per_task",), "cpus": ("allocation", "num_tasks", "cpus_per_task"),
    "nodes_count": ("allocation", "num_nodes"), "end_time": (*_RUN, "time_limit", "expected_start"),
    "dependency": ("dependency",), "features": ("constraint",),
    "array_job_id": ("array_job_id", "id"), "group": ("gid",), "gid": ("gid",),
    "over_subscribe": ("exclusive",), "jobid": ("array_job_id", "array_task_id", "id"),
    "name": ("name",), "comment": ("comment",), "array_task_id": ("array_task_id",),
    "time_limit": ("time_limit",), "time_left": (*_RUN, "time_limit"),
    "min_memory": ("mem_per_node_mb", "mem_per_cpu_mb"), "time_used": _RUN,
    "req_nodes": ("nodelist",), "nodelist": ("node_list",), "command": ("command",),
    "contiguous": (), "priority": ("priority",), "partition": ("partition",), "qos": ("qos",),
    "priority_long": ("priority",), "reason": ("reason",),
    "reason_list": ("state", "reason", "node_list"),
    "start_time": ("state", "start_time", "expected_start"), "state_compact": ("state",),
    "state": ("state",), "uid": ("uid",), "user": ("user", "uid"),
    "reservation": ("reservation",), "submit_time": ("submit_time",), "wckey": ("wckey",),
    "licenses": ("licenses",), "exc_nodes": ("exclude",), "nice": ("nice",),
    "schednodes": ("sched_nodes",), "sct": (), "work_dir": ("workdir",), "num_tasks": ("num_tasks",),
    "cpus_per_task": ("cpus_per_task",), "exit_code": ("exit_code", "exit_signal"),
    "eligible_time": ("eligible_time",), "requeue": ("requeue",),
    "restart_cnt": ("restart_count",), "stdout": ("stdout",), "stderr": ("stderr", "stdout"),
    "time_min": ("time_min",), "pending_time": ("state", "start_time", "submit_time"),
}



def _gres_of(count: int, gtype: str = "") -> str:
    """22.05's gres spelling of a per-job/task TRES: ``gres:gpu:2``, ``gres:gpu:a100:2``."""
    return "N/A" if not count else f"gres:gpu:{gtype}:{count}" if gtype else f"gres:gpu:{count}"


def _cluster_name(job: dict[str, Any], ctx: Ctx) -> str:
    return _this_cluster()


_CLUSTER: list[str] = []  # the config's cluster name, read once (not functools.cache: importing
# functools pulls in collections, 2 ms of every squeue's start)


def _this_cluster() -> str:
    if not _CLUSTER:
        from kiln.config import load

        _CLUSTER.append(load().cluster_name)
    return _CLUSTER[0]


# Fields of squeue -O that kiln fills from the job (key -> header, getter, right-justified is
# unused for -O; attributes read).
_MORE_FIELDS: dict[str, tuple[str, Getter, tuple[str, ...]]] = {
    "tres_alloc": ("TRES_ALLOC", lambda j, c: job_tres(j),
                   ("allocation", "num_tasks", "cpus_per_task", "num_nodes", "mem_per_node_mb",
                    "mem_per_cpu_mb", "gpus", "gpus_per_task", "gpus_per_node")),
    "tres_per_job": ("TRES_PER_JOB", lambda j, c: _gres_of(j.get("gpus") or 0,
                                                         j.get("gpu_type") or ""),
                     ("gpus", "gpu_type")),
    "tres_per_task": ("TRES_PER_TASK", lambda j, c: _gres_of(j.get("gpus_per_task") or 0,
                                                           j.get("gpu_type") or ""),
                      ("gpus_per_task", "gpu_type")),
    "mem_per_tres": ("MEM_PER_TRES", lambda j, c: f"gres:gpu:{j['mem_per_gpu_mb']}"
                     if j.get("mem_per_gpu_mb") else "N/A", ("mem_per_gpu_mb",)),
    "ntasks_per_node": ("NTASKS_PER_NODE", lambda j, c: str(j.get("ntasks_per_node") or "N/A"),
                        ("ntasks_per_node",)),
    "max_nodes": ("MAX_NODES", lambda j, c: str(j.get("num_nodes_max") or 0),
                  ("num_nodes_max",)),
    "accrue_time": ("ACCRUE_TIME", lambda j, c: fmt_time(j.get("eligible_time")),
                    ("eligible_time",)),
    "alloc_nodes": ("ALLOC_NODES", lambda j, c: j.get("submit_host") or "N/A",
                    ("submit_host",)),
    "alloc_sid": ("ALLOC_SID", lambda j, c: str(j.get("alloc_sid") or 0), ("alloc_sid",)),
    "stdin": ("STDIN", lambda j, c: j.get("stdin") or "/dev/null", ("stdin",)),
    "cluster": ("CLUSTER", _cluster_name, ()),
}

# Fields of squeue -O (Slurm 22.05) with nothing behind them on kiln: Slurm's value for a job
# that does not use the feature (N/A, (null), 0, *).
_SLURM_CONSTANTS: dict[str, tuple[str, str]] = {
    "min_tmp_disk": ("MIN_TMP_DISK", "0"), "sockets": ("SOCKETS_PER_NODE", "*"),
    "cores": ("CORES_PER_SOCKET", "*"), "threads": ("THREADS_PER_CORE", "*"),
    "core_spec": ("CORE_SPEC", "N/A"), "tres_bind": ("TRES_BIND", "N/A"),
    "tres_freq": ("TRES_FREQ", "N/A"), "tres_per_socket": ("TRES_PER_SOCKET", "N/A"),
    "cpus_per_tres": ("CPUS_PER_TRES", "N/A"), "ntasks_per_core": ("NTASKS_PER_CORE", "N/A"),
    "ntasks_per_socket": ("NTASKS_PER_SOCKET", "N/A"),
    "ntasks_per_board": ("NTASKS_PER_BOARD", "N/A"),
    "boards_per_node": ("BOARDS_PER_NODE", "N/A"), "sockets_per_board": ("SOCKETS_PER_BOARD", "N/A"),
    "batch_flag": ("BATCH_FLAG", "1"), "assoc_id": ("ASSOC_ID", "0"),
    "derived_ec": ("DERIVED_EC", "0:0"), "max_cpus": ("MAX_CPUS", "0"),
    "last_sched_eval": ("LAST_SCHED_EVAL", "N/A"), "preempt_time": ("PREEMPT_TIME", "N/A"),
    "resize_time": ("RESIZE_TIME", "N/A"), "deadline": ("DEADLINE", "N/A"),
    "delay_boot": ("DELAY_BOOT", "N/A"), "network": ("NETWORK", "(null)"),
    "profile": ("PROFILE", "NotSet"), "reboot": ("REBOOT", "0"), "req_switch": ("REQ_SWITCH", "0"),
    "wait4switch": ("WAIT4SWITCH", "0"), "origin": ("ORIGIN", "N/A"),
    "origin_raw": ("ORIGIN_RAW", "N/A"), "siblings_active": ("ACTIVE_SIBLINGS", "N/A"),
    "siblings_active_raw": ("ACTIVE_SIBLINGS_RAW", "N/A"),
    "siblings_viable": ("VIABLE_SIBLINGS", "N/A"),
    "siblings_viable_raw": ("VIABLE_SIBLINGS_RAW", "N/A"),
    "burst_buffer": ("BURST_BUFFER", "(null)"), "burst_buffer_state": ("BURST_BUFFER_STATE", "(null)"),
    "cluster_features": ("CLUSTER_FEATURES", "(null)"), "container": ("CONTAINER", "(null)"),
    "prefer": ("PREFER", "(null)"), "admin_comment": ("ADMIN_COMMENT", "(null)"),
    "system_comment": ("SYSTEM_COMMENT", "(null)"), "mcs_label": ("MCSLABEL", "N/A"),
    "select_jobinfo": ("SELECT_JOBINFO", "N/A"), "het_job_id": ("HET_JOB_ID", "N/A"),
    "het_job_id_set": ("HET_JOB_ID_SET", "N/A"), "het_job_offset": ("HET_JOB_OFFSET", "N/A"),
}


def _constant(value: str) -> Getter:
    return lambda j, c: value


for _key, (_head, _get, _attrs) in _MORE_FIELDS.items():
    JOB_FIELDS[_key] = (_head, _get, True)
    JOB_ATTRS[_key] = _attrs
for _key, (_head, _value) in _SLURM_CONSTANTS.items():
    JOB_FIELDS[_key] = (_head, _constant(_value), True)
    JOB_ATTRS[_key] = ()


def job_attrs(keys: list[str]) -> list[str]:
    """The Job attributes the fields ``keys`` need, each once, in first-use order."""
    return list(dict.fromkeys(a for key in keys for a in JOB_ATTRS[key]))


# squeue -o letters (SPEC §3 list and the other common ones)
JOB_LETTERS: dict[str, str] = {
    "a": "account", "A": "jobid_raw", "b": "tres_per_node", "B": "batch_host", "c": "min_cpus",
    "C": "cpus", "D": "nodes_count", "e": "end_time", "E": "dependency", "f": "features",
    "F": "array_job_id", "g": "group", "G": "gid", "h": "over_subscribe", "i": "jobid",
    "j": "name", "k": "comment", "K": "array_task_id", "l": "time_limit", "L": "time_left",
    "m": "min_memory", "M": "time_used", "n": "req_nodes", "N": "nodelist", "o": "command",
    "O": "contiguous", "p": "priority", "P": "partition", "q": "qos", "Q": "priority_long",
    "r": "reason", "R": "reason_list", "S": "start_time", "t": "state_compact", "T": "state",
    "U": "uid", "u": "user", "v": "reservation", "V": "submit_time", "w": "wckey",
    "W": "licenses", "x": "exc_nodes", "y": "nice", "Y": "schednodes", "z": "sct",
    "Z": "work_dir",
}

# squeue -O names (lower case)
JOB_LONG_NAMES: dict[str, str] = {
    "account": "account", "arrayjobid": "array_job_id", "arraytaskid": "array_task_id",
    "batchhost": "batch_host", "command": "command", "comment": "comment",
    "cpus-per-task": "cpus_per_task", "dependency": "dependency", "eligibletime": "eligible_time",
    "endtime": "end_time", "exit_code": "exit_code", "feature": "features", "groupid": "gid",
    "groupname": "group", "jobarrayid": "jobid", "jobid": "jobid_raw", "licenses": "licenses",
    "minmemory": "min_memory", "mintime": "time_min", "name": "name", "nice": "nice",
    "nodelist": "nodelist", "numcpus": "cpus", "numnodes": "nodes_count",
    "numtasks": "num_tasks", "oversubscribe": "over_subscribe", "partition": "partition",
    "pendingtime": "pending_time", "priority": "priority", "prioritylong": "priority_long",
    "qos": "qos", "reason": "reason", "reasonlist": "reason_list", "reqnodes": "req_nodes",
    "requeue": "requeue", "reservation": "reservation", "restartcnt": "restart_cnt",
    "schednodes": "schednodes", "sct": "sct", "starttime": "start_time", "state": "state",
    "statecompact": "state_compact", "stderr": "stderr", "stdout": "stdout",
    "submittime": "submit_time", "timeleft": "time_left", "timelimit": "time_limit",
    "timeused": "time_used", "tres-per-node": "tres_per_node", "userid": "uid",
    "username": "user", "wckey": "wckey", "workdir": "work_dir", "exechost": "batch_host",
    # the rest of squeue --helpformat (22.05), with Slurm's aliases
    "mincpus": "min_cpus", "mintmpdisk": "min_tmp_disk", "sockets": "sockets", "cores": "cores",
    "threads": "threads", "contiguous": "contiguous", "excnodes": "exc_nodes",
    "corespec": "core_spec", "tres": "tres_alloc", "tres-alloc": "tres_alloc",
    "tres-per-job": "tres_per_job", "tres-per-task": "tres_per_task",
    "tres-per-socket": "tres_per_socket", "tres-bind": "tres_bind", "tres-freq": "tres_freq",
    "cpus-per-tres": "cpus_per_tres", "mem-per-tres": "mem_per_tres", "gres": "tres_per_node",
    "cpuspertask": "cpus_per_task", "shared": "over_subscribe", "ntpernode": "ntasks_per_node",
    "ntpercore": "ntasks_per_core", "ntpersocket": "ntasks_per_socket",
    "ntperboard": "ntasks_per_board", "boardspernode": "boards_per_node",
    "sperboard": "sockets_per_board", "batchflag": "batch_flag", "associd": "assoc_id",
    "derivedec": "derived_ec", "maxcpus": "max_cpus", "maxnodes": "max_nodes",
    "lastschedeval": "last_sched_eval", "preempttime": "preempt_time",
    "resizetime": "resize_time", "deadline": "deadline", "delayboot": "delay_boot",
    "network": "network", "profile": "profile", "reboot": "reboot", "reqswitch": "req_switch",
    "wait4switch": "wait4switch", "origin": "origin", "originraw": "origin_raw",
    "siblingsactive": "siblings_active", "siblingsactiveraw": "siblings_active_raw",
    "siblingsviable": "siblings_viable", "siblingsviableraw": "siblings_viable_raw",
    "burstbuffer": "burst_buffer", "burstbufferstate": "burst_buffer_state",
    "clusterfeature": "cluster_features", "container": "container", "prefer": "prefer",
    "admin_comment": "admin_comment", "system_comment": "system_comment",
    "mcslabel": "mcs_label", "selectjobinfo": "select_jobinfo", "hetjobid": "het_job_id",
    "hetjobidset": "het_job_id_set", "hetjoboffset": "het_job_offset",
    "packjobid": "het_job_id", "packjobidset": "het_job_id_set",
    "packjoboffset": "het_job_offset", "accruetime": "accrue_time",
    "allocnodes": "alloc_nodes", "allocsid": "alloc_sid", "stdin": "stdin",
    "cluster": "cluster",
}


# squeue -O names Slurm 22.05 matches by prefix (src/squeue/opts.c, parse_long_format:
# ``xstrncasecmp(token, "numtasks", strlen("numtask"))``): NumTask, NumTasks, numtasksX...
JOB_LONG_PREFIXES: dict[str, str] = {"numtask": "num_tasks"}


def job_sort_key(key: str) -> Callable[[dict[str, Any], Ctx], Any]:
    """A sort key for -S: numbers compare as numbers, the rest as printed text."""
    numeric = {
        "jobid": lambda j, c: (j.get("array_job_id") or j["id"], j.get("array_task_id") or -1),
        "jobid_raw": lambda j, c: j["id"],
        "priority": lambda j, c: j.get("priority") or 0,
        "priority_long": lambda j, c: j.get("priority") or 0,
        "time_used": lambda j, c: job_time_used(j, c.now),
        "time_limit": lambda j, c: j["time_limit"] if j.get("time_limit") is not None
        else float("inf"),
        "nodes_count": lambda j, c: job_num_nodes(j),
        "cpus": lambda j, c: job_num_cpus(j),
        "submit_time": lambda j, c: j.get("submit_time") or 0,
        "start_time": lambda j, c: j.get("expected_start") or j.get("start_time") or 0,
        "end_time": lambda j, c: j.get("end_time") or 0,
        "nice": lambda j, c: j.get("nice") or 0,
    }
    if key in numeric:
        return numeric[key]
    getter = JOB_FIELDS[key][1]
    return getter


# --- whole columns at once -------------------------------------------------------------------
# squeue's rows reply (query_jobs with "fields") arrives as a Table: each Job attribute's values
# for every job, in one order. A column of output is then one list comprehension, with no
# function call per job: the getters above, applied to 10,000 jobs one by one, cost more than
# everything else squeue does. The common fields have a comprehension here; any other field
# runs its getter per job on a dictionary of just the attributes JOB_ATTRS names for it.
# tests/unit/schedd/handlers/test_query_rows.py holds each comprehension to its getter.

Table = dict[str, list["Any"]]


def _nulls(values: list[Any]) -> list[str]:
    return [str(v) if v not in (None, "") else "(null)" for v in values]


def _texts(values: list[Any], default: str = "") -> list[str]:
    return [v or default for v in values]


def _jobid_column(t: Table, c: Ctx) -> list[str]:
    if "display_id" not in t and t["array_task_id"].count(None) == len(t["id"]):
        return list(map(str, t["id"]))  # no array task, nothing folded
    display = t.get("display_id") or [None] * len(t["id"])
    return [f"{a}_{k}" if a is not None and k is not None else (d or str(i))
            for i, a, k, d in zip(t["id"], t["array_job_id"], t["array_task_id"], display,
                                  strict=True)]


def _time_used_column(t: Table, c: Ctx) -> list[str]:
    if not any(t["start_time"]):
        return ["0:00"] * len(t["start_time"])  # none started
    now = c.now
    return [fmt_secs(time_used(s, b, e, now)) if b and s != "PENDING" else "0:00"
            for s, b, e in zip(t["state"], t["start_time"], t["end_time"], strict=True)]


def _reason_list_column(t: Table, c: Ctx) -> list[str]:
    return [f"({r or 'None'})" if s in _REASON_STATES else (n or "")
            for s, r, n in zip(t["state"], t["reason"], t["node_list"], strict=True)]


def _nodes_count_column(t: Table, c: Ctx) -> list[str]:
    return [str(len(a)) if a else str(int(n or 1))
            for a, n in zip(t["allocation"], t["num_nodes"], strict=True)]


def _user_column(t: Table, c: Ctx) -> list[str]:
    return [u or str(i) for u, i in zip(t["user"], t["uid"], strict=True)]


JOB_COLUMNS: dict[str, Callable[[Table, Ctx], list[str]]] = {
    "jobid": _jobid_column,
    "jobid_raw": lambda t, c: list(map(str, t["id"])),
    "partition": lambda t, c: _texts(t["partition"]),
    "name": lambda t, c: _texts(t["name"]),
    "user": _user_column,
    "account": lambda t, c: _nulls(t["account"]),
    "qos": lambda t, c: _nulls(t["qos"]),
    "state": lambda t, c: list(t["state"]),
    "state_compact": lambda t, c: [COMPACT.get(s, s) for s in t["state"]],
    "reason": lambda t, c: _texts(t["reason"], "None"),
    "reason_list": _reason_list_column,
    "time_used": _time_used_column,
    "time_limit": lambda t, c: list(map(fmt_secs, t["time_limit"])),
    "nodes_count": _nodes_count_column,
    "nodelist": lambda t, c: _texts(t["node_list"]),
    "priority_long": lambda t, c: [str(p or 0) for p in t["priority"]],
    "num_tasks": lambda t, c: [str(n or 1) for n in t["num_tasks"]],
}

# -S keys that compare as numbers, whole columns at once (the rest: job_sort_key per job)
SORT_COLUMNS: dict[str, Callable[[Table, Ctx], list[Any]]] = {
    "jobid": lambda t, c: t["id"] if t["array_job_id"].count(None) == len(t["id"]) else [
        (a or i, k or -1) for i, a, k in zip(t["id"], t["array_job_id"], t["array_task_id"],
                                             strict=True)],
    "jobid_raw": lambda t, c: t["id"],
    "priority": lambda t, c: [p or 0 for p in t["priority"]],
    "priority_long": lambda t, c: [p or 0 for p in t["priority"]],
    "submit_time": lambda t, c: [v or 0 for v in t["submit_time"]],
}


def _per_job(key: str, get: Callable[[dict[str, Any], Ctx], Any], t: Table, ctx: Ctx
             ) -> list[Any]:
    attrs = JOB_ATTRS[key]
    if not attrs:
        return [get({}, ctx) for _ in t["id"]]
    return [get(dict(zip(attrs, vals, strict=True)), ctx)
            for vals in zip(*[t[a] for a in attrs], strict=True)]


def column_texts(key: str, t: Table, ctx: Ctx) -> list[str]:
    """Field ``key`` as printed, for every job of the table."""
    fast = JOB_COLUMNS.get(key)
    return fast(t, ctx) if fast is not None else _per_job(key, JOB_FIELDS[key][1], t, ctx)


def sort_column(key: str, t: Table, ctx: Ctx) -> list[Any]:
    """The -S key ``key`` of every job: job_sort_key's values, whole columns at once."""
    fast = SORT_COLUMNS.get(key)
    if fast is not None:
        return fast(t, ctx)
    get = job_sort_key(key)
    if get is JOB_FIELDS[key][1]:
        return column_texts(key, t, ctx)
    return _per_job(key, get, t, ctx)


def uniform_key(key: str, t: Table, uniform: frozenset[str]) -> bool:
    """Does field ``key`` read only attributes that are the same for every job of ``t``?"""
    return all(a in uniform for a in JOB_ATTRS[key]) and not (
        key == "jobid" and "display_id" in t)


def render_table(t: Table, order: list[int], prefix: str, columns: list[Column], ctx: Ctx,
                 header: bool, uniform: frozenset[str] = frozenset()) -> list[str]:
    """render() for a Table: each column's texts, put in ``order``, then one format per line.
    A field that reads only ``uniform`` attributes (the same for every job) is worked out
    once and written into the line template."""
    lines = [line_template(prefix, columns, JOB_FIELDS) % tuple(
        JOB_FIELDS[c.key][0] for c in columns)] if header else []
    if not order:
        return lines
    first = order[0]
    fixed = {i: printable(JOB_FIELDS[c.key][1]({a: t[a][first] for a in JOB_ATTRS[c.key]}, ctx))
             for i, c in enumerate(columns) if uniform_key(c.key, t, uniform)}
    line = line_template(prefix, columns, JOB_FIELDS, fixed)
    # a job's name or comment is text another user wrote: its control characters show as ?
    texts = [printable_lines(column_texts(c.key, t, ctx)) for i, c in enumerate(columns)
             if i not in fixed]
    if not texts:
        return lines + [line % ()] * len(order)
    ordered = [[col[i] for i in order] for col in texts]
    lines += [line % values for values in zip(*ordered, strict=True)]
    return lines


def openapi_v38_meta() -> dict[str, Any]:
    """The ``meta`` of a plain ``--json`` (Slurm 22.05's openapi/v0.0.38), as Slurm 22.05.8's
    squeue and sinfo print it (recorded from ../shared/bench's Slurm; kiln emulates 22.05.8)."""
    return {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"},
            "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5}, "release": "22.05.8"}}

