"""agentd.sampler: fake and NVML GPU readings, process-tree RSS, and the stats a job ends with."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import SimpleNamespace
from typing import Any

import pytest

from agentd import sampler
from kiln.model import GPU
from kiln.slurm import stats as keys


def gpus(n: int = 4, memory_mb: int = 81920) -> list[GPU]:
    return [GPU(i, f"GPU-{i}", "NVIDIA H100-80GB", memory_mb) for i in range(n)]


def test_fake_readings_are_deterministic_and_in_range() -> None:
    seen = set()
    for job_id in range(1, 200):
        for index in range(8):
            util, mem = sampler.fake_gpu_sample(job_id, index, 81920)
            assert (util, mem) == sampler.fake_gpu_sample(job_id, index, 81920)
            assert 30 <= util <= 99 and 8192 <= mem <= 81920 * 0.9
            seen.add(util)
    assert len(seen) > 30  # they differ between jobs and GPUs


def fixed_tree(rss: float = 2048.0, user: float = 1.5, system: float = 0.25):
    return lambda pid: sampler.TreeUsage(rss, user, system, {pid, pid + 1})


def test_sampler_samples_new_jobs_at_once_then_on_the_interval() -> None:
    s = sampler.Sampler(sampler.FakeGPUs(gpus()), interval=10, probe=fixed_tree())
    s.track({"job_id": 7, "generation": 1, "gpus": [1, 3]})
    running = [{"job_id": 7, "generation": 1, "pid": 100}]
    s.tick(1000.0, running)  # due (first ever) and unsampled
    s.tick(1001.0, running)  # neither due nor unsampled
    assert s.jobs[(7, 1)].samples == 1
    s.tick(1010.5, running)
    stats = s.finish(7, 1)
    u1, m1 = sampler.fake_gpu_sample(7, 1, 81920)
    u3, m3 = sampler.fake_gpu_sample(7, 3, 81920)
    assert stats == {keys.STAT_SAMPLES: 2, keys.STAT_RSS_MAX: 2048,
                     keys.STAT_RSS_MEAN: 2048,
                     keys.STAT_GPU_UTIL_MEAN: round((u1 + u3) / 2, 2),
                     keys.STAT_GPU_UTIL_MAX: round((u1 + u3) / 2, 2),
                     keys.STAT_GPU_MEM_MAX: int(m1 + m3),
                     keys.STAT_CPU_USER: 1.5, keys.STAT_CPU_SYSTEM: 0.25,
                     keys.STAT_GPU_SIMULATED: 1}  # fake GPUs: made up, and marked so
    assert s.finish(7, 1) == {}  # forgotten


def test_the_kernels_peak_rss_wins_over_a_smaller_sample_and_stands_alone() -> None:
    s = sampler.Sampler(None, interval=10, probe=fixed_tree())
    s.track({"job_id": 8, "generation": 1})
    s.tick(1000.0, [{"job_id": 8, "generation": 1, "pid": 100}])  # one sample: 2048 KiB
    stats = s.finish(8, 1, (2.0, 0.5), peak_rss_kb=307200.0)
    assert (stats[keys.STAT_RSS_MAX], stats[keys.STAT_RSS_MEAN]) == (307200, 2048)
    assert keys.STAT_GPU_SIMULATED not in stats  # no GPU figure at all
    alone = s.finish(9, 1, (1.0, 0.0), peak_rss_kb=4096.0)  # never sampled
    assert alone[keys.STAT_RSS_MAX] == 4096


def test_jobs_without_gpus_or_already_gone() -> None:
    s = sampler.Sampler(None, interval=1, probe=fixed_tree(512.0))
    s.tick(5.0, [{"job_id": 3, "generation": 2, "pid": 9}])  # adopted: never tracked
    assert s.finish(3, 2) == {keys.STAT_SAMPLES: 1, keys.STAT_RSS_MAX: 512,
                              keys.STAT_RSS_MEAN: 512, keys.STAT_CPU_USER: 1.5,
                              keys.STAT_CPU_SYSTEM: 0.25}
    gone = sampler.Sampler(None, interval=1, probe=lambda pid: sampler.GONE)
    gone.tick(5.0, [{"job_id": 4, "generation": 1, "pid": 9}])
    assert gone.finish(4, 1) == {}


def test_reaped_cpu_time_wins_over_a_smaller_sample_and_stands_alone() -> None:
    s = sampler.Sampler(None, interval=1, probe=fixed_tree(100.0, user=2.0, system=3.0))
    s.track({"job_id": 5, "generation": 1, "gpus": []})
    s.tick(1.0, [{"job_id": 5, "generation": 1, "pid": 9}])
    stats = s.finish(5, 1, cpu=(4.0, 1.0))  # wait4's figure; the sample saw more system time
    assert (stats[keys.STAT_CPU_USER], stats[keys.STAT_CPU_SYSTEM]) == (4.0, 3.0)
    # a job that ended before its first sample still has its CPU time, and nothing else
    s.track({"job_id": 6, "generation": 1, "gpus": []})
    assert s.finish(6, 1, cpu=(0.5, 0.125)) == {keys.STAT_CPU_USER: 0.5,
                                                 keys.STAT_CPU_SYSTEM: 0.125}


def test_tree_rss_counts_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; x = b'x' * 20_000_000; "
                              "time.sleep(30)"])
    try:
        for _ in range(50):
            tree = sampler.tree_usage(os.getpid())
            if child.pid in tree.pids and tree.rss_kb > 20_000:
                break
            time.sleep(0.1)
        assert child.pid in tree.pids and os.getpid() in tree.pids
        assert tree.rss_kb > 20_000  # our own RSS plus the child's 20 MB
    finally:
        child.kill()
        child.wait()
    assert sampler.tree_usage(child.pid) == sampler.GONE


def test_tree_cpu_counts_live_children_and_what_they_reaped() -> None:
    """A shell whose busy child has exited and been reaped still shows that child's CPU time
    (children_user), and a live busy grandchild counts too."""
    burn = "import time; t = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    shell = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} -c '{burn}'; sleep 30"])
    try:
        for _ in range(100):
            tree = sampler.tree_usage(shell.pid)
            if tree.cpu_user + tree.cpu_system >= 0.5 and len(tree.pids) == 2:
                break  # the burner has exited and been reaped; sleep is running
            time.sleep(0.1)
        assert tree.cpu_user + tree.cpu_system >= 0.5, tree
    finally:
        shell.kill()
        shell.wait()


class FakeNVMLError(Exception):
    pass


def fake_nvml(processes: list[Any], fail: set[int] = frozenset()) -> SimpleNamespace:
    def handle(i: int) -> int:
        if i in fail:
            raise FakeNVMLError("GPU is lost")
        return i

    return SimpleNamespace(
        NVMLError=FakeNVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=50 + h),
        nvmlDeviceGetComputeRunningProcesses=lambda h: processes,
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=3 * 1024 * 1024 * 1024))


def test_nvml_readings_use_the_jobs_processes_else_the_device() -> None:
    procs = [SimpleNamespace(pid=11, usedGpuMemory=1024 ** 3),
             SimpleNamespace(pid=99, usedGpuMemory=5 * 1024 ** 3)]
    nvml = sampler.NvmlGPUs(fake_nvml(procs))
    assert nvml.sample(1, [0, 2], {10, 11}) == [(50.0, 1024.0), (52.0, 1024.0)]
    assert nvml.sample(1, [0], {12}) == [(50.0, 3072.0)]  # no process of ours: device's use
    lossy = sampler.NvmlGPUs(fake_nvml(procs, fail={1}))
    assert lossy.sample(1, [0, 1], {11}) == [(50.0, 1024.0)]


def test_nvml_used_memory_none_falls_back_to_the_device() -> None:
    """Current nvidia-ml-py gives usedGpuMemory=None where the driver cannot tell: that is not
    0 MiB held, it is unknown, so the device's used memory stands in."""
    procs = [SimpleNamespace(pid=11, usedGpuMemory=None)]
    nvml = sampler.NvmlGPUs(fake_nvml(procs))
    assert nvml.sample(1, [0], {11}) == [(50.0, 3072.0)]


