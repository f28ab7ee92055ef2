"""Advance reservations (``scontrol create|update|delete|show reservation``): the model, how
their nodes and GPUs are chosen, and their rows in the ledger.

A reservation sets resources aside for some users or accounts during a window. Its resources
are settled when it is created (or updated): whole nodes (``Nodes=``, ``NodeCnt=``) or a GPU
count (``TRES=gres/gpu=N``, which kiln accepts although Slurm 22.05 refuses it) resolved to
``holdings``, node -> [CPUs, memory MiB, GPUs]. The scheduler core sees them as
``ReservationView`` (blocked time for everyone else, the only capacity of the jobs that name the
reservation with ``--reservation``; see ``schedd/scheduler/reserved.py``).

Flags: ``MAINT`` (nodes may be taken whatever their state, e.g. drained for maintenance) and
``IGNORE_JOBS`` (running jobs do not make nodes busy). Without
``IGNORE_JOBS`` a node is busy when a running job would still hold it at the start of the
window, or when another reservation holds it at an overlapping time.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kiln.model import Job, Node
from schedd.scheduler.snapshot import ReservationView

FLAGS = ("MAINT", "IGNORE_JOBS")

INVALID_USER = "Invalid user id"
INVALID_ACCOUNT = "Invalid account or account/partition combination specified"
INVALID_RESERVATION = "Requested reservation is invalid"
ACCESS_DENIED = "Access denied to requested reservation"
DUPLICATE = "Duplicate reservation name"
BUSY_NODES = "Requested nodes are busy"
NODE_CONFIG = "Requested node configuration is not available"
INVALID_NODE = "Invalid node name specified"
INVALID_TIME = "Invalid time specification"
NO_MEMBERS = "Either Users or Accounts must be specified"
IN_USE = "Reservation request busy"


class ReservationError(Exception):
    """A refused create/update/delete; the message is Slurm's one line."""


@dataclass(slots=True)
class Reservation:
    name: str
    start_time: float
    end_time: float
    nodes: list[str] = field(default_factory=list)
    gpus: int = 0  # TRES=gres/gpu=N; 0 = whole nodes
    holdings: dict[str, list[int]] = field(default_factory=dict)  # node -> [cpus, mem, gpus]
    users: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    partition: str = ""
    created_by: int = 0
    created_at: float = 0.0

    def admits(self, user: str, account: str) -> bool:
        """Whether a job of ``user`` under ``account`` may use the reservation."""
        return user in self.users or account in self.accounts

    def active(self, now: float) -> bool:
        return self.start_time <= now < self.end_time

    def view(self) -> ReservationView:
        return ReservationView(self.name, self.start_time, self.end_time,
                               {n: (h[0], h[1], h[2]) for n, h in self.holdings.items()})

    def to_row(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ROW_FIELDS}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Reservation:
        kw = {name: row[name] for name in ROW_FIELDS if name in row}
        for name in ("nodes", "users", "accounts", "flags"):
            kw[name] = list(kw.get(name) or [])
        kw["holdings"] = {n: [int(x) for x in h] for n, h in (kw.get("holdings") or {}).items()}
        return cls(**kw)

    def to_wire(self, now: float) -> dict[str, Any]:
        d = self.to_row()
        d["state"] = "ACTIVE" if self.active(now) else "INACTIVE"
        d["cpus"] = sum(h[0] for h in self.holdings.values())
        d["gpu_count"] = sum(h[2] for h in self.holdings.values())
        return d


ROW_FIELDS = ("name", "start_time", "end_time", "nodes", "gpus", "holdings", "users",
              "accounts", "flags", "partition", "created_by", "created_at")


@dataclass(slots=True)
class Request:
    """What scontrol asked for, already typed (times in POSIX seconds)."""

    name: str = ""
    start_time: float | None = None
    end_time: float | None = None
    duration: int | None = None  # seconds
    nodes: list[str] = field(default_factory=list)
    node_cnt: int = 0
    gpus: int = 0
    users: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    partition: str = ""


def edit_members(members: list[str], add: list[str], remove: list[str], kind: str,
                 name: str) -> list[str]:
    """scontrol's ``Users+=``/``Users-=`` (and Accounts'): ``members`` with ``add`` appended
    (once each) and ``remove`` taken out. Removing a name that is not a member is an error: it
    is more likely a typo than a wish."""
    missing = [m for m in remove if m not in members]
    if missing:
        raise ReservationError(f"{kind} {missing[0]} is not in reservation {name}")
    kept = [m for m in members if m not in remove]
    return kept + [m for m in dict.fromkeys(add) if m not in kept]


