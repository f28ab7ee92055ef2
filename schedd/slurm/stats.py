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
    if not isinstance(value, dict):
        return {}
    out: dict[str, float] = {}
    for key in STAT_KEYS:
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
