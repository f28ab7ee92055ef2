"""Preemption, the daemon's side: carry out what ``scheduler/preempt.py`` decided.

A victim's life, once chosen:

1. **Notice, at once** (unlike Slurm 22.05, which stays silent until GraceTime ends): its
   ``--signal`` (``B:`` = the batch shell only), else SIGTERM, goes to its process group so it
   can checkpoint. The mark (``Job.preempt``: preemptor, deadline, mode, stamped with the
   run's generation; ``choose``) is committed with the cycle's starts, so a restarted schedd
   carries on, and the notice is sent after that commit (``transitions.start_runs``).
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

from kiln.model import Job, JobState, PreemptMark
from schedd.lifecycle.context import Context
from schedd.lifecycle.transitions import RunEnd, Verdict
from schedd.lifecycle.victims import CANCEL, REQUEUE, RESEND, Tracker, mode_of
from schedd.scheduler.snapshot import Preemption
from schedd.state import RUNNING_STATES

log = logging.getLogger("schedd.preemption")

# --- acting ------------------------------------------------------------------------------------


def choose(ctx: Context, tracker: Tracker, preemptions: list[Preemption],
           now: float) -> list[tuple[Job, PreemptMark]]:
    """The victims' marks for the cycle's preemptions (each its mode and GraceTime, stamped
    with its run's generation), tracked from now on. ``transitions.start_runs`` commits them
    with the cycle's starts and sends each victim its notice; ``tick`` terminates it when its
    grace time is over (at once for none: ``tick`` runs every turn of the loop)."""
    marks = []
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
            marks.append((job, mark))
            tracker.victims[victim_id] = mark
            log.info("preempted JobId=%d (%s, GraceTime %d s) to reclaim resources for "
                     "JobId=%d (%s)", victim_id, mode, grace, p.job_id, p.cause)
    return marks


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