def check_members(req: Request, known_accounts: Iterable[str]) -> None:
    if not req.users and not req.accounts:
        raise ReservationError(NO_MEMBERS)
    for user in req.users:
        try:
            pwd.getpwnam(user)
        except KeyError:
            raise ReservationError(INVALID_USER) from None
    known = set(known_accounts)
    if any(a not in known for a in req.accounts):
        raise ReservationError(INVALID_ACCOUNT)
    bad = [f for f in req.flags if f not in FLAGS]
    if bad:
        raise ReservationError(f"Invalid flag: {bad[0]} (kiln knows {', '.join(FLAGS)})")


def window(req: Request, now: float) -> tuple[float, float]:
    """Start and end: StartTime (default now) and EndTime or Duration."""
    start = now if req.start_time is None else req.start_time
    if req.end_time is not None:
        end = req.end_time
    elif req.duration is not None:
        end = start + req.duration
    else:
        raise ReservationError("Duration or EndTime must be specified")
    if end <= start or end <= now:
        raise ReservationError(INVALID_TIME)
    return start, end


class Planner:
    """Chooses a reservation's nodes and GPUs from what is free during its window."""

    def __init__(self, nodes: dict[str, Node], running: Iterable[Job],
                 reservations: Iterable[Reservation], job_end: Any) -> None:
        self.nodes = nodes
        self.running = list(running)
        self.others = list(reservations)
        self.job_end = job_end  # Job -> planned end (start + limit)

    def used(self, node: Node, start: float, end: float, ignore_jobs: bool,
             name: str) -> list[int]:
        """CPUs, memory and GPUs of ``node`` not free during ``[start, end)``."""
        used = [0, 0, 0]
        if not ignore_jobs:
            for job in self.running:
                if job.reservation == name or self.job_end(job) <= start:
                    continue
                for a in job.allocation:
                    if a.node == node.name:
                        used[0] += a.cpus
                        used[1] += a.memory_mb
                        used[2] += len(a.gpus)
        for r in self.others:
            if r.name != name and r.start_time < end and start < r.end_time:
                h = r.holdings.get(node.name)
                if h:
                    used = [u + x for u, x in zip(used, h, strict=True)]
        return used

    def plan(self, req: Request, start: float, end: float, name: str) -> dict[str, list[int]]:
        maint = "MAINT" in req.flags
        ignore = "IGNORE_JOBS" in req.flags
        if req.nodes:
            unknown = [n for n in req.nodes if n not in self.nodes]
            if unknown:
                raise ReservationError(INVALID_NODE)
            pool = [self.nodes[n] for n in req.nodes]
        else:
            pool = [n for n in sorted(self.nodes.values(), key=lambda n: n.name)
                    if not req.partition or req.partition in n.partitions]
        if not maint:
            usable = [n for n in pool if n.state.value == "IDLE"]
            if req.nodes and len(usable) < len(pool):
                raise ReservationError(NODE_CONFIG)
            pool = usable
        if req.gpus:
            return self._gpus(pool, req.gpus, start, end, ignore, name)
        count = req.node_cnt or len(req.nodes)
        if count <= 0:
            raise ReservationError("Nodes, NodeCnt or TRES=gres/gpu=N must be specified")
        if len(pool) < count:
            raise ReservationError(NODE_CONFIG)
        free = [n for n in pool if not any(self.used(n, start, end, ignore, name))]
        if req.nodes and len(free) < len(pool):
            raise ReservationError(BUSY_NODES)
        if len(free) < count:
            raise ReservationError(BUSY_NODES)
        return {n.name: [n.cpus, n.memory_mb, len(n.gpus)] for n in free[:count]}

    def _gpus(self, pool: list[Node], want: int, start: float, end: float, ignore: bool,
              name: str) -> dict[str, list[int]]:
        """Fewest nodes first: the nodes with the most GPUs free during the window."""
        if sum(len(n.gpus) for n in pool) < want:
            raise ReservationError(NODE_CONFIG)
        free = []
        for n in pool:
            used = self.used(n, start, end, ignore, name)
            gpus = len(n.gpus) - used[2]
            if gpus > 0:
                free.append((-gpus, n.name, n, used))
        free.sort()
        out: dict[str, list[int]] = {}
        need = want
        for neg, _name, n, used in free:
            take = min(-neg, need)
            cpus = min(n.cpus * take // len(n.gpus), n.cpus - used[0])
            mem = min(n.memory_mb * take // len(n.gpus), n.memory_mb - used[1])
            out[n.name] = [max(cpus, 1), max(mem, 0), take]
            need -= take
            if need == 0:
                return out
        raise ReservationError(BUSY_NODES)


def next_name(user: str, taken: Iterable[str]) -> str:
    """Slurm names an unnamed reservation ``<user>_<n>``."""
    names = set(taken)
    n = 1
    while f"{user}_{n}" in names:
        n += 1
    return f"{user}_{n}"
