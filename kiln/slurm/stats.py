"""The statistics an agent reports for a job or step, and how schedd reads them (stdlib only).

``agentd/sampler.py`` samples a job's process tree and GPUs and sends the figures as ``stats``
in ``job_ended``; schedd keeps them in ``job.extra["stats"]`` (a job) or the step row's
``stats`` (an srun step), and sacct/seff print them as GPUUtil, GPUMemMax, MaxRSS, AveRSS,
TotalCPU, UserCPU and SystemCPU (``schedd/reports/accounting.py``). The key names below are the
contract between the two sides; ``clean_stats`` is how schedd takes what an agent sent.
"""

from __future__ import annotations

import math
from typing import Any

STAT_SAMPLES = "samples"  # how many samples the figures below come from
STAT_GPU_UTIL_MEAN = "gpu_util_mean"  # percent, mean over samples and the job's GPUs
STAT_GPU_UTIL_MAX = "gpu_util_max"
STAT_GPU_MEM_MAX = "gpu_mem_max_mb"  # MiB, the most the job's GPUs held together
STAT_RSS_MAX = "rss_max_kb"  # KiB, the process tree's largest resident set
STAT_RSS_MEAN = "rss_mean_kb"
STAT_CPU_USER = "cpu_user_s"  # seconds of user CPU time: the batch shell's tree
STAT_CPU_SYSTEM = "cpu_system_s"
# 1 when the GPU figures are made up (--fake-gpus: no GPU was measured); sacct and seff label
# them "simulated" wherever they print them
STAT_GPU_SIMULATED = "gpu_simulated"

STAT_KEYS: tuple[str, ...] = (
    STAT_SAMPLES, STAT_GPU_UTIL_MEAN, STAT_GPU_UTIL_MAX, STAT_GPU_MEM_MAX,
    STAT_RSS_MAX, STAT_RSS_MEAN, STAT_CPU_USER, STAT_CPU_SYSTEM, STAT_GPU_SIMULATED,
)


def clean_stats(value: Any) -> dict[str, float]:
    """What of an agent's ``stats`` schedd may keep: the known keys whose values are finite,
    non-negative numbers (``int`` or ``float``, not ``bool``); everything else is dropped.

    Anything that is not a dict gives ``{}``. Only the known keys are looked up, so the result
    has at most ``len(STAT_KEYS)`` entries and the work does not grow with what was sent.
    Integers stay integers (a sample count, KiB); they must fit a float."""
    return _clean(value, STAT_KEYS)


def _clean(value: Any, known: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    out: dict[str, float] = {}
    for key in known:
        number = value.get(key)
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            continue
        try:
            as_float = float(number)
        except OverflowError:  # an int too big for a float
            continue
        if math.isfinite(as_float) and as_float >= 0:
            out[key] = abs(number)  # -0.0 -> 0.0
    return out


# --- live usage: what sstat shows of a running step -------------------------------------------
# Every heartbeat, an agent sends each running step's usage on its node (the batch step with
# its ``running`` item, srun steps as ``step_usage``): per metric, the largest and smallest of
# its tasks' figures with the task that has them, and their total; schedd merges the nodes'
# (``merge_usage``) and sstat prints the result. A task's figure is its largest RSS and virtual
# size (KiB), its CPU time (user + system seconds), its major page faults, and the bytes it has
# read and written, so far.

USAGE_METRICS: tuple[str, ...] = ("cpu", "mem", "vmem", "pages", "read", "write")
USAGE_PARTS: tuple[str, ...] = ("max", "max_task", "min", "min_task", "tot")
U_NTASKS = "ntasks"
U_GPU_UTIL = "gpu_util"  # percent, mean over the samples so far (the step's GPUs on the node)
U_GPU_MEM = "gpu_mem_mb"  # MiB, the most the node's GPUs held together
U_SIMULATED = "gpu_simulated"  # 1: the GPU figures come from --fake-gpus, not a device

USAGE_KEYS: tuple[str, ...] = (
    U_NTASKS, U_GPU_UTIL, U_GPU_MEM, U_SIMULATED,
    *(f"{m}_{p}" for m in USAGE_METRICS for p in USAGE_PARTS),
)


def clean_usage(value: Any) -> dict[str, float]:
    """What of an agent's live ``usage`` schedd may keep (as ``clean_stats``)."""
    return _clean(value, USAGE_KEYS)


def summarize_tasks(tasks: dict[int, dict[str, float]]) -> dict[str, float]:
    """A node's usage of one step from its tasks' figures ({task id: {metric: value}})."""
    out: dict[str, float] = {U_NTASKS: len(tasks)}
    if not tasks:
        return out
    for metric in USAGE_METRICS:
        values = [(float(t.get(metric, 0.0)), task) for task, t in sorted(tasks.items())]
        high = max(values, key=lambda v: v[0])
        low = min(values, key=lambda v: v[0])
        out.update({f"{metric}_max": high[0], f"{metric}_max_task": high[1],
                    f"{metric}_min": low[0], f"{metric}_min_task": low[1],
                    f"{metric}_tot": sum(v for v, _ in values)})
    return out


def merge_usage(nodes: dict[str, dict[str, float]]) -> dict[str, Any]:
    """One step's usage over its nodes ({node: summary}): the largest and smallest with the
    node and task that have them (``<metric>_max_node``), totals and task counts summed; the
    GPU figures: utilisation averaged over the nodes, memory summed. {} without a node."""
    if not nodes:
        return {}
    names = sorted(nodes)
    out: dict[str, Any] = {U_NTASKS: int(sum(nodes[n].get(U_NTASKS, 0) for n in names)),
                           "nodes": names}
    for metric in USAGE_METRICS:
        if not any(f"{metric}_max" in nodes[n] for n in names):
            continue
        high = max(names, key=lambda n: nodes[n].get(f"{metric}_max", 0.0))
        low = min(names, key=lambda n: nodes[n].get(f"{metric}_min", 0.0))
        out.update({
            f"{metric}_max": nodes[high].get(f"{metric}_max", 0.0), f"{metric}_max_node": high,
            f"{metric}_max_task": int(nodes[high].get(f"{metric}_max_task", 0)),
            f"{metric}_min": nodes[low].get(f"{metric}_min", 0.0), f"{metric}_min_node": low,
            f"{metric}_min_task": int(nodes[low].get(f"{metric}_min_task", 0)),
            f"{metric}_tot": sum(nodes[n].get(f"{metric}_tot", 0.0) for n in names)})
    gpu = [nodes[n] for n in names if U_GPU_UTIL in nodes[n]]
    if gpu:
        out[U_GPU_UTIL] = sum(g[U_GPU_UTIL] for g in gpu) / len(gpu)
        out[U_GPU_MEM] = sum(g.get(U_GPU_MEM, 0.0) for g in gpu)
        out[U_SIMULATED] = any(g.get(U_SIMULATED) for g in gpu)
    return out
