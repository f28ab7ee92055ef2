"""``sstat``: live usage of running job steps, as Slurm 22.05's sstat prints it.

The figures are the agents' own samples (``agentd/sampler.py``: the batch shell's process tree,
and each srun task's), sent with every heartbeat and merged over the step's nodes by schedd
(``job_stat``, ``kiln.slurm.stats.merge_usage``). A task's figure is its largest RSS and
virtual size, and its CPU time, major page faults and bytes read and written so far; ``Ave*``
is the mean over the step's tasks, ``Max*``/``Min*`` the task that has the most/least, with
its node and task id. GPU utilisation and memory appear in the TRESUsageIn fields as
``gres/gpuutil`` and ``gres/gpumem``; on ``--fake-gpus`` nodes they are simulated, which sstat
says on stderr (its stdout stays Slurm's).

Which step: ``-j 123.batch`` the batch step, ``-j 123.N`` srun step N, ``-j 123`` the job's
first running step (the batch step: Slurm's order), ``-a`` every running step. A user sees their
own jobs; operators every job. Output is sacct's: fixed width with a space after every field,
``-p``/``-P`` parsable, ``-n`` no header, ``-o`` fields (a prefix of a name is enough, as in
Slurm).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

from cli.core import Args, command, fail, write_lines
from cli.core.client import Client
from cli.core.formats import fmt_cpu_time, fmt_duration
from cli.core.options import NO_ARG, Opt, OptionTable
from cli.sacct import Column, Field, Options, print_field_names, render
from kiln.slurm.tres import unit_text

PROG = "sstat"
DEFAULT_FORMAT = (
    "JobID,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,"
    "MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,"
    "AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ConsumedEnergy,MaxDiskRead,"
    "MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,"
    "AveDiskWrite,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode,TRESUsageInMaxTask,"
    "TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutAve,"
    "TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutMin,"
    "TRESUsageOutMinNode,TRESUsageOutMinTask,TRESUsageOutTot")

TABLE = OptionTable([
    Opt("allsteps", "a", NO_ARG), Opt("helpformat", "e", NO_ARG), Opt("help", "h", NO_ARG),
    Opt("pidformat", "i", NO_ARG), Opt("jobs", "j"), Opt("noconvert", "", NO_ARG),
    Opt("noheader", "n", NO_ARG), Opt("format", "o"), Opt("fields", "", dest="format"),
    Opt("parsable", "p", NO_ARG), Opt("parsable2", "P", NO_ARG), Opt("usage", "", NO_ARG),
    Opt("verbose", "v", NO_ARG), Opt("version", "V", NO_ARG),
])
USAGE = """Usage: sstat [options] -j <job(.stepid)>
    Use --help for help"""
HELP = """sstat [<OPTION>] -j <job(.stepid)>
    Valid <OPTION> values are:
      -a, --allsteps:
                   Print all steps for the given job(s) when no step is
                   specified.
      -e, --helpformat:
                   Print a list of fields that can be specified with the
                   '--format' option
      -h, --help:  Print this description of use.
      -j, --jobs:
                   Format is <job(.step)>. Stat this job step
                   or comma-separated list of job steps. This option is
                   required.  The step portion will default to the lowest
                   numbered (not batch, extern, etc) step running if not
                   specified, unless the --allsteps flag is set where not
                   setting the step will result in all running steps to be
                   displayed.
      --noconvert:
                   Don't convert units from their original type
                   (e.g. 2048M won't be converted to 2G).
      -n, --noheader:
                   No header will be added to the beginning of output.
                   The default is to print a header.
      -o, --format:
                   Comma separated list of fields.
                   (use '--helpformat' for a list of available fields).
      -p, --parsable: output will be '|' delimited with a '|' at the end
      -P, --parsable2: output will be '|' delimited without a '|' at the end
      --usage:     Display brief usage message.
      -v, --verbose:
                   Primarily for debugging purposes, report the state of
                   various variables during processing.
      -V, --version: Print version."""

_STEP = re.compile(r"^(\d+(?:_\d+)?)(?:\.(batch|extern|\d+))?$")

Row = dict[str, Any]  # one step: job_id, step, nodes, usage (kiln.slurm.stats.merge_usage)


# --- figures ---------------------------------------------------------------------------------


def _u(row: Row, key: str) -> float | None:
    value = row["usage"].get(key)
    return None if value is None else float(value)


def _ave(row: Row, metric: str) -> float | None:
    total, tasks = _u(row, f"{metric}_tot"), row["usage"].get("ntasks") or 0
    return None if total is None or not tasks else total / tasks


def _kib(value: float | None, opts: Options) -> str:
    """Memory in KiB, as sacct's MaxRSS: exact units (204800 -> 200M), or K with --noconvert."""
    if value is None:
        return ""
    return f"{int(value)}K" if opts.noconvert else unit_text(int(value), "KMGTP")


def _count(value: float | None, opts: Options) -> str:
    """Bytes or page counts: Slurm's convert_num_unit, two decimals once it is 1024 or more."""
    if value is None:
        return ""
    if opts.noconvert or value < 1024:
        return str(int(value))
    units = "KMGTPE"
    value /= 1024
    i = 0
    while value >= 1024 and i < len(units) - 1:
        value /= 1024
        i += 1
    return f"{value:.2f}{units[i]}"


def _cpu(value: float | None, opts: Options) -> str:
    return "" if value is None else fmt_cpu_time(int(value))


Show = Callable[[float | None, Options], str]
_SHOW: dict[str, Show] = {"cpu": _cpu, "mem": _kib, "vmem": _kib, "pages": _count,
                          "read": _count, "write": _count}


def _max(metric: str) -> Callable[[Row, Options], str]:
    return lambda r, o: _SHOW[metric](_u(r, f"{metric}_max"), o)


def _min(metric: str) -> Callable[[Row, Options], str]:
    return lambda r, o: _SHOW[metric](_u(r, f"{metric}_min"), o)


def _ave_of(metric: str) -> Callable[[Row, Options], str]:
    return lambda r, o: _SHOW[metric](_ave(r, metric), o)


def _node(metric: str, end: str) -> Callable[[Row, Options], str]:
    return lambda r, o: str(r["usage"].get(f"{metric}_{end}_node", ""))


def _task(metric: str, end: str) -> Callable[[Row, Options], str]:
    return lambda r, o: "" if f"{metric}_{end}_task" not in r["usage"] else \
        str(int(r["usage"][f"{metric}_{end}_task"]))


# --- TRES strings: TRESUsageIn*/Out*, names sorted as Slurm prints them ---------------------

_IN = (("cpu", "cpu"), ("energy", None), ("fs/disk", "read"), ("mem", "mem"),
       ("pages", "pages"), ("vmem", "vmem"))
_OUT = (("energy", None), ("fs/disk", "write"))


def _tres_value(row: Row, metric: str | None, part: str, opts: Options) -> str:
    if metric is None:
        return "0"  # energy: kiln has no energy plugin (Slurm prints 0 without one)
    value = _ave(row, metric) if part == "ave" else _u(row, f"{metric}_{part}")
    if value is None:
        return ""
    if metric == "cpu":
        return fmt_duration(value)
    if metric in ("mem", "vmem"):
        return _kib(value, opts)
    return str(int(value))


def _gres(row: Row, part: str) -> list[str]:
    """gres/gpumem and gres/gpuutil where the step's GPUs were sampled (Ave, Max, Min, Tot)."""
    util, mem = _u(row, "gpu_util"), _u(row, "gpu_mem_mb")
    if util is None or part.endswith("_node") or part.endswith("_task"):
        return []
    return [f"gres/gpumem={int(mem or 0)}M", f"gres/gpuutil={int(round(util))}"]


def _tres(names: tuple[tuple[str, str | None], ...], part: str) -> Callable[[Row, Options], str]:
    def get(row: Row, opts: Options) -> str:
        if not row["usage"].get("ntasks"):
            return ""
        items = []
        for name, metric in names:
            if part.endswith(("_node", "_task")) and metric is None:  # energy: none measured
                value = (row["nodes"] or [""])[0] if part.endswith("_node") else "0"
            elif part.endswith(("_node", "_task")):
                value = str(row["usage"].get(f"{metric}_{part}", ""))
            else:
                value = _tres_value(row, metric, part, opts)
            items.append(f"{name}={value}")
        if names is _IN:
            items[3:3] = _gres(row, part)  # after fs/disk, before mem (sorted by name)
        return ",".join(items)
    return get


def _jobid(row: Row, opts: Options | None) -> str:
    return f"{row['job_id']}.{row['step']}"


def _always(text: str) -> Callable[[Row, Options], str]:
    return lambda r, o: text


FIELDS: list[Field] = [
    Field("AveCPU", 10, _ave_of("cpu"), cut=False),
    Field("AveCPUFreq", 10, _always("")),
    Field("AveDiskRead", 12, _ave_of("read"), cut=False),
    Field("AveDiskWrite", 12, _ave_of("write"), cut=False),
    Field("AvePages", 10, _ave_of("pages"), cut=False),
    Field("AveRSS", 10, _ave_of("mem"), cut=False),
    Field("AveVMSize", 10, _ave_of("vmem"), cut=False),
    Field("ConsumedEnergy", 14, _always("0"), cut=False),
    Field("ConsumedEnergyRaw", 17, _always("0"), cut=False),
    Field("JobID", -12, _jobid),
    Field("MaxDiskRead", 12, _max("read"), cut=False),
    Field("MaxDiskReadNode", 15, _node("read", "max")),
    Field("MaxDiskReadTask", 15, _task("read", "max"), cut=False),
    Field("MaxDiskWrite", 12, _max("write"), cut=False),
    Field("MaxDiskWriteNode", 16, _node("write", "max")),
    Field("MaxDiskWriteTask", 16, _task("write", "max"), cut=False),
    Field("MaxPages", 8, _max("pages"), cut=False),
    Field("MaxPagesNode", 12, _node("pages", "max")),
    Field("MaxPagesTask", 14, _task("pages", "max"), cut=False),
    Field("MaxRSS", 10, _max("mem"), cut=False),
    Field("MaxRSSNode", 10, _node("mem", "max")),
    Field("MaxRSSTask", 10, _task("mem", "max"), cut=False),
    Field("MaxVMSize", 10, _max("vmem"), cut=False),
    Field("MaxVMSizeNode", 14, _node("vmem", "max")),
    Field("MaxVMSizeTask", 14, _task("vmem", "max"), cut=False),
    Field("MinCPU", 10, _min("cpu"), cut=False),
    Field("MinCPUNode", 10, _node("cpu", "min")),
    Field("MinCPUTask", 10, _task("cpu", "min"), cut=False),
    Field("Nodelist", 20, lambda r, o: ",".join(r["nodes"])),
    Field("NTasks", 8, lambda r, o: str(r["usage"].get("ntasks", 0)), cut=False),
    Field("Pids", 20, _always("")),
    Field("ReqCPUFreq", 10, _always("Unknown")),
    Field("ReqCPUFreqMin", 13, _always("Unknown")),
    Field("ReqCPUFreqMax", 13, _always("Unknown")),
    Field("ReqCPUFreqGov", 13, _always("Unknown")),
    Field("TRESUsageInAve", 14, _tres(_IN, "ave")),
    Field("TRESUsageInMax", 14, _tres(_IN, "max")),
    Field("TRESUsageInMaxNode", 18, _tres(_IN, "max_node")),
    Field("TRESUsageInMaxTask", 18, _tres(_IN, "max_task")),
    Field("TRESUsageInMin", 14, _tres(_IN, "min")),
    Field("TRESUsageInMinNode", 18, _tres(_IN, "min_node")),
    Field("TRESUsageInMinTask", 18, _tres(_IN, "min_task")),
    Field("TRESUsageInTot", 14, _tres(_IN, "tot")),
    Field("TRESUsageOutAve", 15, _tres(_OUT, "ave")),
    Field("TRESUsageOutMax", 15, _tres(_OUT, "max")),
    Field("TRESUsageOutMaxNode", 19, _tres(_OUT, "max_node")),
    Field("TRESUsageOutMaxTask", 19, _tres(_OUT, "max_task")),
    Field("TRESUsageOutMin", 15, _tres(_OUT, "min")),
    Field("TRESUsageOutMinNode", 19, _tres(_OUT, "min_node")),
    Field("TRESUsageOutMinTask", 19, _tres(_OUT, "min_task")),
    Field("TRESUsageOutTot", 15, _tres(_OUT, "tot")),
]
_GPU_FIELDS = {f.name for f in FIELDS if f.name.startswith("TRESUsageIn")}


def parse_format(text: str) -> list[Column]:
    """'MaxRSS,JobID%20' -> columns. As Slurm's, a name matches the first field it begins
    (``maxrss`` is MaxRSS, ``tresusageinmaxn`` TRESUsageInMaxNode); an unknown one is an error."""
    columns = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, pct, width = item.partition("%")
        field = next((f for f in FIELDS if f.name.lower().startswith(name.lower())), None)
        if field is None or not name:
            fail(f'Invalid field requested: "{name}"')
        try:
            columns.append(Column(field, int(width) if pct else field.width))
        except ValueError:
            fail(f'Invalid field requested: "{item}"')
    return columns


# --- which steps -----------------------------------------------------------------------------


def parse_jobs(values: list[str]) -> list[tuple[str, str | None]]:
    """'123,124.batch,125.0' -> [(job, step or None)]; Slurm's error for anything else."""
    out = []
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            m = _STEP.match(item)
            if m is None:
                fail(f"Invalid job id: {item}")
            out.append((m.group(1), m.group(2)))
    return out


def choose(answer: dict[str, Any], step: str | None, all_steps: bool,
           warn: Callable[[str], None]) -> list[Row]:
    """The step rows sstat prints for one id, and its errors (as Slurm's, it goes on)."""
    jobs = answer.get("jobs") or []
    ident = answer.get("id", "")
    if not jobs:
        warn(f"couldn't get info for job {ident}" if step == "batch"
             else f"couldn't get steps for job {ident}")
        return []
    rows: list[Row] = []
    for job in jobs:
        if job.get("denied"):
            warn(f"problem getting step_layout for {job['job_id']}.{step or 'batch'}: "
                 "Access/permission denied")
            continue
        steps = [dict(s, job_id=job["job_id"]) for s in job.get("steps") or []]
        if step is not None:
            rows.extend(s for s in steps if s["step"] == step)
        elif all_steps:
            rows.extend(steps)
        elif not steps:
            warn(f"no steps running for job {job['job_id']}")
        else:
            rows.append(steps[0])
    return rows


# --- the command -----------------------------------------------------------------------------


def _refused(args: Args) -> None:
    if "pidformat" in args.given:
        fail("--pidformat is not supported by kiln: sstat shows a step's figures, "
             "not its processes")


@command(PROG, TABLE, help=HELP + "\n", usage=USAGE + "\n", check=_refused)
def sstat(args: Args) -> int:
    values, positional = args.every(), args.positional
    if "helpformat" in values:
        print_field_names(FIELDS)
        return 0
    columns = parse_format(",".join(v or "" for v in values["format"]) if "format" in values
                           else DEFAULT_FORMAT)
    wanted = parse_jobs([v or "" for v in values.get("jobs", [])] + positional)
    if not wanted:
        fail("You didn't give me any jobs to stat.")
    with Client() as client:
        reply = client.call("job_stat", {"job_ids": [job for job, _ in wanted]})
    answers = reply.get("answers") or []
    errors: list[str] = []
    rows: list[Row] = []
    for (_, step), answer in zip(wanted, answers, strict=False):
        rows.extend(choose(answer, step, "allsteps" in values, errors.append))
    _print(rows, columns, values)
    for line in errors:
        print(f"{PROG}: error: {line}", file=sys.stderr)
    if any(c.field.name in _GPU_FIELDS for c in columns):
        for row in rows:
            if row["usage"].get("gpu_simulated"):
                print(f"{PROG}: note: gres/gpuutil and gres/gpumem of {_jobid(row, None)} "
                      "are simulated (--fake-gpus nodes)", file=sys.stderr)
    return 0


def _print(rows: list[Row], columns: list[Column], values: dict[str, list[str | None]]) -> None:
    parsable = "parsable" in values or "parsable2" in values
    lines = render(rows, columns, Options(0.0, "noconvert" in values),
                   header="noheader" not in values, delimiter="|" if parsable else None,
                   trailing="parsable" in values)
    write_lines(lines)


main = sstat.main


if __name__ == "__main__":
    sys.exit(main())
