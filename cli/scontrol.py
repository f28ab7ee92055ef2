"""``scontrol``: look at jobs, nodes, partitions and the configuration in Slurm's ``Key=Value``
layout, hold/release/requeue/update jobs, update nodes, expand hostlists, ping schedd.

``show hostnames`` and ``show hostlist`` are pure (no schedd): jobs call them from inside
their allocation to turn ``$SLURM_JOB_NODELIST`` into names.
"""

from __future__ import annotations

import os
import sys
import time

from cli.core import Args, CommandError, command, fail
from cli.core.client import Client, ClientError
from cli.core.formats import (
    command_text,
    fmt_duration,
    fmt_time,
    job_num_cpus,
    job_num_nodes,
    job_tres,
    mem_str,
)
from cli.core.options import (
    NO_ARG,
    Opt,
    OptionError,
    OptionTable,
    parse_begin,
    parse_memory_mb,
    parse_time_limit,
)
from cli.nodeview import node_gres, node_gres_drain, node_shares
from kiln.slurm.hostlist import HostlistError, compress, expand
from kiln.slurm.text import printable_lines

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

PROG = "scontrol"

TABLE = OptionTable([
    Opt("all", "a", NO_ARG), Opt("details", "d", NO_ARG), Opt("federation", "", NO_ARG),
    Opt("help", "h", NO_ARG), Opt("hide", "", NO_ARG), Opt("local", "", NO_ARG),
    Opt("cluster", "", dest="clusters"), Opt("clusters", "M"), Opt("oneliner", "o", NO_ARG),
    Opt("quiet", "Q", NO_ARG), Opt("sibling", "", NO_ARG), Opt("usage", "", NO_ARG),
    Opt("verbose", "v", NO_ARG), Opt("version", "V", NO_ARG), Opt("json", "", NO_ARG),
])

# What `scontrol show` takes, in the order Slurm 22.05 tries them (scontrol.c's _show_it): a
# word matches an entity when it is a prefix of one of its names, at least that many letters
# long, case aside (`show part`, `show no`, `show j`, `show res`, `show c`); the first match
# wins. None: an entity of Slurm's that kiln does not show (said as Slurm says an unknown one).
SHOW_ENTITIES: tuple[tuple[str | None, tuple[str, ...], int], ...] = (
    (None, ("aliases",), 1), (None, ("bbstat", "dwstat"), 2), (None, ("burstbuffer",), 2),
    (None, ("assoc_mgr", "cache"), 2), ("config", ("config", "configuration"), 1),
    (None, ("daemons",), 1), (None, ("federations",), 1), (None, ("frontendname",), 1),
    ("hostnames", ("hostnames", "hostname"), 5), ("hostlist", ("hostlist",), 5),
    ("hostlistsorted", ("hostlistsorted",), 9), ("job", ("jobs", "jobid"), 1),
    ("license", ("licenses", "licensename"), 2), ("node", ("nodes", "nodename"), 1),
    ("partition", ("partitions", "partitionname"), 2),
    ("reservation", ("reservations", "reservationname"), 1), (None, ("slurmd",), 2),
    (None, ("steps",), 2), ("topology", ("topology",), 1),
)


def show_entity(word: str) -> str | None:
    """The entity ``scontrol show WORD`` names (Slurm's abbreviations), or None."""
    tag = word.lower()
    for entity, names, least in SHOW_ENTITIES:
        if len(tag) >= least and any(name.startswith(tag) for name in names):
            return entity
    return None


USAGE = ("scontrol [<OPTION>] [<COMMAND>]\n  show job|node|partition|config|hostnames|"
         "hostlist|reservation [<id>], hold|release|requeue <job_list>,\n  update JobId=<id> "
         "<key>=<value>..., update NodeName=<name> State=<state> Reason=<text>,\n  "
         "create|update|delete reservation <key>=<value>..., ping,\n  reconfigure, "
         "reboot [ASAP] [nextstate=resume|down] [reason=<text>] ALL|<NodeList>,\n  "
         "cancel_reboot <NodeList>\n")


def main(argv: Sequence[str] | None = None) -> int:
    return scontrol.main(argv)


@command(PROG, TABLE, help=USAGE, stop_at_positional=True,
         answers=("version", "help", "usage"))
