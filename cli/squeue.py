"""``squeue``: the job queue in Slurm's columns.

Default layout ``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R``; ``-o`` with Slurm's ``%`` fields,
``-O`` with long names; filters go to schedd, formatting happens here. Pending array tasks
are folded into one ``123_[4-9]`` line unless ``-r`` asks for one line per task, as Slurm does.
"""

from __future__ import annotations

import gc
import os
import sys
import time

from cli.arrays import fold_pending_arrays
from cli.core import Args, CommandError, command, fail, warn_ignored
from cli.core.client import Client, ClientError
from cli.core.formats import (
    JOB_FIELDS,
    JOB_LETTERS,
    JOB_LONG_NAMES,
    JOB_LONG_PREFIXES,
    Column,
    Ctx,
    Table,
    job_attrs,
    job_num_cpus,
    job_num_nodes,
    job_sort_key,
    job_tres_per_node,
    parse_long_format,
    parse_percent_format,
    render,
    render_table,
    sort_column,
    uniform_key,
)
from cli.core.options import (
    NO_ARG,
    OPTIONAL,
    Opt,
    OptionError,
    OptionTable,
    check_users,
    env_defaults,
    list_filters,
    parse_states,
)

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

PROG = "squeue"
DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"

TABLE = OptionTable([
    Opt("accounts", "A"), Opt("account", "", dest="accounts"), Opt("all", "a", NO_ARG),
    Opt("array", "r", NO_ARG), Opt("array-unique", "", NO_ARG), Opt("Format", "O"),
    Opt("format", "o"), Opt("federation", "", NO_ARG), Opt("help", "", NO_ARG),
    Opt("hide", "", NO_ARG), Opt("iterate", "i"), Opt("jobs", "j", OPTIONAL),
    Opt("job", "", OPTIONAL, dest="jobs"), Opt("local", "", NO_ARG), Opt("long", "l", NO_ARG),
    Opt("licenses", "L"), Opt("cluster", "", dest="clusters"), Opt("clusters", "M"),
    Opt("me", "", NO_ARG), Opt("name", "n"), Opt("noconvert", "", NO_ARG),
    Opt("node", "", dest="nodelist"), Opt("nodes", "", dest="nodelist"), Opt("nodelist", "w"),
    Opt("noheader", "h", NO_ARG), Opt("partitions", "p"), Opt("partition", "", dest="partitions"),
    Opt("priority", "P", NO_ARG), Opt("qos", "q"), Opt("reservation", "R"),
    Opt("sibling", "", NO_ARG), Opt("sort", "S"), Opt("start", "", NO_ARG),
    Opt("steps", "s", OPTIONAL), Opt("states", "t"), Opt("state", "", dest="states"),
    Opt("usage", "", NO_ARG), Opt("user", "u", dest="users"), Opt("users", "", dest="users"),
    Opt("verbose", "v", NO_ARG), Opt("version", "V", NO_ARG), Opt("json", "", OPTIONAL),
    Opt("yaml", "", NO_ARG), Opt("only-job-state", "", NO_ARG),
])
# Accepted options that mean nothing on kiln: one warning line each.
IGNORED = {"clusters": "kiln schedules one cluster", "federation": "kiln has no federation",
           "sibling": "kiln has no federation"}
# Options that would change what is shown and that kiln cannot honour: refused.
REFUSED = {"steps": "--steps is not supported: list a job's steps with sacct -j JOBID",
           "yaml": "--yaml is not supported: use --json"}



# squeue's input environment variables (squeue(1)), under the command line
ENV_VARS = {"SQUEUE_ACCOUNT": "accounts", "SQUEUE_ALL": "all", "SQUEUE_ARRAY": "array",
            "SQUEUE_LICENSES": "licenses", "SQUEUE_NAMES": "name",
            "SQUEUE_PARTITION": "partitions", "SQUEUE_PRIORITY": "priority", "SQUEUE_QOS": "qos",
            "SQUEUE_SORT": "sort", "SQUEUE_STATES": "states", "SQUEUE_USERS": "users"}
ENV_FLAGS = frozenset({"all", "array", "priority"})


def from_environment(values: dict[str, str | None]) -> None:
    """SQUEUE_* where the command line is silent; SQUEUE_FORMAT2 (-O) before SQUEUE_FORMAT
    (-o), and neither when the command line gives a format (or --long/--start)."""
    env_defaults(values, ENV_VARS, ENV_FLAGS)
    if not {"format", "Format", "long", "start"} & values.keys():
        if os.environ.get("SQUEUE_FORMAT2"):
            values["Format"] = os.environ["SQUEUE_FORMAT2"]
        elif os.environ.get("SQUEUE_FORMAT"):
            values["format"] = os.environ["SQUEUE_FORMAT"]


