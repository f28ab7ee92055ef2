"""Builders of the values the tests feed kiln: one function per domain type, each with the
defaults most tests want and every field open to a keyword. A test module binds its own
clock (``now``) where a value needs one; the builders keep no clock of their own.

- ``gpu_list``, ``node_view``: the scheduler core's nodes (schedd/scheduler/snapshot.py)
- ``pending``, ``running``: its pending and running jobs; ``started``: the ids a cycle starts
- ``job``, ``node``: the daemon's own Job and Node (kiln/model.py); ``SCHEDBENCH``: the user
  of slurm-reference's transcripts
- ``sqlite_ledger``: a migrated SQLite ledger's URL
- ``handler_context``: what schedd's handlers are called with (schedd/lifecycle/context.py's
  ``Context``), over a real State on a SQLite ledger

Fixtures (the ledger on both backends, ``fake_schedd``) are in tests/unit/conftest.py."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.config import Config
from kiln.model import GPU, Job, JobState, Node, NodeAllocation
from schedd.domain.steps import StepTable
from schedd.ledger.migrate import upgrade
from schedd.ledger.store import Store
from schedd.lifecycle.victims import Tracker
from schedd.scheduler.snapshot import Decisions, NodeView, PendingJob, RunningJob
from schedd.state import State

MIN = 60


def gpu_list(node: str, count: int, *, model: str = "H100", memory_mb: int = 80_000,
         per_island: int = 0) -> list[GPU]:
    """``count`` GPUs of one node, uuids ``<node>-<index>``; ``per_island`` > 0 groups them into
    NVLink islands of that many (0: one island)."""
    return [GPU(i, f"{node}-{i}", model, memory_mb, island=i // per_island if per_island else 0)
            for i in range(count)]


def node_view(name: str = "n1", gpus: int = 8, *, cpus: int = 64, memory_mb: int = 512_000,
              gpu_type: str = "h100", model: str = "", gpu_memory_mb: int = 80_000,
              per_island: int = 0, **fields: Any) -> NodeView:
    """A schedulable node: by default 64 CPUs, 500 GiB and 8 H100s (80 GB) in one island."""
    return NodeView(name, cpus, memory_mb,
                    gpu_list(name, gpus, model=model or gpu_type.upper(),
                         memory_mb=gpu_memory_mb, per_island=per_island),
                    gpu_type, **fields)


def pending(job_id: int, gpus: int = 0, minutes: float = 60, name: str = "",
            submit: float = 0.0, nodes: int = 1, **fields: Any) -> PendingJob:
    """A pending job of ``nodes`` nodes with ``gpus`` GPUs each and a limit of ``minutes``,
    named ``j<id>`` and submitted at ``<id>`` (seconds) unless told; ``fields`` set any of
    PendingJob's fields, these included."""
    values: dict[str, Any] = {"name": name or f"j{job_id}", "num_nodes": nodes,
                              "gpus_per_node": gpus, "time_limit": int(minutes * MIN),
                              "submit_time": submit or job_id}
    return PendingJob(job_id, **(values | fields))


def running(job_id: int, node: str, gpu_ids: Iterable[int], *, start: float, end: float,
            cpus: int | None = None, memory_mb: int = 0, **fields: Any) -> RunningJob:
    """A job running on one node with these GPUs (and as many CPUs, unless told) from ``start``
    to its limit at ``end``."""
    ids = list(gpu_ids)
    return RunningJob(job_id, [NodeAllocation(node, len(ids) if cpus is None else cpus,
                                              memory_mb, ids)], start, end, **fields)


# the user, ids and account of slurm-reference's transcripts (the CLI's tests compare with them)
SCHEDBENCH: dict[str, Any] = {"user": "schedbench", "uid": 999, "gid": 995, "account": "physics"}


def job(job_id: int, state: JobState | str = JobState.PENDING, *, node: str = "",
        gpu_ids: Iterable[int] = (), cpus: int = 1, memory_mb: int = 0, **fields: Any) -> Job:
    """A Job in ``state``; with ``node``, placed there: its node list and batch host, and one
    allocation of ``cpus`` CPUs, ``memory_mb`` and these GPUs. ``fields`` set any of Job's
    fields, these included."""
    values: dict[str, Any] = {"id": job_id, "state": JobState(state)}
    if node:
        values |= {"node_list": node, "batch_host": node,
                   "allocation": [NodeAllocation(node, cpus, memory_mb, list(gpu_ids))]}
    return Job(**(values | fields))


def node(name: str = "n1", gpus: int = 8, *, cpus: int = 64, memory_mb: int = 512_000,
         model: str = "H100", gpu_memory_mb: int = 80_000, **fields: Any) -> Node:
    """A node as schedd keeps it: by default 64 CPUs, 500 GiB and 8 H100s (80 GB)."""
    return Node(name, cpus, memory_mb, gpu_list(name, gpus, model=model, memory_mb=gpu_memory_mb),
                **fields)


def started(decisions: Decisions) -> list[int]:
    """The ids of the jobs a cycle's decisions start, in their order."""
    return [s.job_id for s in decisions.starts]


@dataclass
class HandlerContext:
    """schedd/lifecycle/context.py's ``Context`` for calling handlers without the daemon: the clock is
    ``clock[0]`` (a test moves it), and each wake of the scheduler is recorded in ``wakes``."""

    state: State
    cfg: Config
    clock: list[float]
    agents: Any = None  # a test's recorder of what schedd tells the agents
    steps: StepTable = field(default_factory=StepTable)
    preemption: Tracker = field(default_factory=Tracker)
    planner: Any = None
    diag: Any = None
    offload: Any = None
    mail: Any = None  # a test's Outbox (lifecycle/mail.py), where one is looked at
    metrics: Any = None
    wakes: list[str] = field(default_factory=list)

    def now(self) -> float:
        return self.clock[0]

    def wake_scheduler(self) -> None:
        self.wakes.append("wake")

    def close(self) -> None:
        self.state.store.close()


def sqlite_ledger(tmp_path: Path, name: str = "kiln.db") -> str:
    """The URL of a SQLite ledger in ``tmp_path``, migrated to the head revision (both
    backends: tests/unit/conftest.py's ``ledger_url``)."""
    url = f"sqlite:///{tmp_path}/{name}"
    upgrade(url)
    return url


def handler_context(tmp_path: Path, now: float, *, nodes: Iterable[str] = (),
                    partitions: Iterable[str] = ("gpu",), accounts: bool = True,
                    **cfg: Any) -> HandlerContext:
    """A State over a migrated SQLite ledger in ``tmp_path`` (``cfg``: Config's fields), its
    accounts loaded (``accounts``), and the named nodes alive at ``now``: 8 CPUs, 1000 MB each,
    in ``partitions``. Close it (``close()``) when done."""
    url = sqlite_ledger(tmp_path)
    state = State(Config(home=tmp_path, db_url=url, **cfg), Store(url))
    if accounts:
        state.load_accounts(now)
    for name in nodes:
        state.nodes[name] = node(name, 0, cpus=8, memory_mb=1000, last_heartbeat=now,
                                 partitions=list(partitions))
    return HandlerContext(state, state.cfg, [now])