def test_make_sampler_picks_the_backend() -> None:
    assert sampler.make_sampler([], False, 10).backend is None
    assert isinstance(sampler.make_sampler(gpus(2), True, 10).backend, sampler.FakeGPUs)


@pytest.mark.parametrize("interval", [0, -1])
def test_interval_has_a_floor(interval: float) -> None:
    assert sampler.Sampler(None, interval).interval == 0.05


# --- live usage: what sstat shows ------------------------------------------------------------


def tree(rss: float, cpu: float = 1.0, vms: float = 0.0, pid: int = 1) -> sampler.TreeUsage:
    return sampler.TreeUsage(rss, cpu, 0.0, {pid}, vms, 3.0, 100.0, 50.0)


def test_batch_usage_is_the_largest_seen_and_the_gpus() -> None:
    readings = iter([tree(1000.0, cpu=1.0, vms=5000.0), tree(400.0, cpu=2.5, vms=4000.0)])
    s = sampler.Sampler(sampler.FakeGPUs(gpus()), interval=1, probe=lambda pid: next(readings))
    s.track({"job_id": 9, "generation": 1, "gpus": [0]})
    assert s.usage(9, 1) == {}  # before the first sample
    s.tick(10.0, [{"job_id": 9, "generation": 1, "pid": 5}])
    s.tick(11.0, [{"job_id": 9, "generation": 1, "pid": 5}])
    usage = s.usage(9, 1)
    util, _ = sampler.fake_gpu_sample(9, 0, 81920)
    assert usage[keys.U_NTASKS] == 1 and usage["mem_max"] == 1000.0  # RSS peaks
    assert usage["cpu_max"] == 2.5 and usage["vmem_tot"] == 5000.0  # CPU time only grows
    assert (usage["mem_max_task"], usage["pages_max"], usage["read_max"]) == (0, 3.0, 100.0)
    assert usage[keys.U_GPU_UTIL] == util and usage[keys.U_SIMULATED] == 1


