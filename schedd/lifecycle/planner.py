"""The one place a scheduling snapshot is built: for the cycle and for ``sbatch --test-only``.

A snapshot is the core's whole input (``scheduler/snapshot.py``): schedd's state as
``schedd/snapshots.py`` builds it, what preemption needs (who may preempt whom, each running job's
checkpoint age and restart cost, the victims already ending), and the promises of the last
cycle (expected starts and their nodes: a job shown a start in ``squeue --start`` is planned
first, on its nodes, so a newcomer — or a ``--test-only`` probe — never takes its slot).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from kiln.config import Config, SchedulerConfig
from schedd import snapshots
from schedd.lifecycle import victims
from schedd.lifecycle.agents import AgentRegistry
from schedd.scheduler import forecast, fragment, runtimes
from schedd.scheduler.cycle import schedule
from schedd.scheduler.snapshot import Decisions, PendingJob, Snapshot
from schedd.state import State

log = logging.getLogger("schedd.planner")


@dataclass(frozen=True, slots=True)
class Quantiles:
    """A job's published p50 and p90 start (the plan's, stretched by how recent waits
    turned out: ``runtimes.LeadCalibration``) and the plan's own, which the record checks."""

    p50: float
    p90: float
    plan: forecast.Forecast


@dataclass(frozen=True, slots=True)
class Frozen:
    """The planner's pure part over one snapshot, for the worker thread (schedd/offload.py):
    everything the plans read from state is here, taken on the loop — the policy, the
    predicted run times, a copy of the lead calibration (whose reads update its caches) — so
    planning never touches state while the loop changes it."""

    config: SchedulerConfig
    predictions: forecast.Predictions
    leads: runtimes.LeadCalibration

    def quantiles(self, snapshot: Snapshot,
                  wanted: Collection[int] | None = None) -> dict[int, Quantiles]:
        """The p50 and p90 start of the pending jobs (``wanted`` only, when given): the core
        re-run under predicted run times (``scheduler/forecast.py``), then calibrated."""
        plans = forecast.forecasts(snapshot, self.config, self.predictions, wanted)
        out = {}
        for job_id, plan in plans.items():
            if plan.p50 is None or plan.p90 is None:
                continue
            p50, p90 = self.leads.stretch(snapshot.now, plan.p50, plan.p90)
            out[job_id] = Quantiles(p50, p90, plan)
        return out

    def p50_start(self, snapshot: Snapshot, job_id: int) -> float | None:
        """One job's published p50 start alone (the shape advisor's figure)."""
        plan = forecast.p50_start(snapshot, self.config, self.predictions, job_id)
        return None if plan is None else self.leads.stretch(snapshot.now, plan, plan)[0]

    def decide(self, snapshot: Snapshot) -> Decisions:
        """Run the core on a snapshot (nothing remembered: a probe's plan promises nothing)."""
        return schedule(snapshot, self.config)


class Planner:
    def __init__(self, cfg: Config, state: State, agents: AgentRegistry,
                 tracker: victims.Tracker):
        self.cfg = cfg
        self.state = state
        self.agents = agents
        self.tracker = tracker
        self.promised: dict[int, float] = {}
        self.promised_nodes: dict[int, list[str]] = {}
        # per waiting job, the later work that passed it over in the hole (bf_overtake,
        # scheduler/overtake.py): the core's count, handed back to it each cycle
        self.passed_over: dict[int, float] = {}
        # pending jobs a request in progress is ending (a big scancel between its slices:
        # transitions.cancel_in_slices): never offered to the core meanwhile
        self.withheld: set[int] = set()
        # the recent starts by shape, decayed (scheduler/fragment.py): with the pending
        # jobs, the workload the core's GPU placement measures fragmentation against
        self.history = fragment.StartHistory()

    def snapshot(self, now: float, probes: Iterable[PendingJob] = ()) -> tuple[Snapshot,
                                                                              dict[int, str]]:
        """The core's input now (plus ``probes``: jobs not submitted, for --test-only), and
        the reasons of the pending jobs it must not consider."""
        snapshot, blocked = snapshots.build(self.state, now)
        if self.withheld:
            snapshot.pending = [p for p in snapshot.pending if p.job_id not in self.withheld]
        snapshot.pending.extend(probes)
        victims.annotate(snapshot, self.cfg, self.state, self.agents.checkpoints,
                            self.tracker, now)
        pending = {p.job_id for p in snapshot.pending}
        snapshot.gpu_history = self.history.snapshot(now)
        snapshot.promised = {j: t for j, t in self.promised.items() if j in pending}
        snapshot.promised_nodes = {j: n for j, n in self.promised_nodes.items() if j in pending}
        if self.passed_over:
            snapshot.passed_over = {j: w for j, w in self.passed_over.items() if j in pending}
        if self.cfg.scheduler.predict_runtime:  # the cycle plans holes on median run times
            explain = snapshot.explain
            snapshot = forecast.under(snapshot, self.predictions(snapshot), forecast.P50)
            snapshot.explain = explain
        return snapshot, blocked

    def predictions(self, snapshot: Snapshot) -> forecast.Predictions:
        """Run times predicted from the ledger's history for the snapshot's jobs."""
        requests = {j.id: self.state.pending_view(j) for j in self.state.running()}
        return runtimes.predictions(self.state.runtimes, snapshot, requests)

    def frozen(self, snapshot: Snapshot) -> Frozen:
        """What planning on ``snapshot`` reads, copied now (on the loop) for another thread."""
        return Frozen(self.cfg.scheduler, self.predictions(snapshot), self.state.leads.copy())

    def decide(self, snapshot: Snapshot) -> Decisions:
        """Run the core on a snapshot (nothing remembered: a probe's plan promises nothing)."""
        return schedule(snapshot, self.cfg.scheduler)

    def remember(self, decisions: Decisions, now: float | None = None) -> None:
        """The cycle's plan becomes the promises the next snapshot carries, and its count of
        overtaking the next snapshot's; its starts (made at ``now``) join the start history."""
        if now is not None:
            for start in decisions.starts:
                self.history.record(start.allocation, now)
        self.promised = decisions.expected_start
        self.promised_nodes = decisions.reserved_nodes
        self.passed_over = decisions.passed_over
