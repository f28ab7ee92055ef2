"""Preemption's victims, as the cycle sees them: ``Tracker`` (the victims still in GraceTime
and the preemptors waiting for them; memory only, rebuilt from the ledger's marks at start),
the policy (who may preempt whom) and what the cycle's snapshot is told of each running job
(``annotate``). Acting on the core's preemptions is ``lifecycle/preemption.py``'s; this part
imports no transition, so that the services object (``schedd/context.py``) and the planner
can name it without a circle."""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.config import Config
from kiln.model import Job, PreemptMark
from schedd.scheduler.snapshot import PreemptPolicy, Snapshot
from schedd.state import State

SETTLE = 5.0  # seconds a preemptor stays in flight after its last victim ended
RESEND = 5.0  # seconds between terminate messages to a victim that has not ended
REQUEUE, CANCEL, OFF = "requeue", "cancel", "off"


@dataclass(slots=True)
class Tracker:
    """The victims still running and the preemptors waiting for them (memory only; the marks
    in the ledger rebuild it at start-up)."""

    victims: dict[int, PreemptMark] = field(default_factory=dict)  # job id -> its mark
    told: dict[int, float] = field(default_factory=dict)  # victim -> when terminate went out
    settled: dict[int, float] = field(default_factory=dict)  # preemptor -> last victim's end
    requeued: dict[int, int] = field(default_factory=dict)  # requeued victim -> its preemptor

    @classmethod
    def from_state(cls, state: State) -> Tracker:
        tracker = cls()
        for job in state.running():
            mark = mark_of(job)
            if mark is not None:
                tracker.victims[job.id] = mark
        return tracker

    def in_flight(self, now: float) -> frozenset[int]:
        for by, when in list(self.settled.items()):
            if now - when > SETTLE:
                del self.settled[by]
        flying = frozenset({m.by for m in self.victims.values()} | set(self.settled))
        for victim, by in list(self.requeued.items()):
            if by not in flying:
                del self.requeued[victim]
        return flying

    def held_back(self, in_flight: frozenset[int]) -> dict[int, int]:
        """Requeued victims whose preemptor is still in flight: they wait for it."""
        return {v: by for v, by in self.requeued.items() if by in in_flight}


# --- the snapshot ------------------------------------------------------------------------------


def policy(cfg: Config, state: State, tracker: Tracker, now: float) -> PreemptPolicy | None:
    """Who may preempt whom, from sacctmgr's QOS (Preempt, PreemptMode) and guarantees; None
    when nobody may (the cycle then skips preemption altogether)."""
    qos = state.accounts.qos
    preempts = {name: frozenset(q.preempt) for name, q in qos.items() if q.preempt}
    guarantees = {a.account: dict(a.guarantee) for a in state.accounts.accounts()
                  if a.guarantee}
    if not preempts and not guarantees:
        return None
    exempt = frozenset(name for name, q in qos.items() if mode_of(cfg, q.preempt_mode) == OFF)
    in_flight = tracker.in_flight(now)
    return PreemptPolicy(preempts=preempts, exempt=exempt, guarantees=guarantees,
                         burst_qos=cfg.scheduler.burst_qos, in_flight=in_flight,
                         held_back=tracker.held_back(in_flight))


def annotate(snapshot: Snapshot, cfg: Config, state: State, checkpoints: dict[int, float],
             tracker: Tracker, now: float) -> None:
    """Add what preemption needs to the cycle's snapshot: the policy, and per running job its
    checkpoint age (from its agent's reports), restart cost and whether it is already ending."""
    snapshot.preemption = policy(cfg, state, tracker, now)
    if snapshot.preemption is None:
        return
    for run in snapshot.running:
        job = state.jobs.get(run.job_id)
        if job is None:
            continue
        seen = checkpoints.get(run.job_id)
        run.checkpoint_age = None if seen is None else max(now - seen, 0.0)
        run.restart_cost = job.restart_cost
        mark = tracker.victims.get(run.job_id)
        run.preempting = mark is not None
        if mark is not None:  # planned to end with its grace: the walk then reserves what it
            # frees for its preemptor, and no other job (its requeued fellow victims above
            # all) may take it meanwhile
            end = max(mark.deadline, now) + cfg.kill_wait
            run.end_time = min(run.end_time, end)
            if run.predicted_end is not None:
                run.predicted_end = min(run.predicted_end, end)


def mode_of(cfg: Config, qos_mode: str) -> str:
    """The PreemptMode that applies: the QOS's, else the cluster's; kiln does not suspend
    jobs (gang scheduling), so SUSPEND is taken as REQUEUE."""
    mode = (qos_mode or "cluster").lower()
    if mode == "cluster":
        mode = (cfg.scheduler.preempt_mode or REQUEUE).lower()
    return REQUEUE if mode == "suspend" else mode


def mark_of(job: Job) -> PreemptMark | None:
    """The job's victim mark, if this run (launch generation) of it is a victim."""
    mark = job.preempt
    return mark if mark is not None and mark.generation == job.generation else None
