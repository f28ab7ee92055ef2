"""``sacct``: accounting records of jobs and their steps, from schedd's ledger.

schedd selects the jobs and computes their figures (``schedd/reports/accounting.py``); this module
parses Slurm's options and prints the fields the way sacct 22.05 does:

- fixed width: every field padded to its width (negative width: left-aligned), followed by one
  space; text longer than the width is cut to width-1 and ends in ``+`` (``CANCELLED+``);
- ``-p``/``--parsable``: ``|`` after every field; ``-P``/``--parsable2``: ``|`` between fields;
- ``-o Name%N``: width N, right-aligned (``%-N`` left-aligned).

The default window is Slurm's: since midnight today, unless ``-j`` names jobs (then from the
epoch) or ``-s`` names states (then only jobs in those states now). Step rows (``123.batch``,
``123.extern``, ``123.0``) follow each job unless ``-X``.
"""

from __future__ import annotations

import getpass
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cli.core import Args, CommandError, command, fail, write_lines
from cli.core.client import Client
from cli.core.formats import fmt_cpu_time, fmt_duration, fmt_time
from cli.core.options import (
    NO_ARG,
    OPTIONAL,
    Opt,
    OptionError,
    OptionTable,
    check_users,
    parse_begin,
    parse_states,
)
from kiln.slurm.text import printable, printable_lines

PROG = "sacct"
DEFAULT_FORMAT = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
BRIEF_FORMAT = "JobID,State,ExitCode"
LONG_FORMAT = ("JobID,JobIDRaw,JobName,Partition,MaxRSS,AllocCPUS,Elapsed,State,ExitCode,"
               "AllocTRES,ReqTRES,GPUHours,GPUUtil,GPUMemMax,Billing")

TABLE = OptionTable([
    Opt("allusers", "a", NO_ARG), Opt("accounts", "A"), Opt("account", "", dest="accounts"),
    Opt("allocations", "X", NO_ARG), Opt("brief", "b", NO_ARG), Opt("delimiter", ""),
    Opt("duplicates", "D", NO_ARG), Opt("endtime", "E"), Opt("helpformat", "e", NO_ARG),
    Opt("format", "o"), Opt("help", "h", NO_ARG), Opt("jobs", "j"), Opt("json", "", OPTIONAL),
    Opt("long", "l", NO_ARG), Opt("allclusters", "L", NO_ARG), Opt("clusters", "M"),
    Opt("cluster", "", dest="clusters"), Opt("name", ""), Opt("nodelist", "N"),
    Opt("noconvert", "", NO_ARG), Opt("noheader", "n", NO_ARG), Opt("parsable", "p", NO_ARG),
    Opt("parsable2", "P", NO_ARG), Opt("qos", "q"), Opt("partition", "r"),
    Opt("starttime", "S"), Opt("state", "s"), Opt("truncate", "T", NO_ARG),
    Opt("user", "u"), Opt("uid", "", dest="user"), Opt("usage", "", NO_ARG),
    Opt("verbose", "v", NO_ARG), Opt("version", "V", NO_ARG), Opt("units", ""),
    # accepted and meaningless on one kiln cluster (see IGNORED), or refused (see REFUSED)
    Opt("array", "", NO_ARG), Opt("federation", "", NO_ARG), Opt("local", "", NO_ARG),
    Opt("use-local-uid", "", NO_ARG), Opt("whole-hetjob", "", OPTIONAL),
    Opt("batch-script", "B", NO_ARG), Opt("completion", "c", NO_ARG),
    Opt("constraints", "C"), Opt("env-vars", "", NO_ARG), Opt("file", "f"),
    Opt("gid", "g"), Opt("group", "", dest="gid"), Opt("nnodes", "i"), Opt("ncpus", "I"),
    Opt("timelimit-min", "k"), Opt("timelimit-max", "K"), Opt("reason", "R"),
    Opt("wckeys", "W"), Opt("associations", "x"), Opt("yaml", "", NO_ARG),
])
# Options that change nothing on kiln: accepted, with one warning line where a user could
# expect an effect.
IGNORED = {
    "array": "",  # array tasks are always listed one per row
    "federation": "kiln schedules one cluster", "local": "",
    "use-local-uid": "", "whole-hetjob": "kiln has no heterogeneous jobs",
}
# Filters and outputs kiln's sacct does not provide: refused rather than silently ignored,
# since a filter that does nothing returns rows the user asked not to see.
REFUSED = {
    "batch-script": "scripts are kept in the ledger but not printed by sacct",
    "completion": "kiln has no job completion plugin; sacct reads the ledger",
    "constraints": "filtering by constraints is not supported",
    "env-vars": "environments are kept in the ledger but not printed by sacct",
    "file": "kiln's sacct reads its ledger, not a file",
    "gid": "filtering by group is not supported", "nnodes": "filtering by node count is not supported",
    "ncpus": "filtering by CPU count is not supported",
    "timelimit-min": "filtering by time limit is not supported",
    "timelimit-max": "filtering by time limit is not supported",
    "reason": "filtering by reason is not supported", "wckeys": "kiln has no WCKeys",
    "associations": "filtering by association id is not supported; use -A and -u",
    "yaml": "use --json",
}
REPEATABLE = {"jobs", "format", "user", "accounts", "name", "partition", "qos", "state"}

