"""What the scheduler core sees and what it decides: the pure core's whole interface.

``cycle.schedule(snapshot, config) -> Decisions`` is a function: no database, no sockets, no
clock (``snapshot.now`` is the time). The daemon builds snapshots from its in-memory state; the
simulator builds them from a trace on a virtual clock; property tests build random ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from schedd.model import GPU, Job, NodeAllocation

if TYPE_CHECKING:
    from schedd.scheduler.limits import LimitTable
    from schedd.scheduler.preempt import Preemption, PreemptPolicy


@dataclass(slots=True)
class NodeView:
    """A schedulable node: its capacity. What is free is derived from ``Snapshot.running``."""

    name: str
    cpus: int
    memory_mb: int
    gpus: list[GPU] = field(default_factory=list)
    gpu_type: str = ""  # gres spelling, e.g. "a100"
    features: frozenset[str] = frozenset()
    partitions: frozenset[str] = frozenset()
    available: bool = True  # False when DOWN or DRAIN: runs what it has, takes nothing new


@dataclass(slots=True)
class PendingJob:
    """A pending job, eligible to run as far as the daemon can tell (not held, dependencies met,
    begin time reached); the core decides whether and where it starts, and why not."""

    job_id: int
    name: str = ""
    user: str = ""
    account: str = ""
    partition: str = ""
    qos: str = "normal"
    num_nodes: int = 1
    cpus_per_node: int = 1
    mem_per_node_mb: int = 0
    gpus_per_node: int = 0
    gpu_type: str = ""
    exclusive: bool = False
    features: frozenset[str] = frozenset()
    nodelist: frozenset[str] = frozenset()  # -w: must include these nodes
    exclude: frozenset[str] = frozenset()  # -x
    time_limit: int = 3600  # seconds, resolved (partition default, UNLIMITED -> horizon)
    submit_time: float = 0.0
    nice: int = 0
    qos_priority: int = 0
    partition_priority: int = 1
    admin_priority: int | None = None  # scontrol update Priority=: fixed, factors ignored
    assoc_priority: int = 0  # the association's Priority (sacctmgr), for the assoc factor
    predicted_runtime: int | None = None  # seconds, used for planning when predict_runtime is on
    reservation: str = ""  # --reservation: runs only inside that advance reservation

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.num_nodes


@dataclass(slots=True)
class RunningJob:
    job_id: int
    allocation: list[NodeAllocation]
    start_time: float
    end_time: float  # start + time limit: when its resources are surely free again
    user: str = ""
    account: str = ""
    qos: str = "normal"
    partition: str = ""
    predicted_end: float | None = None  # planning end when predict_runtime is on (<= end_time)
    # preemption (scheduler/preempt.py): seconds since its last checkpoint (None: none seen),
    # its --restart-cost in seconds (None: the config's), and whether it is already ending
    checkpoint_age: float | None = None
    restart_cost: int | None = None
    preempting: bool = False
    reservation: str = ""  # the advance reservation it runs in, "" = none


@dataclass(slots=True)
class AssociationView:
    """One association of the fair-share tree as the core sees it.

    An account association has ``user == ""``; a user association hangs under its account.
    ``parent`` is the parent account ("" or "root" = directly under root). ``usage`` is the
    decayed billing-seconds consumed by this association alone (children are summed by the core).
    """

    account: str
    parent: str = ""
    user: str = ""
    shares: int = 1
    usage: float = 0.0
    priority: int = 0


@dataclass(slots=True)
class ReservationView:
    """An advance reservation (scontrol create reservation) as the core sees it: during
    ``[start, end)`` the ``holdings`` (node -> (CPUs, memory MiB, GPUs)) are blocked time for
    every job that does not name it, and the only capacity of the jobs that do
    (``PendingJob.reservation``). See ``scheduler/reservations.py``."""

    name: str
    start: float
    end: float
    holdings: dict[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass(slots=True)
class Snapshot:
    now: float
    nodes: list[NodeView]
    running: list[RunningJob] = field(default_factory=list)
    pending: list[PendingJob] = field(default_factory=list)
    associations: list[AssociationView] = field(default_factory=list)  # empty: no fair share
    # expected starts promised by the previous cycle (Decisions.expected_start fed back): jobs that
    # hold one are planned before jobs that do not, so a newcomer never takes a promised slot
    promised: dict[int, float] = field(default_factory=dict)
    # the nodes of those promises (Decisions.reserved_nodes fed back): a promised job stays on
    # them, so on a cluster of many nodes it cannot take another promised job's slot either
    promised_nodes: dict[int, list[str]] = field(default_factory=dict)
    # association and QOS limits (scheduler/limits.py); None: no limits enforced
    limits: LimitTable | None = None
    # who may preempt whom, guarantees, burst QOS (scheduler/preempt.py); None: no preemption
    preemption: PreemptPolicy | None = None
    # advance reservations not yet ended (scheduler/reservations.py); empty: none
    reservations: list[ReservationView] = field(default_factory=list)
    # Whether the caller reads a reason and a displayed priority for every pending job
    # (Decisions.reasons, .priorities): the daemon does (squeue, scontrol show job). The
    # simulator reads only the starts and the plan, and on a long queue naming every waiting
    # job each cycle is most of its time; False lets the core leave out the reasons of jobs
    # the walk never looks at and every priority. Starts and plans are the same either way.
    explain: bool = True
    # The caller vouches that ``pending`` is a queue of plain arrivals: in arrival order
    # ((submit time, job id) rising), one nice value, no admin-set priority, no reservation
    # named. The core then skips the passes over the queue that would find this out every
    # cycle (priority.submit_ordered, cycle.by_submit, the reservation split); the decisions
    # are the same as without. The simulator sets it (its queue is a subsequence of a trace in
    # that order, its jobs all made alike by Machine.pending); the daemon does not.
    plain_arrivals: bool = False


@dataclass(slots=True)
class Start:
    job_id: int
    allocation: list[NodeAllocation]


@dataclass(slots=True)
class Decisions:
    """What one cycle decided. With ``Snapshot.explain`` off, ``reasons`` may leave out the
    jobs the walk never looked at, and ``priorities`` is empty."""

    starts: list[Start] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)  # pending job -> Slurm reason
    expected_start: dict[int, float] = field(default_factory=dict)  # from the backfill plan
    reserved_nodes: dict[int, list[str]] = field(default_factory=dict)  # the plan's nodes
    priorities: dict[int, int] = field(default_factory=dict)
    preemptions: list[Preemption] = field(default_factory=list)  # scheduler/preempt.py


def cpus_per_node(job: Job) -> int:
    if job.ntasks_per_node:
        tasks = job.ntasks_per_node
    else:
        tasks = -(-max(job.num_tasks, 1) // max(job.num_nodes, 1))
    return max(tasks, 1) * max(job.cpus_per_task, 1)


def gpus_per_node(job: Job) -> int:
    nodes = max(job.num_nodes, 1)
    if job.gpus_per_node:
        return job.gpus_per_node
    if job.gpus:
        return -(-job.gpus // nodes)
    if job.gpus_per_task:
        return job.gpus_per_task * -(-max(job.num_tasks, 1) // nodes)
    return 0


def mem_per_node(job: Job) -> int:
    if job.mem_per_node_mb:
        return job.mem_per_node_mb
    if job.mem_per_cpu_mb:
        return job.mem_per_cpu_mb * cpus_per_node(job)
    if job.mem_per_gpu_mb:
        return job.mem_per_gpu_mb * gpus_per_node(job)
    return 0


def split_names(expr: str) -> frozenset[str]:
    """'-w a,b' or a hostlist expression -> node names."""
    from schedd.hostlist import expand

    return frozenset(expand(expr)) if expr else frozenset()


def pending_from_job(job: Job, time_limit: int, qos_priority: int = 0,
                     partition_priority: int = 1) -> PendingJob:
    """The core's view of a pending Job; ``time_limit`` already resolved by the caller."""
    return PendingJob(
        job_id=job.id,
        name=job.name,
        user=job.user,
        account=job.account,
        partition=job.partition,
        qos=job.qos,
        num_nodes=max(job.num_nodes, 1),
        cpus_per_node=cpus_per_node(job),
        mem_per_node_mb=mem_per_node(job),
        gpus_per_node=gpus_per_node(job),
        gpu_type=job.gpu_type,
        exclusive=job.exclusive,
        features=frozenset(f for f in job.constraint.replace("|", "&").split("&") if f),
        nodelist=split_names(job.nodelist),
        exclude=split_names(job.exclude),
        time_limit=time_limit,
        submit_time=job.submit_time,
        nice=job.nice,
        qos_priority=qos_priority,
        partition_priority=partition_priority,
        admin_priority=job.extra.get("admin_priority"),
        reservation=job.reservation,
    )
