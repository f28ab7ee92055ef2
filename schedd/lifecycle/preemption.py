"""Preemption, the daemon's side: carry out what ``scheduler/preempt.py`` decided.

A victim's life, once chosen:

1. **Notice, at once** (unlike Slurm 22.05, which stays silent until GraceTime ends): its
   ``--signal`` (``B:`` = the batch shell only), else SIGTERM, goes to its process group so it
   can checkpoint. The mark (``Job.preempt``: preemptor, deadline, mode, stamped with the
   run's generation) is committed, so a restarted schedd carries on.
2. **After GraceTime** (of the *victim's* QOS, as in Slurm): schedd tells its agent to terminate
   it as PREEMPTED: the usual SIGTERM, SIGKILL after KillWait, and the ``DUE TO PREEMPTION``
   banner. The agent is kept simple: schedd keeps the grace time itself.
3. **Its end** (``transitions.end_run``, through this module's judge and after-hook): recorded
   as PREEMPTED whatever the script did with the signal; then with PreemptMode REQUEUE (and a
   job that may be requeued) it goes back to PENDING with its id and submit time, restart
   count + 1; with CANCEL it stays PREEMPTED.

While a preemptor's victims are ending, and a moment after, it is *in flight*: planned first in
the walk, kept to the nodes its victims free (the core promises them to it: ``preempt.hold_for``),
not given more victims, and its requeued victims wait for it (``preempt.held_back``). A run
younger than ``preempt_exempt_time`` (Slurm's PreemptExemptTime) is nobody's victim.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kiln.config import Config
from kiln.model import Job, JobState, PreemptMark
from kiln.slurm.signals import notice_signal
from schedd.context import Context
from schedd.lifecycle.transitions import RunEnd, Verdict
from schedd.scheduler.snapshot import Preemption, PreemptPolicy, Snapshot
from schedd.state import RUNNING_STATES, State

log = logging.getLogger("schedd.preemption")

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


# --- acting ------------------------------------------------------------------------------------


def start(ctx: Context, tracker: Tracker, preemptions: list[Preemption], now: float) -> None:
    """Mark the victims, send each its notice, and terminate at once those without grace."""
    changes = []
    for p in preemptions:
        for victim_id in p.victims:
            job = ctx.state.jobs.get(victim_id)
            if job is None or job.state != JobState.RUNNING or victim_id in tracker.victims:
                continue
            qos = ctx.state.accounts.qos.get(job.qos)
            grace = max(qos.grace_time if qos else 0, 0)
            mode = mode_of(ctx.cfg, qos.preempt_mode if qos else "cluster")
            if mode != REQUEUE or not job.requeue:
                mode = CANCEL
            mark = PreemptMark(job.generation, p.job_id, now, now + grace, mode, p.cause)
            changes.append((job, {"preempt": mark}))
            tracker.victims[victim_id] = mark
            log.info("preempted JobId=%d (%s, GraceTime %d s) to reclaim resources for "
                     "JobId=%d (%s)", victim_id, mode, grace, p.job_id, p.cause)
    ctx.state.commit(changes)
    for job, _ in changes:
        signum, batch_only = notice_signal(job.signal)
        # the notice reaches the whole job (the batch shell's group and its steps), or with
        # --signal=B: the batch shell alone
        ctx.agents.signal(job, signum, batch_only, full=not batch_only)
    tick(ctx, tracker, now)


def tick(ctx: Context, tracker: Tracker, now: float) -> None:
    """Terminate victims whose grace time is over (again every RESEND seconds until they end:
    a message to an agent may be lost)."""
    for victim_id, mark in list(tracker.victims.items()):
        if now < mark.deadline:
            continue
        job = ctx.state.jobs.get(victim_id)
        if job is None or job.state not in RUNNING_STATES:
            forget(tracker, victim_id, now)
            continue
        if now - tracker.told.get(victim_id, -RESEND) >= RESEND:
            tracker.told[victim_id] = now
            ctx.agents.terminate(job, JobState.PREEMPTED.value)


def forget(tracker: Tracker, victim_id: int, now: float) -> None:
    mark = tracker.victims.pop(victim_id, None)
    tracker.told.pop(victim_id, None)
    if mark is not None:
        tracker.settled[mark.by] = now


# --- a victim's end (judged in transitions.end_run) ------------------------------------------------


def mark_of(job: Job) -> PreemptMark | None:
    """The job's victim mark, if this run (launch generation) of it is a victim."""
    mark = job.preempt
    return mark if mark is not None and mark.generation == job.generation else None


def judge_preempted(job: Job, end: RunEnd, verdict: Verdict) -> None:
    """A marked victim ends PREEMPTED however its script took the notice; with PreemptMode
    REQUEUE it goes back to the queue."""
    mark = job.preempt
    if verdict.final or mark is None or mark.generation != end.generation:
        return
    verdict.state = JobState.PREEMPTED
    verdict.requeue = mark.mode == REQUEUE and job.requeue
    verdict.why = f"preempted for job {mark.by}"
    verdict.final = True


def release(ctx: Context, job: Job, verdict: Verdict, now: float) -> None:
    """A victim's end frees its preemptor (in flight a moment more: SETTLE); a requeued
    victim waits for that preemptor meanwhile (``preempt.held_back``)."""
    mark = ctx.preemption.victims.get(job.id)
    forget(ctx.preemption, job.id, now)
    if mark is not None and verdict.requeue:
        ctx.preemption.requeued[job.id] = mark.by