_JOB_STEP = re.compile(r"^(\d+)(?:_(\d+|\[[0-9,\-:%]+\]))?(?:\.(batch|extern|\d+))?$")


# --- fields ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Field:
    """One sacct field: Slurm's spelling, its default width (negative: left-aligned), how to
    print it from a row, and whether long text is cut with '+' (numbers and dates never are)."""

    name: str
    width: int
    get: Callable[[dict[str, Any], Options], str]
    cut: bool = True
    keys: tuple[str, ...] = ()  # the row keys ``get`` reads (schedd sends only those)


@dataclass(slots=True)
class Options:
    now: float
    noconvert: bool = False


def _text(key: str) -> Callable[[dict[str, Any], Options], str]:
    return lambda r, o: "" if r.get(key) is None else str(r[key])


def _date(key: str) -> Callable[[dict[str, Any], Options], str]:
    return lambda r, o: fmt_time(r.get(key), none="Unknown")


def _limit(row: dict[str, Any], opts: Options) -> str:
    if not row.get("has_limit"):
        return ""
    return fmt_duration(row.get("time_limit"))


def _limit_raw(row: dict[str, Any], opts: Options) -> str:
    if not row.get("has_limit"):
        return ""
    limit = row.get("time_limit")
    return "UNLIMITED" if limit is None else str(-(-int(limit) // 60))


def _units(value: Any, units: str, opts: Options) -> str:
    from kiln.slurm.tres import unit_text

    if value is None:
        return ""
    return f"{int(value)}{units[0]}" if opts.noconvert else unit_text(int(value), units)


def _simulated(row: dict[str, Any], text: str) -> str:
    """A GPU figure made up on fake GPUs says so: ``57.0%(sim)`` (agentd/sampler.py)."""
    return f"{text}(sim)" if text and row.get("gpu_simulated") else text


def _number(key: str, fmt: str) -> Callable[[dict[str, Any], Options], str]:
    return lambda r, o: "" if r.get(key) is None else format(float(r[key]), fmt)


def _billing(row: dict[str, Any], opts: Options) -> str:
    value = row.get("billing")
    if value is None:
        return ""
    return f"{float(value):.2f}".rstrip("0").rstrip(".")


def _group(row: dict[str, Any], opts: Options) -> str:
    if row.get("kind") == "step" or row.get("gid") is None:
        return ""
    from kiln.identity import group_name

    return group_name(int(row["gid"]))


def _cpu_time(row: dict[str, Any], opts: Options) -> str:
    return fmt_duration(int(row.get("elapsed") or 0) * int(row.get("alloc_cpus") or 0))


def _gres(key: str) -> Callable[[dict[str, Any], Options], str]:
    """ReqGRES/AllocGRES (kept by Slurm for old readers such as job-metrics warehouses): the
    gres part of the TRES string, ``gres/gpu=2`` -> ``gpu:2``, ``gres/gpu:a100=2`` ->
    ``gpu:a100:2``."""
    def get(r: dict[str, Any], o: Options) -> str:
        items = [item[5:].replace("=", ":") for item in str(r.get(key) or "").split(",")
                 if item.startswith("gres/")]
        return ",".join(items)
    return get


FIELDS: list[Field] = [
    Field("Account", 10, _text("account"), keys=("account",)),
    Field("AllocCPUS", 10, _text("alloc_cpus"), cut=False, keys=("alloc_cpus",)),
    Field("AllocNodes", 10, lambda r, o: str(r.get("nnodes") if r.get("alloc_tres") else 0),
          cut=False, keys=("nnodes", "alloc_tres")),
    Field("AllocGRES", 12, _gres("alloc_tres"), keys=("alloc_tres",)),
    Field("AllocTRES", 10, _text("alloc_tres"), keys=("alloc_tres",)),
    Field("AveRSS", 10, lambda r, o: _units(r.get("ave_rss_kb"), "KMGTP", o), cut=False,
          keys=("ave_rss_kb",)),
    Field("Billing", 10, _billing, cut=False, keys=("billing",)),
    Field("Cluster", 10, _text("cluster"), keys=("cluster",)),
    Field("Comment", 14, _text("comment"), keys=("comment",)),
    Field("Constraints", 19, _text("constraints"), keys=("constraints",)),
    Field("CPUTime", 10, _cpu_time, cut=False, keys=("elapsed", "alloc_cpus")),
    Field("CPUTimeRAW", 10, lambda r, o: str(int(r.get("elapsed") or 0)
                                             * int(r.get("alloc_cpus") or 0)), cut=False,
          keys=("elapsed", "alloc_cpus")),
    Field("DerivedExitCode", 15, _text("derived_exit_code"), keys=("derived_exit_code",)),
    Field("Elapsed", 10, lambda r, o: fmt_duration(r.get("elapsed") or 0), cut=False,
          keys=("elapsed",)),
    Field("ElapsedRaw", 10, lambda r, o: str(int(r.get("elapsed") or 0)), cut=False,
          keys=("elapsed",)),
    Field("Eligible", 19, _date("eligible"), cut=False, keys=("eligible",)),
    Field("End", 19, _date("end"), cut=False, keys=("end",)),
    Field("ExitCode", 8, _text("exit_code"), keys=("exit_code",)),
    Field("GID", 6, lambda r, o: "" if r.get("kind") == "step" else str(r.get("gid", "")),
          cut=False, keys=("gid",)),
    Field("GPUHours", 10, _number("gpu_hours", ".4f"), cut=False, keys=("gpu_hours",)),
    Field("GPUMemMax", 10, lambda r, o: _simulated(r, _units(r.get("gpu_mem_max_mb"), "MGTP", o)),
          cut=False, keys=("gpu_mem_max_mb", "gpu_simulated")),
    Field("GPUUtil", 10, lambda r, o: "" if r.get("gpu_util") is None
          else _simulated(r, f"{float(r['gpu_util']):.1f}%"), cut=False,
          keys=("gpu_util", "gpu_simulated")),
    Field("Group", 9, _group, keys=("gid",)),
    # kiln's: the run's GPU-hours below [scheduler.idle_gpu] below_util ("" when not watched)
    Field("IdleGPUHours", 12, _number("idle_gpu_hours", ".4f"), cut=False,
          keys=("idle_gpu_hours",)),
    Field("JobID", -12, _text("job_id"), keys=("job_id",)),
    Field("JobIDRaw", -12, _text("job_id_raw"), keys=("job_id_raw",)),
    Field("JobName", 10, _text("name"), keys=("name",)),
    Field("MaxRSS", 10, lambda r, o: _units(r.get("max_rss_kb"), "KMGTP", o), cut=False,
          keys=("max_rss_kb",)),
    Field("NCPUS", 10, _text("alloc_cpus"), cut=False, keys=("alloc_cpus",)),
    Field("NNodes", 8, _text("nnodes"), cut=False, keys=("nnodes",)),
    Field("NodeList", 15, lambda r, o: r.get("node_list") or
          ("None assigned" if r.get("kind") == "job" else ""), keys=("node_list",)),
    Field("NTasks", 8, lambda r, o: "" if r.get("kind") == "job" else str(r.get("ntasks", "")),
          cut=False, keys=("ntasks",)),
    Field("Partition", 10, _text("partition"), keys=("partition",)),
    Field("Priority", 10, _text("priority"), cut=False, keys=("priority",)),
    Field("QOS", 10, _text("qos"), keys=("qos",)),
    Field("Reason", 22, _text("reason"), keys=("reason",)),
    Field("ReqCPUS", 8, lambda r, o: "" if r.get("kind") == "step" else str(r.get("req_cpus")),
          cut=False, keys=("req_cpus",)),
    Field("ReqGRES", 12, _gres("req_tres"), keys=("req_tres",)),
    Field("ReqMem", 10, _text("req_mem"), keys=("req_mem",)),
    Field("ReqTRES", 10, _text("req_tres"), keys=("req_tres",)),
    Field("Reservation", 20, _text("reservation"), keys=("reservation",)),
    Field("Start", 19, _date("start"), cut=False, keys=("start",)),
    Field("State", 10, _text("state"), keys=("state",)),
    Field("SystemCPU", 10, lambda r, o: fmt_cpu_time(r.get("system_cpu")), cut=False,
          keys=("system_cpu",)),
    Field("Submit", 19, _date("submit"), cut=False, keys=("submit",)),
    Field("Timelimit", 10, _limit, cut=False, keys=("has_limit", "time_limit")),
    Field("TotalCPU", 10, lambda r, o: fmt_cpu_time(r.get("total_cpu")), cut=False,
          keys=("total_cpu",)),
    Field("TimelimitRaw", 10, _limit_raw, cut=False, keys=("has_limit", "time_limit")),
    Field("UID", 6, lambda r, o: "" if r.get("kind") == "step" else str(r.get("uid", "")),
          cut=False, keys=("uid",)),
    Field("User", 9, _text("user"), keys=("user",)),
    Field("UserCPU", 10, lambda r, o: fmt_cpu_time(r.get("user_cpu")), cut=False,
          keys=("user_cpu",)),
    Field("WorkDir", 20, lambda r, o: "" if r.get("kind") == "step" else r.get("workdir") or "",
          keys=("workdir",)),
]
FIELDS_BY_NAME = {f.name.lower(): f for f in FIELDS}


@dataclass(frozen=True, slots=True)
class Column:
    field: Field
    width: int  # negative: left-aligned


def parse_format(text: str) -> list[Column]:
    """'JobID,JobName%12,State%-20' -> columns; an unknown name is Slurm's error."""
    columns = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, pct, width = item.partition("%")
        field = FIELDS_BY_NAME.get(name.lower())
        if field is None:
            fail(f'Invalid field requested: "{name}"')
        if pct:
            try:
                columns.append(Column(field, int(width)))
            except ValueError:
                fail(f'Invalid field requested: "{item}"')
        else:
            columns.append(Column(field, field.width))
    return columns


def fit(value: str, width: int, cut: bool) -> str:
    """Slurm's print_fields_str: cut to |width|-1 plus '+', then pad (negative width: left)."""
    size = abs(width)
    if not size:
        return value
    if cut and len(value) > size:
        value = value[:size - 1] + "+"
    return value.ljust(size) if width < 0 else value.rjust(size)


def render(rows: list[dict[str, Any]], columns: list[Column], opts: Options, *,
           header: bool, delimiter: str | None, trailing: bool) -> list[str]:
    """Lines of output: fixed width (delimiter None) or parsable. A control character in a
    field (a job name, a comment) is shown as ``?``, whoever wrote it and whenever."""
    lines: list[str] = []
    if delimiter is None:
        if header:
            lines.append("".join(fit(c.field.name[:abs(c.width)] if c.width else c.field.name,
                                     c.width, False) + " " for c in columns))
            lines.append("".join("-" * abs(c.width) + " " for c in columns))
        for row in rows:
            lines.append("".join(fit(c.field.get(row, opts), c.width, c.field.cut) + " "
                                 for c in columns))
        return printable_lines(lines)
    end = delimiter if trailing else ""
    if header:
        lines.append(delimiter.join(c.field.name for c in columns) + end)
    for row in rows:
        # field by field: the delimiter is the user's own, whatever it is
        lines.append(delimiter.join(printable(c.field.get(row, opts)) for c in columns) + end)
    return lines


# --- selection -------------------------------------------------------------------------------


def split_ids(text: str) -> list[str]:
    """'1,2_[0-3,7],3.batch' -> items; commas inside brackets belong to the array range."""
    items, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [i.strip() for i in items if i.strip()]


@dataclass(frozen=True, slots=True)
class JobSpec:
    job: str  # as schedd reads it: '123', '123_4', '123_[0-3]'
    step: str | None  # 'batch', 'extern', '0', or None for the whole job


def parse_job_specs(values: list[str]) -> list[JobSpec]:
    specs = []
    for text in values:
        for item in split_ids(text):
            m = _JOB_STEP.match(item)
            if not m:
                raise CommandError(f"{PROG}: fatal: Bad job/step specified: {item}",
                                   prefixed=False)
            job = item.split(".", 1)[0]
            specs.append(JobSpec(job, m.group(3)))
    return specs


_RELATIVE = re.compile(r"^now\s*([+-])\s*(\d+)\s*([a-z]*)$")
_UNITS = {"": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
          "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600,
          "d": 86400, "day": 86400, "days": 86400, "w": 604800, "week": 604800,
          "weeks": 604800}
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")


def parse_time_arg(text: str, now: float, option: str) -> float:
    """sacct -S/-E and sreport start=/end=: now[{+|-}N[unit]], HH:MM[:SS] (today),
    YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], today, midnight, noon, or POSIX seconds."""
    s = text.strip().lower()
    m = _RELATIVE.match(s)
    if m:
        if m.group(3) not in _UNITS:
            raise CommandError(f"Invalid time specification for {option}: {text}")
        delta = int(m.group(2)) * _UNITS[m.group(3)]
        return now + delta if m.group(1) == "+" else now - delta
    m = _CLOCK.match(s)
    if m:
        t = time.localtime(now)
        return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, int(m.group(1)), int(m.group(2)),
                            int(m.group(3) or 0), 0, 0, -1))
    if s.isdigit() and len(s) > 8:
        return float(s)
    if s == "midnight":
        s = "today"
    try:
        return parse_begin(s, now)
    except OptionError:
        raise CommandError(f"Invalid time specification for {option}: {text}") from None


