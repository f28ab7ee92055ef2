"""What this node has: GPUs from NVML (or a fake spec for tests), CPUs and memory from psutil.

Islands (``GPU.island``) are the locality groups placement keeps a job inside: GPUs joined by
NVLink, or hanging off one PCIe switch. NVML reports both pairwise; we join GPUs that are NVLink
peers or whose common PCIe ancestor is a single switch (``NVML_TOPOLOGY_SINGLE`` or closer), and
number the connected groups 0, 1, ... in GPU index order.

Affinity (``GPU.cpus``) is the CPU ids near a GPU (its NUMA node's), from NVML's
``nvmlDeviceGetCpuAffinity``; the scheduler gives a job CPUs near its GPUs first. An NVML that
cannot say (an older driver or nvidia-ml-py without the call, a GPU that does not report it)
leaves it empty: unknown, not a failure. Fake GPUs take theirs from ``[agent]
gpu_island_cpus``, one CPU list per island, so that placement is testable without a GPU.

A node without NVIDIA's driver (no ``libnvidia-ml``) simply has no GPUs: ``discover()`` returns
``[]``. Every other NVML failure (driver loaded but broken, a device that stops answering) raises
``GPUDiscoveryError`` with one line the daemon can log and put in the node's drain reason: a GPU
node must not quietly register as a CPU node.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Sequence

import psutil

from kiln.model import GPU
from kiln.slurm.cpulist import parse_cpu_list

DEFAULT_FAKE_MODEL = "H100-80GB"
DEFAULT_FAKE_MEMORY_MB = 81920

_FAKE = re.compile(r"^(?P<count>\d+)(?:x(?P<model>[A-Za-z0-9][A-Za-z0-9_.-]*))?$", re.IGNORECASE)
_MEMORY_SUFFIX = re.compile(r"-(?P<size>\d+)(?P<unit>GB|G|MB|M)$", re.IGNORECASE)


class GPUDiscoveryError(RuntimeError):
    """NVML is present but could not tell us about the GPUs; the message is one line."""


def discover(fake: str = "", islands: int = 2, seed: str = "",
             island_cpus: Sequence[str] = ()) -> list[GPU]:
    """The node's GPUs: from ``fake`` (e.g. '8xH100-80GB') when given, else from NVML.

    ``islands`` and ``island_cpus`` apply to fake GPUs only (real ones get NVML's topology and
    affinity); ``seed`` (the node name; default the host name) makes fake UUIDs differ between
    nodes and repeat across runs.
    """
    if fake:
        return fake_gpus(fake, islands, seed or socket.gethostname(), island_cpus)
    return nvml_gpus()


def node_resources() -> tuple[int, int]:
    """(CPUs, memory in MiB) this node offers to jobs."""
    return psutil.cpu_count(logical=True) or 1, psutil.virtual_memory().total // (1024 * 1024)


# --- fake ----------------------------------------------------------------------------------


def fake_gpus(spec: str, islands: int = 2, seed: str = "",
              island_cpus: Sequence[str] = ()) -> list[GPU]:
    """'8xH100-80GB', '4xA100', '8' or '0' -> that many identical GPUs in ``islands`` groups;
    ``island_cpus`` ('0-31', '32-63'), when given, one CPU list per group: its GPUs' affinity."""
    match = _FAKE.match(spec.strip())
    if not match:
        raise ValueError(f"invalid fake GPU spec {spec!r} (expected COUNTxMODEL, e.g. 8xH100-80GB)")
    count = int(match["count"])
    if count > 1024:
        raise ValueError(f"invalid fake GPU spec {spec!r}: more than 1024 GPUs")
    if islands < 1:
        raise ValueError(f"invalid GPU island count {islands}: must be at least 1")
    model = match["model"] or DEFAULT_FAKE_MODEL
    memory_mb = _memory_from_model(model)
    groups = min(islands, count) or 1
    near = _island_affinity(island_cpus, groups if count else 0)
    return [
        GPU(
            index=i,
            uuid=_fake_uuid(seed, i),
            model=f"NVIDIA {model}",
            memory_mb=memory_mb,
            island=i * groups // count,
            cpus=list(near[i * groups // count]) if near else [],
        )
        for i in range(count)
    ]


def _island_affinity(island_cpus: Sequence[str], groups: int) -> list[tuple[int, ...]]:
    """``[agent] gpu_island_cpus`` checked: one CPU list per island of the fake GPUs."""
    if not island_cpus:
        return []
    if isinstance(island_cpus, str) or len(island_cpus) != groups:
        raise ValueError(f"invalid gpu_island_cpus {island_cpus!r}: one CPU list per GPU "
                         f"island ({groups} here), e.g. [\"0-31\", \"32-63\"]")
    out = []
    for text in island_cpus:
        try:
            cpus = parse_cpu_list(text) if isinstance(text, str) else ()
        except ValueError:
            cpus = ()
        if not cpus:
            raise ValueError(f"invalid CPU list {text!r} in gpu_island_cpus (expected e.g. "
                             "\"0-31\" or \"0,2,4\")")
        out.append(cpus)
    return out


def _memory_from_model(model: str) -> int:
    match = _MEMORY_SUFFIX.search(model)
    if not match:
        return DEFAULT_FAKE_MEMORY_MB
    size = int(match["size"])
    return size * 1024 if match["unit"].upper().startswith("G") else size


def _fake_uuid(seed: str, index: int) -> str:
    """A stable NVML-looking UUID ('GPU-xxxxxxxx-xxxx-...') from the node name and index."""
    h = hashlib.sha1(f"kiln-fake-gpu:{seed}:{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# --- NVML ----------------------------------------------------------------------------------


def nvml_gpus() -> list[GPU]:
    import pynvml  # imported here: the fake path and CPU nodes never load the library

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if _no_driver(pynvml, exc):
            return []
        raise GPUDiscoveryError(f"NVML initialisation failed: {_text(exc)}") from None
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = [_describe(pynvml, i, h) for i, h in enumerate(handles)]
        for gpu, island in zip(gpus, _islands(pynvml, handles), strict=True):
            gpu.island = island
        return gpus
    except pynvml.NVMLError as exc:
        raise GPUDiscoveryError(f"NVML device query failed: {_text(exc)}") from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _no_driver(pynvml, exc) -> bool:
    return getattr(exc, "value", None) in (
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    )


def _text(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _describe(pynvml, index: int, handle) -> GPU:
    return GPU(
        index=index,
        uuid=_str(pynvml.nvmlDeviceGetUUID(handle)),
        model=_str(pynvml.nvmlDeviceGetName(handle)),
        memory_mb=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024),
        cpus=_affinity(pynvml, handle),
    )


MASK_BITS = 64  # NVML's mask words are C ``unsigned long`` (64 bits on Linux's LP64 ABIs)


def _affinity(pynvml, handle) -> list[int]:
    """The CPU ids near the GPU (``nvmlDeviceGetCpuAffinity``'s mask), or [] where NVML cannot
    say: an nvidia-ml-py or driver without the call, a GPU that does not report it. Unknown
    affinity only costs placement a preference; the GPU itself is fine."""
    getter = getattr(pynvml, "nvmlDeviceGetCpuAffinity", None)
    if getter is None:
        return []
    words = max(1, -(-(os.cpu_count() or 1) // MASK_BITS))
    try:
        mask = getter(handle, words)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return []
    return [w * MASK_BITS + bit for w, word in enumerate(mask)
            for bit in range(MASK_BITS) if int(word) >> bit & 1]


def _islands(pynvml, handles: list) -> list[int]:
    """Connected components of 'NVLink peers or behind one PCIe switch', numbered 0, 1, ..."""
    parent = list(range(len(handles)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a in range(len(handles)):
        for b in range(a + 1, len(handles)):
            if _close(pynvml, handles[a], handles[b]):
                ra, rb = root(a), root(b)
                parent[max(ra, rb)] = min(ra, rb)
    roots = [root(i) for i in range(len(handles))]
    numbers = {r: n for n, r in enumerate(dict.fromkeys(roots))}
    return [numbers[r] for r in roots]


def _close(pynvml, a, b) -> bool:
    """NVLink peers or behind one PCIe switch. Topology a driver cannot report (some virtual
    GPUs) leaves the pair apart rather than failing discovery: the devices are still good."""
    try:
        nvlink = pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        if nvlink == pynvml.NVML_P2P_STATUS_OK:
            return True
    except pynvml.NVMLError_NotSupported:
        pass
    try:
        level = pynvml.nvmlDeviceGetTopologyCommonAncestor(a, b)
    except pynvml.NVMLError_NotSupported:
        return False
    return level <= pynvml.NVML_TOPOLOGY_SINGLE
