"""What the scheduler core sees and what it decides: the pure core's whole interface.

``cycle.schedule(snapshot, config) -> Decisions`` is a function: no database, no sockets, no
clock (``snapshot.now`` is the time). The daemon builds snapshots from its in-memory state; the
simulator builds them from a trace on a virtual clock; property tests build random ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.model import GPU, Job, NodeAllocation
from kiln.slurm import licenses
from kiln.slurm.topology import Place
from schedd.scheduler.gpushare import Task


@dataclass(slots=True)
class NodeView:
    """A schedulable node: its capacity. What is free is derived from ``Snapshot.running``."""

    name: str
    cpus: int
    memory_mb: int
    gpus: list[GPU] = field(default_factory=list)
    gpu_type: str = ""  # gres spelling, e.g. "a100"; "" for GPUs of several types:
    # GPU index -> type when the node's GPUs are of several types (a MIG GPU of mixed profiles,
    # kiln.slurm.gres.kinds_of); {} when all are ``gpu_type``
    gpu_kinds: dict[int, str] = field(default_factory=dict)
    features: frozenset[str] = frozenset()
    partitions: frozenset[str] = frozenset()
    available: bool = True  # False when DOWN or DRAIN: runs what it has, takes nothing new
    # GPUs out of service (a fatal NVML fault, until RESUME): not in ``gpus``, never handed
    # out; a job that would fit with them waits (ReqNodeNotAvail), not BadConstraints
    failed_gpus: int = 0
    shards_per_gpu: int = 0  # gres/shard: shards each GPU offers (scheduler/shares.py); 0 none
    mps_per_gpu: int = 0  # gres/mps: MPS units each GPU offers (likewise); 0 none
    # where it sits in the network ([topology], kiln/slurm/topology.Place); None: flat
    topo: Place | None = None


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
    shards_per_node: int = 0  # --gres=shard:N (scheduler/shares.py)
    mps_per_node: int = 0  # --gres=mps:N, on one GPU of each node (likewise)
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
    licenses: tuple[tuple[str, int], ...] = ()  # -L: (name, count) pairs (scheduler/licenses)
    # network topology (scheduler/topology.py): --switches=N (at most N leaf switches or
    # blocks, 0 = no bound) for up to switch_wait seconds after its submission (resolved:
    # @max-time capped by max_switch_wait); --segment=N; --exclusive=topo (whole nodes and its
    # blocks to itself: ``exclusive`` is set too)
    switches: int = 0
    switch_wait: int = 0
    segment: int = 0
    exclusive_topo: bool = False

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
    licenses: tuple[tuple[str, int], ...] = ()  # the licenses it holds while it runs
    exclusive_topo: bool = False  # --exclusive=topo: its blocks are its own (topology.py)


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
    (``PendingJob.reservation``). See ``scheduler/reserved.py``."""

    name: str
    start: float
    end: float
    holdings: dict[str, tuple[int, int, int]] = field(default_factory=dict)


# --- association and QOS limits (scheduler/limits.py enforces them) ---------------------------

AssocKey = tuple[str, str]  # (account, user); user "" = the account itself


@dataclass(slots=True)
class Limits:
    """The limits sacctmgr sets on an association or a QOS; None / empty = no limit."""

    grp_tres: dict[str, int] = field(default_factory=dict)
    grp_tres_mins: dict[str, int] = field(default_factory=dict)
    grp_jobs: int | None = None
    grp_submit_jobs: int | None = None
    max_jobs: int | None = None
    max_submit_jobs: int | None = None
    max_tres_per_job: dict[str, int] = field(default_factory=dict)
    max_wall: int | None = None  # seconds
    # QOS only: per-user limits (MaxJobsPU, MaxSubmitPU, MaxTRESPU)
    max_jobs_per_user: int | None = None
    max_submit_per_user: int | None = None
    max_tres_per_user: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class AssocLimits:
    """One association of the tree with its own limits and its own GrpTRESMins usage
    (TRES-minutes in this budget period; the core sums subtrees)."""

    account: str
    user: str = ""
    parent: AssocKey | None = None  # None: under root (or root itself)
    limits: Limits = field(default_factory=Limits)
    tres_mins_used: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class QOSLimits:
    name: str
    limits: Limits = field(default_factory=Limits)
    deny_on_limit: bool = False


@dataclass(slots=True)
class LimitTable:
    assocs: dict[AssocKey, AssocLimits] = field(default_factory=dict)
    qos: dict[str, QOSLimits] = field(default_factory=dict)

    def chain(self, account: str, user: str) -> list[AssocKey]:
        """The job's association and its ancestors, nearest first (empty if unknown)."""
        key: AssocKey | None = (account, user) if (account, user) in self.assocs else (account, "")
        out: list[AssocKey] = []
        while key is not None and key in self.assocs and key not in out:
            out.append(key)
            key = self.assocs[key].parent
        return out

    def effective(self, chain: list[AssocKey], name: str) -> int | dict[str, int] | None:
        """A Max* limit as it applies to the first association of ``chain`` (inherited)."""
        return self.effective_at(chain, name)[1]

    def effective_at(self, chain: list[AssocKey], name: str
                     ) -> tuple[AssocKey | None, int | dict[str, int] | None]:
        """The association of ``chain`` a Max* limit comes from, and its value."""
        for key in chain:
            value = getattr(self.assocs[key].limits, name)
            if value is not None and value != {}:
                return key, value
        return None, None



