"""The domain: jobs, nodes, GPUs and allocations as plain data classes.

Everything above this module (the scheduler core, the ledger, the handlers, the CLI formatters)
speaks in these types, and the wire carries them as ``dataclasses.asdict`` dictionaries with the
same key names. Only the standard library is imported here: the CLI and the agent import it too.

Units, once for all: times are POSIX seconds (float for instants, int for durations); memory is
MiB (Slurm's "MB"); a time limit of ``None`` means UNLIMITED.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kiln.slurm.gres import gres_type  # noqa: F401  (re-exported, as below)
from kiln.slurm.states import (  # noqa: F401  (re-exported: the domain's words live here too)
    ACTIVE_STATES,
    COMPACT_STATES,
    FINISHED_STATES,
    LAUNCH_FAILED_HELD,
    JobState,
    NodeState,
)


@dataclass(slots=True)
class GPU:
    """One device as NVML (or the fake backend) reports it.

    ``island`` groups devices that talk over NVLink (or share a PCIe switch): placement keeps a
    job's GPUs inside one island when it can.
    """

    index: int
    uuid: str
    model: str
    memory_mb: int
    island: int = 0
    cpus: list[int] = field(default_factory=list)  # the CPU ids near it (NVML), [] = unknown
    # why it is out of service ("" = healthy): server-owned, set from a fatal NVML fault its
    # agent reported, cleared by scontrol update State=RESUME (schedd/lifecycle/gpuhealth.py)
    fault: str = ""


@dataclass(slots=True)
class Node:
    name: str
    cpus: int
    memory_mb: int
    gpus: list[GPU] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    state: NodeState = NodeState.IDLE
    reason: str = ""
    address: str = ""
    last_heartbeat: float = 0.0
    boot_time: float = 0.0
    cgroup: str = ""  # the agent's containment, scontrol's CgroupPlugin=... line (not stored)
    # when this node's agent started (SlurmdStartTime); from its registration, not kept in
    # the ledger: a schedd that restarts asks each agent to register again (handlers/agent.py)
    slurmd_start_time: float = 0.0
    # who set ``reason`` and when (sinfo -R's USER and TIMESTAMP): memory only, rebuilt at
    # start from the audit trail of scontrol update (State.load); 0 / None: not known
    reason_time: float = 0.0
    reason_uid: int | None = None
    fake_gpus: bool = False  # its agent runs --fake-gpus (kiln fake-gpu); not stored
    # gres/shard: shards each GPU offers (its agent's [agent] shards_per_gpu, else its
    # partition's); 0 = none. From the registration, not stored
    shards_per_gpu: int = 0
    mps_per_gpu: int = 0  # gres/mps: MPS units each GPU offers (likewise); 0 = none
    # scontrol reboot (schedd/lifecycle/reboot.py), memory only: "" none, "requested" (when
    # the node is idle), "issued" (its agent runs the reboot program); what it returns to
    reboot: str = ""
    reboot_asap: bool = False  # ASAP: drained for the reboot (cancel_reboot undrains it)
    reboot_next: str = ""  # nextstate: "resume" (the default) or "down"
    reboot_reason: str = ""  # reason=: the DOWN node's reason, or the ASAP drain's

    @property
    def healthy_gpus(self) -> list[GPU]:
        """The GPUs placement may hand out: those without a fault."""
        return [g for g in self.gpus if not g.fault]

    @property
    def gpu_model(self) -> str:
        """The node's GPU type in Slurm's gres spelling (``a100``), or '' without GPUs."""
        return gres_type(self.gpus[0].model) if self.gpus else ""

    def gpu_count(self, gpu_type: str = "") -> int:
        """How many of its GPUs are of ``gpu_type`` (all of them for '')."""
        if not gpu_type:
            return len(self.gpus)
        return sum(1 for g in self.gpus if gres_type(g.model) == gpu_type)


@dataclass(slots=True)
class NodeAllocation:
    """What one job holds on one node."""

    node: str
    cpus: int
    memory_mb: int
    gpus: list[int] = field(default_factory=list)
    # the CPU ids on the node (0 .. node's CPUs - 1), chosen by the scheduler; [] for an
    # allocation made before it chose them (the agent then picks them itself)
    cpu_ids: list[int] = field(default_factory=list)
    # GPU shares (schedd/scheduler/shares.py): GPU index -> shares held on it, of the kind
    # ``share_kind`` ("shard": gres/shard; "mps": gres/mps units); those GPUs are not in
    # ``gpus`` (held whole) but the job sees them (``devices``)
    shards: dict[int, int] = field(default_factory=dict)
    shards_per_gpu: int = 0  # the node's shares per GPU (of that kind) when they were given
    share_kind: str = "shard"

    @property
    def shard_count(self) -> int:
        return sum(self.shards.values()) if self.shards else 0

    @property
    def mps_count(self) -> int:
        """gres/mps units held (0 for shards or none)."""
        return self.shard_count if self.shards and self.share_kind == "mps" else 0

    @property
    def mps_gpus(self) -> list[int]:
        """The GPUs it holds MPS units on (its agent runs their MPS control daemon)."""
        return sorted(self.shards) if self.shards and self.share_kind == "mps" else []

    @property
    def gpu_share(self) -> float:
        """The GPUs its shards amount to (2 of a GPU's 4 shards: 0.5)."""
        return self.shard_count / self.shards_per_gpu if self.shards_per_gpu else 0.0

    @property
    def devices(self) -> list[int]:
        """The GPU indices the job may use on this node: whole ones and those of its shards."""
        return sorted(set(self.gpus).union(self.shards)) if self.shards else list(self.gpus)


def shards_from_wire(value: Any) -> dict[int, int]:
    """An allocation's shards as sent (``{GPU index: shards}``, the index a string after
    JSON) or stored (``[[GPU index, shards], ...]``)."""
    pairs = value.items() if isinstance(value, dict) else value or []
    return {int(g): int(n) for g, n in pairs}


def shards_wire(shards: dict[int, int]) -> list[list[int]]:
    return [[g, n] for g, n in sorted(shards.items())]


@dataclass(slots=True)
class Allocation:
    job_id: int
    nodes: list[NodeAllocation] = field(default_factory=list)

    @property
    def node_names(self) -> list[str]:
        return [n.node for n in self.nodes]

    @property
    def total_cpus(self) -> int:
        return sum(n.cpus for n in self.nodes)

    @property
    def total_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)


