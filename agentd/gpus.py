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

MIG (Multi-Instance GPU): a GPU in MIG mode is not handed out itself; each of its GPU instances
is (``MigGPU``), a typed GPU named by its profile (``gpu:1g.10gb``, the type ``gres_type``
reads from NVML's name of the instance, 'NVIDIA A100-SXM4-80GB MIG 1g.10gb') with its own UUID
(``MIG-...``, what ``CUDA_VISIBLE_DEVICES`` names, ``visible_environment``), numbered 0, 1, ...
across the node like whole GPUs. The agent keeps what only it needs: the parent GPU's index
(its device node, its health) and the ``/dev/nvidia-caps`` minors of the instance's GPU and
compute instance access (``/proc/driver/nvidia-caps/mig-minors``, ``parse_mig_minors``): the
job's device cgroup opens the parent and those caps, nothing else. Fake GPUs are partitioned
by ``--fake-mig 3g.40gb:1,2g.20gb:1,1g.10gb:2`` (``fake_mig``): mixed profiles on a GPU as
real layouts have them, checked against MIG's slices and placements; one layout for every
fake GPU or one per GPU ('3g.40gb:2/1g.10gb:7'), with stable fake UUIDs.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import psutil

from kiln.model import GPU
from kiln.slurm.cpulist import parse_cpu_list

DEFAULT_FAKE_MODEL = "H100-80GB"
DEFAULT_FAKE_MEMORY_MB = 81920

_FAKE = re.compile(r"^(?P<count>\d+)(?:x(?P<model>[A-Za-z0-9][A-Za-z0-9_.-]*))?$", re.IGNORECASE)
_MEMORY_SUFFIX = re.compile(r"-(?P<size>\d+)(?P<unit>GB|G|MB|M)$", re.IGNORECASE)


class GPUDiscoveryError(RuntimeError):
    """NVML is present but could not tell us about the GPUs; the message is one line."""


@dataclass(slots=True)
class MigGPU(GPU):
    """A MIG GPU instance: a GPU to the scheduler (``index`` across the node, ``uuid``
    'MIG-...', ``model`` ending in 'MIG <profile>'), plus what the agent alone uses."""

    parent: int = 0  # the parent GPU's index (NVML's, /dev/nvidia<minor of that GPU>)
    gi: int = 0  # GPU instance id on the parent
    ci: int = 0  # compute instance id in the GPU instance
    caps: list[int] = field(default_factory=list)  # /dev/nvidia-caps/nvidia-cap<minor>s


def discover(fake: str = "", islands: int = 2, seed: str = "",
             island_cpus: Sequence[str] = (), fake_mig: str = "") -> list[GPU]:
    """The node's GPUs: from ``fake`` (e.g. '8xH100-80GB') when given, else from NVML.

    ``islands`` and ``island_cpus`` apply to fake GPUs only (real ones get NVML's topology and
    affinity); ``seed`` (the node name; default the host name) makes fake UUIDs differ between
    nodes and repeat across runs; ``fake_mig`` ('1g.10gb:7') partitions every fake GPU.
    """
    if fake:
        gpus = fake_gpus(fake, islands, seed or socket.gethostname(), island_cpus)
        return fake_mig_gpus(gpus, fake_mig, seed or socket.gethostname()) if fake_mig else gpus
    if fake_mig:
        raise ValueError("--fake-mig partitions fake GPUs: give --fake-gpus too")
    return nvml_gpus()


def parents(gpus: Sequence[GPU]) -> list[int]:
    """For each GPU the node hands out (by index), the physical GPU it is on: its own index,
    or a MIG instance's parent."""
    return [g.parent if isinstance(g, MigGPU) else g.index for g in gpus]


def physical_count(gpus: Sequence[GPU]) -> int:
    """How many physical GPUs (NVML devices) these are on."""
    return max(parents(gpus), default=-1) + 1


def visible_environment(env: Mapping[str, str], gpus: Sequence[GPU]) -> dict[str, str]:
    """A launch's environment with ``CUDA_VISIBLE_DEVICES``'s MIG instances named as CUDA
    wants them, by UUID (``MIG-...``); whole GPUs keep their index. schedd sends indices (it
    hands out indices); only the agent knows which are MIG instances."""
    out = dict(env)
    text = out.get("CUDA_VISIBLE_DEVICES")
    if not text:
        return out
    by_index = {g.index: g for g in gpus}
    names = []
    for word in text.split(","):
        gpu = by_index.get(int(word)) if word.isdigit() else None
        names.append(gpu.uuid if isinstance(gpu, MigGPU) else word)
    out["CUDA_VISIBLE_DEVICES"] = ",".join(names)
    return out


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


# --- fake MIG ------------------------------------------------------------------------------

# MIG's GPU instance profiles by the GPU's memory (GB): profile -> (compute slices, memory
# slices, the memory slices it may start at). A100 40GB; A100 80GB and H100 80GB. A GPU has 7
# compute slices and 8 memory slices, and an instance takes a run of memory slices from one of
# its profile's start positions (NVIDIA's MIG user guide, "A100/H100 MIG profiles" and their
# placements): so 4g.40gb + 3g.40gb fits, as 4g at 0-3 and 3g at 4-7.
MIG_PROFILES: dict[int, dict[str, tuple[int, int, tuple[int, ...]]]] = {
    40: {"1g.5gb": (1, 1, (0, 1, 2, 3, 4, 5, 6)), "1g.10gb": (1, 2, (0, 2, 4, 6)),
         "2g.10gb": (2, 2, (0, 2, 4)), "3g.20gb": (3, 4, (0, 4)), "4g.20gb": (4, 4, (0,)),
         "7g.40gb": (7, 8, (0,))},
    80: {"1g.10gb": (1, 1, (0, 1, 2, 3, 4, 5, 6)), "1g.20gb": (1, 2, (0, 2, 4, 6)),
         "2g.20gb": (2, 2, (0, 2, 4)), "3g.40gb": (3, 4, (0, 4)), "4g.40gb": (4, 4, (0,)),
         "7g.80gb": (7, 8, (0,))},
}
MIG_SLICES = 7
MIG_MEMORY_SLICES = 8
_MIG_ITEM = re.compile(r"^(?P<profile>\d+g\.\d+gb)(?::(?P<count>\d+))?$", re.IGNORECASE)


def mig_placement(profiles: Sequence[str], size: int) -> list[int] | None:
    """Where each instance's memory slices start on a GPU of ``size`` GB (in ``profiles``'
    order), or None when no placement holds them all: a search over the start positions,
    largest instances first; at most 7 instances, so it is small."""
    table = MIG_PROFILES[size]
    if sum(table[p][0] for p in profiles) > MIG_SLICES:
        return None
    order = sorted(range(len(profiles)), key=lambda i: -table[profiles[i]][1])
    starts = [0] * len(profiles)

    def place(k: int, used: int) -> bool:
        if k == len(order):
            return True
        _c, width, at = table[profiles[order[k]]]
        for start in at:
            mask = ((1 << width) - 1) << start
            if start + width <= MIG_MEMORY_SLICES and not used & mask:
                starts[order[k]] = start
                if place(k + 1, used | mask):
                    return True
        return False

    return starts if place(0, 0) else None


def parse_fake_mig(spec: str, memory_mb: int) -> list[str]:
    """'3g.40gb:2' or '3g.40gb:1,2g.20gb:1,1g.10gb:2' -> the profiles of one GPU's instances,
    checked to fit a GPU of ``memory_mb`` as real MIG places them (7 compute slices, 8 memory
    slices, each profile at its own start positions); ValueError (one line)."""
    size = round(memory_mb / 1024)
    table = MIG_PROFILES.get(size)
    if table is None:
        raise ValueError(f"invalid --fake-mig {spec!r}: MIG needs a 40GB or 80GB GPU "
                         f"(A100-40GB, A100-80GB, H100-80GB), not {size}GB")
    profiles: list[str] = []
    for item in spec.split(","):
        match = _MIG_ITEM.match(item.strip())
        if not match:
            raise ValueError(f"invalid --fake-mig {spec!r} (expected PROFILE[:COUNT],..., "
                             "e.g. 3g.40gb:2 or 3g.40gb:1,2g.20gb:1,1g.10gb:2)")
        profile = match["profile"].lower()
        if profile not in table:
            raise ValueError(f"invalid --fake-mig {spec!r}: no MIG profile {profile} on a "
                             f"GPU of {size}GB (it has {', '.join(table)})")
        count = int(match["count"] or 1)
        if not 1 <= count <= MIG_SLICES:
            raise ValueError(f"invalid --fake-mig {spec!r}: {count} instances of {profile} "
                             f"(1 to {MIG_SLICES})")
        profiles += [profile] * count
    if mig_placement(profiles, size) is None:
        slices = sum(table[p][0] for p in profiles)
        memory = sum(table[p][1] for p in profiles)
        raise ValueError(f"invalid --fake-mig {spec!r}: {slices} compute slices and {memory} "
                         f"memory slices do not fit a {size}GB GPU as MIG places them "
                         f"({MIG_SLICES} compute slices, {MIG_MEMORY_SLICES} memory slices)")
    return profiles


def fake_layouts(spec: str, count: int) -> list[str]:
    """``--fake-mig``: one layout for every GPU, or one per GPU separated by '/'
    ('3g.40gb:2/1g.10gb:7' on a 2-GPU node)."""
    layouts = [part.strip() for part in spec.split("/")]
    if len(layouts) == 1:
        return layouts * count
    if len(layouts) != count:
        raise ValueError(f"invalid --fake-mig {spec!r}: {len(layouts)} layouts for {count} "
                         "GPUs (give one for all, or one per GPU separated by '/')")
    return layouts


def fake_mig_gpus(gpus: Sequence[GPU], spec: str, seed: str) -> list[GPU]:
    """Every fake GPU partitioned as ``spec`` says: its instances, numbered across the node,
    each with a UUID from the node name, the GPU's index and the instance's."""
    out: list[GPU] = []
    for gpu, layout in zip(gpus, fake_layouts(spec, len(gpus)), strict=True):
        for k, profile in enumerate(parse_fake_mig(layout, gpu.memory_mb)):
            gi = k + 1
            size = int(profile.split(".")[1][:-2])
            out.append(MigGPU(
                index=len(out), uuid=_fake_mig_uuid(seed, gpu.index, k),
                model=f"{gpu.model} MIG {profile}", memory_mb=size * 1024, island=gpu.island,
                cpus=list(gpu.cpus), parent=gpu.index, gi=gi, ci=0,
                caps=[mig_minor(gpu.index, gi), mig_minor(gpu.index, gi, 0)]))
    return out


def _fake_mig_uuid(seed: str, gpu: int, instance: int) -> str:
    """A stable MIG UUID ('MIG-xxxxxxxx-xxxx-...') from the node name, GPU and instance."""
    h = hashlib.sha1(f"kiln-fake-mig:{seed}:{gpu}:{instance}".encode()).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# --- /proc/driver/nvidia-caps/mig-minors ----------------------------------------------------

MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
_MINOR_LINE = re.compile(r"^gpu(?P<gpu>\d+)/gi(?P<gi>\d+)(?:/ci(?P<ci>\d+))?/access\s+"
                         r"(?P<minor>\d+)$")


def mig_minor(gpu: int, gi: int, ci: int | None = None) -> int:
    """The driver's numbering of the caps minors (what mig-minors lists: config 1, monitor 2,
    then per GPU 15 GPU instances of one access entry and 8 compute instances each), for fake
    instances."""
    base = 3 + gpu * 15 * 9 + gi * 9
    return base if ci is None else base + 1 + ci


def parse_mig_minors(text: str) -> dict[tuple[int, int, int | None], int]:
    """mig-minors' 'gpu0/gi1/access 12' and 'gpu0/gi1/ci0/access 13' lines -> {(gpu minor,
    gi, ci or None): caps minor}; other lines (config, monitor) are not a job's."""
    out: dict[tuple[int, int, int | None], int] = {}
    for line in text.splitlines():
        match = _MINOR_LINE.match(line.strip())
        if match:
            ci = None if match["ci"] is None else int(match["ci"])
            out[(int(match["gpu"]), int(match["gi"]), ci)] = int(match["minor"])
    return out


def read_mig_minors(path: str = MIG_MINORS) -> dict[tuple[int, int, int | None], int]:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return parse_mig_minors(fh.read())
    except OSError:
        return {}


# --- NVML ----------------------------------------------------------------------------------


def nvml_gpus(pynvml=None, minors_path: str = MIG_MINORS) -> list[GPU]:
    """The node's GPUs from NVML (``pynvml``: the module, or a stand-in in tests); a GPU in
    MIG mode is its instances (``_instances``)."""
    if pynvml is None:
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
        migs = [_mig_enabled(pynvml, h) for h in handles]
        if not any(migs):
            return gpus
        if not all(migs):
            raise GPUDiscoveryError(
                f"GPUs {_indices(gpus, migs, True)} are in MIG mode and "
                f"{_indices(gpus, migs, False)} not: kiln hands out a node's MIG instances or "
                f"its whole GPUs, not both "
                "(put all of the node's GPUs in MIG mode, or none)")
        minors = read_mig_minors(minors_path)
        out: list[GPU] = []
        for gpu, handle in zip(gpus, handles, strict=True):
            out += _instances(pynvml, gpu, handle, minors, len(out))
        return out  # of one profile or several: each instance is a GPU of its profile's type
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


def _indices(gpus: Sequence[GPU], flags: Sequence[bool], value: bool) -> str:
    return ",".join(str(g.index) for g, f in zip(gpus, flags, strict=True) if f == value)


def _mig_enabled(pynvml, handle) -> bool:
    """Whether the GPU is in MIG mode now (not merely pending a reset into it)."""
    getter = getattr(pynvml, "nvmlDeviceGetMigMode", None)
    if getter is None:
        return False
    try:
        current, _pending = getter(handle)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
        return False
    return current == getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1)