def midnight(now: float) -> float:
    t = time.localtime(now)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))


def build_query(values: dict[str, list[str | None]], specs: list[JobSpec],
                now: float) -> tuple[dict[str, Any], float | None, float | None]:
    """The acct_jobs body, and the window (for --truncate)."""
    def last(key: str) -> str | None:
        got = values.get(key)
        return got[-1] if got else None

    def listed(key: str) -> list[str]:
        return [v.strip() for text in values.get(key) or [] for v in (text or "").split(",")
                if v.strip()]

    query: dict[str, Any] = {}
    if specs:
        query["job_ids"] = list(dict.fromkeys(s.job for s in specs))
    for key, dest in (("accounts", "accounts"), ("name", "names"), ("partition", "partitions"),
                      ("qos", "qos")):
        if listed(key):
            query[dest] = listed(key)
    users = listed("user")
    if users:
        try:
            query["users"] = check_users(users)
        except OptionError as exc:
            fail(exc.message)
    elif "allusers" not in values and not specs and os.getuid() != 0:
        query["users"] = [getpass.getuser()]
    if values.get("nodelist"):
        from kiln.slurm.hostlist import HostlistError, expand

        try:
            query["nodes"] = expand(last("nodelist") or "")
        except HostlistError:
            fail(f"Invalid node list: {last('nodelist')}")
    if values.get("state"):
        try:
            states, _ = parse_states(",".join(listed("state")))
        except OptionError as exc:
            fail(exc.message)
        if states:
            query["states"] = states
    start = parse_time_arg(last("starttime"), now, "--starttime") if last("starttime") else None
    end = parse_time_arg(last("endtime"), now, "--endtime") if last("endtime") else None
    if start is None:
        if values.get("state") and not specs:
            start = now  # Slurm: with --state and no start, only what is in that state now
        elif not specs:
            start = midnight(now)
    if end is None and start is not None:
        end = now
    if start is not None and end is not None and end < start:
        fail("start time is after end time")
    query["start"], query["end"] = start, end
    query["steps"] = "allocations" not in values
    if "duplicates" in values:
        query["duplicates"] = True  # one record per run of a requeued job
    return query, start, end