@dataclass(slots=True)
class Partition:
    name: str
    nodes: list[str] = field(default_factory=list)  # empty: every node
    default: bool = False
    max_time: int | None = None  # seconds; None = UNLIMITED
    default_time: int | None = None
    priority_tier: int = 1
    state: str = "UP"
    # a node cut off from schedd for fence_timeout: "kill" its jobs of this partition (they
    # are requeued elsewhere, never running twice at once), or "keep" them running (a
    # requeued one may then run beside its old run until the node returns)
    on_isolation: str = "kill"
    # gres/shard: shards each GPU of this partition's nodes offers, where the node's own
    # [agent] shards_per_gpu does not say (0 = none)
    shards_per_gpu: int = 0
    mps_per_gpu: int = 0  # gres/mps: MPS units each GPU offers, likewise (0 = none)


@dataclass(slots=True)
class License:
    """A cluster license (``[[license]]`` in kiln.toml: Slurm's ``Licenses=name:count``)."""

    name: str
    count: int = 1


@dataclass(frozen=True, slots=True)
class StopMark:
    """schedd told the agent to stop one run (``generation``) of a job, and what that run's
    end is then recorded as. Set by ``lifecycle.transitions.request_stop``; consumed by
    ``end_run`` (every path that ends a run), so it never outlives the run it was set for.

    ``cause``: why (``cancel``, ``requeue``, ``node_down``, ``time_limit``, ``budget``,
    ``relinquish``); ``ended``: the state the run ends in whatever the agent saw (CANCELLED,
    REQUEUED, NODE_FAIL, TIMEOUT, COMPLETED, FAILED); ``requeue``: back to PENDING once it has
    ended (``hold``: held); ``exit``: the exit (code, signal) the run is recorded with instead
    of the agent's (salloc relinquishing reports its command's)."""

    generation: int
    cause: str
    ended: str
    requeue: bool = False
    hold: bool = False
    actor: int | None = None
    exit: tuple[int, int] | None = None

    def to_wire(self) -> dict[str, Any]:
        wire = {"generation": self.generation, "cause": self.cause, "ended": self.ended,
                "requeue": self.requeue, "hold": self.hold, "actor": self.actor}
        if self.exit is not None:
            wire["exit"] = list(self.exit)
        return wire

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> StopMark:
        exit_ = d.get("exit")
        return cls(int(d["generation"]), str(d["cause"]), str(JobState(d["ended"])),
                   bool(d.get("requeue")), bool(d.get("hold")),
                   None if d.get("actor") is None else int(d["actor"]),
                   (int(exit_[0]), int(exit_[1])) if isinstance(exit_, list) else None)


