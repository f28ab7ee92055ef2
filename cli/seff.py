"""``seff JOBID``: the efficiency report Slurm users know, from kiln's accounting.

The lines and their order are those of Slurm's contrib ``seff`` (Job ID, Cluster, User/Group,
State, Nodes/Cores, CPU Utilized/Efficiency, Job Wall-clock time, Memory Utilized/Efficiency),
followed by kiln's GPU lines: the GPUs allocated, their mean (and peak) utilisation and the
most GPU memory the job held against what its GPUs have. The figures come from ``sacct``'s
records (schedd's ``acct_jobs``): the agents' samples in ``Job.stats`` (GPUUtil,
GPUMemMax, MaxRSS), the CPU time the agent reaped with the batch shell plus that of its srun
steps (TotalCPU), and the allocation.

A figure kiln did not measure is said to be unavailable rather than shown as zero: an
efficiency of 0 % reads as "your job wasted everything".
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from cli.core import Args, command, fail
from cli.core.client import Client, ClientError
from cli.core.formats import fmt_duration
from cli.core.options import NO_ARG, Opt, OptionTable

PROG = "seff"
USAGE = "Usage: seff [Options] <Jobid>\n       Options:\n       -h    Help menu\n" \
        "       -v    Version\n       -d    Debug mode: display raw Slurm data\n"
TABLE = OptionTable([Opt("help", "h", NO_ARG), Opt("version", "v", NO_ARG),
                     Opt("debug", "d", NO_ARG)])
_JOB_ID = re.compile(r"^\d+(_\d+)?$")
_MEM = re.compile(r"^(\d+(?:\.\d+)?)([KMGTP]?)$")
_MB = {"K": 1 / 1024, "": 1.0, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2, "P": 1024.0 ** 3}


def main(argv: Sequence[str] | None = None) -> int:
    return seff.main(argv)


# Getopt::Long's words: a bad option's message alone, without seff's name
@command(PROG, TABLE, help=USAGE, version="seff Version: 2.1 (kiln)\n", bare_getopt_errors=True)
def seff(args: Args) -> int:
    values, positional = args.given, args.positional
    if len(positional) != 1 or not _JOB_ID.match(positional[0]):
        print(USAGE, end="", file=sys.stderr)
        return 1
    job_id = positional[0]
    try:
        with Client() as client:
            rows = client.call("acct_jobs", {"job_ids": [job_id], "steps": False})["rows"]
            row = next((r for r in rows if r.get("job_id") == job_id
                        or r.get("job_id_raw") == job_id), None)
            nodes = client.call("query_nodes", {})["nodes"] if row and row.get("alloc_gpus") \
                else []
    except ClientError as exc:
        fail(exc.message)
    if row is None:
        fail("Job not found.", prefixed=False)
    if "debug" in values:
        for key in sorted(row):
            print(f"{key}={row[key]}")
    print("\n".join(report_lines(row, nodes)))
    return 0


def mem_mb(text: str) -> float | None:
    """'16G', '16000M', '512' (MB), '0' -> MiB; None when unreadable."""
    m = _MEM.match(str(text).strip())
    return float(m.group(1)) * _MB[m.group(2)] if m else None


def tres_mem_mb(tres: str) -> float | None:
    for item in str(tres or "").split(","):
        name, _, value = item.partition("=")
        if name == "mem":
            return mem_mb(value)
    return None


def size_text(mb: float) -> str:
    """seff's memory figures: 'NNN.NN MB' up to 1 GB, then GB, then TB."""
    for unit, factor in (("TB", 1024.0 ** 2), ("GB", 1024.0)):
        if mb >= factor:
            return f"{mb / factor:.2f} {unit}"
    return f"{mb:.2f} MB"


def report_lines(row: dict[str, Any], nodes: list[dict[str, Any]]) -> list[str]:
    state, base = str(row.get("state", "")), str(row.get("state_base", row.get("state", "")))
    exit_code = str(row.get("exit_code") or "0:0")
    lines = []
    if row.get("array_job_id") is not None and row.get("array_task_id") is not None:
        lines.append(f"Job ID: {row['job_id_raw']}")
        lines.append(f"Array Job ID: {row['job_id']}")
    else:
        lines.append(f"Job ID: {row['job_id']}")
    group = _group_name(row.get("gid"))
    lines += [f"Cluster: {row.get('cluster', 'kiln')}",
              f"User/Group: {row.get('user', '')}/{group}",
              f"State: {state} (exit code {exit_code.split(':')[0]})"]
    nnodes, cpus = int(row.get("nnodes") or 1), int(row.get("alloc_cpus") or 0)
    if nnodes > 1:
        lines += [f"Nodes: {nnodes}", f"Cores per node: {max(cpus // nnodes, 1)}"]
    else:
        lines.append(f"Cores: {cpus}")
    if base == "PENDING":
        lines.append("Efficiency not available for jobs in the PENDING state.")
        return lines
    elapsed = float(row.get("elapsed") or 0)
    lines += _cpu_lines(row, cpus, elapsed)
    lines.append(f"Job Wall-clock time: {fmt_duration(elapsed)}")
    lines += _memory_lines(row)
    lines += _gpu_lines(row, nodes)
    if base in ("RUNNING", "COMPLETING"):
        lines.append("WARNING: Efficiency statistics may be misleading for RUNNING jobs.")
    return lines


