"""Per-job resource samples on a node: GPU utilisation and memory, and process-tree RSS.

Every ``interval`` seconds (``[agent] sample_interval``, 10 s by default) the agent samples each
job it runs; a job it has not sampled yet is sampled at the next loop turn, so even a job of a
second leaves one sample. It keeps, per job, the mean and maximum of:

- GPU utilisation (percent, averaged over the job's GPUs at each sample);
- GPU memory (MiB, the job's GPUs together);
- RSS (KiB, the batch shell and all its descendants, from psutil).

When the job ends the agent sends them as ``stats`` in ``job_ended``; schedd keeps them in
``job.extra["stats"]`` and sacct prints them as GPUUtil, GPUMemMax, MaxRSS and AveRSS. The key
names are ``schedd.accounting``'s ``STAT_*``.

GPU figures come from a backend: NVML on a real node (utilisation of the job's devices, memory
of the job's processes on them, else the device's used memory), or, with ``--fake-gpus``, a
deterministic function of the job id and GPU index (``fake_gpu_sample``) so tests can predict
what sacct shows.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil

from schedd import accounting as keys
from schedd.model import GPU

log = logging.getLogger("agentd.sampler")

Key = tuple[int, int]  # (job id, generation)


class GPUBackend(Protocol):
    def sample(self, job_id: int, gpus: list[int], pids: set[int]) -> list[tuple[float, float]]:
        """(utilisation percent, memory MiB) of each of ``gpus`` that could be read."""
        ...


def fake_gpu_sample(job_id: int, index: int, memory_mb: int) -> tuple[float, float]:
    """The fake backend's reading of GPU ``index`` under job ``job_id``: the same every time,
    so a test knows the mean and maximum sacct must show. Utilisation 30..99 %, memory a
    whole number of MiB between 10 % and 90 % of the device."""
    digest = hashlib.sha1(f"{job_id}:{index}".encode()).digest()
    util = 30 + digest[0] % 70
    memory = memory_mb * (10 + digest[1] % 81) // 100
    return float(util), float(memory)


class FakeGPUs:
    """Readings for ``--fake-gpus`` nodes (see ``fake_gpu_sample``)."""

    def __init__(self, gpus: Iterable[GPU]):
        self.memory = {g.index: g.memory_mb for g in gpus}

    def sample(self, job_id: int, gpus: list[int], pids: set[int]) -> list[tuple[float, float]]:
        return [fake_gpu_sample(job_id, i, self.memory.get(i, 0)) for i in gpus
                if i in self.memory]


class NvmlGPUs:
    """Readings from NVML. GPUs are allocated whole, so the device's utilisation is the
    job's; memory is what the job's processes hold on the device when NVML can tell (it
    cannot inside some containers), else the device's used memory."""

    def __init__(self, pynvml: Any = None):
        if pynvml is None:
            import pynvml as module

            pynvml = module
        self.nvml = pynvml
        self.nvml.nvmlInit()
        self._handles: dict[int, Any] = {}
        self._warned = False

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self.nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def sample(self, job_id: int, gpus: list[int], pids: set[int]) -> list[tuple[float, float]]:
        out = []
        for index in gpus:
            try:
                handle = self._handle(index)
                util = float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
                out.append((util, self._memory_mb(handle, pids)))
            except self.nvml.NVMLError as exc:
                if not self._warned:
                    log.warning("NVML sample of GPU %d failed: %s", index, exc)
                    self._warned = True
        return out

    def _memory_mb(self, handle: Any, pids: set[int]) -> float:
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except self.nvml.NVMLError:
            procs = []
        mine = [p.usedGpuMemory or 0 for p in procs if p.pid in pids]
        if mine:
            return sum(mine) / (1024 * 1024)
        return self.nvml.nvmlDeviceGetMemoryInfo(handle).used / (1024 * 1024)

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass


