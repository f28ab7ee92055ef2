"""Job steps (srun inside an allocation): where a step's tasks go, and the steps that run now.

``plan`` lays a step's tasks over the job's allocation the way Slurm's default ``block``
distribution does (fill each node's share before the next, ranks in node order) and picks each
node's GPUs from what the job holds there. ``StepTable`` is schedd's in-memory record of the
steps still running: which nodes have yet to report, each task's exit, the step's verdict
(the worst task's) and its forwarded output not yet read by srun (schedd.stepoutput). The
ledger row (``job_steps``) is written by the handler; this module is pure and testable alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.model import Job, NodeAllocation
from kiln.slurm.hostlist import compress, expand
from kiln.slurm.stats import STAT_CPU_SYSTEM, STAT_CPU_USER
from schedd.domain.jobenv import job_ntasks
from schedd.domain.stepoutput import StepOutput

# Slurm's words for a step that ended badly, most telling first.
_STATE_RANK = {"NODE_FAIL": 5, "TIMEOUT": 4, "CANCELLED": 3, "OUT_OF_MEMORY": 2, "FAILED": 1,
               "COMPLETED": 0}


class StepError(Exception):
    """A step request that cannot be met; the message is Slurm's reason text."""


@dataclass(frozen=True, slots=True)
class StepShape:
    """What srun asked for; 0 means 'not given' (the job's own value applies)."""

    ntasks: int = 0
    nodes: int = 0
    ntasks_per_node: int = 0
    cpus_per_task: int = 0
    gpus: int = 0
    gpus_per_node: int = 0
    gpus_per_task: int = 0


@dataclass(frozen=True, slots=True)
class NodeShare:
    """One node's part of a step: its index in the step, its ranks, CPUs and GPUs."""

    node: str
    index: int
    procids: tuple[int, ...]
    cpus: int
    gpus: tuple[int, ...]


def in_nodelist_order(allocation: list[NodeAllocation]) -> list[NodeAllocation]:
    """The allocation in SLURM_JOB_NODELIST's order (placement lists nodes best fit first).

    Slurm runs the batch script on the first node of the list and numbers nodes (SLURM_NODEID)
    and ranks in that order; launchers rely on it (rank 0 on the first host of
    ``scontrol show hostnames``, e.g. PyTorch's MASTER_ADDR)."""
    return placed(allocation)[0]


def placed(allocation: list[NodeAllocation]) -> tuple[list[NodeAllocation], str]:
    """The allocation in SLURM_JOB_NODELIST's order and that node list (``gpu[1-3]``), from one
    compression of the node names: what a start records and launches by."""
    nodes = compress([a.node for a in allocation])
    order = {name: i for i, name in enumerate(expand(nodes))}
    return sorted(allocation, key=lambda a: order.get(a.node, len(order))), nodes


def plan(job: Job, shape: StepShape) -> list[NodeShare]:
    """Lay the step's tasks over the job's nodes (block distribution); raises StepError."""
    alloc = in_nodelist_order(job.allocation)
    if not alloc:
        raise StepError("Job has no allocation")
    for name in ("ntasks", "nodes", "ntasks_per_node", "cpus_per_task", "gpus", "gpus_per_node",
                 "gpus_per_task"):
        if getattr(shape, name) < 0:
            raise StepError(f"Invalid {name.replace('_', '-')} value")
    if shape.nodes > len(alloc):
        raise StepError(f"Only allocated {len(alloc)} nodes asked for {shape.nodes}")
    counts = _task_counts(job, shape, len(alloc))
    shares, first = [], 0
    for index, count in enumerate(counts):
        a = alloc[index]
        gpus = _node_gpus(a.devices, shape, count, len(counts))  # its shards' GPUs too
        shares.append(NodeShare(a.node, index, tuple(range(first, first + count)), a.cpus,
                                tuple(gpus)))
        first += count
    return shares


