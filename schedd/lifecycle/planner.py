"""The one place a scheduling snapshot is built: for the cycle and for ``sbatch --test-only``.

A snapshot is the core's whole input (``scheduler/snapshot.py``): schedd's state as
``State.snapshot`` sees it, what preemption needs (who may preempt whom, each running job's
checkpoint age and restart cost, the victims already ending), and the promises of the last
cycle (expected starts and their nodes: a job shown a start in ``squeue --start`` is planned
first, on its nodes, so a newcomer — or a ``--test-only`` probe — never takes its slot).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from schedd.config import Config
from schedd.lifecycle import preemption
from schedd.lifecycle.agents import AgentRegistry
from schedd.scheduler.cycle import schedule
from schedd.scheduler.snapshot import Decisions, PendingJob, Snapshot
from schedd.state import State

log = logging.getLogger("schedd.planner")


class Planner:
    def __init__(self, cfg: Config, state: State, agents: AgentRegistry,
                 tracker: preemption.Tracker):
        self.cfg = cfg
        self.state = state
        self.agents = agents
        self.tracker = tracker
        self.promised: dict[int, float] = {}
        self.promised_nodes: dict[int, list[str]] = {}

    def snapshot(self, now: float, probes: Iterable[PendingJob] = ()) -> tuple[Snapshot,
                                                                              dict[int, str]]:
        """The core's input now (plus ``probes``: jobs not submitted, for --test-only), and
        the reasons of the pending jobs it must not consider."""
        snapshot, blocked = self.state.snapshot(now)
        snapshot.pending.extend(probes)
        preemption.annotate(snapshot, self.cfg, self.state, self.agents.checkpoints,
                            self.tracker, now)
        pending = {p.job_id for p in snapshot.pending}
        snapshot.promised = {j: t for j, t in self.promised.items() if j in pending}
        snapshot.promised_nodes = {j: n for j, n in self.promised_nodes.items() if j in pending}
        return snapshot, blocked

    def decide(self, snapshot: Snapshot) -> Decisions:
        """Run the core on a snapshot (nothing remembered: a probe's plan promises nothing)."""
        return schedule(snapshot, self.cfg.scheduler)

    def remember(self, decisions: Decisions) -> None:
        """The cycle's plan becomes the promises the next snapshot carries."""
        self.promised = decisions.expected_start
        self.promised_nodes = decisions.reserved_nodes
