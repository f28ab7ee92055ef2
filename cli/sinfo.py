"""``sinfo``: partitions and nodes, one line per group of nodes that print alike.

Like Slurm, a line is a set of nodes of one partition whose displayed fields are all equal
(the node list and counts are the aggregates); ``-N`` gives one line per node, ``-s`` one per
partition, ``-R`` the reasons of down and drained nodes. ``%G`` shows ``gpu:<type>:<count>``,
with ``(S:<sockets>)`` where the GPUs' CPU affinity is known (``cli.nodeview.node_gres``).
"""

from __future__ import annotations

import os
import sys

from cli.core import Args, CommandError, command, fail, write_lines
from cli.core.client import Client, ClientError
from cli.core.formats import (
    Column,
    fmt_limit_minutes,
    fmt_time,
    pad,
    parse_long_format,
    parse_percent_format,
)
from cli.core.options import (
    NO_ARG,
    OPTIONAL,
    Opt,
    OptionTable,
    env_defaults,
)
from cli.nodeview import node_gres, node_gres_used, node_state, partition_nodes
from kiln.slurm.hostlist import compress, expand

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

PROG = "sinfo"

TABLE = OptionTable([
    Opt("all", "a", NO_ARG), Opt("dead", "d", NO_ARG), Opt("exact", "e", NO_ARG),
    Opt("federation", "", NO_ARG), Opt("noheader", "h", NO_ARG), Opt("help", "", NO_ARG),
    Opt("hide", "", NO_ARG), Opt("iterate", "i"), Opt("local", "", NO_ARG),
    Opt("long", "l", NO_ARG), Opt("cluster", "", dest="clusters"), Opt("clusters", "M"),
    Opt("nodes", "n"), Opt("noconvert", "", NO_ARG), Opt("Node", "N", NO_ARG),
    Opt("format", "o"), Opt("Format", "O"), Opt("partition", "p"),
    Opt("responding", "r", NO_ARG), Opt("list-reasons", "R", NO_ARG),
    Opt("summarize", "s", NO_ARG), Opt("sort", "S"), Opt("states", "t"),
    Opt("reservation", "T", NO_ARG), Opt("usage", "", NO_ARG), Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG), Opt("json", "", OPTIONAL),
])

DEFAULT_FORMAT = "partition:9 ,available:.5 ,time:.10 ,nodes:.6 ,statecompact:.6 ,nodelist:0"
LONG_FORMAT = ("partition:9 ,available:.5 ,time:.10 ,size:.10 ,root:.4 ,oversubscribe:.8 ,"
               "groups:.10 ,nodes:.6 ,statelong:.11 ,nodelist:0")
NODE_FORMAT = "nodelist:0 ,nodes:.6 ,partition:.9 ,statecompact:6"
NODE_LONG_FORMAT = ("nodelist:0 ,nodes:.6 ,partition:.9 ,statelong:.11 ,cpus:4 ,"
                    "socketcorethread:.8 ,memory:.6 ,disk:.8 ,weight:.6 ,features:.8 ,reason:20")
SUMMARY_FORMAT = "partition:9 ,available:.5 ,time:.10 ,nodeaiot:.16 ,nodelist:0"
REASON_FORMAT = "reason:20 ,user:9 ,timestamp:19 ,nodelist:0"

Group = dict[str, "Any"]  # {"partition": dict, "nodes": [node dicts]}


def _category(node: dict[str, Any]) -> str:
    """A/I/O: allocated (some or all), idle, other (down, drained, ...)."""
    base = node_state(node).rstrip("*@^")  # not responding, a reboot pending or issued
    if base in ("alloc", "mix", "comp"):
        return "A"
    return "I" if base == "idle" else "O"


def _aiot(counts: dict[str, int]) -> str:
    total = sum(counts.values())
    return f"{counts.get('A', 0)}/{counts.get('I', 0)}/{counts.get('O', 0)}/{total}"


def _node_aiot(g: Group) -> str:
    counts: dict[str, int] = {}
    for n in g["nodes"]:
        counts[_category(n)] = counts.get(_category(n), 0) + 1
    return _aiot(counts)


def _cpu_aiot(g: Group) -> str:
    counts = {"A": 0, "I": 0, "O": 0}
    for n in g["nodes"]:
        cpus, alloc = int(n.get("cpus") or 0), int(n.get("alloc_cpus") or 0)
        if _category(n) == "O":
            counts["O"] += cpus
        else:
            counts["A"] += alloc
            counts["I"] += cpus - alloc
    return _aiot(counts)