@dataclass(frozen=True, slots=True)
class PreemptMark:
    """This run (``generation``) of a job was chosen as a preemption victim for job ``by``: it
    got its notice ``at``; after ``deadline`` (its GraceTime) it is terminated; ``mode`` is
    ``requeue`` or ``cancel``. Consumed by ``end_run`` like ``StopMark``."""

    generation: int
    by: int
    at: float
    deadline: float
    mode: str
    cause: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {"generation": self.generation, "by": self.by, "at": self.at,
                "deadline": self.deadline, "mode": self.mode, "cause": self.cause}

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> PreemptMark:
        mode = str(d["mode"])
        if mode not in ("requeue", "cancel"):
            raise ValueError(f"preemption mode {mode!r}")
        return cls(int(d["generation"]), int(d["by"]), float(d["at"]), float(d["deadline"]),
                   mode, str(d.get("cause") or ""))


@dataclass(slots=True)
class Job:
    """A batch job: what the user asked for (every sbatch option, stored even where a later
    feature will act on it) and what became of it.

    Array tasks are separate Job rows that share ``array_job_id``; the task that keeps the
    array's own id has ``id == array_job_id``.
    """

    id: int
    name: str = ""
    user: str = ""
    uid: int = -1
    gid: int = -1
    account: str = ""
    partition: str = ""
    qos: str = "normal"
    state: JobState = JobState.PENDING
    reason: str = "None"
    priority: int = 0
    nice: int = 0
    held: str = ""  # "", "user" or "admin"

    # arrays
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_spec: str = ""  # e.g. "1-10%2" as submitted
    array_max_running: int = 0  # the %N throttle, 0 = none

    # times (POSIX seconds)
    submit_time: float = 0.0
    eligible_time: float = 0.0
    begin_time: float = 0.0  # --begin; 0 = now
    start_time: float = 0.0
    end_time: float = 0.0
    time_limit: int | None = None  # seconds, None = UNLIMITED
    time_min: int | None = None

    # resources asked for
    num_nodes: int = 1
    num_nodes_max: int = 0  # 0 = same as num_nodes
    num_tasks: int = 1
    ntasks_per_node: int = 0  # 0 = not given
    cpus_per_task: int = 1
    mem_per_node_mb: int = 0  # --mem; 0 = not given
    mem_per_cpu_mb: int = 0
    mem_per_gpu_mb: int = 0
    gpus: int = 0  # -G/--gpus: total over the job
    gpus_per_node: int = 0  # --gres=gpu:N / --gpus-per-node
    gpus_per_task: int = 0
    gpu_type: str = ""  # --gres=gpu:a100:2 -> "a100"
    shards_per_node: int = 0  # --gres=shard:N: GPU shards on each node (schedd/scheduler/shares)
    mps_per_node: int = 0  # --gres=mps:N: MPS units on one GPU of each node (likewise)
    exclusive: bool = False
    # network topology ([topology], schedd/scheduler/topology.py): --switches=N[@max-time]
    # (switch_wait: the @max-time in seconds, None = the cluster's max_switch_wait),
    # --segment=N, --exclusive=topo (exclusive is set too)
    switches: int = 0
    switch_wait: int | None = None
    segment: int = 0
    exclusive_topo: bool = False
    constraint: str = ""
    nodelist: str = ""  # -w, as given (hostlist expression)
    exclude: str = ""  # -x
    reservation: str = ""

    # behaviour
    dependency: str = ""
    requeue: bool = True
    signal: str = ""  # --signal as given: [B:]SIG[@secs]
    open_mode: str = "truncate"
    stdout: str = ""  # patterns as given (%j ...), "" = slurm-%j.out
    stderr: str = ""
    workdir: str = ""
    export: str = "ALL"
    comment: str = ""
    mail_type: str = ""
    mail_user: str = ""
    submit_host: str = ""
    command: str = ""  # the script path as given, or "(wrap)"/"(stdin)"
    script: str = ""
    environment: dict[str, str] = field(default_factory=dict)
    script_args: list[str] = field(default_factory=list)  # after the script's name
    alloc_sid: int = 0  # the submitting shell's session id (scontrol's AllocNode:Sid)
    restart_cost: int | None = None  # --restart-cost, seconds (preemption's victim score)
    stdin: str = ""  # --input, as given
    wckey: str = ""
    licenses: str = ""  # -L, as given (recorded)
    interactive: bool = False  # salloc's allocation: no batch script, an extern step holds it

    # what happened
    node_list: str = ""  # compressed hostlist of the allocation
    allocation: list[NodeAllocation] = field(default_factory=list)
    batch_host: str = ""
    exit_code: int = 0
    exit_signal: int = 0
    restart_count: int = 0
    generation: int = 0  # bumped at every launch: fences stale agents
    cancelled_by: int | None = None

    # --- server-owned: written by schedd code only, never from a request's fields ---------
    admin_priority: int | None = None  # scontrol update Priority= (operators): factors ignored
    launched_limit: int | None = None  # the time limit this run's agent enforces, seconds
    stop: StopMark | None = None  # the agent was told to stop this run, and why
    preempt: PreemptMark | None = None  # this run is a preemption victim
    stats: dict[str, float] = field(default_factory=dict)  # the agent's samples (slurm.stats)
    expected_start: float = 0.0  # the last plan's start for a pending job (squeue --start)
    sched_nodes: str = ""  # ... and the nodes it was planned on
    forecast_first: list[float] | None = None  # [expected start, when first published]
    forecast_last: list[float] | None = None  # [expected start, when last published]
    # the first p50/p90 start published (reports/forecast.py): [p50, p90, when, plan p50, plan p90]
    forecast_band: list[float] | None = None
    set_aside: str = ""  # why schedd could not load or schedule this job (held for an admin)
    # the time-limit notices (--mail-type TIME_LIMIT_50/80/90, TIME_LIMIT) mailed for this run,
    # comma-separated in the order sent; cleared at each start (lifecycle/mail.py)
    mail_sent: str = ""
    # idle GPUs ([scheduler.idle_gpu], lifecycle/idlegpu.py): this run's GPU-seconds read below
    # below_util (None: the run was not watched), and since when all its GPUs have been (0: not)
    idle_gpu_s: float | None = None
    idle_since: float = 0.0

    @property
    def display_id(self) -> str:
        """JobID as squeue/sacct print it: '123' or '123_4' for an array task."""
        if self.array_job_id is not None and self.array_task_id is not None:
            return f"{self.array_job_id}_{self.array_task_id}"
        return str(self.id)

    @property
    def total_gpus(self) -> int:
        if self.allocation:
            return sum(len(a.gpus) for a in self.allocation)
        if self.gpus:
            return self.gpus
        if self.gpus_per_task:
            return self.gpus_per_task * self.num_tasks
        return self.gpus_per_node * self.num_nodes

    def to_wire(self, *, with_script: bool = False, private: bool = True) -> dict[str, Any]:
        """The dictionary the wire carries. ``private``: what the job carries that only its
        owner and operators may read (``PRIVATE_FIELDS``: export values, script arguments);
        ``with_script`` (with ``private``) adds the script and the environment.

        Built field by field rather than with ``dataclasses.asdict`` (which deep-copies): squeue
        asks for every queued job, and this is most of the cost of answering it."""
        if not private:
            names = PUBLIC_FIELDS
        else:
            names = JOB_FIELDS if with_script else _LIGHT_FIELDS
        d = {name: getattr(self, name) for name in names}
        d["state"] = self.state.value
        d["allocation"] = allocation_wire(self.allocation)
        d["stop"] = self.stop.to_wire() if self.stop is not None else None
        d["preempt"] = self.preempt.to_wire() if self.preempt is not None else None
        return d

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Job:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["state"] = JobState(kw.get("state", "PENDING"))
        kw["allocation"] = [NodeAllocation(**{**a, "shards": shards_from_wire(a.get("shards"))})
                            for a in kw.get("allocation", [])]
        if kw.get("stop") is not None:
            kw["stop"] = StopMark.from_wire(kw["stop"])
        if kw.get("preempt") is not None:
            kw["preempt"] = PreemptMark.from_wire(kw["preempt"])
        return cls(**kw)


