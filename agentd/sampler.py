"""Per-job resource samples on a node: GPU utilisation and memory, process-tree RSS and CPU time.

Every ``interval`` seconds (``[agent] sample_interval``, 10 s by default) the agent samples each
job it runs; a job it has not sampled yet is sampled at the next loop turn, so even a job of a
second leaves one sample. It keeps, per job, the mean and maximum of:

- GPU utilisation (percent, averaged over the job's GPUs at each sample);
- GPU memory (MiB, the job's GPUs together);
- RSS (KiB, the batch shell and all its descendants, from psutil).

It also keeps the most CPU time (user and system seconds) it has seen the process tree use: its
live processes' own times plus what they have reaped. When the agent reaps the batch shell
itself, wait4's figure (the shell and every descendant it waited for) is exact and is what
counts; the sampled figure is what is left after an agent restart, when nobody can wait for the
shell, and a floor where a job's processes escaped the shell (double fork). Of two lower bounds
the larger is kept.

When the job ends the agent sends them as ``stats`` in ``job_ended``; schedd keeps them in
``Job.stats`` and sacct prints them as GPUUtil, GPUMemMax, MaxRSS, AveRSS, TotalCPU,
UserCPU and SystemCPU. The key names are ``kiln/slurm/stats.py``'s ``STAT_*``.

GPU figures come from a backend: NVML on a real node (utilisation of the job's devices, memory
of the job's processes on them, else the device's used memory), or, with ``--fake-gpus``, a
deterministic function of the job id and GPU index (``fake_gpu_sample``) so tests can predict
what sacct shows. Made-up figures are marked (``STAT_GPU_SIMULATED``), and sacct and seff say
"simulated" next to them: nobody should take them for a measurement.

MaxRSS is also the kernel's peak (wait4's ``ru_maxrss``) when the agent reaps the batch shell:
a job shorter than the interval has one sample, taken as it starts.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import psutil

from agentd.gpus import MigGPU
from kiln.model import GPU
from kiln.slurm import stats as keys

log = logging.getLogger("agentd.sampler")

Key = tuple[int, int]  # (job id, generation)


class GPUBackend(Protocol):
    simulated: bool  # the readings are made up (fake GPUs), not measured

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
    """Readings for ``--fake-gpus`` nodes (see ``fake_gpu_sample``). ``overrides`` (the fake
    NVML of agentd/gpuhealth.py: its ``util(index)``) may set a GPU's utilisation: ``kiln
    fake-gpu NODE GPU --util PCT``, until ``--clear``."""

    simulated = True

    def __init__(self, gpus: Iterable[GPU], overrides: Any = None):
        self.memory = {g.index: g.memory_mb for g in gpus}
        self.overrides = overrides

    def sample(self, job_id: int, gpus: list[int], pids: set[int]) -> list[tuple[float, float]]:
        out = []
        for i in gpus:
            if i not in self.memory:
                continue
            util, memory = fake_gpu_sample(job_id, i, self.memory[i])
            forced = self.overrides.util(i) if self.overrides is not None else None
            out.append((util if forced is None else forced, memory))
        return out


class NvmlGPUs:
    """Readings from NVML. GPUs are allocated whole, so the device's utilisation is the
    job's; memory is what the job's processes hold on the device when NVML can tell (it
    cannot inside some containers), else the device's used memory."""

    simulated = False

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
        # usedGpuMemory is None where the driver cannot tell (Windows WDDM, some containers;
        # current nvidia-ml-py returns None, not NVML_VALUE_NOT_AVAILABLE): device's use then
        mine = [p.usedGpuMemory for p in procs
                if getattr(p, "pid", None) in pids and isinstance(p.usedGpuMemory, int)]
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
    cpu_user: float = 0.0
    cpu_system: float = 0.0
    task: dict[str, float] = field(default_factory=dict)  # sstat's figures of the batch step
    simulated: bool = False  # the GPU readings came from the fake backend
    last_util: list[float] = field(default_factory=list)  # the latest sample, GPU by GPU

    def add(self, gpu: list[tuple[float, float]], tree: TreeUsage) -> None:
        self.samples += 1
        absorb(self.task, tree)
        self.rss_sum += tree.rss_kb
        self.rss_max = max(self.rss_max, tree.rss_kb)
        self.cpu_user = max(self.cpu_user, tree.cpu_user)
        self.cpu_system = max(self.cpu_system, tree.cpu_system)
        if gpu:
            self.last_util = [min(max(u, 0.0), 100.0) for u, _ in gpu]
            util = sum(u for u, _ in gpu) / len(gpu)
            self.gpu_samples += 1
            self.util_sum += util
            self.util_max = max(self.util_max, util)
            self.mem_max = max(self.mem_max, sum(m for _, m in gpu))

    def stats(self, cpu: tuple[float, float] | None = None,
              peak_rss_kb: float | None = None) -> dict[str, float | int]:
        """The ``stats`` of job_ended; {} without samples or CPU time. ``cpu``: the exact
        (user, system) seconds from wait4, when the agent reaped the batch shell;
        ``peak_rss_kb``: wait4's ``ru_maxrss``, the kernel's peak resident set of the shell and
        of each process it reaped (the largest one), which a job shorter than the sampling
        interval reaches after its only sample: MaxRSS is the larger of the two."""
        out: dict[str, float | int] = {}
        rss_max = max(self.rss_max, peak_rss_kb or 0.0)
        if self.samples:
            out.update({keys.STAT_SAMPLES: self.samples, keys.STAT_RSS_MAX: int(rss_max),
                        keys.STAT_RSS_MEAN: int(self.rss_sum / self.samples)})
        elif rss_max:
            out[keys.STAT_RSS_MAX] = int(rss_max)
        if self.gpu_samples:
            out.update({keys.STAT_GPU_UTIL_MEAN: round(self.util_sum / self.gpu_samples, 2),
                        keys.STAT_GPU_UTIL_MAX: round(self.util_max, 2),
                        keys.STAT_GPU_MEM_MAX: int(self.mem_max)})
            if self.simulated:
                out[keys.STAT_GPU_SIMULATED] = 1
        if cpu is not None or self.samples:
            user, system = cpu if cpu is not None else (0.0, 0.0)
            out.update({keys.STAT_CPU_USER: round(max(user, self.cpu_user), 3),
                        keys.STAT_CPU_SYSTEM: round(max(system, self.cpu_system), 3)})
        return out