def test_step_tasks_are_sampled_each_and_forgotten_when_gone() -> None:
    rss = {11: 100.0, 12: 300.0}
    s = sampler.Sampler(None, interval=1, probe=lambda pid: tree(rss[pid], pid=pid))
    s.tick(1.0, [], [(4, 0, 0, 11), (4, 0, 1, 12)])
    [step] = s.step_usage()
    assert (step["job_id"], step["step_id"]) == (4, 0)
    u = step["usage"]
    assert (u[keys.U_NTASKS], u["mem_max"], u["mem_max_task"]) == (2, 300.0, 1)
    assert (u["mem_min"], u["mem_min_task"], u["mem_tot"]) == (100.0, 0, 400.0)
    s.tick(5.0, [], [])
    assert s.step_usage() == []


def test_schedd_merges_a_steps_nodes() -> None:
    a = keys.summarize_tasks({0: {"mem": 100.0, "cpu": 5.0}, 1: {"mem": 700.0, "cpu": 1.0}})
    b = keys.summarize_tasks({2: {"mem": 300.0, "cpu": 9.0}})
    merged = keys.merge_usage({"n2": b, "n1": a})
    assert merged[keys.U_NTASKS] == 3 and merged["nodes"] == ["n1", "n2"]
    assert (merged["mem_max"], merged["mem_max_node"], merged["mem_max_task"]) == (700.0, "n1", 1)
    assert (merged["cpu_min"], merged["cpu_min_node"], merged["cpu_min_task"]) == (1.0, "n1", 1)
    assert (merged["cpu_max_node"], merged["mem_tot"]) == ("n2", 1100.0)
    assert keys.merge_usage({}) == {}
    assert keys.clean_usage({"mem_max": -1, "cpu_max": True, "ntasks": 2, "x": 1}) == {
        "ntasks": 2}