def scontrol(line: Args) -> int:
    words, flags = line.positional, line.given
    command, args = (keyword(words[0]) if words else "help"), words[1:]
    if command in ("version", "help"):  # as --version; no command: as --help
        scontrol.answer({command: None})
        return 0
    if command is None:  # Slurm's fprintf: no "scontrol: error: " in front
        fail(f"invalid keyword: {words[0]}", prefixed=False)
    if command == "show":
        return show(args, oneliner="oneliner" in flags, details="details" in flags)
    if command in ("hold", "uhold", "release", "requeue", "requeuehold"):
        return job_action(command, args)
    if command == "update":
        return update(args)
    if command == "create":  # advance reservations: cli/scontrol_resv.py
        from cli import scontrol_resv

        return scontrol_resv.create(args)
    if command == "delete":
        from cli import scontrol_resv

        return scontrol_resv.delete(args)
    if command == "ping":
        return ping()
    if command == "token":
        return token(args)
    if command == "reconfigure":
        return reconfigure(args)
    if command == "reboot":
        return reboot(args)
    if command == "cancel_reboot":
        return cancel_reboot(args)
    fail(f"invalid keyword: {words[0]}", prefixed=False)  # one of Slurm's kiln does not have


# scontrol's keywords in the order Slurm 22.05 tries them (scontrol.c's _process_command): a
# word is a keyword when it is a prefix of the name at least `least` letters long, case aside
# (`sho`, `rec`, `u`); None: a keyword of Slurm's kiln does not have, listed so that its
# abbreviations are not taken for a later one's (`d` is Slurm's `details`, not `delete`).
# (name, least, kiln's command); `hold`/`uhold`/`holdu`/`requeuehold` compare their first
# letters only, as Slurm's do.
KEYWORDS: tuple[tuple[str, int, str | None], ...] = (
    ("abort", 5, None), ("all", 2, None), ("cancel_reboot", 3, "cancel_reboot"),
    ("completing", 2, None), ("cluster", 2, None), ("create", 2, "create"),
    ("details", 1, None), ("errnumstr", 2, None), ("errnostr", 2, None), ("exit", 2, None),
    ("help", 2, None), ("hide", 2, None), ("oneliner", 1, None), ("pidinfo", 3, None),
    ("ping", 3, "ping"), ("quiet", 4, None), ("quit", 4, None),
    ("reboot_nodes", 3, "reboot"), ("reconfigure", 3, "reconfigure"),
    ("requeue", 3, "requeue"),
)
FIXED_KEYWORDS = (("requeuehold", "requeuehold"), ("holdu", "uhold"), ("hold", "hold"),
                  ("uhold", "uhold"))
LATER_KEYWORDS: tuple[tuple[str, int, str | None], ...] = (
    ("release", 3, "release"), ("suspend", 2, None), ("resume", 3, None), ("top", 3, None),
    ("token", 3, "token"), ("wait_job", 2, None), ("setdebugflags", 9, None),
    ("setdebug", 2, None), ("schedloglevel", 3, None), ("show", 3, "show"),
    ("write", 5, None), ("takeover", 8, None), ("shutdown", 8, None), ("update", 1, "update"),
    ("delete", 1, "delete"), ("verbose", 4, None), ("version", 4, "version"),
    ("listpids", 1, None), ("notify", 1, None), ("callerid", 3, None),
)


def keyword(word: str) -> str | None:
    """kiln's command for ``scontrol WORD`` (Slurm's abbreviations), or None."""
    tag = word.lower()

    def match(table: tuple[tuple[str, int, str | None], ...]) -> tuple[bool, str | None]:
        for name, least, command in table:
            if len(tag) >= least and name.startswith(tag):
                return True, command
        return False, None

    found, command = match(KEYWORDS)
    if found:
        return command
    for name, command in FIXED_KEYWORDS:  # xstrncasecmp(tag, name, len(name))
        if tag.startswith(name):
            return command
    return match(LATER_KEYWORDS)[1]


# --- show ------------------------------------------------------------------------------------


def show(args: list[str], oneliner: bool, details: bool = False) -> int:
    if any(a in ("-o", "--oneliner") for a in args):  # `show reservation -o`, as Slurm allows
        args, oneliner = [a for a in args if a not in ("-o", "--oneliner")], True
    if not args:
        fail("too few arguments for keyword:show", prefixed=False)
    word, eq, value = args[0].partition("=")  # `show job=5`, as Slurm takes it too
    entity = show_entity(word)
    target = value if eq else args[1] if len(args) > 1 else None
    if entity is None:  # Slurm's line ends in a space
        fail(f"invalid entity:{args[0]} for keyword:show ", prefixed=False)
    if entity == "hostnames":
        return show_hostnames(target)
    if entity == "topology":
        return show_topology(target)
    if entity in ("hostlist", "hostlistsorted"):
        if not target:
            fail("invalid hostlist: (null)")
        names = _expand(target)
        print(compress(sorted(names) if entity == "hostlistsorted" else names))
        return 0
    with Client() as client:
        if entity == "job":
            return show_jobs(client, target, oneliner, details)
        if entity == "node":
            return show_nodes(client, target, oneliner)
        if entity == "partition":
            return show_partitions(client, target, oneliner)
        if entity == "license":
            return show_licenses(client, target, oneliner)
        if entity == "reservation":
            from cli import scontrol_resv

            return scontrol_resv.show(client, target, oneliner)
        return show_config(client)