@dataclass(slots=True)
class JobSamples:
    """Running sums and maxima of one job's samples."""

    gpus: list[int] = field(default_factory=list)
    samples: int = 0
    gpu_samples: int = 0
    util_sum: float = 0.0
    util_max: float = 0.0
    mem_max: float = 0.0
    rss_sum: float = 0.0
    rss_max: float = 0.0

    def add(self, gpu: list[tuple[float, float]], rss_kb: float) -> None:
        self.samples += 1
        self.rss_sum += rss_kb
        self.rss_max = max(self.rss_max, rss_kb)
        if gpu:
            util = sum(u for u, _ in gpu) / len(gpu)
            self.gpu_samples += 1
            self.util_sum += util
            self.util_max = max(self.util_max, util)
            self.mem_max = max(self.mem_max, sum(m for _, m in gpu))

    def stats(self) -> dict[str, float | int]:
        """The ``stats`` of job_ended; {} without samples."""
        if not self.samples:
            return {}
        out: dict[str, float | int] = {
            keys.STAT_SAMPLES: self.samples, keys.STAT_RSS_MAX: int(self.rss_max),
            keys.STAT_RSS_MEAN: int(self.rss_sum / self.samples)}
        if self.gpu_samples:
            out.update({keys.STAT_GPU_UTIL_MEAN: round(self.util_sum / self.gpu_samples, 2),
                        keys.STAT_GPU_UTIL_MAX: round(self.util_max, 2),
                        keys.STAT_GPU_MEM_MAX: int(self.mem_max)})
        return out


def tree_rss_kb(pid: int) -> tuple[float, set[int]]:
    """RSS of a process and all its descendants (KiB), and their pids; (0, {}) once gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return 0.0, set()
    total, pids = 0, set()
    for proc in procs:
        try:
            rss = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if rss:  # a zombie (exited, not yet reaped) reads 0: it holds nothing any more
            total += rss
            pids.add(proc.pid)
    return total / 1024, pids


class Sampler:
    """The agent's sampling: ``track`` at launch, ``tick`` every loop turn, ``finish`` at the
    end. ``backend`` None samples RSS only (a node without GPUs)."""

    def __init__(self, backend: GPUBackend | None, interval: float,
                 rss: Callable[[int], tuple[float, set[int]]] = tree_rss_kb):
        self.backend = backend
        self.interval = max(float(interval), 0.05)
        self.rss = rss
        self.jobs: dict[Key, JobSamples] = {}
        self._last = 0.0

    def track(self, spec: dict[str, Any]) -> None:
        """A job was launched here with these GPU indices (its launch spec's ``gpus``)."""
        key = (int(spec["job_id"]), int(spec["generation"]))
        self.jobs[key] = JobSamples(gpus=[int(g) for g in spec.get("gpus") or []])

    def tick(self, now: float, running: list[dict[str, Any]]) -> None:
        """Sample every running job when the interval has passed, and any job not sampled yet
        (``running``: the launcher's list, with job_id, generation and pid)."""
        due = now - self._last >= self.interval
        if due:
            self._last = now
        for item in running:
            key = (int(item["job_id"]), int(item["generation"]))
            samples = self.jobs.setdefault(key, JobSamples())  # adopted after a restart
            if due or not samples.samples:
                self._sample(key[0], int(item["pid"]), samples)

    def _sample(self, job_id: int, pid: int, samples: JobSamples) -> None:
        rss_kb, pids = self.rss(pid)
        if not pids:
            return  # already gone: nothing to read
        gpu: list[tuple[float, float]] = []
        if self.backend is not None and samples.gpus:
            gpu = self.backend.sample(job_id, samples.gpus, pids)
        samples.add(gpu, rss_kb)

    def finish(self, job_id: int, generation: int) -> dict[str, float | int]:
        """The job's statistics, forgotten here; {} when it was never sampled."""
        samples = self.jobs.pop((job_id, generation), None)
        return samples.stats() if samples is not None else {}


def make_sampler(gpus: list[GPU], fake: bool, interval: float) -> Sampler:
    """The sampler for this node: fake readings for fake GPUs, NVML for real ones, RSS only
    when the node has no GPU or NVML will not start."""
    backend: GPUBackend | None = None
    if gpus and fake:
        backend = FakeGPUs(gpus)
    elif gpus:
        try:
            backend = NvmlGPUs()
        except Exception as exc:  # noqa: BLE001 - any NVML failure: sample RSS only
            log.warning("GPU sampling off: NVML did not start: %s", exc)
    return Sampler(backend, interval)