def _instances(pynvml, parent: GPU, handle, minors: Mapping[tuple[int, int, int | None], int],
               first: int) -> list[GPU]:
    """The MIG instances of one GPU, numbered from ``first``. A MIG-mode GPU with none made
    offers nothing (Slurm: a MIG-mode GPU is only its instances). ``caps`` come from
    mig-minors, keyed by the parent's device minor."""
    minor = parent.index
    with_minor = getattr(pynvml, "nvmlDeviceGetMinorNumber", None)
    if with_minor is not None:
        minor = int(with_minor(handle))
    out: list[GPU] = []
    for slot in range(int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) == pynvml.NVML_ERROR_NOT_FOUND:
                continue  # an empty slot
            raise
        gi = int(pynvml.nvmlDeviceGetGpuInstanceId(mig))
        ci = int(pynvml.nvmlDeviceGetComputeInstanceId(mig))
        caps = [minors[k] for k in ((minor, gi, None), (minor, gi, ci)) if k in minors]
        out.append(MigGPU(
            index=first + len(out), uuid=_str(pynvml.nvmlDeviceGetUUID(mig)),
            model=_str(pynvml.nvmlDeviceGetName(mig)),
            memory_mb=int(pynvml.nvmlDeviceGetMemoryInfo(mig).total) // (1024 * 1024),
            island=parent.island, cpus=list(parent.cpus), parent=parent.index, gi=gi, ci=ci,
            caps=caps))
    return out


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