def show_topology(target: str | None) -> int:
    """``scontrol show topology [NAME]``: the cluster's [topology] (kiln.toml, as schedd reads
    it) in Slurm's lines; NAME a node (the switches or block holding it) or a switch/block."""
    from kiln.config import load

    topo = load().topology
    if topo is None:
        print("No topology information available")
        return 0
    lines = topo.show(target or "")
    if target and not lines:
        named = [line for line in topo.show() if line.split()[0].split("=", 1)[1] == target]
        if not named:
            fail(f"Topology information contains no switch or node named {target}")
        lines = named
    print("\n".join(lines))
    return 0


def _expand(expr: str) -> list[str]:
    try:
        return expand(expr)
    except HostlistError:
        fail(f"invalid hostlist: {expr}")


def show_hostnames(target: str | None) -> int:
    expr = target or os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not expr:
        fail("host list is empty")
    print("\n".join(_expand(expr)))
    return 0


def _emit(blocks: list[list[str]], oneliner: bool) -> None:
    """Slurm's layout: first pair at column 0, the rest indented three spaces, a blank line
    after each record; -o puts a record on one line."""
    out = []
    for lines in blocks:
        lines = printable_lines(lines)  # a job's name or comment is not a terminal's command
        if oneliner:
            out.append(" ".join(lines) + " \n")
        else:
            out.append(lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "   \n\n")
    sys.stdout.write("".join(out))


def show_jobs(client: Client, target: str | None, oneliner: bool,
              details: bool = False) -> int:
    query: dict[str, Any] = {"all_states": True}
    if target:
        query["job_ids"] = [t for t in target.split(",") if t]
    try:
        reply = client.call("query_jobs", query)
    except ClientError as exc:
        raise CommandError(f"slurm_load_jobs error: {exc.message}", prefixed=False) from None
    jobs = reply.get("jobs", [])
    if not jobs:
        if target:
            fail("slurm_load_jobs error: Invalid job id specified", prefixed=False)
        print("No jobs in the system")
        return 0
    now = float(reply.get("now") or time.time())
    from cli.arrays import fold_pending_arrays

    _emit([job_lines(j, now, details) for j in fold_pending_arrays(jobs)], oneliner)
    return 0


def _owner(name: str, num: Any, kind: str) -> str:
    if not name:
        try:
            if kind == "user":
                import pwd

                name = pwd.getpwuid(int(num)).pw_name
            else:
                import grp

                name = grp.getgrgid(int(num)).gr_name
        except (KeyError, ValueError, OverflowError):
            name = str(num)
    return f"{name}({num})"


def _expand_path(pattern: str, job: dict[str, Any], default: str) -> str:
    """StdOut/StdErr as scontrol shows them: %j %x %u %A %a %% expanded, made absolute."""
    pattern = pattern or default
    aid = job.get("array_job_id")
    tid = job.get("array_task_id")
    subs = {"j": str(job["id"]), "J": str(job["id"]), "x": job.get("name", ""),
            "u": job.get("user", ""), "A": str(aid if aid is not None else job["id"]),
            "a": str(tid if tid is not None else 4294967294), "%": "%",
            "N": job.get("batch_host") or "%N"}
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern) and pattern[i + 1] in subs:
            out.append(subs[pattern[i + 1]])
            i += 2
            continue
        out.append(ch)
        i += 1
    path = "".join(out)
    return path if path.startswith("/") else os.path.join(job.get("workdir") or "/", path)


def _gres_spec(job: dict[str, Any], count: int) -> str:
    gtype = job.get("gpu_type") or ""
    return f"gres:gpu:{gtype}:{count}" if gtype else f"gres:gpu:{count}"