def _part_name(g: Group, star: bool = True) -> str:
    p = g["partition"]
    return p["name"] + ("*" if star and p.get("default") else "")


def _first(g: Group) -> dict[str, Any]:
    return g["nodes"][0] if g["nodes"] else {}


SinfoGetter = "Callable[[Group], str]"

# key -> (header, getter, aggregate over the group's nodes)
FIELDS: dict[str, tuple[str, SinfoGetter, bool]] = {
    "partition": ("PARTITION", _part_name, False),
    "partitionname": ("PARTITION", lambda g: _part_name(g, star=False), False),
    "available": ("AVAIL", lambda g: "up" if str(g["partition"].get("state", "UP")).upper()
                  == "UP" else str(g["partition"].get("state")).lower(), False),
    "time": ("TIMELIMIT", lambda g: fmt_limit_minutes(g["partition"].get("max_time")), False),
    "defaulttime": ("DEFAULTTIME", lambda g: fmt_limit_minutes(
        g["partition"].get("default_time"), "n/a"), False),
    "nodes": ("NODES", lambda g: str(len(g["nodes"])), True),
    "statecompact": ("STATE", lambda g: node_state(_first(g)) if g["nodes"] else "n/a", False),
    "statelong": ("STATE", lambda g: node_state(_first(g), long=True) if g["nodes"] else "n/a",
                  False),
    "nodelist": ("NODELIST", lambda g: compress([n["name"] for n in g["nodes"]]), True),
    "hostnames": ("HOSTNAMES", lambda g: compress([n["name"] for n in g["nodes"]]), True),
    "cpus": ("CPUS", lambda g: str(_first(g).get("cpus", 0)), False),
    "cpusstate": ("CPUS(A/I/O/T)", _cpu_aiot, True),
    "memory": ("MEMORY", lambda g: str(_first(g).get("memory_mb", 0)), False),
    "allocmem": ("ALLOCMEM", lambda g: str(_first(g).get("alloc_mem_mb", 0)), False),
    "gres": ("GRES", lambda g: node_gres(_first(g)), False),
    "gresused": ("GRES_USED", lambda g: node_gres_used(_first(g)), False),
    "features": ("AVAIL_FEATURES", lambda g: ",".join(_first(g).get("features") or [])
                 or "(null)", False),
    "features_act": ("ACTIVE_FEATURES", lambda g: ",".join(_first(g).get("features") or [])
                     or "(null)", False),
    "reason": ("REASON", lambda g: _first(g).get("reason") or "none", False),
    "user": ("USER", lambda g: _first(g).get("reason_user") or "Unknown", False),
    "timestamp": ("TIMESTAMP", lambda g: fmt_time(_first(g).get("reason_time"), "Unknown"),
                  False),
    "nodeaiot": ("NODES(A/I/O/T)", _node_aiot, True),
    "nodeai": ("NODES(A/I)", lambda g: "/".join(_node_aiot(g).split("/")[:2]), True),
    "size": ("JOB_SIZE", lambda g: "1-infinite", False),
    "root": ("ROOT", lambda g: "no", False),
    "oversubscribe": ("OVERSUBSCRIBE", lambda g: "NO", False),
    "groups": ("GROUPS", lambda g: "all", False),
    "socketcorethread": ("S:C:T", lambda g: f"{_first(g).get('cpus', 1)}:1:1", False),
    "disk": ("TMP_DISK", lambda g: "0", False),
    "weight": ("WEIGHT", lambda g: "1", False),
    "freemem": ("FREE_MEM", lambda g: str(max(int(_first(g).get("memory_mb", 0))
                                              - int(_first(g).get("alloc_mem_mb", 0)), 0)), False),
    "cpuload": ("CPU_LOAD", lambda g: "N/A", False),
    "prio_tier": ("PRIO_TIER", lambda g: str(g["partition"].get("priority_tier", 1)), False),
}

LETTERS = {
    "P": "partition", "R": "partitionname", "a": "available", "l": "time", "L": "defaulttime",
    "D": "nodes", "t": "statecompact", "T": "statelong", "N": "nodelist", "n": "hostnames",
    "c": "cpus", "C": "cpusstate", "m": "memory", "G": "gres", "f": "features",
    "b": "features_act", "E": "reason", "u": "user", "H": "timestamp", "F": "nodeaiot",
    "A": "nodeai", "s": "size", "r": "root", "h": "oversubscribe", "g": "groups",
    "z": "socketcorethread", "d": "disk", "w": "weight", "e": "freemem", "O": "cpuload",
    "p": "prio_tier",
}

def _cluster(g: Group) -> str:
    from kiln.config import load

    return load().cluster_name