def _task_counts(job: Job, shape: StepShape, available: int) -> list[int]:
    """Tasks per node, for the first nodes of the allocation."""
    if shape.ntasks_per_node and not shape.ntasks:
        nodes = shape.nodes or available
        return [shape.ntasks_per_node] * nodes
    ntasks = shape.ntasks or _default_ntasks(job, shape.nodes or available)
    nodes = min(shape.nodes or available, ntasks)
    if shape.ntasks_per_node:
        nodes = max(nodes, min(available, -(-ntasks // shape.ntasks_per_node)))
        if shape.ntasks_per_node * nodes < ntasks:
            raise StepError(f"Requested {ntasks} tasks at {shape.ntasks_per_node} per node "
                            f"need more than the {available} allocated nodes")
        counts, left = [], ntasks
        for _ in range(nodes):
            counts.append(min(shape.ntasks_per_node, left))
            left -= counts[-1]
        return [c for c in counts if c] or [ntasks]
    base, extra = divmod(ntasks, nodes)
    return [base + (1 if i < extra else 0) for i in range(nodes)]


def _default_ntasks(job: Job, nodes: int) -> int:
    """srun without -n: the job's task count, or one task per node when the job named none
    (``sbatch -N2 --wrap 'srun hostname'`` prints two host names)."""
    if job.num_tasks <= 1 and not job.ntasks_per_node:
        return nodes
    return job_ntasks(job)


def _node_gpus(held: list[int], shape: StepShape, tasks: int, nodes: int) -> list[int]:
    if shape.gpus_per_task:
        want = shape.gpus_per_task * tasks
    elif shape.gpus_per_node:
        want = shape.gpus_per_node
    elif shape.gpus:
        want = -(-shape.gpus // nodes)
    else:
        return held
    if want > len(held):
        raise StepError(f"Requested {want} GPUs on a node where the job holds {len(held)}")
    return held[:want]


@dataclass(slots=True)
class TaskExit:
    procid: int
    node: str
    exit_code: int
    exit_signal: int


@dataclass(slots=True)
class LiveStep:
    """A step schedd has launched and not yet forgotten."""

    job_id: int
    step_id: int
    nodes: list[str]
    num_tasks: int
    start_time: float
    waiting: set[str] = field(default_factory=set)  # nodes that have not reported the end
    exits: dict[int, TaskExit] = field(default_factory=dict)
    states: list[str] = field(default_factory=list)  # as the nodes reported them
    end_time: float = 0.0
    cpu: list[float] | None = None  # [user, system] seconds, summed over the nodes that said
    output: StepOutput = field(default_factory=StepOutput)  # forwarded, not yet read by srun
    uid: int = -1  # the job's owner: who may attach to (sattach) or type into the step
    terminal: str = ""  # srun --pty: the node whose task 0 runs under a pseudo-terminal

    @property
    def stats(self) -> dict[str, float]:
        """The step's ``stats`` for the ledger (sacct's TotalCPU); {} when no node said."""
        if self.cpu is None:
            return {}
        return {STAT_CPU_USER: round(self.cpu[0], 3), STAT_CPU_SYSTEM: round(self.cpu[1], 3)}

    @property
    def done(self) -> bool:
        return not self.waiting

    @property
    def exit_code(self) -> int:
        return max((e.exit_code for e in self.exits.values()), default=0)

    @property
    def exit_signal(self) -> int:
        return next((e.exit_signal for e in sorted(self.exits.values(), key=lambda e: e.procid)
                     if e.exit_signal), 0)

    @property
    def state(self) -> str:
        if not self.done:
            return "RUNNING"
        worst = max(self.states, key=lambda s: _STATE_RANK.get(s, 1), default="COMPLETED")
        if worst == "COMPLETED" and (self.exit_code or self.exit_signal):
            return "FAILED"
        return worst

    def node_ended(self, node: str, state: str, exits: list[TaskExit], now: float,
                   cpu: tuple[float, float] | None = None) -> bool:
        """Record one node's report; True when it was the last one awaited."""
        if node not in self.waiting:
            return False
        self.waiting.discard(node)
        self.states.append(state if state in _STATE_RANK else "FAILED")
        for e in exits:
            self.exits[e.procid] = e
        if cpu is not None:
            before = self.cpu or [0.0, 0.0]
            self.cpu = [before[0] + cpu[0], before[1] + cpu[1]]
        if self.done:
            self.end_time = now
            return True
        return False

    def abandon(self, state: str, now: float) -> None:
        """The job ended under the step: whatever has not reported ends as ``state``."""
        if self.waiting:
            self.waiting.clear()
            self.states.append(state)
            self.end_time = now


class StepTable:
    """The steps of running jobs, keyed (job id, step id), and the next step id of each job."""

    def __init__(self) -> None:
        self.steps: dict[tuple[int, int], LiveStep] = {}
        self._next: dict[int, int] = {}

    def next_id(self, job_id: int, stored_max: int) -> int:
        """A fresh step id (0, 1, ...); ``stored_max`` is the ledger's highest, for a job that
        schedd first sees steps of after a restart."""
        step_id = max(self._next.get(job_id, 0), stored_max + 1)
        self._next[job_id] = step_id + 1
        return step_id

    def known(self, job_id: int) -> bool:
        return job_id in self._next

    def add(self, step: LiveStep) -> None:
        self.steps[(step.job_id, step.step_id)] = step

    def get(self, job_id: int, step_id: int) -> LiveStep | None:
        return self.steps.get((job_id, step_id))

    def of_job(self, job_id: int) -> list[LiveStep]:
        return [s for (j, _), s in self.steps.items() if j == job_id]

    def forget(self, job_id: int, step_id: int | None = None) -> None:
        """Drop one step, or (step_id None) every step of a job and its id counter."""
        if step_id is not None:
            self.steps.pop((job_id, step_id), None)
            return
        for key in [k for k in self.steps if k[0] == job_id]:
            del self.steps[key]
        self._next.pop(job_id, None)