JOB_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Job))
# What a job carries that only its owner and operators may read; script and environment go
# only where asked for (scontrol show job --details, srun), to them too.
PRIVATE_FIELDS = frozenset({"export", "script_args", "script", "environment"})
_LIGHT_FIELDS = tuple(n for n in JOB_FIELDS if n not in ("script", "environment"))
PUBLIC_FIELDS = tuple(n for n in JOB_FIELDS if n not in PRIVATE_FIELDS)
# What a query_jobs "fields" list may name (squeue): what anyone may see of any job.
ROW_FIELDS = frozenset(PUBLIC_FIELDS) - {"stop", "preempt"}


def allocation_wire(allocation: list[NodeAllocation]) -> list[dict[str, Any]]:
    return [{"node": a.node, "cpus": a.cpus, "memory_mb": a.memory_mb, "gpus": list(a.gpus),
             "cpu_ids": list(a.cpu_ids), "shards": dict(a.shards),
             "shards_per_gpu": a.shards_per_gpu, "share_kind": a.share_kind}
            for a in allocation]


def job_columns(jobs: list[Job], names: Sequence[str]) -> list[list[Any]]:
    """For each of ``names`` (a subset of ROW_FIELDS), its wire value for every job, in order.

    squeue asks for a handful of attributes of every queued job: a C-level ``attrgetter`` map
    per attribute, and no dictionary per job, is what keeps 10,000 jobs cheap. ``state`` is a
    StrEnum and goes on the wire as its text; only ``allocation`` needs converting."""
    columns = []
    for name in names:
        values = list(map(operator.attrgetter(name), jobs))
        if name == "allocation":
            values = [allocation_wire(a) if a else a for a in values]  # no new empty list
        columns.append(values)
    return columns


def node_from_wire(d: dict[str, Any]) -> Node:
    names = {f.name for f in dataclasses.fields(Node)}
    kw = {k: v for k, v in d.items() if k in names}
    kw["gpus"] = [GPU(**g) for g in kw.get("gpus", [])]
    kw["state"] = NodeState(kw.get("state", "IDLE"))
    return Node(**kw)