# --- preemption (scheduler/preempt.py decides it) ---------------------------------------------

@dataclass(slots=True)
class PreemptPolicy:
    """What the daemon knows about who may preempt whom (from sacctmgr's QOS and associations)."""

    preempts: dict[str, frozenset[str]] = field(default_factory=dict)  # QOS -> its Preempt list
    exempt: frozenset[str] = frozenset()  # QOS with PreemptMode=OFF: never preempted
    guarantees: dict[str, dict[str, float]] = field(default_factory=dict)  # account -> TRES
    burst_qos: str = "burst"
    in_flight: frozenset[int] = frozenset()  # preemptors whose victims are still ending
    # requeued victim -> its preemptor, while that one is in flight: the victim waits for it
    held_back: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class Preemption:
    job_id: int  # the preemptor
    victims: list[int]
    cause: str  # QOS or GUARANTEE
    nodes: list[str] = field(default_factory=list)  # where it will run: held for it (promised)


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
    # advance reservations not yet ended (scheduler/reserved.py); empty: none
    reservations: list[ReservationView] = field(default_factory=list)
    # Whether the caller reads a reason and a displayed priority for every pending job
    # (Decisions.reasons, .priorities): the daemon does (squeue, scontrol show job). The
    # simulator reads only the starts and the plan, and on a long queue naming every waiting
    # job each cycle is most of its time; False lets the core leave out the reasons of jobs
    # the walk never looks at and every priority. Starts and plans are the same either way.
    explain: bool = True
    # The caller vouches that ``pending`` is a queue of plain arrivals: in arrival order
    # ((submit time, job id) rising), one nice value, no admin-set priority, one partition,
    # QOS and association priority for every job, no reservation named. The core then skips
    # the passes over the queue that would find this out every cycle
    # (priority.submit_ordered, cycle.by_submit, the reservation split); the decisions are the
    # same as without. The simulator sets it (its queue is a subsequence of a trace in
    # that order, its jobs all made alike by Machine.pending); the daemon does not.
    plain_arrivals: bool = False
    # the cluster's licenses ([[license]]: name -> count); empty: none configured
    licenses: dict[str, int] = field(default_factory=dict)
    # the last cycle's plan (Decisions.memo handed back; scheduler/replan.py): lets a policy
    # that reserves for every job (conservative backfill) plan again only what changed. Checked
    # against this snapshot before any of it is used; the decisions are the same without it.
    # The simulator hands it back; the daemon does not. Opaque to the caller (a
    # replan.PlanMemo, whose module builds on this one).
    memo: object | None = None
    # the previous cycle's Decisions.passed_over, fed back (scheduler/overtake.py): per waiting
    # job, the machine-seconds of later jobs that took a hole it fitted in; empty = none
    passed_over: dict[int, float] = field(default_factory=dict)
    # The recent GPU starts by shape, decayed (scheduler/fragment.StartHistory.snapshot, kept
    # by the caller): with the pending jobs' asks, the workload the fragmentation-aware
    # placement measures against (fragment.py). None: no measure, best fit. The daemon always
    # hands one (empty at first); the simulator only when asked (kiln sim --gpu-placement).
    gpu_history: tuple[tuple[Task, float], ...] | None = None


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
    depth: int = 0  # pending jobs the walk tested (sdiag)
    backfilled: int = 0  # of the starts, those behind a job that could not start (sdiag)
    memo: object | None = None  # for the next cycle's Snapshot.memo (scheduler/replan.py)
    passed_over: dict[int, float] = field(default_factory=dict)  # next Snapshot.passed_over


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
    from kiln.slurm.hostlist import expand

    return frozenset(expand(expr)) if expr else frozenset()


def job_licenses(job: Job) -> tuple[tuple[str, int], ...]:
    """A job's -L as (name, count) pairs (admission checked it; a record older than that
    check that does not parse asks for none)."""
    try:
        return tuple(licenses.parse(job.licenses).items())
    except licenses.LicenseError:
        return ()


def pending_from_job(job: Job, time_limit: int, qos_priority: int = 0,
                     partition_priority: int = 1, max_switch_wait: int = 300) -> PendingJob:
    """The core's view of a pending Job; ``time_limit`` already resolved by the caller, a
    ``--switches`` wait capped by the cluster's ``max_switch_wait`` (Slurm's)."""
    wait = job.switch_wait if job.switch_wait is not None else max_switch_wait
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
        shards_per_node=job.shards_per_node, mps_per_node=job.mps_per_node,
        exclusive=job.exclusive or job.exclusive_topo,
        switches=job.switches,
        switch_wait=min(wait, max_switch_wait) if job.switches else 0,
        segment=job.segment,
        exclusive_topo=job.exclusive_topo,
        features=frozenset(f for f in job.constraint.replace("|", "&").split("&") if f),
        nodelist=split_names(job.nodelist),
        exclude=split_names(job.exclude),
        time_limit=time_limit,
        submit_time=job.submit_time,
        nice=job.nice,
        qos_priority=qos_priority,
        partition_priority=partition_priority,
        admin_priority=job.admin_priority,
        reservation=job.reservation,
        licenses=job_licenses(job),
    )