def keep_steps(rows: list[dict[str, Any]], specs: list[JobSpec]) -> list[dict[str, Any]]:
    """-j 123.batch: when every id names a step, only those steps' rows are shown."""
    if not specs or any(s.step is None for s in specs):
        return rows
    wanted = {f"{s.job}.{s.step}" for s in specs}
    return [r for r in rows if r.get("kind") == "step"
            and (r["job_id"] in wanted or r["job_id_raw"] in wanted)]


def truncate(rows: list[dict[str, Any]], start: float | None, end: float | None,
             now: float) -> list[dict[str, Any]]:
    """-T: start and end times cut to the window, elapsed recomputed."""
    out = []
    for row in rows:
        row = dict(row)
        if row.get("start"):
            if start is not None:
                row["start"] = max(row["start"], start)
            stop = row.get("end") or now
            if end is not None:
                stop = min(stop, end)
                if row.get("end"):
                    row["end"] = stop
            row["elapsed"] = max(int(stop) - int(row["start"]), 0)
        out.append(row)
    return out


# --- JSON ------------------------------------------------------------------------------------


def _exit_json(text: str) -> dict[str, Any]:
    code, _, sig = (text or "0:0").partition(":")
    status = "SUCCESS" if code == "0" and sig in ("", "0") else (
        "SIGNALED" if sig not in ("", "0") else "FAILED")
    out: dict[str, Any] = {"status": status, "return_code": int(code or 0)}
    if sig not in ("", "0"):
        out["signal"] = {"signal_id": int(sig)}
    return out


