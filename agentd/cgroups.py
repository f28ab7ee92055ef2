"""Per-job cgroups: what holds a job to its CPUs, memory, GPUs and process count, and what lets
the agent find and kill every process a job started, whatever it did (``setsid``, double fork,
``nohup``, a daemon).

The agent makes one cgroup per job, ``kiln/<node>[.<instance>]/job_<id>_<generation>``, in
every hierarchy it uses, *before* anything of the job runs, and writes the limits there. The
batch script runs in it (in a ``batch`` leaf on v2 with controllers), srun's tasks in
``step_<n>`` leaves below it, so a step can be stopped alone and the job as a whole. The node
name (and the instance: a hash of the agent's spool) is in the path because several agents and
test clusters share one host; the job's generation because a requeued job's new run must not
meet the old one's stragglers.

What the host has is found once at start (``detect``) from ``/proc/self/mountinfo``:

- **v2** (``cgroup2`` with the controllers enabled): memory, cpuset, pids from the unified tree;
  GPUs through a BPF device program attached to the job's cgroup (``attach_device_program``:
  a few instructions, loaded with ``bpf(2)`` through ctypes; no BPF toolchain needed);
- **v1** (memory, cpuset, devices, pids, freezer, cpuacct mounted one by one);
- **hybrid** (v1 controllers plus a v2 mount without them, as on these test machines): the limits
  from v1, and the v2 tree for membership, ``cgroup.events``'s ``populated`` and ``cgroup.kill``.

A process joins its cgroup itself, in the child after ``fork`` and before ``exec``: the parent
(root) opens the leaves' ``cgroup.procs`` files (``JobCgroup.open_procs``) and the child writes
``0`` ("myself") to each (``join_fds``), which the kernel allows after the switch to the user
because the files were opened by root. ``cgroupfs.join_paths`` does the same from paths, for a supervisor
process that still is root when it joins.

Settings keep the names and meaning of Slurm's cgroup.conf (``[cgroup]`` in kiln.toml,
``kiln.config.CgroupConfig``). Every file write is one short ``open``/``write``/``close``:
a job's launch costs a handful of ``mkdir`` and writes (measured in docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd import cgroupfs
from kiln.slurm.cpulist import format_cpu_list, parse_cpu_list

log = logging.getLogger("agentd.cgroups")

V1_CONTROLLERS = ("memory", "cpuset", "devices", "pids", "freezer", "cpuacct")
V2_CONTROLLERS = ("memory", "cpuset", "pids")
BATCH = "batch"
_GPU_NODE = re.compile(r"^nvidia(\d+)$")


class CgroupError(Exception):
    """A cgroup could not be made or set; the message is one line."""


@dataclass(frozen=True, slots=True)
class Settings:
    """cgroup.conf's settings, with Slurm's meaning; ``enabled`` False = no cgroups at all."""

    enabled: bool = True
    constrain_cores: bool = True  # ConstrainCores: the job's cpuset holds its CPUs only
    constrain_ram_space: bool = True  # ConstrainRAMSpace: memory limit = AllowedRAMSpace % of --mem
    allowed_ram_space: float = 100.0  # AllowedRAMSpace, percent of the job's memory
    constrain_swap_space: bool = True  # ConstrainSwapSpace: RAM + swap limited to the same
    constrain_devices: bool = True  # ConstrainDevices: only the job's /dev/nvidiaN open
    pids_max: int = 4096  # pids.max per job (0 = no limit)
    unkillable_step_timeout: int = 60  # UnkillableStepTimeout, seconds
    root: str = "/sys/fs/cgroup"  # where to look for the hierarchies (a fake tree in tests)
    device_dir: str = "/dev"  # where the GPUs' nvidiaN device nodes are (stand-ins in tests)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one job gets on this node."""

    memory_bytes: int | None = None
    cpus: tuple[int, ...] = ()
    deny_devices: tuple[tuple[str, int, int], ...] = ()  # ('c', major, minor) not the job's
    pids_max: int | None = None
    no_swap: bool = False  # ConstrainSwapSpace: RAM + swap held to the memory limit