def _group_name(gid: Any) -> str:
    import grp

    try:
        return grp.getgrgid(int(gid)).gr_name
    except (KeyError, TypeError, ValueError):
        return str(gid if gid is not None else "")


def _cpu_lines(row: dict[str, Any], cpus: int, elapsed: float) -> list[str]:
    core_walltime = fmt_duration(cpus * elapsed)
    used = row.get("total_cpu")  # seconds, known once the job's agent has reported its end
    if not isinstance(used, (int, float)):
        return ["CPU Utilized: unavailable (not measured yet)",
                f"CPU Efficiency: unavailable of {core_walltime} core-walltime"]
    share = 100.0 * used / (cpus * elapsed) if cpus and elapsed else 0.0
    return [f"CPU Utilized: {fmt_duration(used)}",
            f"CPU Efficiency: {share:.2f}% of {core_walltime} core-walltime"]


def _memory_lines(row: dict[str, Any]) -> list[str]:
    allocated = tres_mem_mb(str(row.get("alloc_tres") or "")) or 0.0
    rss_kb = row.get("max_rss_kb")
    if not isinstance(rss_kb, (int, float)):
        return ["Memory Utilized: unavailable (no samples)",
                f"Memory Efficiency: unavailable of {size_text(allocated)}"]
    used = rss_kb / 1024.0
    if not allocated:
        return [f"Memory Utilized: {size_text(used)}",
                "Memory Efficiency: no memory was requested (the node's memory was shared)"]
    return [f"Memory Utilized: {size_text(used)}",
            f"Memory Efficiency: {100.0 * used / allocated:.2f}% of {size_text(allocated)}"]


def _gpu_lines(row: dict[str, Any], nodes: list[dict[str, Any]]) -> list[str]:
    gpus = int(row.get("alloc_gpus") or 0)
    if not gpus:
        return []
    model, per_gpu = _gpu_model(row, nodes)
    lines = [f"GPUs: {gpus}" + (f" ({model})" if model else "")]
    util, peak = row.get("gpu_util"), row.get("gpu_util_max")
    # made-up figures of fake GPUs (agentd/sampler.py) are never shown as measured
    sim = " [simulated: fake GPUs, not measured]" if row.get("gpu_simulated") else ""
    if isinstance(util, (int, float)):
        peak_text = f" (peak {peak:.2f}%)" if isinstance(peak, (int, float)) else ""
        lines.append(f"GPU Efficiency: {util:.2f}% mean utilisation{peak_text}{sim}")
    else:
        lines.append("GPU Efficiency: unavailable (no GPU samples)")
    held = row.get("gpu_mem_max_mb")
    if isinstance(held, (int, float)):
        total = per_gpu * gpus
        share = f" ({100.0 * held / total:.2f}% of {size_text(total)})" if total else ""
        lines.append(f"GPU Memory Utilized: {size_text(held)}{share}{sim}")
    else:
        lines.append("GPU Memory Utilized: unavailable (no GPU samples)")
    idle, hours = row.get("idle_gpu_hours"), row.get("gpu_hours")
    if isinstance(idle, (int, float)):  # [scheduler.idle_gpu] watched the run
        lines.append(f"GPU idle: {idle:.2f} GPU-hours of {float(hours or 0):.2f}")
    return lines


def _gpu_model(row: dict[str, Any], nodes: list[dict[str, Any]]) -> tuple[str, float]:
    """The GPU model and per-GPU memory (MiB) of the job's first node."""
    from kiln.slurm.hostlist import HostlistError, expand

    try:
        names = expand(str(row.get("node_list") or ""))
    except HostlistError:
        names = []
    for node in nodes:
        if names and node.get("name") == names[0] and node.get("gpus"):
            gpu = node["gpus"][0]
            return str(gpu.get("model", "")), float(gpu.get("memory_mb") or 0)
    return "", 0.0


if __name__ == "__main__":
    sys.exit(main())