def _tres_json(text: str) -> list[dict[str, Any]]:
    items = []
    for part in (text or "").split(","):
        if "=" not in part:
            continue
        name, _, count = part.partition("=")
        kind, _, sub = name.partition("/")
        items.append({"type": kind, "name": sub or None, "count": count})
    return items


def json_doc(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """sacct --json in the shape of Slurm's data_parser v0.0.38 (the keys tools read), plus
    kiln's own figures under "kiln"."""
    from cli.sacct_json import cpu_times  # time.total/user/system, spelt alike in every version

    jobs: list[dict[str, Any]] = []
    for row in rows:
        times = {"elapsed": int(row.get("elapsed") or 0), "start": int(row.get("start") or 0),
                 "end": int(row.get("end") or 0), "submission": int(row.get("submit") or 0),
                 "eligible": int(row.get("eligible") or 0), **cpu_times(row)}
        if row["kind"] == "step":
            if jobs:
                jobs[-1]["steps"].append({
                    "step": {"id": row["job_id_raw"], "name": row["name"]},
                    "state": row["state"], "exit_code": _exit_json(row["exit_code"]),
                    "nodes": {"range": row.get("node_list") or "",
                              "count": row.get("nnodes") or 0},
                    "tasks": {"count": row.get("ntasks") or 0}, "time": times,
                    "tres": {"allocated": _tres_json(row.get("alloc_tres") or "")}})
            continue
        limit = row.get("time_limit")
        jobs.append({
            "account": row["account"], "allocation_nodes": row.get("nnodes") or 0,
            "array": {"job_id": row.get("array_job_id") or 0,
                      "task_id": row.get("array_task_id")},
            "association": {"account": row["account"], "cluster": row["cluster"],
                            "partition": None, "user": row["user"]},
            "cluster": row["cluster"], "constraints": row.get("constraints") or "",
            "derived_exit_code": _exit_json(row.get("derived_exit_code") or "0:0"),
            "time": {**times, "limit": None if limit is None else -(-int(limit) // 60)},
            "exit_code": _exit_json(row["exit_code"]), "group": _group(row, Options(0)),
            "job_id": int(row["job_id_raw"]), "name": row["name"],
            "nodes": row.get("node_list") or "", "partition": row["partition"],
            "priority": row.get("priority") or 0, "qos": row["qos"],
            "required": {"CPUs": row.get("req_cpus") or 0},
            "state": {"current": row["state_base"], "reason": row.get("reason") or "None"},
            "steps": [],
            "tres": {"allocated": _tres_json(row.get("alloc_tres") or ""),
                     "requested": _tres_json(row.get("req_tres") or "")},
            "user": row["user"], "working_directory": row.get("workdir") or "",
            "kiln": {"gpu_hours": row.get("gpu_hours"), "billing": row.get("billing"),
                     "gpu_util": row.get("gpu_util"), "gpu_mem_max_mb": row.get("gpu_mem_max_mb"),
                     "max_rss_kb": row.get("max_rss_kb")},
        })
    return {"meta": {"plugin": {"type": "openapi/dbv0.0.38", "name": "kiln"},
                     "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5},
                               "release": "22.05.8"}},
            "errors": [], "jobs": jobs}


# --- command ---------------------------------------------------------------------------------

USAGE = """Usage: sacct [options]
  -a, --allusers  -A, --accounts  -b, --brief  -D, --duplicates  -e, --helpformat
  -E, --endtime  -j, --jobs  -l, --long  -M, --clusters  -n, --noheader  -N, --nodelist
  -o, --format  -p, --parsable  -P, --parsable2  -q, --qos  -r, --partition
  -s, --state  -S, --starttime  -T, --truncate  -u, --user  -X, --allocations
  --delimiter  --json  --name  --noconvert  -V, --version"""


def refused(args: Args) -> None:
    """What sacct refuses or warns about, before it answers --help."""
    args.refuse_positional("Unknown arguments: {words}")
    for opt, _ in args.parsed:
        if opt.dest in REFUSED:
            fail(f"--{opt.long} is not supported by kiln: {REFUSED[opt.dest]}")
        if IGNORED.get(opt.dest):
            print(f"{PROG}: warning: --{opt.long} is ignored: {IGNORED[opt.dest]}",
                  file=sys.stderr)


def collect(args: Args) -> dict[str, list[str | None]]:
    """Each dest's values: all of them for a repeatable option, else the last."""
    values: dict[str, list[str | None]] = {}
    for opt, value in args.parsed:
        if opt.dest in REPEATABLE:
            values.setdefault(opt.dest, []).append(value)
        else:
            values[opt.dest] = [value]
    return values


def choose_columns(values: dict[str, list[str | None]]) -> list[Column]:
    if values.get("format"):
        text = ",".join(v or "" for v in values["format"])
    elif "brief" in values:
        text = BRIEF_FORMAT
    elif "long" in values:
        text = LONG_FORMAT
    else:  # Slurm's input environment variable, then its default
        text = os.environ.get("SACCT_FORMAT") or DEFAULT_FORMAT
    return parse_format(text)


def print_field_names(fields: Sequence[Field]) -> None:
    """--helpformat (sacct's and sstat's): the field names, four to a line."""
    names = [f.name for f in fields]
    for i in range(0, len(names), 4):
        print("".join(n.ljust(20) for n in names[i:i + 4]).rstrip())


@command(PROG, TABLE, help=USAGE + "\n", check=refused)
def sacct(args: Args) -> int:
    values = collect(args)
    if "helpformat" in values:
        print_field_names(FIELDS)
        return 0
    columns = choose_columns(values)
    specs = parse_job_specs([v or "" for v in values.get("jobs", [])])
    now = time.time()
    query, start, end = build_query(values, specs, now)
    if "json" not in values:
        wanted = {k for c in columns for k in c.field.keys}
        if "truncate" in values:
            wanted |= {"start", "end", "elapsed"}
        query["fields"] = sorted(wanted)
    with Client() as client:
        reply = client.call("acct_jobs", query)
    rows = keep_steps(reply.get("rows", []), specs)
    opts = Options(float(reply.get("now") or now), "noconvert" in values)
    if "truncate" in values:
        rows = truncate(rows, start, end, opts.now)
    if "json" in values:
        import json

        version = json_version(values)
        if version:
            from cli import sacct_json

            doc = sacct_json.document(rows, version)
        else:
            doc = json_doc(rows)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    parsable = "parsable" in values or "parsable2" in values
    delimiter = None
    if parsable:
        delimiter = (values.get("delimiter") or ["|"])[-1] or "|"
    lines = render(rows, columns, opts, header="noheader" not in values, delimiter=delimiter,
                   trailing="parsable" in values)
    write_lines(lines)
    return 0


def json_version(values: dict[str, list[str | None]]) -> str:
    """--json[=v0.0.40|v0.0.41]: the data_parser asked for ('' = v0.0.38)."""
    from cli.data_parser import VersionError, version_of

    try:
        return version_of((values.get("json") or [None])[-1])
    except VersionError as exc:
        fail(str(exc))


main = sacct.main


if __name__ == "__main__":
    sys.exit(main())