def json_version(values: dict[str, str | None]) -> str:
    """--json[=v0.0.40|v0.0.41]: the data_parser asked for ('' = v0.0.38)."""
    from cli.data_parser import VersionError, version_of

    try:
        return version_of(values.get("json"))
    except VersionError as exc:
        fail(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    return squeue.main(argv)


def parse_job_ids(text: str) -> list[str]:
    ids = [j.strip() for j in text.split(",") if j.strip()]
    for job_id in ids:
        base, _, task = job_id.partition("_")
        if not base.isdigit() or (task and not (task.isdigit() or task.startswith("["))):
            fail(f"Invalid job id: {job_id}")
    return ids


def build_query(values: dict[str, str | None], positional: list[str]) -> dict[str, Any]:
    """The query_jobs filter body from the options."""
    query: dict[str, Any] = {}
    jobs = values.get("jobs")
    if "jobs" in values and jobs is None and positional:
        jobs = positional.pop(0)
    if positional:
        fail(f"Unrecognized option: {positional[0]}")
    if jobs:
        query["job_ids"] = parse_job_ids(jobs)
    try:
        query.update(list_filters(values, {"users": "users", "accounts": "accounts",
                                           "partitions": "partitions", "qos": "qos",
                                           "name": "names"}))
        check_users(query.get("users", []))
    except OptionError as exc:
        fail(exc.message)
    if values.get("states"):
        try:
            states, all_states = parse_states(values["states"])
        except OptionError as exc:
            fail(exc.message)
        if states:
            query["states"] = states
        if all_states:
            query["all_states"] = True
    elif "start" in values:
        query["states"] = ["PENDING"]
    if "start" in values:
        query["start_estimates"] = True
    return query


def choose_columns(values: dict[str, str | None]) -> tuple[str, list[Column]]:
    if values.get("format") and values.get("Format"):
        fail("-O (--Format) is incompatible with -o (--format)")
    if values.get("Format"):
        columns, unknown = parse_long_format(values["Format"], JOB_LONG_NAMES,
                                             JOB_LONG_PREFIXES)
        if unknown:  # a name squeue does not know: nothing is printed (no shifted columns)
            fail(*(f"Invalid job format specification: {name}" for name in unknown))
        return "", columns
    fmt = values.get("format")
    if not fmt:
        if "start" in values:
            fmt = START_FORMAT
        elif "long" in values:
            fmt = LONG_FORMAT
        else:
            fmt = DEFAULT_FORMAT
    prefix, columns, unknown = parse_percent_format(fmt, JOB_LETTERS)
    for letter in unknown:
        print(f"{PROG}: error: Invalid job format specification: {letter}", file=sys.stderr)
    return prefix, columns


def sort_jobs(jobs: list[dict[str, Any]], spec: str | None, ctx: Ctx,
              start: bool) -> list[dict[str, Any]]:
    """-S: comma list of [+|-]letter, applied right to left with stable sorts. Default
    'P,t,-p' (partition, state as printed, priority descending); --start: by start time."""
    # Ties keep job-id order (array tasks by task id), so the output is stable between calls.
    jobs.sort(key=lambda j: (j.get("array_job_id") or j["id"], j.get("array_task_id") or -1))
    for key, reverse in reversed(sort_keys(spec, start)):
        getter = job_sort_key(key)
        jobs.sort(key=lambda j, g=getter: g(j, ctx), reverse=reverse)
    return jobs


def sort_keys(spec: str | None, start: bool) -> list[tuple[str, bool]]:
    """-S as (field key, descending) pairs, left to right; an unknown letter is an error."""
    keys = []
    for item in reversed([s.strip() for s in (spec or ("S" if start else "P,t,-p")).split(",")]):
        key = JOB_LETTERS.get(item.lstrip("+-")) if item else ""
        if key is None:
            fail(f"Invalid sort specification: {item}")
        if key:
            keys.append((key, item.startswith("-")))
    return keys[::-1]


def sort_order(table: Table, spec: str | None, ctx: Ctx, start: bool,
               uniform: frozenset[str] = frozenset()) -> list[int]:
    """sort_jobs for a Table: the jobs' positions in display order, by the same stable sorts,
    each over a whole column of keys (none for a key that is the same for every job)."""
    order = list(range(len(table["id"])))
    ids = sort_column("jobid", table, ctx)
    order.sort(key=ids.__getitem__)
    for key, reverse in reversed(sort_keys(spec, start)):
        if not uniform_key(key, table, uniform):
            order.sort(key=sort_column(key, table, ctx).__getitem__, reverse=reverse)
    return order


USAGE = """Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]
              [-n name] [-o format] [-p partitions] [--qos qos]
              [--reservation reservation] [--sort fields] [--start]
              [--steps] [-t states] [-u user_name] [--usage]
              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]
              [-ahjlrsv]
"""


@command(PROG, TABLE, help=USAGE)
def squeue(args: Args) -> int:
    values, positional = args.given, args.positional
    for dest, message in REFUSED.items():
        if dest in values:
            fail(message)
    warn_ignored(PROG, values, IGNORED)
    from_environment(values)
    query = build_query(values, positional)
    prefix, columns = choose_columns(values)
    if values.get("iterate") is not None:
        return iterate(values, query, prefix, columns)
    return show_queue(values, query, prefix, columns)


def iterate(values: dict[str, str | None], query: dict[str, Any], prefix: str,
            columns: list[Column]) -> int:
    """-i SECONDS: print the queue again every SECONDS, each time under a date line, until
    interrupted (Ctrl-C exits 0, as Slurm's does)."""
    text = str(values.get("iterate") or "").strip()
    if not text.isdigit() or int(text) == 0:
        fail(f"invalid --iterate argument: {text}")
    try:
        while True:
            print(time.strftime("%a %b %d %H:%M:%S %Y"), flush=True)
            show_queue(values, dict(query), prefix, columns)
            sys.stdout.write("\n")
            sys.stdout.flush()
            time.sleep(int(text))
    except KeyboardInterrupt:
        return 0


def local_filters(jobs: list[dict[str, Any]], values: dict[str, str | None]
                  ) -> list[dict[str, Any]]:
    """-R/--reservation and -L/--licenses: filters schedd's query has no field for."""
    if values.get("reservation"):
        wanted = set(str(values["reservation"]).split(","))
        jobs = [j for j in jobs if j.get("reservation") in wanted]
    if values.get("licenses"):
        wanted = {w.split(":")[0] for w in str(values["licenses"]).split(",")}
        jobs = [j for j in jobs if wanted & {w.split(":")[0] for w in str(
            j.get("licenses") or "").split(",") if w}]
    return jobs


# What folding, the default order and the id check read, whatever the format.
BASE_ATTRS = ("id", "array_job_id", "array_task_id", "state", "reason", "restart_count",
              "array_max_running")


def wanted_fields(values: dict[str, str | None], columns: list[Column]) -> list[str]:
    """The Job attributes this listing reads (columns, -S keys, -R/-L filters): squeue asks
    schedd for only those, column by column, rather than for whole jobs."""
    spec = values.get("sort") or ("-p" if "priority" in values else None)
    spec = spec or ("S" if "start" in values else "P,t,-p")
    keys = [c.key for c in columns]
    keys += [JOB_LETTERS[k] for k in (i.strip().lstrip("+-") for i in spec.split(","))
             if k in JOB_LETTERS]
    fields = [*BASE_ATTRS, *job_attrs(keys)]
    if values.get("reservation"):
        fields.append("reservation")
    if values.get("licenses"):
        fields.append("licenses")
    return list(dict.fromkeys(fields))


def reply_table(reply: dict[str, Any]) -> tuple[Table, frozenset[str]] | None:
    """The columns reply as a Table, and the attributes that are the same for every job;
    None for whole jobs (--json, or a schedd without "fields")."""
    if "values" not in reply:
        return None
    table = dict(zip(reply.get("columns") or [], reply["values"], strict=True))
    count = int(reply.get("count") or 0)
    constant = reply.get("constant") or {}
    for name, value in constant.items():
        table[name] = [value] * count
    return table, frozenset(constant)


def table_records(table: Table) -> list[dict[str, Any]]:
    names = list(table)
    return [dict(zip(names, vals, strict=True)) for vals in zip(*table.values(), strict=True)]


def records_table(records: list[dict[str, Any]], names: list[str]) -> Table:
    return {name: [r.get(name) for r in records] for name in names}


def fold_table(table: Table, uniform: frozenset[str]) -> tuple[Table, frozenset[str]]:
    """fold_pending_arrays for a Table: only array tasks go through dictionaries. They come
    after the other jobs, in their own order: sort_order's first (stable) sort by job id
    restores the order fold_pending_arrays would have given. A uniform attribute stays so
    when the folded records keep its value."""
    names = [n for n in table if n != "display_id"]
    tids = table["array_task_id"]
    plain = [i for i, t in enumerate(tids) if t is None]
    tasks = [i for i, t in enumerate(tids) if t is not None]
    folded = fold_pending_arrays([{n: table[n][i] for n in names} for i in tasks])
    out = {n: ([table[n][0]] * len(plain) if n in uniform and plain else
               list(map(table[n].__getitem__, plain))) + [r.get(n) for r in folded]
           for n in names}
    display = table.get("display_id")
    out["display_id"] = ([display[i] for i in plain] if display else [None] * len(plain)) + [
        r.get("display_id") for r in folded]
    kept = frozenset(a for a in uniform if a in table and table[a] and all(
        r.get(a) == table[a][0] for r in folded))
    return out, kept


def prepare_table(table: Table, uniform: frozenset[str], values: dict[str, str | None],
                  fold: bool) -> tuple[Table, frozenset[str]]:
    """-R/-L filters (on dictionaries: rare) and array folding (only when a job is an array
    task), with the attributes still uniform afterwards."""
    if values.get("reservation") or values.get("licenses"):
        table = records_table(local_filters(table_records(table), values), list(table))
    if fold and table["array_task_id"].count(None) != len(table["id"]):
        return fold_table(table, uniform)
    return table, uniform


def show_queue(values: dict[str, str | None], query: dict[str, Any], prefix: str,
               columns: list[Column]) -> int:
    """One listing. The collector stays off meanwhile: the reply is tens of thousands of
    acyclic objects, and its passes over them cost squeue a third of its time."""
    gc.disable()
    try:
        return _show_queue(values, query, prefix, columns)
    finally:
        gc.enable()


def _show_queue(values: dict[str, str | None], query: dict[str, Any], prefix: str,
                columns: list[Column]) -> int:
    if "json" not in values:  # --json prints whole jobs
        query = {**query, "fields": wanted_fields(values, columns)}
    try:
        with Client() as client:
            reply = client.call("query_jobs", query)
    except ClientError as exc:
        raise CommandError(f"slurm_load_jobs error: {exc.message}", prefixed=False) from None
    ids = query.get("job_ids", [])
    table, uniform = reply_table(reply) or (None, frozenset())
    count = len(table["id"]) if table is not None else len(reply.get("jobs") or [])
    if not count and len(ids) == 1 and ids[0].isdigit():
        fail("slurm_load_jobs error: Invalid job id specified", prefixed=False)
    ctx = Ctx(float(reply.get("now") or time.time()), "start" in values)
    fold = "array" not in values and not any("_" in i for i in ids)
    sort = values.get("sort") or ("-p" if "priority" in values else None)
    header = "noheader" not in values
    lines = []
    if table is None:
        jobs = local_filters(reply.get("jobs") or [], values)
        if "json" in values:
            return print_json(jobs, ctx, json_version(values), values)
        jobs = sort_jobs(fold_pending_arrays(jobs) if fold else jobs, sort, ctx,
                         "start" in values)
        body = render(jobs, prefix, columns, JOB_FIELDS, ctx, header)
    else:
        table, uniform = prepare_table(table, uniform, values, fold)
        order = sort_order(table, sort, ctx, "start" in values, uniform)
        body = render_table(table, order, prefix, columns, ctx, header, uniform)
    if "long" in values:
        lines.append(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(ctx.now)))
    lines += body
    if lines:
        lines.append("")
        sys.stdout.write("\n".join(lines))
    return 0