def node_detail_lines(job: dict[str, Any]) -> list[str]:
    """-d's per-node lines, as Slurm 22.05 prints them (two spaces deeper than the record):
    ``  Nodes=node1 CPU_IDs=0-3 Mem=8192 GRES=gpu:a100:2(IDX:0-1)``."""
    from kiln.slurm.cpulist import format_cpu_list

    gtype = job.get("gpu_type") or ""
    lines = []
    for a in job.get("allocation") or []:
        gpus = list(a.get("gpus") or [])
        gres = ""
        if gpus:
            kind = f"gpu:{gtype}:" if gtype else "gpu:"
            gres = f"{kind}{len(gpus)}(IDX:{format_cpu_list(gpus)})"
        cpu_ids = format_cpu_list(a.get("cpu_ids") or []) or "(null)"
        lines.append(f"  Nodes={a['node']} CPU_IDs={cpu_ids} Mem={a.get('memory_mb') or 0} "
                     f"GRES={gres}")
    return lines


def job_lines(job: dict[str, Any], now: float, details: bool = False) -> list[str]:
    """`scontrol show job` for one job, in Slurm 22.05's order; ``details`` (-d) adds each
    node's CPU ids, memory and GPU indices under Socks/Node."""
    state = job["state"]
    start = job.get("start_time") or 0
    limit = job.get("time_limit")
    if state == "PENDING":
        start = job.get("expected_start") or 0
        run_time = 0
    else:
        end_ref = job.get("end_time") if state not in ("RUNNING", "SUSPENDED") else 0
        run_time = int((end_ref or now) - start) if start else 0
    end = job.get("end_time") or 0
    if not end and start and limit is not None:
        end = start + limit
    head = f"JobId={job['id']}"
    aid, tid = job.get("array_job_id"), job.get("array_task_id")
    if aid is not None and (tid is not None or job.get("_folded")):
        if state == "PENDING" and not job.get("restart_count"):
            head = f"JobId={aid}"  # a task not started yet: the array's record, as Slurm's
        head += f" ArrayJobId={aid} ArrayTaskId={job.get('array_task_ranges') or tid}"
        if job.get("array_max_running"):
            head += f" ArrayTaskThrottle={job['array_max_running']}"
    head += f" JobName={job.get('name', '')}"
    reason = (job.get("reason") or "None").replace(" ", "_")
    submit = fmt_time(job.get("submit_time"), "Unknown")
    eligible = fmt_time(job.get("eligible_time") or job.get("begin_time"), "Unknown")
    lines = [
        head,
        f"UserId={_owner(job.get('user', ''), job.get('uid', -1), 'user')} "
        f"GroupId={_owner('', job.get('gid', -1), 'group')} MCS_label=N/A",
        f"Priority={job.get('priority', 0)} Nice={job.get('nice', 0)} "
        f"Account={job.get('account') or '(null)'} QOS={job.get('qos') or '(null)'}",
        f"JobState={state} Reason={reason} Dependency={job.get('dependency') or '(null)'}",
        f"Requeue={1 if job.get('requeue', True) else 0} Restarts={job.get('restart_count', 0)} "
        f"BatchFlag=1 Reboot=0 ExitCode={job.get('exit_code', 0)}:{job.get('exit_signal', 0)}",
        f"RunTime={fmt_duration(run_time)} TimeLimit={fmt_duration(limit)} "
        f"TimeMin={fmt_duration(job['time_min']) if job.get('time_min') else 'N/A'}",
        f"SubmitTime={submit} EligibleTime={eligible}",
        f"AccrueTime={eligible}",
        f"StartTime={fmt_time(start, 'Unknown')} EndTime={fmt_time(end, 'Unknown')} "
        "Deadline=N/A",
    ]
    if state == "RUNNING":
        lines.append(f"PreemptEligibleTime={fmt_time(start, 'Unknown')} PreemptTime=None")
    lines += [
        f"SuspendTime=None SecsPreSuspend=0 "
        f"LastSchedEval={fmt_time(start or job.get('submit_time'), 'Unknown')} Scheduler=Main",
        f"Partition={job.get('partition') or '(null)'} "
        f"AllocNode:Sid={job.get('submit_host') or 'localhost'}:{job.get('alloc_sid') or 0}",
        f"ReqNodeList={job.get('nodelist') or '(null)'} ExcNodeList={job.get('exclude') or '(null)'}",
    ]
    if state == "PENDING":
        sched = job.get("sched_nodes")
        lines.append(f"NodeList= SchedNodeList={sched}" if sched else "NodeList=(null)")
    else:
        lines.append(f"NodeList={job.get('node_list') or '(null)'}")
    if job.get("batch_host") and state in ("RUNNING", "COMPLETING", "SUSPENDED"):
        lines.append(f"BatchHost={job['batch_host']}")
    cpt = int(job.get("cpus_per_task") or 1)
    nodes = job_num_nodes(job)
    nodes_text = f"{nodes}-{job['num_nodes_max']}" if state == "PENDING" and \
        (job.get("num_nodes_max") or 0) > nodes else str(nodes)
    min_mem = f"{mem_str(job['mem_per_node_mb'])}" if job.get("mem_per_node_mb") else "0"
    lines += [
        f"NumNodes={nodes_text} NumCPUs={job_num_cpus(job)} NumTasks={job.get('num_tasks', 1)} "
        f"CPUs/Task={cpt} ReqB:S:C:T=0:0:*:*",
        f"TRES={job_tres(job)}",
        f"Socks/Node=* NtasksPerN:B:S:C={job.get('ntasks_per_node') or 0}:0:*:* CoreSpec=*",
        *(node_detail_lines(job) if details else []),
        f"MinCPUsNode={cpt} MinMemory{'CPU' if job.get('mem_per_cpu_mb') else 'Node'}="
        f"{mem_str(job['mem_per_cpu_mb']) if job.get('mem_per_cpu_mb') else min_mem} "
        "MinTmpDiskNode=0",
        f"Features={job.get('constraint') or '(null)'} DelayBoot=00:00:00",
    ]
    if job.get("reservation"):
        lines.append(f"Reservation={job['reservation']}")
    lines += [
        f"OverSubscribe={'NO' if job.get('exclusive') else 'OK'} Contiguous=0 "
        f"Licenses={job.get('licenses') or '(null)'} Network=(null)",
        f"Command={command_text(job)}",
        f"WorkDir={job.get('workdir') or '(null)'}",
    ]
    if job.get("comment"):
        lines.append(f"Comment={job['comment']} ")
    default_out = "slurm-%A_%a.out" if job.get("array_task_id") is not None else "slurm-%j.out"
    stdout = _expand_path(job.get("stdout") or "", job, default_out)
    lines += [
        f"StdErr={_expand_path(job['stderr'], job, '') if job.get('stderr') else stdout}",
        f"StdIn={job.get('stdin') or '/dev/null'}",
        f"StdOut={stdout}",
        "Power=",
    ]
    lines += _tres_per_lines(job)
    if job.get("mail_user") or job.get("mail_type"):
        lines.append(f"MailUser={job.get('mail_user') or job.get('user', '')} "
                     f"MailType={job.get('mail_type') or 'NONE'}")
    return lines