@dataclass(slots=True)
class Layout:
    """The hierarchies of this host: v1 controllers by name, the v2 mount and its controllers."""

    v1: dict[str, Path] = field(default_factory=dict)
    v2: Path | None = None
    v2_controllers: frozenset[str] = frozenset()

    @property
    def version(self) -> str:
        if self.v2 is not None and not self.v1 and self.v2_controllers:
            return "v2"
        if self.v1 and self.v2 is not None:
            return "hybrid"
        if self.v1:
            return "v1"
        return "v2" if self.v2 is not None else "none"


def detect(mountinfo: str = "/proc/self/mountinfo", root: str = "/sys/fs/cgroup") -> Layout:
    """The cgroup hierarchies mounted under ``root`` (v1 controllers, the v2 mount)."""
    layout = Layout()
    try:
        with open(mountinfo, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return layout
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rest = left.split(), right.split()
        if len(parts) < 5 or len(rest) < 3:
            continue
        point = parts[4].replace("\\040", " ")
        if not (point == root or point.startswith(root.rstrip("/") + "/")):
            continue
        if rest[0] == "cgroup2":
            layout.v2 = Path(point)
        elif rest[0] == "cgroup":
            for name in rest[2].split(","):
                if name in V1_CONTROLLERS:
                    layout.v1.setdefault(name, Path(point))
    if layout.v2 is not None:
        layout.v2_controllers = frozenset(_read(layout.v2 / "cgroup.controllers").split())
    return layout


def gpu_devices(device_dir: str) -> dict[int, tuple[str, int, int]]:
    """GPU index -> ('c', major, minor) of ``<device_dir>/nvidiaN`` (nvidiactl, nvidia-uvm
    and the like are not GPUs: every job may open them)."""
    out: dict[int, tuple[str, int, int]] = {}
    try:
        names = os.listdir(device_dir)
    except OSError:
        return out
    for name in names:
        match = _GPU_NODE.match(name)
        if not match:
            continue
        try:
            st = os.stat(os.path.join(device_dir, name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            out[int(match[1])] = ("c", os.major(st.st_rdev), os.minor(st.st_rdev))
    return out


_CAP_NODE = re.compile(r"^nvidia-cap(\d+)$")


def mig_caps_devices(device_dir: str) -> dict[int, tuple[str, int, int]]:
    """caps minor -> ('c', major, minor) of ``<device_dir>/nvidia-caps/nvidia-capN`` (the
    MIG instances' access devices, by the number mig-minors gives them)."""
    where = os.path.join(device_dir, "nvidia-caps")
    out: dict[int, tuple[str, int, int]] = {}
    try:
        names = os.listdir(where)
    except OSError:
        return out
    for name in names:
        match = _CAP_NODE.match(name)
        if not match:
            continue
        try:
            st = os.stat(os.path.join(where, name))
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            out[int(match[1])] = ("c", os.major(st.st_rdev), os.minor(st.st_rdev))
    return out


# --- the node's manager ----------------------------------------------------------------------


class Cgroups:
    """The cgroups of one node's jobs: what the host allows, the node's CPU ids in use, and
    ``create``/``adopt`` for each job. ``summary`` and ``unenforced`` say what is and is not
    enforced here, for the log, the node's reason and ``kiln up``."""

    def __init__(self, node: str, settings: Settings | None = None,
                 layout: Layout | None = None, mountinfo: str = "/proc/self/mountinfo",
                 instance: str = ""):
        self.node = node
        self.settings = settings or Settings()
        self.layout = layout or detect(mountinfo, self.settings.root)
        # kiln/<node>, or kiln/<node>.<instance> where clusters with the same node names share
        # a host (test clusters: every one has a node1 and a job 1)
        self.base = Path("kiln") / (f"{node}.{instance}" if instance else node)
        self.dirs: dict[str, Path] = {}  # role -> this node's directory in that hierarchy
        self.unenforced: list[str] = []
        self.cpus_in_use: dict[tuple[int, int], tuple[int, ...]] = {}
        self._gpus = gpu_devices(self.settings.device_dir)
        # MIG (agentd/gpus.py): GPU index handed out -> (its parent GPU, its caps minors);
        # set by the agent after discovery (``set_mig``), empty on a node without MIG
        self.mig: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._caps: dict[int, tuple[str, int, int]] = {}
        self.device_program = False  # v2: GPUs denied by a BPF device program (no v1 devices)
        # v1 cpuset: a job's cpuset is born with this node's CPUs and memory nodes
        # (cgroup.clone_children, checked at start), so a launch writes its CPUs only
        self.cpuset_clones = False
        if self.settings.enabled:
            self._prepare()
        else:
            self.unenforced.append("cgroups are off ([cgroup] enabled = false)")
        self.node_cpus = self._node_cpus()

    @property
    def active(self) -> bool:
        """Is there a hierarchy to put jobs in (at least membership)?"""
        return bool(self.dirs)

    @property
    def tracking(self) -> str | None:
        """The role whose tree says which processes a job has (v2's, else a v1 one)."""
        for role in ("unified", "freezer", "pids", "memory", "cpuset", "devices", "cpuacct"):
            if role in self.dirs:
                return role
        return None

    def node_line(self) -> str:
        """What ``scontrol show node`` prints for this node, in cgroup.conf's words:
        ``CgroupPlugin=cgroup/v1 ConstrainCores=yes ... PidsMax=4096`` (each ``yes`` only
        where it is enforced here)."""
        if not self.active:
            return "CgroupPlugin=(null)"
        have = self._enforced()
        s = self.settings

        def flag(on: bool, controller: str) -> str:
            return "yes" if on and controller in have else "no"

        pids = s.pids_max if s.pids_max and "pids" in have else 0
        return (f"CgroupPlugin=cgroup/{self.layout.version} "
                f"ConstrainCores={flag(s.constrain_cores, 'cpuset')} "
                f"ConstrainRAMSpace={flag(s.constrain_ram_space, 'memory')} "
                f"ConstrainSwapSpace={flag(s.constrain_swap_space, 'memory')} "
                f"ConstrainDevices={flag(s.constrain_devices and bool(self._gpus), 'devices')} "
                f"PidsMax={pids or 'UNLIMITED'}")

    def reason(self) -> str:
        """The node's reason when something set is not enforced here ('' when all is)."""
        if not self.unenforced:
            return ""
        return ("cgroups: not enforced: " + "; ".join(self.unenforced))[:256]

    def summary(self) -> str:
        """One line: the version and what is enforced, or why nothing is."""
        if not self.active:
            return "cgroups: none writable; " + "; ".join(self.unenforced)
        roles = " ".join(sorted(self.dirs))
        text = f"cgroups: {self.layout.version} ({roles})"
        if self.unenforced:
            text += "; not enforced: " + "; ".join(self.unenforced)
        return text

    def _prepare(self) -> None:
        if self.layout.v2 is not None:
            self._add_role("unified", self.layout.v2)
        for role, mount in self._roles().items():
            self._add_role(role, mount)
        self.device_program = "devices" not in self.dirs and "unified" in self.dirs and \
            self.settings.constrain_devices and bool(self._gpus) and device_programs_work()
        have = self._enforced()
        s = self.settings
        wanted = {"memory": s.constrain_ram_space, "cpuset": s.constrain_cores,
                  "pids": s.pids_max > 0, "devices": s.constrain_devices and bool(self._gpus)}
        for name, on in wanted.items():
            if on and name not in have:
                self.unenforced.append(f"{name} (no writable {name} controller)")
        if not self.dirs and not self.unenforced:
            self.unenforced.append(f"no cgroup hierarchy under {self.settings.root}")

    def _enforced(self) -> set[str]:
        """The controllers jobs here are held by (v1 directories, v2 controllers, and
        ``devices`` through a v2 device program)."""
        have = set(self.dirs)
        if "unified" in self.dirs:
            have |= {c for c in V2_CONTROLLERS if c in self.layout.v2_controllers}
            if self.device_program:
                have.add("devices")
        return have

    def _add_role(self, role: str, mount: Path) -> None:
        where = mount / self.base
        try:
            self._make_base(role, mount)
        except OSError as exc:
            self.unenforced.append(f"{where}: {exc.strerror or exc}")
            return
        self.dirs[role] = where

    def _roles(self) -> dict[str, Path]:
        """The hierarchies a job joins: only those something needs, as each join costs the
        launch time (a v1 cpuset's about a millisecond). The v2 tree, where there is one,
        gives membership, ``cgroup.kill`` and CPU time (``cpu.stat``), so v1's freezer and
        cpuacct are used only without it; devices only on a node with GPUs."""
        s, v1 = self.settings, self.layout.v1
        unified = self.dirs.get("unified")
        in_v2 = self.layout.v2_controllers if unified is not None else frozenset()
        kill_v2 = unified is not None and (unified / "cgroup.kill").exists()  # Linux >= 5.14
        needed = {"memory": "memory" not in in_v2,
                  "cpuset": s.constrain_cores and "cpuset" not in in_v2,
                  "pids": s.pids_max > 0 and "pids" not in in_v2,
                  "devices": s.constrain_devices and bool(self._gpus),
                  "freezer": not kill_v2}
        needed["cpuacct"] = unified is None
        return {name: v1[name] for name in V1_CONTROLLERS if name in v1 and needed[name]}

    def _make_base(self, role: str, mount: Path) -> None:
        """kiln/<node> in one hierarchy (cpuset's levels given the parent's CPUs and memory
        nodes, v2's levels the controllers their children use)."""
        here = mount
        for part in self.base.parts:
            if role == "unified":
                self._enable_v2(here)
            here = here / part
            with contextlib.suppress(FileExistsError):
                here.mkdir()
            if role == "cpuset":
                _inherit_cpuset(here)
        if role == "unified":
            self._enable_v2(here)
        if role == "cpuset":
            self.cpuset_clones = _clone_children(here)

    def _enable_v2(self, where: Path) -> None:
        wanted = [c for c in V2_CONTROLLERS if c in self.layout.v2_controllers]
        if wanted:
            _write(where / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))

    def _node_cpus(self) -> tuple[int, ...]:
        text = ""
        if "cpuset" in self.dirs:
            text = _read(self.dirs["cpuset"] / "cpuset.effective_cpus")
        elif "unified" in self.dirs and "cpuset" in self.layout.v2_controllers:
            text = _read(self.dirs["unified"] / "cpuset.cpus.effective")
        return parse_cpu_list(text) if text.strip() else tuple(sorted(os.sched_getaffinity(0)))

    # --- a job's cgroup ----------------------------------------------------------------------

    def limits(self, key: tuple[int, int], cpus: int, memory_mb: int,
               gpus: Iterable[int], cpu_ids: Iterable[int] = ()) -> Limits:
        """The limits cgroup.conf's settings give a job of ``cpus`` CPUs, ``memory_mb`` MiB
        and these GPU indices. Its CPU ids are the scheduler's (``cpu_ids``, mapped onto the
        host's); only a launch without them (an older schedd) gets the agent's own choice
        (the least used, lowest first)."""
        s = self.settings
        memory = None
        if s.constrain_ram_space and memory_mb > 0:
            memory = int(memory_mb * 1024 * 1024 * s.allowed_ram_space / 100)
        chosen: tuple[int, ...] = ()
        if s.constrain_cores:
            given = tuple(cpu_ids)
            chosen = self._host_cpus(key, given) if given else self._choose_cpus(key, cpus)
        deny = self._deny_devices(set(gpus)) if s.constrain_devices else ()
        return Limits(memory, chosen, deny, s.pids_max or None,
                      no_swap=s.constrain_swap_space and memory is not None)

    def set_mig(self, instances: dict[int, tuple[int, tuple[int, ...]]]) -> None:
        """This node's MIG instances (index -> (parent GPU, caps minors)); their caps'
        device nodes are read from ``<device_dir>/nvidia-caps``."""
        self.mig = dict(instances)
        self._caps = mig_caps_devices(self.settings.device_dir)

    def _deny_devices(self, mine: set[int]) -> tuple[tuple[str, int, int], ...]:
        """What a job holding these GPU indices may not open: the other GPUs' nvidiaN; with
        MIG, every GPU but its instances' parents and every instance's caps but its own
        (Slurm: the parent GPU and the instance's /dev/nvidia-caps entries only)."""
        if not self.mig:
            return tuple(dev for index, dev in sorted(self._gpus.items()) if index not in mine)
        parents = {self.mig[i][0] for i in mine if i in self.mig}
        caps = {c for i in mine if i in self.mig for c in self.mig[i][1]}
        every = sorted({c for _, held in self.mig.values() for c in held} - caps)
        return tuple(dev for index, dev in sorted(self._gpus.items()) if index not in parents) \
            + tuple(self._caps[c] for c in every if c in self._caps)

    def _host_cpus(self, key: tuple[int, int], ids: tuple[int, ...]) -> tuple[int, ...]:
        """The scheduler's CPU ids as this host's: the i-th id of the node is the host's
        (i mod n)-th CPU of the node's cpuset, so a node registered with more CPUs than the
        host has (tests, an oversubscribed VM) still gets a cpuset, and ids that differ modulo
        n land on different CPUs. On a node registered with its real CPUs (ids 0..n-1 over a
        cpuset of n) that is the identity on the cpuset's order."""
        host = self.node_cpus
        chosen = tuple(sorted({host[i % len(host)] for i in ids})) if host else ()
        self.cpus_in_use[key] = chosen
        return chosen

    def _choose_cpus(self, key: tuple[int, int], count: int) -> tuple[int, ...]:
        if count <= 0 or count >= len(self.node_cpus):
            chosen = self.node_cpus
        else:
            load = {cpu: 0 for cpu in self.node_cpus}
            for held in self.cpus_in_use.values():
                for cpu in held:
                    if cpu in load:
                        load[cpu] += 1
            chosen = tuple(sorted(sorted(load, key=lambda c: (load[c], c))[:count]))
        self.cpus_in_use[key] = chosen
        return chosen

    def release(self, key: tuple[int, int]) -> None:
        self.cpus_in_use.pop(key, None)

    def close(self) -> None:
        """Remove this node's (empty) directories, when the agent stops; a job's that still
        runs keeps them, and the next agent adopts it."""
        for where in self.dirs.values():
            with contextlib.suppress(OSError):
                where.rmdir()

    def create(self, job_id: int, generation: int, limits: Limits,
               name: str = "") -> JobCgroup:
        """Make the job's cgroup (``name``, default ``job_<id>_<generation>``) with its limits,
        and its ``batch`` leaf; CgroupError if the kernel refuses (the launch then fails: a job
        must not run unconstrained by surprise)."""
        name = name or f"job_{job_id}_{generation}"
        cg = JobCgroup({role: where / name for role, where in self.dirs.items()}, self.tracking,
                       cpuset_cloned=self.cpuset_clones)
        try:
            cg.make(limits, self.node_cpus)
            if self.device_program and limits.deny_devices:
                attach_device_program(self.dirs["unified"] / name, limits.deny_devices)
            if self.layout.version == "v2" and "unified" in self.dirs:
                cg.add_leaf(BATCH)  # v2 with controllers: no processes beside child cgroups
                cg.batch = BATCH
        except OSError as exc:
            cg.remove()
            raise CgroupError(f"cannot make the job's cgroup: {exc.strerror or exc}") from None
        return cg

    def adopt(self, record: dict[str, Any]) -> JobCgroup | None:
        """The cgroup of a job an earlier agent started (from its spool record)."""
        dirs = {role: Path(p) for role, p in (record.get("dirs") or {}).items()}
        if not dirs:
            return None
        cg = JobCgroup(dirs, record.get("tracking"), batch=str(record.get("batch", "")))
        cpus = tuple(record.get("cpus") or ())
        if cpus and record.get("key"):
            self.cpus_in_use[tuple(record["key"])] = cpus  # type: ignore[index]
        return cg


@dataclass(slots=True)
class JobCgroup:
    """One job's cgroup in every hierarchy the node uses (role -> directory).

    The batch script's processes live in the job's cgroup itself (one ``mkdir`` per hierarchy
    less per launch), steps' in ``step_<n>`` leaves below it; on v2 with controllers, whose
    cgroups with children hold no processes, the script has a ``batch`` leaf too (``batch``).
    """

    dirs: dict[str, Path]
    tracking: str | None
    cpus: tuple[int, ...] = ()
    leaves: list[str] = field(default_factory=list)
    batch: str = ""  # the batch script's leaf ("" = the job's cgroup itself)
    # v1 cpuset made under cgroup.clone_children: born with its parent's CPUs and memory nodes
    cpuset_cloned: bool = False
    paths: dict[str, str] = field(default_factory=dict, repr=False)  # dirs as strings

    def __post_init__(self) -> None:
        self.paths = {role: str(where) for role, where in self.dirs.items()}

    def to_record(self, key: tuple[int, int]) -> dict[str, Any]:
        return {"dirs": {r: str(p) for r, p in self.dirs.items()}, "tracking": self.tracking,
                "cpus": list(self.cpus), "key": list(key), "batch": self.batch}

    # --- making ------------------------------------------------------------------------------

    def make(self, limits: Limits, node_cpus: tuple[int, ...]) -> None:
        stale = self.mkdirs()
        if stale and self.populated():  # a run no agent remembers (its spool record lost)
            log.warning("job cgroup %s already held processes: killed", self.dirs.get(
                self.tracking or "", next(iter(self.dirs.values()))))
            self.kill()
        self._set_limits(limits)

    def mkdirs(self) -> bool:
        """The job's directory in each hierarchy; True if one was there already (stale).
        A v1 cpuset not cloned from its parent is given the parent's memory nodes here (and
        CPUs, which ``_set_limits`` then narrows to the job's)."""
        stale = False
        for role, where in self.paths.items():
            try:
                os.mkdir(where)
            except FileExistsError:
                stale = True
            if role == "cpuset" and (stale or not self.cpuset_cloned):
                _inherit_cpuset(where)
        return stale

    def _set_limits(self, limits: Limits) -> None:
        """Write the job's limits: one ``open``/``write``/``close`` each, no ``stat`` first
        (a file this kernel lacks, as ``memory.memsw.*`` without swap accounting, is skipped
        where the setting allows it)."""
        d = self.paths
        unified = d.get("unified")
        join = os.path.join
        if limits.memory_bytes is not None:
            value = str(limits.memory_bytes)
            if "memory" in d:
                _write(join(d["memory"], "memory.limit_in_bytes"), value)
                if limits.no_swap:  # RAM + swap = the same limit
                    _write_if_there(join(d["memory"], "memory.memsw.limit_in_bytes"), value)
            elif unified is not None and _write_if_there(join(unified, "memory.max"), value):
                if limits.no_swap:
                    _write_if_there(join(unified, "memory.swap.max"), "0")
        if limits.cpus:  # a cpuset without them has the node's (cloned or copied at mkdir)
            text = format_cpu_list(limits.cpus)
            if "cpuset" in d:
                _write(join(d["cpuset"], "cpuset.cpus"), text)
            elif unified is not None:
                _write_if_there(join(unified, "cpuset.cpus"), text)
            self.cpus = limits.cpus
        if limits.pids_max:
            if "pids" in d:
                _write(join(d["pids"], "pids.max"), str(limits.pids_max))
            elif unified is not None:
                _write_if_there(join(unified, "pids.max"), str(limits.pids_max))
        if limits.deny_devices and "devices" in d:
            for kind, major, minor in limits.deny_devices:
                _write(join(d["devices"], "devices.deny"), f"{kind} {major}:{minor} rwm")

    def add_leaf(self, leaf: str) -> None:
        """A leaf for a step's or the batch script's processes (made after the job's limits,
        so that v1's devices and cpuset copy them)."""
        for role, where in self.paths.items():
            path = os.path.join(where, leaf)
            made = True
            try:
                os.mkdir(path)
            except FileExistsError:
                made = False
            if role == "cpuset" and not (made and self.cpuset_cloned):  # cloned: has the job's
                _inherit_cpuset(path)
        if leaf not in self.leaves:
            self.leaves.append(leaf)

    # --- joining -----------------------------------------------------------------------------

    def procs_paths(self, leaf: str | None = None) -> list[str]:
        """The ``cgroup.procs`` files a process writes itself into to join ``leaf`` (by
        default where the batch script goes)."""
        leaf = self.batch if leaf is None else leaf
        return [os.path.join(where, leaf, "cgroup.procs") for where in self.paths.values()]

    def open_procs(self, leaf: str | None = None) -> list[int]:
        """Descriptors (opened now, as root) for ``join_fds`` in the child; the caller closes
        them after the fork."""
        fds: list[int] = []
        try:
            for path in self.procs_paths(leaf):
                fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    # --- what is in it -----------------------------------------------------------------------

    @property
    def tree(self) -> cgroupfs.Tree:
        """The job's cgroup as the os-only helpers see it (``agentd.cgroupfs``, shared with
        the job's supervisor)."""
        return cgroupfs.Tree(self.paths, self.tracking)

    def pids(self, leaf: str | None = None) -> list[int]:
        """Every process in the job's tree (or in one leaf)."""
        return self.tree.pids(leaf)

    def populated(self, leaf: str | None = None) -> bool:
        """Does any process remain (v2's ``populated``, else a walk of the v1 tree)?"""
        return self.tree.populated(leaf)

    def signal(self, signum: int, leaf: str | None = None) -> None:
        self.tree.signal(signum, leaf)

    def kill(self, leaf: str | None = None) -> None:
        """SIGKILL every process (``cgroupfs.Tree.kill``: v2's ``cgroup.kill``, or v1's
        freeze, kill, thaw)."""
        self.tree.kill(leaf)

    # --- accounting --------------------------------------------------------------------------

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer killed in this cgroup (its own counter)."""
        return self.tree.oom_kills()

    def max_rss_kb(self) -> int:
        """The cgroup's own peak memory use, KiB (0 when the kernel keeps none)."""
        return self.tree.max_rss_kb()

    def cpu_seconds(self) -> tuple[float, float] | None:
        """(user, system) CPU seconds of everything that ran in the job, from the cgroup's
        counters; None when the host keeps none."""
        return self.tree.cpu_seconds()

    # --- removal -----------------------------------------------------------------------------

    def remove(self, leaf: str | None = None) -> bool:
        """rmdir the job's (or a leaf's) directories, deepest first; False if any is busy."""
        ok = True
        join = os.path.join
        for where in self.paths.values():
            top = join(where, leaf) if leaf else where
            known = [top] if leaf else [*(join(top, name) for name in self.leaves), top]
            for path in known:  # the leaves we made, then the job: no walk in the usual case
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    break  # a leaf we did not make (an earlier agent's): walk below
            else:
                continue
            for path in reversed(list(cgroupfs.walk(top))):
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    ok = False
                    log.warning("cannot remove cgroup %s: %s", path, exc.strerror)
        if leaf and leaf in self.leaves:
            self.leaves.remove(leaf)
        return ok


# --- v2 devices: a BPF device program ----------------------------------------------------------

# bpf(2) by hand (ctypes): the syscall number per machine, the commands and types used
_NR_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_PROG_LOAD, _BPF_PROG_ATTACH = 5, 8
_BPF_PROG_TYPE_CGROUP_DEVICE, _BPF_CGROUP_DEVICE, _BPF_F_ALLOW_MULTI = 15, 6, 2


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def device_program(deny: Iterable[tuple[str, int, int]]) -> bytes:
    """A BPF_PROG_TYPE_CGROUP_DEVICE program that refuses these devices (any access) and
    allows the rest: ctx is {u32 access_type (type in the low 16 bits), u32 major, u32 minor}."""
    prog = [_insn(0x61, 2, 1, 4), _insn(0x61, 3, 1, 8),  # r2 = major, r3 = minor
            _insn(0x61, 4, 1, 0), _insn(0x54, 4, imm=0xFFFF)]  # r4 = type (1 block, 2 char)
    for kind, major, minor in deny:  # if (type, major, minor) match: return 0 (EPERM)
        prog += [_insn(0x55, 4, off=4, imm=2 if kind == "c" else 1),
                 _insn(0x55, 2, off=3, imm=major), _insn(0x55, 3, off=2, imm=minor),
                 _insn(0xB7, 0, imm=0), _insn(0x95)]
    return b"".join([*prog, _insn(0xB7, 0, imm=1), _insn(0x95)])  # return 1: allowed


def _bpf(cmd: int, attr: bytes) -> int:
    import ctypes
    import platform

    number = _NR_BPF.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"bpf(2) not wired for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr, len(attr))
    result = libc.syscall(number, cmd, buf, len(attr))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def _load_program(deny: Iterable[tuple[str, int, int]]) -> int:
    import ctypes

    code = device_program(deny)
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack("<IIQQ", _BPF_PROG_TYPE_CGROUP_DEVICE, len(code) // 8,
                       ctypes.addressof(insns), ctypes.addressof(license_))
    return _bpf(_BPF_PROG_LOAD, attr.ljust(128, b"\0"))


def attach_device_program(cgroup_dir: Path, deny: Iterable[tuple[str, int, int]]) -> None:
    """Deny these devices to every process in a v2 cgroup (the program stays attached to the
    cgroup once our descriptors close, and goes with it)."""
    prog = _load_program(deny)
    try:
        target = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _bpf(_BPF_PROG_ATTACH, struct.pack("<IIII", target, prog, _BPF_CGROUP_DEVICE,
                                               _BPF_F_ALLOW_MULTI).ljust(32, b"\0"))
        finally:
            os.close(target)
    finally:
        os.close(prog)


def device_programs_work() -> bool:
    """Can this agent load a device program (root, a kernel with cgroup BPF)?"""
    try:
        os.close(_load_program([]))
    except OSError:
        return False
    return True


# --- what the child calls --------------------------------------------------------------------


def join_fds(fds: Iterable[int]) -> None:
    """Put the calling process in the cgroups whose ``cgroup.procs`` these descriptors are
    (write "0": myself). Call it in the child after fork, before exec."""
    for fd in fds:
        os.write(fd, b"0")


# --- helpers ---------------------------------------------------------------------------------


def _inherit_cpuset(where: str | Path) -> None:
    """v1 cpuset: a new cgroup has no CPUs or memory nodes until given its parent's."""
    parent = os.path.dirname(os.fspath(where).rstrip("/"))
    for name in ("cpuset.cpus", "cpuset.mems"):
        if not _read(os.path.join(where, name)).strip():
            _write(os.path.join(where, name), _read(os.path.join(parent, name)).strip())


def _clone_children(node_dir: Path) -> bool:
    """Set v1 ``cgroup.clone_children`` on this node's cpuset, so that a job's cpuset is born
    with the node's CPUs and memory nodes (the kernel's copy at ``mkdir``, inherited by the
    job's own leaves) instead of the agent reading and writing both for every job. True when
    a probe cgroup made under it has them; False (each job copies them itself) where the
    kernel refuses or did not copy (it does not when a sibling cpuset is exclusive)."""
    try:
        _write(os.path.join(node_dir, "cgroup.clone_children"), "1")
    except OSError:
        return False
    probe = os.path.join(node_dir, f"clone_probe_{os.getpid()}")
    try:
        os.mkdir(probe)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        return all(_read(os.path.join(probe, name)).strip() ==
                   _read(os.path.join(node_dir, name)).strip() != ""
                   for name in ("cpuset.cpus", "cpuset.mems"))
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)


def _read(path: str | Path) -> str:
    return cgroupfs.read(path)


def _write(path: str | Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            name = os.path.basename(os.fspath(path))
            raise OSError(exc.errno, f"{name}: invalid value {text!r}") from None
        raise
    finally:
        os.close(fd)


def _write_if_there(path: str, text: str) -> bool:
    """``_write``, or False where the file does not exist (a controller or kernel feature
    this host lacks); one failed ``open`` instead of a ``stat`` before every write."""
    try:
        _write(path, text)
    except FileNotFoundError:
        return False
    return True