def json_job(job: dict[str, Any], ctx: Ctx) -> dict[str, Any]:
    """One job in the key names of Slurm's squeue --json (data_parser v0.0.38) that tools
    read; times are POSIX seconds, time_limit minutes as Slurm reports it."""
    limit = job.get("time_limit")
    return {
        "job_id": job["id"], "array_job_id": job.get("array_job_id") or 0,
        "array_task_id": job.get("array_task_id"), "name": job.get("name", ""),
        "user_name": job.get("user", ""), "user_id": job.get("uid"),
        "group_id": job.get("gid"), "account": job.get("account", ""),
        "partition": job.get("partition", ""), "qos": job.get("qos", ""),
        "job_state": job["state"], "state_reason": job.get("reason", "None"),
        "priority": job.get("priority", 0), "nodes": job.get("node_list", ""),
        "node_count": job_num_nodes(job), "cpus": job_num_cpus(job),
        "tasks": job.get("num_tasks", 1), "time_limit": None if limit is None else limit // 60,
        "submit_time": int(job.get("submit_time") or 0),
        "start_time": int(job.get("start_time") or 0), "end_time": int(job.get("end_time") or 0),
        "current_working_directory": job.get("workdir", ""), "command": job.get("command", ""),
        "standard_output": job.get("stdout", ""), "standard_error": job.get("stderr", ""),
        "exit_code": job.get("exit_code", 0), "dependency": job.get("dependency", ""),
        "tres_per_node": "" if job_tres_per_node(job) == "N/A" else job_tres_per_node(job),
    }


def print_json(jobs: list[dict[str, Any]], ctx: Ctx, version: str = "",
               values: dict[str, str | None] | None = None) -> int:
    import json

    if version:
        from cli import squeue_json

        doc = squeue_json.document(jobs, ctx, version, values or {})
    else:
        from cli.core.formats import openapi_v38_meta

        doc = {"meta": openapi_v38_meta(), "errors": [],
               "jobs": [json_job(j, ctx) for j in jobs]}
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