def _tres_per_lines(job: dict[str, Any]) -> list[str]:
    lines = []
    if job.get("mem_per_gpu_mb"):
        lines.append(f"MemPerTres=gres:gpu:{job['mem_per_gpu_mb']}")
    if job.get("gpus"):
        lines.append(f"TresPerJob={_gres_spec(job, job['gpus'])}")
    per_node = [_gres_spec(job, job["gpus_per_node"])] if job.get("gpus_per_node") else []
    if job.get("shards_per_node"):
        per_node.append(f"gres:shard:{job['shards_per_node']}")
    if job.get("mps_per_node"):
        per_node.append(f"gres:mps:{job['mps_per_node']}")
    if per_node:
        lines.append(f"TresPerNode={','.join(per_node)}")
    if job.get("gpus_per_task"):
        lines.append(f"TresPerTask={_gres_spec(job, job['gpus_per_task'])}")
    return lines


def node_lines(node: dict[str, Any], now: float) -> list[str]:
    """`scontrol show node` for one node."""
    gpus = node.get("gpus") or []
    features = ",".join(node.get("features") or []) or "(null)"
    cpus, mem = int(node.get("cpus") or 0), int(node.get("memory_mb") or 0)
    alloc_cpus, alloc_mem = int(node.get("alloc_cpus") or 0), int(node.get("alloc_mem_mb") or 0)
    alloc_gpus = int(node.get("alloc_gpus") or 0)
    shares = node_shares(node)  # gres/shard, gres/mps
    cfg_tres = f"cpu={cpus},mem={mem_str(mem)},billing={cpus}" + \
        (f",gres/gpu={len(gpus)}" if gpus else "") + \
        "".join(f",gres/{kind}={total}" for kind, total, _used in shares)
    alloc_tres = ",".join(
        [f"cpu={alloc_cpus}"] * bool(alloc_cpus) + [f"mem={mem_str(alloc_mem)}"] * bool(alloc_mem)
        + [f"gres/gpu={alloc_gpus}"] * bool(alloc_gpus)
        + [f"gres/{kind}={used}" for kind, _total, used in shares if used])
    address = node.get("address") or node["name"]
    lines = [
        f"NodeName={node['name']} Arch={os.uname().machine} CoresPerSocket=1 ",
        f"CPUAlloc={alloc_cpus} CPUEfctv={cpus} CPUTot={cpus} CPULoad=N/A",
        f"AvailableFeatures={features}",
        f"ActiveFeatures={features}",
        f"Gres={node_gres(node)}",
        *([f"GresDrain={node_gres_drain(node)}"] if node_gres_drain(node) else []),
        f"NodeAddr={address} NodeHostName={node['name']} Version=kiln",
        f"RealMemory={mem} AllocMem={alloc_mem} FreeMem=N/A Sockets={cpus} Boards=1",
        f"State={node.get('state_display') or node.get('state', 'IDLE')} ThreadsPerCore=1 "
        "TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        f"Partitions={','.join(node.get('partitions') or [])} ",
        f"BootTime={fmt_time(node.get('boot_time'), 'None')} "
        f"SlurmdStartTime={fmt_time(node.get('slurmd_start_time'), 'None')}",
        f"LastBusyTime={fmt_time(node.get('last_heartbeat'), 'None')}",
        f"CfgTRES={cfg_tres}",
        f"AllocTRES={alloc_tres}",
        *([node["cgroup"]] if node.get("cgroup") else []),  # kiln: the node's containment
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if node.get("reason"):
        lines.append(f"Reason={node['reason']}")
    return lines


def show_nodes(client: Client, target: str | None, oneliner: bool) -> int:
    body = {"names": _expand(target)} if target else {}
    reply = client.call("query_nodes", body)
    nodes = reply.get("nodes", [])
    if target:
        wanted = set(body["names"])
        nodes = [n for n in nodes if n["name"] in wanted]
        if not nodes:
            fail(f"Node {target} not found", prefixed=False)
    if not nodes:
        print("No nodes in the system")
        return 0
    now = float(reply.get("now") or time.time())
    _emit([node_lines(n, now) for n in nodes], oneliner)
    return 0


def partition_lines(part: dict[str, Any], nodes: list[dict[str, Any]]) -> list[str]:
    names = part.get("nodes") or [n["name"] for n in nodes
                                  if part["name"] in (n.get("partitions") or [])] \
        or [n["name"] for n in nodes]
    members = [n for n in nodes if n["name"] in set(names)]
    cpus = sum(int(n.get("cpus") or 0) for n in members)
    mem = sum(int(n.get("memory_mb") or 0) for n in members)
    gpus = sum(len(n.get("gpus") or []) for n in members)
    tres = f"cpu={cpus},mem={mem_str(mem)},node={len(names)},billing={cpus}" + \
        (f",gres/gpu={gpus}" if gpus else "")
    default_time = part.get("default_time")
    return [
        f"PartitionName={part['name']}",
        "AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL",
        f"AllocNodes=ALL Default={'YES' if part.get('default') else 'NO'} QoS=N/A",
        f"DefaultTime={fmt_duration(default_time) if default_time else 'NONE'} "
        "DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO",
        f"MaxNodes=UNLIMITED MaxTime={fmt_duration(part.get('max_time'))} MinNodes=0 LLN=NO "
        "MaxCPUsPerNode=UNLIMITED",
        f"Nodes={compress(names) if names else '(null)'}",
        f"PriorityJobFactor=1 PriorityTier={part.get('priority_tier', 1)} RootOnly=NO "
        "ReqResv=NO OverSubscribe=NO",
        "OverTimeLimit=NONE PreemptMode=OFF",
        f"State={part.get('state', 'UP')} TotalCPUs={cpus} TotalNodes={len(names)} "
        "SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES={tres}",
    ]


def show_licenses(client: Client, target: str | None, oneliner: bool) -> int:
    """``scontrol show licenses [NAME]``: Slurm 22.05's two lines per license."""
    lics = client.call("query_licenses", {"names": [target]} if target else {})["licenses"]
    for lic in lics:
        head = f"LicenseName={lic['name']}"
        counts = (f"Total={lic['total']} Used={lic['used']} "
                  f"Free={max(lic['total'] - lic['used'], 0)} Reserved=0 Remote=no")
        print(f"{head} {counts}" if oneliner else f"{head}\n    {counts}")
    return 0


def show_partitions(client: Client, target: str | None, oneliner: bool) -> int:
    parts = client.call("query_partitions", {"names": [target]} if target else {})["partitions"]
    if target:
        parts = [p for p in parts if p["name"] == target]
        if not parts:
            fail(f"Partition {target} not found", prefixed=False)
    if not parts:
        print("No partitions in the system")
        return 0
    nodes = client.call("query_nodes", {}).get("nodes", [])
    blocks = [partition_lines(p, nodes) for p in parts]
    if oneliner:
        _emit(blocks, True)
    else:
        sys.stdout.write("".join(b[0] + "\n" + "".join(f"   {x}\n" for x in b[1:]) + "\n"
                                 for b in blocks))
    return 0


def config_value(value: Any) -> str:
    if value is None or value == "":
        return "(null)"
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def show_config(client: Client) -> int:
    config = client.call("show_config", {}).get("config", {})
    lines = [f"Configuration data as of {fmt_time(time.time())}"]
    lines += [f"{key:<23} = {config_value(value)}" for key, value in config.items()]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


# --- actions ---------------------------------------------------------------------------------


def _job_list(args: list[str], keyword: str) -> list[str]:
    ids = [j for a in args for j in a.split(",") if j]
    if not ids:
        fail(f"too few arguments for keyword:{keyword}", prefixed=False)
    for job_id in ids:
        base = job_id.split("_")[0]
        if not base.isdigit():
            fail(f"Invalid job id specified for job {job_id}", prefixed=False)
    return ids


def job_action(command: str, args: list[str]) -> int:
    """hold/uhold/release/requeue/requeuehold; errors print `<message> for job <id>`."""
    ids = _job_list(args, command)
    if command in ("hold", "uhold"):
        op, body = "hold", {"job_ids": ids}
    elif command == "release":
        op, body = "release", {"job_ids": ids}
    else:
        op, body = "requeue", {"job_ids": ids, "hold": command == "requeuehold"}
    with Client() as client:
        try:
            reply = client.call(op, body)
        except ClientError as exc:
            fail(f"{exc.message} for job {','.join(ids)}", prefixed=False)
    return _print_job_errors(reply.get("errors", []))


def _print_job_errors(errors: list[dict[str, Any]]) -> int:
    for err in errors:  # a second line of the message (what does not fit) follows as is
        first, *more = str(err.get("message", "")).split("\n")
        print(f"{first} for job {err.get('job_id', '')}", *more, sep="\n", file=sys.stderr)
    return 1 if errors else 0


# scontrol update job keys -> (Job field, value parser)
JOB_UPDATES = {
    "timelimit": ("time_limit", lambda v: parse_time_limit(v, "TimeLimit")),
    "timemin": ("time_min", lambda v: parse_time_limit(v, "TimeMin")),
    "nice": ("nice", int),
    "priority": ("priority", int),
    "account": ("account", str),
    "qos": ("qos", str),
    "partition": ("partition", str),
    "starttime": ("begin_time", parse_begin),
    "begintime": ("begin_time", parse_begin),
    "name": ("name", str),
    "jobname": ("name", str),
    "comment": ("comment", str),
    "dependency": ("dependency", str),
    "numnodes": ("num_nodes", int),
    "numtasks": ("num_tasks", int),
    "mincpusnode": ("cpus_per_task", int),
    "minmemorynode": ("mem_per_node_mb", parse_memory_mb),
    "reqnodelist": ("nodelist", str),
    "excnodelist": ("exclude", str),
    "features": ("constraint", str),
    "reservation": ("reservation", str),
    "requeue": ("requeue", lambda v: v not in ("0", "no", "NO")),
}


def _pairs(args: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq:
            fail(f"Invalid input: {arg}", "Request aborted")
        pairs.append((key, value))
    return pairs


def update(args: list[str]) -> int:
    pairs = _pairs(args)
    if not pairs:
        fail("too few arguments for keyword:update")
    key = pairs[0][0].lower()
    if key in ("jobid", "job"):
        return update_job(pairs)
    if key in ("nodename", "node"):
        return update_node(pairs)
    if key in ("reservationname", "reservation"):
        from cli import scontrol_resv

        return scontrol_resv.update(pairs)
    fail(f"Invalid input: {args[0]}", "Request aborted")


def update_job(pairs: list[tuple[str, str]]) -> int:
    ids = _job_list([pairs[0][1]], "update")
    changes: dict[str, Any] = {}
    for key, value in pairs[1:]:
        spec = JOB_UPDATES.get(key.lower())
        if spec is None:
            fail(f"Update of this parameter is not supported: {key}={value}", "Request aborted")
        try:
            changes[spec[0]] = spec[1](value)
        except (OptionError, ValueError):
            fail(f"Invalid input: {key}={value}", "Request aborted")
    if not changes:
        fail("No changes specified")
    with Client() as client:
        try:
            reply = client.call("update_job", {"job_ids": ids, "changes": changes})
        except ClientError as exc:
            fail(f"Error updating job {','.join(ids)}: {exc.message}", prefixed=False)
    return _print_job_errors(reply.get("errors", []))


def update_node(pairs: list[tuple[str, str]]) -> int:
    names = _expand(pairs[0][1])
    changes: dict[str, Any] = {}
    for key, value in pairs[1:]:
        low = key.lower()
        if low == "state":
            changes["state"] = value.upper()
        elif low == "reason":
            changes["reason"] = value
        else:
            fail(f"Update of this parameter is not supported: {key}={value}", "Request aborted")
    if changes.get("state") in ("DRAIN", "DOWN") and not changes.get("reason"):
        fail("You must specify a reason when DOWNING or DRAINING a node. Request denied",
             prefixed=False)
    with Client() as client:
        try:
            client.call("update_node", {"names": names, "changes": changes})
        except ClientError as exc:
            fail(f"slurm_update error: {exc.message}", prefixed=False)
    return 0


# --- administration: reconfigure, reboot ------------------------------------------------------


def reconfigure(args: list[str]) -> int:
    """Slurm prints nothing when the daemons re-read their configuration; kiln adds a line
    for each changed key that a running daemon cannot take (kiln/reconfig.py)."""
    if args:
        fail("too many arguments for keyword:reconfigure")
    with Client() as client:
        try:
            reply = client.call("reconfigure", {})
        except ClientError as exc:
            fail(f"slurm_reconfigure error: {exc.message}", prefixed=False)
    for line in reply.get("restart") or []:
        print(line)
    return 0


def parse_reboot(args: list[str]) -> dict[str, Any]:
    """``[ASAP] [nextstate=resume|down] [reason=<text>] ALL|<NodeList>``, as Slurm's scontrol
    reads them: the options first (any order), the nodes last."""
    body: dict[str, Any] = {"asap": False, "next_state": "", "reason": ""}
    nodes = None
    for i, arg in enumerate(args):
        key, eq, value = arg.partition("=")
        low = key.lower()
        if not eq and low == "asap":
            body["asap"] = True
        elif eq and low == "nextstate":
            if value.lower() not in ("resume", "down"):
                fail(f"Invalid nextstate: {value} (expected RESUME or DOWN)", prefixed=False)
            body["next_state"] = value.lower()
        elif eq and low == "reason":
            body["reason"] = value
        elif not eq and i == len(args) - 1:
            nodes = arg
        else:
            fail(f"invalid keyword: {arg}", prefixed=True)
    if nodes is None:
        fail("too few arguments for keyword:reboot")
    body["names"] = ["ALL"] if nodes.upper() == "ALL" else _expand(nodes)
    return body


def reboot(args: list[str]) -> int:
    body = parse_reboot(args)
    with Client() as client:
        try:
            client.call("reboot_nodes", body)
        except ClientError as exc:
            fail(f"scontrol_reboot_nodes error: {exc.message}", prefixed=False)
    return 0


def cancel_reboot(args: list[str]) -> int:
    if len(args) != 1:
        fail("too few arguments for keyword:cancel_reboot" if not args else
             "too many arguments for keyword:cancel_reboot")
    names = ["ALL"] if args[0].upper() == "ALL" else _expand(args[0])
    with Client() as client:
        try:
            client.call("cancel_reboot", {"names": names})
        except ClientError as exc:
            fail(f"slurm_update error: {exc.message}", prefixed=False)
    return 0


def token(args: list[str]) -> int:
    """scontrol token [lifespan=S] [username=U]: an auth/jwt token from schedd, printed as
    Slurm prints it (SLURM_JWT=...), for kiln restd's X-SLURM-USER-TOKEN."""
    body: dict[str, Any] = {}
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lower() == "lifespan" and value.isdigit() and int(value) > 0:
            body["lifespan"] = min(int(value), 2**31 - 1)
        elif key.lower() == "username" and value:
            body["username"] = value
        else:
            fail(f"Invalid token argument: {arg}", prefixed=False)
    try:
        with Client() as client:
            reply = client.call("auth_token", body)
    except ClientError as exc:
        fail(f"slurm_fetch_token error: {exc.message}", prefixed=False)
    print(f"SLURM_JWT={reply['token']}")
    return 0


def ping() -> int:
    host = os.uname().nodename
    try:
        with Client(timeout=5) as client:
            client.call("ping", {})
    except ClientError:
        print(f"Slurmctld(primary) at {host} is DOWN")
        return 1
    print(f"Slurmctld(primary) at {host} is UP")
    return 0


if __name__ == "__main__":
    sys.exit(main())