def _user_long(g: Group) -> str:
    return "root(0)" if _first(g).get("reason") else "Unknown"


# the rest of sinfo --helpformat (22.05): filled where kiln knows, else Slurm's value for a
# node that does not use the feature
FIELDS.update({
    "nodehost": ("HOSTNAMES", FIELDS["hostnames"][1], True),
    "nodeaddr": ("NODE_ADDR", lambda g: compress([n.get("address") or n["name"]
                                                  for n in g["nodes"]]), True),
    "sockets": ("SOCKETS", lambda g: str(_first(g).get("cpus", 1)), False),
    "cores": ("CORES", lambda g: "1", False),
    "threads": ("THREADS", lambda g: "1", False),
    "cluster": ("CLUSTER", _cluster, False),
    "allocnodes": ("ALLOCNODES", lambda g: "all", False),
    "comment": ("COMMENT", lambda g: "(null)", False),
    "extra": ("EXTRA", lambda g: "(null)", False),
    "maxcpuspernode": ("MAX_CPUS_PER_NODE", lambda g: "UNLIMITED", False),
    "port": ("PORT", lambda g: "0", False),
    "preemptmode": ("PREEMPT_MODE", lambda g: "OFF", False),
    "priorityjobfactor": ("PRIO_JOB_FACTOR", lambda g: "1", False),
    "userlong": ("USER", _user_long, False),
    "version": ("VERSION", lambda g: "kiln", False),
})
LONG_NAMES = {k: k for k in FIELDS}
LONG_NAMES.update({"gresused": "gresused", "statecomplete": "statelong", "cpusload": "cpuload",
                   "priotier": "prio_tier", "prioritytier": "prio_tier", "allocmem": "allocmem",
                   "disk": "disk", "size": "size"})


def from_environment(values: dict[str, str | None]) -> None:
    """sinfo's input environment variables under the command line: SINFO_PARTITION,
    SINFO_SORT, SINFO_ALL, and SINFO_FORMAT for the default (partition) layout only."""
    env_defaults(values, {"SINFO_PARTITION": "partition", "SINFO_SORT": "sort",
                          "SINFO_ALL": "all"}, frozenset({"all"}))
    layouts = {"format", "Format", "summarize", "Node", "list-reasons"}
    if os.environ.get("SINFO_FORMAT") and not layouts & values.keys():
        values["format"] = os.environ["SINFO_FORMAT"]


def main(argv: Sequence[str] | None = None) -> int:
    return sinfo.main(argv)



def group_nodes(partitions: list[dict[str, Any]], nodes: list[dict[str, Any]],
                columns: list[Column], per_node: bool, summarize: bool) -> list[Group]:
    """One group per (partition, equal non-aggregate fields); -N: per node; -s: per partition."""
    keys = [c.key for c in columns if not FIELDS[c.key][2]]
    groups: list[Group] = []
    for part in partitions:
        index: dict[tuple[str, ...], Group] = {}
        for node in partition_nodes(part, nodes):
            single: Group = {"partition": part, "nodes": [node]}
            if per_node:
                groups.append(single)
                continue
            sig = (part["name"],) if summarize else tuple(FIELDS[k][1](single) for k in keys)
            if sig in index:
                index[sig]["nodes"].append(node)
            else:
                index[sig] = single
                groups.append(single)
        if not partition_nodes(part, nodes) and not per_node:
            groups.append({"partition": part, "nodes": []})
    return groups


def layout(groups: list[Group], prefix: str, columns: list[Column], header: bool) -> list[str]:
    """Render, sizing the partition and node-list columns to their longest value when the
    default format asked for that (Slurm's part_field_flag / node_field_flag)."""
    lines = []
    if header:
        lines.append(prefix + "".join(pad(FIELDS[c.key][0], c.width, c.right) + c.suffix
                                      for c in columns))
    for g in groups:
        lines.append(prefix + "".join(pad(FIELDS[c.key][1](g), c.width, c.right) + c.suffix
                                      for c in columns))
    return lines


def _widen(columns: list[Column], groups: list[Group], key: str, minimum: int) -> None:
    for c in columns:
        if c.key == key:
            values = [len(FIELDS[key][1](g)) for g in groups] + [minimum]
            c.width = max(values)


USAGE = """Usage: sinfo [-adelNRrsTv] [-i seconds] [-t states] [-p partition] [-n nodes]
             [-S fields] [-o format] [-O Format] [--federation] [--local]
"""


def _refused(args: Args) -> None:
    args.refuse_positional("Unrecognized option: {first}")


