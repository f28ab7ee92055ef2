"""``sacctmgr``: accounts, users, QOS and associations, with Slurm's syntax and output.

``sacctmgr [-i -n -P -p -s] add|modify|delete|show|list ENTITY [names] [where k=v ...]
[set k=v ...] [format=F%N,...]``. schedd does the change and the permission check and answers
with the lines Slurm prints; ``show`` answers with rows laid out here (fixed width with one
trailing space, right-justified, ``+`` where cut; ``-P`` joins with ``|``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from cli.core import Args, command, fail
from cli.core.client import Client
from cli.core.formats import fmt_duration
from cli.core.options import NO_ARG, Opt, OptionError, OptionTable, parse_time_limit

PROG = "sacctmgr"

TABLE = OptionTable([
    Opt("immediate", "i", NO_ARG), Opt("noheader", "n", NO_ARG), Opt("parsable2", "P", NO_ARG),
    Opt("parsable", "p", NO_ARG), Opt("associations", "s", NO_ARG), Opt("quiet", "Q", NO_ARG),
    Opt("readonly", "r", NO_ARG), Opt("verbose", "v", NO_ARG), Opt("help", "h", NO_ARG),
])

VERBS = {"add": "add", "create": "add", "modify": "modify", "update": "modify",
         "delete": "delete", "remove": "delete", "show": "show", "list": "show"}
ENTITIES = {"account": "account", "accounts": "account", "user": "user", "users": "user",
            "qos": "qos", "association": "assoc", "associations": "assoc", "assoc": "assoc",
            "cluster": "cluster", "clusters": "cluster", "tres": "tres"}
NO_ENTITY = ['No valid entity in list command',
             'Input line must include "Account", "Association", "Cluster", "Configuration",',
             '"Event", "Federation", "Problem", "QOS", "Resource", "Reservation",',
             '"RunAwayJobs", "Stats", "Transaction", "TRES", "User", or "WCKey"']

# format name (lower case) -> (header, default width, record key)
FIELDS: dict[str, tuple[str, int, str]] = {
    "cluster": ("Cluster", 10, "cluster"), "account": ("Account", 10, "account"),
    "user": ("User", 10, "user"), "partition": ("Partition", 10, "partition"),
    "share": ("Share", 9, "share"), "fairshare": ("Share", 9, "share"),
    "priority": ("Priority", 10, "priority"), "grpjobs": ("GrpJobs", 7, "grp_jobs"),
    "grptres": ("GrpTRES", 13, "grp_tres"), "grpsubmit": ("GrpSubmit", 9, "grp_submit_jobs"),
    "grpsubmitjobs": ("GrpSubmit", 9, "grp_submit_jobs"), "grpwall": ("GrpWall", 11, "grp_wall"),
    "grptresmins": ("GrpTRESMins", 13, "grp_tres_mins"), "maxjobs": ("MaxJobs", 7, "max_jobs"),
    "maxtres": ("MaxTRES", 13, "max_tres_per_job"),
    "maxtresperjob": ("MaxTRES", 13, "max_tres_per_job"),
    "maxtrespernode": ("MaxTRESPerNode", 14, "max_tres_per_node"),
    "maxsubmit": ("MaxSubmit", 9, "max_submit_jobs"),
    "maxsubmitjobs": ("MaxSubmit", 9, "max_submit_jobs"),
    "maxwall": ("MaxWall", 11, "max_wall"), "maxwalldurationperjob": ("MaxWall", 11, "max_wall"),
    "maxtresmins": ("MaxTRESMins", 13, "max_tres_mins"), "qos": ("QOS", 20, "qos"),
    "defaultqos": ("Def QOS", 9, "default_qos"),
    "grptresrunmins": ("GrpTRESRunMin", 13, "grp_tres_run_mins"),
    "grptresrunmin": ("GrpTRESRunMin", 13, "grp_tres_run_mins"),
    "parentname": ("ParentName", 10, "parent_name"), "parent": ("ParentName", 10, "parent_name"),
    "descr": ("Descr", 20, "description"), "description": ("Descr", 20, "description"),
    "org": ("Org", 20, "organization"), "organization": ("Org", 20, "organization"),
    "defaultaccount": ("Def Acct", 10, "default_account"),
    "adminlevel": ("Admin", 9, "admin_level"), "name": ("Name", 10, "name"),
    "gracetime": ("GraceTime", 10, "grace_time"), "preempt": ("Preempt", 10, "preempt"),
    "preemptexempttime": ("PreemptExemptTime", 19, "preempt_exempt_time"),
    "preemptmode": ("PreemptMode", 11, "preempt_mode"), "flags": ("Flags", 40, "flags"),
    "usagethres": ("UsageThres", 10, "usage_thres"),
    "usagefactor": ("UsageFactor", 11, "usage_factor"),
    "maxtrespu": ("MaxTRESPU", 13, "max_tres_per_user"),
    "maxtresperuser": ("MaxTRESPU", 13, "max_tres_per_user"),
    "maxjobspu": ("MaxJobsPU", 9, "max_jobs_per_user"),
    "maxjobsperuser": ("MaxJobsPU", 9, "max_jobs_per_user"),
    "maxsubmitpu": ("MaxSubmitPU", 11, "max_submit_per_user"),
    "maxsubmitjobsperuser": ("MaxSubmitPU", 11, "max_submit_per_user"),
    "maxtrespa": ("MaxTRESPA", 13, "max_tres_per_account"),
    "maxjobspa": ("MaxJobsPA", 9, "max_jobs_per_account"),
    "maxsubmitpa": ("MaxSubmitPA", 11, "max_submit_per_account"),
    "guarantee": ("Guarantee", 13, "guarantee"),  # kiln: docs/preemption.md
    "grptresguarantee": ("Guarantee", 13, "guarantee"),
    "mintres": ("MinTRES", 13, "min_tres"), "maxnodes": ("MaxNodes", 8, "max_nodes"),
    "maxcpus": ("MaxCPUs", 8, "max_cpus"), "maxcpumins": ("MaxCPUMins", 11, "max_cpu_mins"),
}
DURATIONS = {"max_wall", "grace_time"}
ASSOC_FORMAT = ("Cluster,Account,User,Partition,Share,Priority,GrpJobs,GrpTRES,GrpSubmit,"
                "GrpWall,GrpTRESMins,MaxJobs,MaxTRES,MaxTRESPerNode,MaxSubmit,MaxWall,"
                "MaxTRESMins,QOS,DefaultQOS,GrpTRESRunMins")
DEFAULT_FORMATS = {
    "assoc": ASSOC_FORMAT,
    "account": "Account,Descr,Org",
    "account+": "Account,Descr,Org,Cluster,ParentName,User,Share,Priority,GrpJobs,GrpTRES,"
                "GrpSubmit,GrpWall,GrpTRESMins,MaxJobs,MaxTRES,MaxTRESPerNode,MaxSubmit,"
                "MaxWall,MaxTRESMins,QOS,DefaultQOS",
    "user": "User,DefaultAccount,AdminLevel",
    "user+": "User,DefaultAccount,AdminLevel,Cluster,Account,Partition,Share,Priority,MaxJobs,"
             "MaxNodes,MaxCPUs,MaxSubmit,MaxWall,MaxCPUMins,QOS,DefaultQOS",
    "qos": "Name,Priority,GraceTime,Preempt,PreemptExemptTime,PreemptMode,Flags,UsageThres,"
           "UsageFactor,GrpTRES,GrpTRESMins,GrpTRESRunMin,GrpJobs,GrpSubmit,GrpWall,MaxTRES,"
           "MaxTRESPerNode,MaxTRESMins,MaxWall,MaxTRESPU,MaxJobsPU,MaxSubmitPU,MaxTRESPA,"
           "MaxJobsPA,MaxSubmitPA,MinTRES",
}
TIME_SETTINGS = {"maxwall", "maxwalldurationperjob", "gracetime"}


def main(argv: Sequence[str] | None = None) -> int:
    return sacctmgr.main(argv)


class Request:
    """What the command line asked for."""

    def __init__(self) -> None:
        self.verb = ""
        self.entity = ""
        self.names: list[str] = []
        self.where: dict[str, str] = {}
        self.set: dict[str, str] = {}
        self.format = ""
        self.tree = False
        self.with_assoc = False


def parse_words(words: list[str], with_assoc: bool) -> Request:
    if not words:
        fail("No command given", prefixed=False)
    req = Request()
    req.verb = VERBS.get(words[0].lower(), "")
    if not req.verb:
        fail(f"Invalid command: {words[0]}", prefixed=True)
    if len(words) < 2 or words[1].lower() not in ENTITIES:
        fail(*NO_ENTITY, prefixed=False)
    req.entity = ENTITIES[words[1].lower()]
    req.with_assoc = with_assoc
    target = req.where
    for word in words[2:]:
        low = word.lower()
        if low == "where":
            target = req.where
        elif low == "set":
            target = req.set
        elif low == "tree":
            req.tree = True
        elif low in ("withassoc", "withassocs"):
            req.with_assoc = True
        elif "=" in word:
            key, _, value = word.partition("=")
            if key.lower() == "format":
                req.format = value
            else:
                target[key] = setting_value(key, value)
        else:
            req.names.extend(n for n in word.split(",") if n)
    return req


def setting_value(key: str, value: str) -> str:
    """Times (MaxWall, GraceTime) go to schedd in seconds; '-1' clears."""
    if key.lower() not in TIME_SETTINGS or value.strip() in ("-1", ""):
        return value
    if key.lower() == "gracetime" and value.isdigit():
        return value  # GraceTime is seconds
    try:
        secs = parse_time_limit(value, key)
    except OptionError:
        fail(f"Invalid time value for {key}: {value}")
    return "-1" if secs is None else str(secs)


# -h is accepted and answers nothing of its own (kiln's sacctmgr has no help text)
@command(PROG, TABLE, bare_getopt_errors=True)
def sacctmgr(args: Args) -> int:
    words, opts = args.positional, set(args.given)
    req = parse_words(words, "associations" in opts)
    if req.entity in ("cluster", "tres"):
        return static_show(req, opts)
    body: dict[str, Any] = {"verb": req.verb, "entity": req.entity, "names": req.names,
                            "where": req.where, "set": req.set, "with_assoc": req.with_assoc}
    with Client() as client:
        reply = client.call("sacctmgr", body)
    if req.verb != "show":
        for line in reply.get("stdout", []):
            print(line)
        for line in reply.get("stderr", []):
            print(line, file=sys.stderr)
        return int(reply.get("rc", 0))
    key = req.entity + ("+" if req.with_assoc and req.entity in ("user", "account") else "")
    fmt = req.format or DEFAULT_FORMATS[key]
    if req.tree and not req.format:
        fmt = "Account,User,Share"
    for line in layout(reply["rows"], fmt, opts, req.tree):
        print(line)
    return 0


def columns(fmt: str) -> list[tuple[str, int, str, bool]]:
    """'Account%256,User' -> (header, width, key, left-justified) per field."""
    out = []
    for item in fmt.split(","):
        name, _, width = item.strip().partition("%")
        field = FIELDS.get(name.lower())
        if field is None:
            fail(f"Unknown field '{name}'")
        left = width.startswith("-")
        try:
            size = int(width.lstrip("-")) if width else field[1]
        except ValueError:
            fail(f"Invalid field width '{item}'")
        out.append((field[0], size, field[2], left))
    return out


def cell(value: str, width: int, left: bool) -> str:
    if len(value) > width:
        value = value[: max(width - 1, 0)] + "+"
    return value.ljust(width) if left else value.rjust(width)


def text(record: dict[str, Any], key: str) -> str:
    value = record.get(key, "")
    if key in DURATIONS:
        return "" if value is None or value == "" else fmt_duration(int(value))
    return "" if value is None else str(value)


def layout(rows: list[dict[str, Any]], fmt: str, opts: set[str], tree: bool) -> list[str]:
    cols = columns(fmt)
    if tree:  # the Account column is indented by depth and left-justified, 20 wide
        cols = [(h, 20 if k == "account" and w == 10 else w, k, left or k == "account")
                for h, w, k, left in cols]
    cells = []
    for rec in rows:
        values = []
        for _, _, key, _ in cols:
            value = text(rec, key)
            if tree and key == "account":
                value = " " * int(rec.get("depth", 0)) + value
            values.append(value)
        cells.append(values)
    return table([(h, w, left) for h, w, _, left in cols], cells, opts)


def table(heads: list[tuple[str, int, bool]], rows: list[list[str]], opts) -> list[str]:
    """Slurm's account-tool layout (sacctmgr, sshare): fixed width with a header, a dashes line
    and a trailing blank on every line, or ``-P``/``-p`` parsable (``-p`` ends lines in '|')."""
    parsable = "parsable2" in opts or "parsable" in opts
    end = "|" if "parsable" in opts else ""
    lines = []
    if "noheader" not in opts:
        if parsable:
            lines.append("|".join(h for h, _, _ in heads) + end)
        else:
            lines.append("".join(cell(h, w, left) + " " for h, w, left in heads))
            lines.append("".join("-" * w + " " for _, w, _ in heads))
    for values in rows:
        if parsable:
            lines.append("|".join(values) + end)
        else:
            pairs = zip(values, heads, strict=True)
            lines.append("".join(cell(v, w, left) + " " for v, (_, w, left) in pairs))
    return lines


def static_show(req: Request, opts: set[str]) -> int:
    """``show cluster`` and ``show tres``: kiln has one cluster and a fixed TRES list."""
    if req.verb != "show":
        fail(f"kiln does not {req.verb} {req.entity}s: they follow kiln.toml")
    from kiln.config import load

    cfg = load()
    if req.entity == "tres":
        rows = [("cpu", "", 1), ("mem", "", 2), ("energy", "", 3), ("node", "", 4),
                ("billing", "", 5), ("fs", "disk", 6), ("vmem", "", 7), ("pages", "", 8),
                ("gres", "gpu", 1001)]
        head = [("Type", 8), ("Name", 15), ("ID", 6)]
        data = [[a, b, str(c)] for a, b, c in rows]
    else:
        host, _, port = cfg.agent_endpoint.rpartition(":")
        head = [("Cluster", 10), ("ControlHost", 15), ("ControlPort", 12), ("RPC", 5),
                ("Share", 9), ("QOS", 20)]
        data = [[cfg.cluster_name, host.rsplit("/", 1)[-1], port, "9728", "1", "normal"]]
    if "parsable2" in opts or "parsable" in opts:
        if "noheader" not in opts:
            print("|".join(h for h, _ in head))
        for row in data:
            print("|".join(row))
        return 0
    if "noheader" not in opts:
        print("".join(cell(h, w, False) + " " for h, w in head))
        print("".join("-" * w + " " for _, w in head))
    for row in data:
        print("".join(cell(v, w, False) + " " for v, (_, w) in zip(row, head, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