def absorb(task: dict[str, float], tree: TreeUsage) -> None:
    """Fold a reading into a task's figures: each the largest seen (RSS and virtual size peak;
    CPU time, page faults and I/O only grow)."""
    for metric, value in tree.figures().items():
        task[metric] = max(task.get(metric, 0.0), value)


class TreeUsage(NamedTuple):
    """One reading of a job's process tree."""

    rss_kb: float
    cpu_user: float  # seconds: the live processes' own, plus what each has reaped
    cpu_system: float
    pids: set[int]
    vms_kb: float = 0.0  # virtual size, the live processes together
    pages: float = 0.0  # major page faults of the live processes
    read_bytes: float = 0.0  # bytes read and written by the live processes (rchar, wchar)
    write_bytes: float = 0.0

    def figures(self) -> dict[str, float]:
        """This reading as sstat's per-task metrics (``kiln.slurm.stats.USAGE_METRICS``)."""
        return {"cpu": self.cpu_user + self.cpu_system, "mem": self.rss_kb, "vmem": self.vms_kb,
                "pages": self.pages, "read": self.read_bytes, "write": self.write_bytes}


GONE = TreeUsage(0.0, 0.0, 0.0, set())
_LOST = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def tree_usage(pid: int) -> TreeUsage:
    """RSS (KiB) and CPU time of a process and all its descendants, and their pids; GONE once
    the process is. A process's ``children_*`` times are those of children it has reaped,
    which are no longer in the tree, so nothing is counted twice."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except _LOST:
        return GONE
    rss_total, vms_total, user, system, pids = 0, 0, 0.0, 0.0, set()
    pages, read, written = 0, 0, 0
    for proc in procs:
        try:
            with proc.oneshot():
                memory, times = proc.memory_info(), proc.cpu_times()
                io = _io(proc)
        except _LOST:
            continue
        user += times.user + times.children_user
        system += times.system + times.children_system
        if memory.rss:  # a zombie (exited, not yet reaped) reads 0: it holds nothing any more
            rss_total += memory.rss
            vms_total += memory.vms
            pids.add(proc.pid)
            pages += _major_faults(proc.pid)
            read, written = read + io[0], written + io[1]
    return TreeUsage(rss_total / 1024, user, system, pids, vms_total / 1024, pages, read,
                     written)


def _io(proc: psutil.Process) -> tuple[int, int]:
    """Characters a process has read and written (Slurm's fs/disk: rchar and wchar)."""
    try:
        io = proc.io_counters()
    except (AttributeError, NotImplementedError, *_LOST):
        return 0, 0
    return int(getattr(io, "read_chars", io.read_bytes)), int(getattr(io, "write_chars",
                                                                      io.write_bytes))


def _major_faults(pid: int) -> int:
    """A process's major page faults (field 12 of /proc/PID/stat); 0 where unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[9])
    except (OSError, IndexError, ValueError):
        return 0


class Sampler:
    """The agent's sampling: ``track`` at launch, ``tick`` every loop turn, ``finish`` at the
    end. ``backend`` None samples the process tree only (a node without GPUs)."""

    def __init__(self, backend: GPUBackend | None, interval: float,
                 probe: Callable[[int], TreeUsage] = tree_usage):
        self.backend = backend
        self.interval = max(float(interval), 0.05)
        self.probe = probe
        self.jobs: dict[Key, JobSamples] = {}
        # srun steps' tasks here: (job id, step id) -> task id -> figures (see ``absorb``)
        self.steps: dict[Key, dict[int, dict[str, float]]] = {}
        self.simulated = isinstance(backend, FakeGPUs)
        self._last = 0.0

    def track(self, spec: dict[str, Any]) -> None:
        """A job was launched here with these GPU indices (its launch spec's ``gpus``)."""
        key = (int(spec["job_id"]), int(spec["generation"]))
        self.jobs[key] = JobSamples(gpus=[int(g) for g in spec.get("gpus") or []])

    def tick(self, now: float, running: list[dict[str, Any]],
             step_tasks: Iterable[tuple[int, int, int, int]] = ()) -> None:
        """Sample every running job when the interval has passed, and any job not sampled yet
        (``running``: the launcher's list, with job_id, generation and pid); and so the srun
        steps' tasks (``step_tasks``: (job id, step id, task id, pid) of each live task)."""
        due = now - self._last >= self.interval
        if due:
            self._last = now
        for item in running:
            if not item["pid"]:
                continue  # its supervisor has not started it yet
            key = (int(item["job_id"]), int(item["generation"]))
            samples = self.jobs.setdefault(key, JobSamples())  # adopted after a restart
            if due or not samples.samples:
                self._sample(key[0], int(item["pid"]), samples)
        self._sample_steps(due, list(step_tasks))

    def _sample_steps(self, due: bool, tasks: list[tuple[int, int, int, int]]) -> None:
        alive = {(job_id, step_id) for job_id, step_id, _, _ in tasks}
        for gone in set(self.steps) - alive:
            del self.steps[gone]
        for job_id, step_id, task_id, pid in tasks:
            figures = self.steps.setdefault((job_id, step_id), {}).get(task_id)
            if figures is not None and not due:
                continue
            tree = self.probe(pid)
            if tree.pids:
                absorb(self.steps[(job_id, step_id)].setdefault(task_id, {}), tree)

    def usage(self, job_id: int, generation: int) -> dict[str, float]:
        """The batch step's live usage on this node (``kiln.slurm.stats.summarize_tasks``,
        and the job's GPUs); {} before its first sample."""
        samples = self.jobs.get((job_id, generation))
        if samples is None or not samples.samples:
            return {}
        out = keys.summarize_tasks({0: samples.task})
        if samples.gpu_samples:
            out.update({keys.U_GPU_UTIL: round(samples.util_sum / samples.gpu_samples, 2),
                        keys.U_GPU_MEM: int(samples.mem_max)})
            if self.simulated:
                out[keys.U_SIMULATED] = 1
        return out

    def gpu_now(self, job_id: int, generation: int) -> list[float]:
        """The job's latest utilisation reading, GPU by GPU (percent; [] before one): the
        heartbeat's ``gpu_util``, for schedd's idle-GPU watch. A GPU NVML could not read is
        left out, so a short list never passes for all GPUs idle."""
        samples = self.jobs.get((job_id, generation))
        if samples is None or len(samples.last_util) != len(samples.gpus):
            return []
        return list(samples.last_util)

    def step_usage(self) -> list[dict[str, Any]]:
        """Each srun step's live usage on this node, for the heartbeat's ``step_usage``."""
        return [{"job_id": job_id, "step_id": step_id, "usage": keys.summarize_tasks(tasks)}
                for (job_id, step_id), tasks in sorted(self.steps.items()) if tasks]

    def _sample(self, job_id: int, pid: int, samples: JobSamples) -> None:
        tree = self.probe(pid)
        if not tree.pids:
            return  # already gone: nothing to read
        gpu: list[tuple[float, float]] = []
        if self.backend is not None and samples.gpus:
            gpu = self.backend.sample(job_id, samples.gpus, tree.pids)
            samples.simulated = self.backend.simulated
        samples.add(gpu, tree)

    def finish(self, job_id: int, generation: int,
               cpu: tuple[float, float] | None = None,
               peak_rss_kb: float | None = None) -> dict[str, float | int]:
        """The job's statistics, forgotten here; {} when it was never sampled and its CPU
        time is unknown. ``cpu``: (user, system) seconds and ``peak_rss_kb`` the peak RSS
        from wait4, when known (``JobSamples.stats``)."""
        samples = self.jobs.pop((job_id, generation), None) or JobSamples()
        return samples.stats(cpu, peak_rss_kb)


def make_sampler(gpus: list[GPU], fake: bool, interval: float,
                 overrides: Any = None) -> Sampler:
    """The sampler for this node: fake readings for fake GPUs (``overrides``: see
    ``FakeGPUs``), NVML for real ones, RSS only when the node has no GPU or NVML will not
    start."""
    backend: GPUBackend | None = None
    if gpus and fake:
        backend = FakeGPUs(gpus, overrides)
    elif gpus and any(isinstance(g, MigGPU) for g in gpus):
        # NVML reports no utilisation of a MIG instance, and the device of an index is not
        # the instance: RSS only
        log.info("GPU sampling off: MIG instances (NVML reports no utilisation of them)")
    elif gpus:
        try:
            backend = NvmlGPUs()
        except Exception as exc:  # noqa: BLE001 - any NVML failure: sample RSS only
            log.warning("GPU sampling off: NVML did not start: %s", exc)
    return Sampler(backend, interval)