@command(PROG, TABLE, help=USAGE, check=_refused)
def sinfo(args: Args) -> int:
    values = args.given
    from_environment(values)  # the command line's dests only: never --help's or --version's
    if "reservation" in values:  # -T: advance reservations (cli/scontrol_resv.py)
        from cli.scontrol_resv import sinfo_reservations

        return sinfo_reservations("noheader" not in values)
    if "long" in values and values.get("format"):
        fail("Options -o(--format) and -l(--long) are mutually exclusive. "
             "Please remove one and retry.")
    prefix, columns, auto_width = choose_format(values)
    try:
        with Client() as client:
            nodes = client.call("query_nodes", {})["nodes"]
            partitions = client.call("query_partitions", {})["partitions"]
    except ClientError as exc:
        raise CommandError(f"slurm_load_partitions: {exc.message}", prefixed=False) from None
    partitions, nodes = apply_filters(values, partitions, nodes)
    if "json" in values:
        from cli.data_parser import VersionError, version_of
        from cli.sinfo_json import print_json

        try:
            version = version_of(values.get("json"))
        except VersionError as exc:
            fail(str(exc))
        groups = group_nodes(partitions, nodes, columns, "Node" in values,
                             "summarize" in values) if version else None
        return print_json(partitions, nodes, groups, version)
    if "list-reasons" in values:
        nodes = [n for n in nodes if _category(n) == "O" or n.get("reason")]
        partitions = [{"name": "", "nodes": [n["name"] for n in nodes]}] if nodes else []
    groups = group_nodes(partitions, nodes, columns, "Node" in values, "summarize" in values)
    if "list-reasons" in values:
        groups = [g for g in groups if g["nodes"]]
    if auto_width:
        _widen(columns, groups, "partition", 9)
        if "Node" in values:
            _widen(columns, groups, "nodelist", 9)
    lines = layout(groups, prefix, columns, "noheader" not in values)
    if "long" in values:  # Slurm's print_date(): -l output starts with the time it was taken
        import time

        lines.insert(0, time.strftime("%a %b %d %H:%M:%S %Y"))
    write_lines(lines)
    return 0


def choose_format(values: dict[str, str | None]) -> tuple[str, list[Column], bool]:
    if values.get("format"):
        prefix, columns, unknown = parse_percent_format(values["format"], LETTERS)
        for letter in unknown:
            print(f"{PROG}: error: Invalid node format specification: {letter}", file=sys.stderr)
        return prefix, columns, False
    if values.get("Format"):
        columns, unknown = parse_long_format(values["Format"], LONG_NAMES)
        if unknown:  # a name sinfo does not know: nothing is printed (no shifted columns)
            fail(*(f"Invalid node format specification: {name}" for name in unknown))
        return "", columns, False
    long = "long" in values
    if "summarize" in values:
        fmt = SUMMARY_FORMAT
    elif "Node" in values:
        fmt = NODE_LONG_FORMAT if long else NODE_FORMAT
    elif "list-reasons" in values:
        fmt = REASON_FORMAT
    else:
        fmt = LONG_FORMAT if long else DEFAULT_FORMAT
    columns, _ = parse_long_format(fmt, LONG_NAMES)  # "partition:9 ," -> suffix " "
    return "", columns, True


def apply_filters(values: dict[str, str | None], partitions: list[dict[str, Any]],
                  nodes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if values.get("partition"):
        wanted = set(values["partition"].split(","))
        partitions = [p for p in partitions if p["name"] in wanted]
    if values.get("nodes"):
        from kiln.slurm.hostlist import HostlistError

        try:
            wanted_nodes = set(expand(values["nodes"]))
        except HostlistError:
            fail(f"Invalid node name {values['nodes']}")
        nodes = [n for n in nodes if n["name"] in wanted_nodes]
    if values.get("states"):
        wanted_states = {s.strip().lower() for s in values["states"].split(",")}
        nodes = [n for n in nodes if node_state(n).rstrip("*") in wanted_states
                 or node_state(n, long=True).rstrip("*") in wanted_states]
    if "responding" in values:
        nodes = [n for n in nodes if not node_state(n).endswith("*")]
    if "dead" in values:
        nodes = [n for n in nodes if node_state(n).endswith("*") or _category(n) == "O"]
    if values.get("nodes") or values.get("states") or "responding" in values or "dead" in values:
        kept = {n["name"] for n in nodes}
        partitions = [dict(p, nodes=[x["name"] for x in partition_nodes(p, nodes)
                                     if x["name"] in kept]) for p in partitions]
        partitions = [p for p in partitions if p["nodes"]]
    return partitions, nodes


if __name__ == "__main__":
    sys.exit(main())
