"""The one door of a job's life: every run starts in ``start_runs`` and ends in ``end_run``.

A run is one launch of a job (``Job.generation``). Whatever ends it — its agent's report, a
node gone silent, a cancel, a time limit, a preemption, a requeue, a spent budget — ends it
here, through the same steps:

1. a report for another run (a stale generation) or for a job that is not running is dropped;
2. the *judges* decide what the run is recorded as and whether the job goes back to the queue
   (``Verdict``), in their order: a cancel wins, then a preemption mark, then a stop mark,
   then a prolog's failure, then a node failure's requeue (``JUDGES``);
3. one commit records the end (state, exit, samples, the ``.batch`` step row and the event) and,
   when the verdict says so, the requeue (PENDING, same id, restarts + 1), and clears every mark
   of the run: a mark never outlives the run it was set for;
4. the *after* hooks act on what was decided (stop the job's srun steps, forget the agent's
   confirmation and checkpoint, release a preemptor, mail), in their order (``AFTER``).

``JUDGES`` and ``AFTER`` are two ordered tuples written out in one place, the package's
``schedd/lifecycle/__init__.py`` (some belong to modules that import this one).

Marks are set only by ``request_stop`` (and the preemption module's ``mark_victims``), always
stamped with the run's generation. Handlers call these functions; they never call a hook by
name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

from kiln.model import LAUNCH_FAILED_HELD, Job, JobState, NodeAllocation, PreemptMark, StopMark
from kiln.slurm.signals import notice_signal
from schedd.ledger.records import JobEvent, StepRecord
from schedd.lifecycle.context import Context
from schedd.state import RUNNING_STATES

log = logging.getLogger("schedd.lifecycle")

# What an agent may report a run ended as (finished states); anything else is taken as FAILED.
# REQUEUED is schedd's to decide (a stop mark of the run's): reported by an agent on its own
# it would leave a job neither pending nor finished, never run again and never purged.
REPORTABLE = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED,
                        JobState.TIMEOUT, JobState.OUT_OF_MEMORY, JobState.NODE_FAIL,
                        JobState.PREEMPTED})
# Slurm's Reason= of a job that ended badly (scontrol show job, squeue %r)
END_REASONS = {JobState.TIMEOUT: "TimeLimit", JobState.FAILED: "NonZeroExitCode",
               JobState.OUT_OF_MEMORY: "OutOfMemory", JobState.NODE_FAIL: "NodeDown"}


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How one run ended, as whoever saw it says: the agent (its report), health (a node
    gone silent: NODE_FAIL) or enforcement (a stalled stop)."""

    generation: int
    state: str
    end_time: float
    exit_code: int = 0
    exit_signal: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    detail: str = ""
    reason: str = ""  # the agent's, when it could not start the run; else the state's
    prolog_failed: bool = False  # the node's prolog failed: nothing of the run ever ran


@dataclass(slots=True)
class Verdict:
    """What the judges made of a run's end."""

    state: JobState
    requeue: bool = False  # back to PENDING (same id, restart count + 1)
    hold: bool = False  # ... held by its user
    why: str = ""  # the REQUEUED event's detail
    final: bool = False  # a judge has spoken for good (later judges leave it be)
    end_time: float = 0.0  # when the run ended (set by end_run before the after-hooks)
    exit: tuple[int, int] | None = None  # (code, signal) recorded instead of the agent's
    pending_reason: str = ""  # the requeued job's Reason, instead of its hold's
    allocation: list[NodeAllocation] = field(default_factory=list)  # the run's (after-hooks)


Judge = Callable[[Job, RunEnd, Verdict], None]
After = Callable[[Context, Job, Verdict, float], None]
# (name, function) in their order; set once, by schedd/lifecycle/__init__.py
JUDGES: tuple[tuple[str, Judge], ...] = ()
AFTER: tuple[tuple[str, After], ...] = ()


def hooks() -> tuple[list[str], list[str]]:
    """The judges and after-hooks, in order (for the docs and the tests)."""
    return [name for name, _ in JUDGES], [name for name, _ in AFTER]


# --- starting ---------------------------------------------------------------------------------


# A start as the cycle applies it: the job, its allocation with the batch host first, and that
# allocation's node list compressed once (``steps.placed``).
Start = tuple[Job, list[NodeAllocation], str]


def start_runs(ctx: Context, starts: Iterable[Start], now: float,
               marks: Iterable[tuple[Job, PreemptMark]] = ()) -> list[Job]:
    """Commit the starts the cycle decided (state, allocation, a new generation, the limit the
    agent will enforce, the ``.batch`` row) and the preemption marks it set, in one commit;
    then tell the agents: each start's launch, each victim's notice (its ``--signal``, else
    SIGTERM; ``B:`` the batch shell only); then the BEGIN mails.

    Written so that a start visits each module once, in order (this one, the signals'
    vocabulary, the write door, the agents, mail): the rows first, then the notices, then
    what the write door knows."""
    starts, marks = list(starts), list(marks)
    rows = [_first_step(job, allocation, nodes, "RUNNING", now)
            for job, allocation, nodes in starts]
    notices = [(job, *notice_signal(job.signal)) for job, _ in marks]
    changes: list[tuple[Job, dict[str, Any]]] = []
    events, launches, mails = [], [], []
    for job, allocation, nodes in starts:
        changes.append((job, {
            "state": JobState.RUNNING, "reason": "None", "start_time": now,
            "allocation": allocation, "batch_host": allocation[0].node, "node_list": nodes,
            "generation": job.generation + 1, "launched_limit": ctx.state.time_limit(job),
            "stop": None, "preempt": None, "expected_start": 0.0, "sched_nodes": "",
            "mail_sent": "",  # a new run: its time-limit notices are still to send
            "idle_gpu_s": None, "idle_since": 0.0,  # ... and its GPUs to watch afresh
            # the forecasts published while it waited go to the ledger with the start
            "forecast_first": job.forecast_first, "forecast_last": job.forecast_last,
            "forecast_band": job.forecast_band,
        }))
        events.append(JobEvent(job.id, now, JobState.RUNNING.value, detail=nodes))
        array = job.array_job_id
        launches.append((job, ctx.state.array_task_ids(array) if array is not None else ()))
        if job.mail_type:  # --mail-type BEGIN (lifecycle/mail.py), with the array's tasks
            mails.append((job, ctx.state.array_tasks(array) if array is not None else []))
    changes.extend((job, {"preempt": mark}) for job, mark in marks)
    ctx.state.commit(changes, events, rows)
    for job, array_ids in launches:
        ctx.agents.launch(job, array_ids)
    for job, signum, batch_only in notices:
        # the notice reaches the whole job (the batch shell's group and its steps), or with
        # --signal=B: the batch shell alone
        ctx.agents.signal(job, signum, batch_only, full=not batch_only)
    for job, siblings in mails:
        ctx.mail.began(job, siblings)
    return [job for job, _, _ in starts]


def _siblings(ctx: Context, job: Job) -> list[Job]:
    """The other tasks of the job's array still in memory (none for a plain job)."""
    return ctx.state.array_tasks(job.array_job_id) if job.array_job_id is not None else []


def _array_ids(ctx: Context, job: Job) -> tuple[int, ...]:
    return ctx.state.array_task_ids(job.array_job_id) if job.array_job_id is not None else ()


def relaunch(ctx: Context, job: Job) -> None:
    """Send a running job's launch again (an agent that never confirmed it)."""
    ctx.agents.launch(job, _array_ids(ctx, job))


# --- stopping ---------------------------------------------------------------------------------


def request_stop(ctx: Context, jobs: Iterable[Job], cause: str, ended: JobState, now: float,
                 requeue: bool = False, hold: bool = False, actor: int | None = None,
                 detail: str = "", exit: tuple[int, int] | None = None) -> list[Job]:
    """Have the agents stop running jobs (state COMPLETING, a stop mark stamped with the run's
    generation); ``end_run`` records each end, as ``ended``, once its agent reports it."""
    changes, events = [], []
    for job in jobs:
        if job.state not in RUNNING_STATES:
            continue
        mark = StopMark(job.generation, cause, ended.value, requeue, hold, actor, exit)
        fields: dict[str, Any] = {"state": JobState.COMPLETING, "stop": mark}
        if cause == "cancel":
            fields["cancelled_by"] = actor
        changes.append((job, fields))
        events.append(JobEvent(job.id, now, JobState.COMPLETING.value, actor_uid=actor,
                               detail=detail or cause))
    ctx.state.commit(changes, events)
    stopped = [job for job, _ in changes]
    for job in stopped:
        ctx.agents.terminate(job, ended.value)
    return stopped


def cancel_pending(ctx: Context, jobs: Iterable[Job], actor: int, now: float) -> None:
    """scancel of jobs that never started (or wait to start again): CANCELLED at once."""
    changes, events = [], []
    for job in jobs:
        if job.state != JobState.PENDING:
            continue
        changes.append((job, {"state": JobState.CANCELLED, "end_time": now, "reason": "None",
                              "cancelled_by": actor, "expected_start": 0.0}))
        events.append(JobEvent(job.id, now, JobState.CANCELLED.value, actor_uid=actor,
                               detail="scancel"))
    ctx.state.commit(changes, events)


CANCEL_SLICE = 200  # jobs ended per slice of a big scancel (one commit each)


def cancel(ctx: Context, jobs: list[Job], actor: int, now: float) -> None:
    """scancel of these jobs, at once: the pending ones CANCELLED, the running ones stopped
    (``request_stop``; their end is recorded when their agent reports it)."""
    pending = [j for j in jobs if j.state == JobState.PENDING]
    running = [j for j in jobs if j.state in RUNNING_STATES]
    cancel_pending(ctx, pending, actor, now)
    request_stop(ctx, running, "cancel", JobState.CANCELLED, now, actor=actor,
                 detail="scancel")
    if pending or running:
        ctx.wake_scheduler()


def cancel_in_slices(ctx: Context, jobs: list[Job], actor: int,
                     size: int = CANCEL_SLICE) -> Generator[None, None, None]:
    """``cancel`` of many jobs ``size`` at a time, yielding between slices (a long request's
    generator: schedd/slicing.py), so that ending 1,600 jobs does not hold schedd's loop for
    the whole of it (45-57 ms under load, one commit). Each slice is one commit and takes
    each job as it is then: one the cycle started meanwhile is stopped, one that ended
    meanwhile is left be. So that the cycle starts none of them meanwhile, the pending ones
    not yet cancelled are withheld from it (``Planner.withheld``) until their slice. The
    request's reply comes after the last slice, so every end is committed before it is
    acknowledged. If the generator is closed before the end (its client went away, schedd
    stops), the rest is cancelled at once: an scancel that was accepted is never half done."""
    withheld = getattr(getattr(ctx, "planner", None), "withheld", None)
    ids = [j.id for j in jobs if j.state == JobState.PENDING]
    if withheld is not None:
        withheld.update(ids)
    done = 0
    try:
        while done < len(jobs):
            if done:
                try:
                    yield
                except GeneratorExit:
                    cancel(ctx, jobs[done:], actor, ctx.now())
                    raise
            chunk = jobs[done:done + size]
            cancel(ctx, chunk, actor, ctx.now())
            done += len(chunk)
            if withheld is not None:
                withheld.difference_update(j.id for j in chunk)
    finally:
        if withheld is not None:
            withheld.difference_update(ids)


# --- ending -----------------------------------------------------------------------------------


def end_run(ctx: Context, job: Job, end: RunEnd) -> bool:
    """Record the end of a job's run (see the module's docstring); False when the report was
    not for the job's current run (a stale generation, or the run already ended)."""
    if job.generation != end.generation or job.state not in RUNNING_STATES:
        return False
    try:
        observed = JobState(end.state)
    except ValueError:
        observed = JobState.FAILED
    verdict = Verdict(observed if observed in REPORTABLE else JobState.FAILED)
    for _, judge in JUDGES:
        judge(job, end, verdict)
    end_time = max(end.end_time, job.start_time)
    exit_code, exit_signal = verdict.exit or (end.exit_code, end.exit_signal)
    fields: dict[str, Any] = {
        "state": verdict.state,
        "reason": (end.reason if verdict.state == JobState.FAILED and end.reason else
                   END_REASONS.get(verdict.state, "None")),
        "end_time": end_time, "exit_code": exit_code, "exit_signal": exit_signal,
        "stop": None, "preempt": None,
    }
    if end.stats:
        fields["stats"] = dict(end.stats)
    events = [JobEvent(job.id, end_time, verdict.state.value, detail=end.detail)]
    batch = _batch_row(job, verdict.state, end_time, exit_code, exit_signal)
    if verdict.requeue:
        fields.update(requeue_fields(job, end_time, verdict.hold))
        if verdict.pending_reason:
            fields["reason"] = verdict.pending_reason
        events.append(JobEvent(job.id, end_time, JobState.REQUEUED.value, detail=verdict.why))
    verdict.allocation = list(job.allocation)  # a requeue clears the job's
    ctx.state.commit([(job, fields)], events, [batch])
    verdict.end_time = end_time
    now = ctx.now()
    for _, hook in AFTER:
        try:
            hook(ctx, job, verdict, now)
        except Exception:  # a hook's failure must not undo or repeat the committed end
            log.exception("after-end hook failed for job %d", job.id)
    ctx.wake_scheduler()
    return True


def requeue_fields(job: Job, now: float, hold: bool = False) -> dict[str, Any]:
    """A job back to PENDING for another run: its id and submit time stay (age keeps counting)."""
    return {
        "state": JobState.PENDING, "reason": "JobHeldUser" if hold else "None",
        "held": "user" if hold else job.held, "restart_count": job.restart_count + 1,
        "start_time": 0.0, "end_time": 0.0, "allocation": [], "node_list": "",
        "batch_host": "", "exit_code": 0, "exit_signal": 0, "eligible_time": now,
        "launched_limit": None,
    }


def _first_step(job: Job, allocation: list[NodeAllocation], nodes: str, state: str,
                start: float) -> StepRecord:
    """The step a run starts with: ``JOBID.batch`` (the script, on the batch host), or for
    salloc's allocations ``JOBID.extern`` (what holds every node of it, as Slurm's
    extern step does)."""
    if job.interactive:
        return StepRecord(job_id=job.id, step_id="extern", name="extern",
                          node_list=nodes, num_nodes=len(allocation), num_tasks=len(allocation),
                          cpus=sum(a.cpus for a in allocation), state=state, start_time=start)
    first = allocation[0] if allocation else None
    return StepRecord(job_id=job.id, step_id="batch", name="batch",
                      node_list=first.node if first else job.batch_host, num_nodes=1,
                      num_tasks=1, cpus=first.cpus if first else 0, state=state,
                      start_time=start)


def _batch_row(job: Job, state: JobState, end: float, exit_code: int,
               exit_signal: int) -> StepRecord:
    """The first step's row (``.batch`` or ``.extern``) of the run that ended. slurmstepd
    records a batch shell killed at the time limit as CANCELLED; an extern step ends
    COMPLETED 0:0 unless the allocation was cancelled or timed out."""
    row = _first_step(job, job.allocation, job.node_list, "", job.start_time)
    if job.interactive:
        shown = (JobState.CANCELLED if state in (JobState.CANCELLED, JobState.TIMEOUT)
                 else JobState.COMPLETED)
        exit_code = exit_signal = 0
    else:
        shown = JobState.CANCELLED if state == JobState.TIMEOUT else state
    row.state, row.exit_code, row.exit_signal, row.end_time = (shown.value, exit_code,
                                                               exit_signal, end)
    return row


# --- the judges and after-hooks of this module (their order: schedd/lifecycle/__init__.py) ------------------------------------------------------------------


def judge_cancelled(job: Job, end: RunEnd, verdict: Verdict) -> None:
    """A cancelled job ends CANCELLED whatever its run did, and stays ended."""
    if job.cancelled_by is not None:
        verdict.state, verdict.requeue, verdict.final = JobState.CANCELLED, False, True


def judge_stopped(job: Job, end: RunEnd, verdict: Verdict) -> None:
    """A run schedd asked to stop ends as the stop said (a node that failed under it ends
    NODE_FAIL); a requeue stop sends the job back to the queue."""
    mark = job.stop
    if verdict.final or mark is None or mark.generation != end.generation:
        return
    if verdict.state != JobState.NODE_FAIL:
        verdict.state = JobState(mark.ended)
    node_down = mark.cause in ("node_down", "gpu_fail")  # lost under the job: --requeue rules
    verdict.requeue = mark.requeue and (job.requeue or not node_down)
    verdict.hold = mark.hold
    # a failed GPU's stop: the job's reason since its notice names the GPU and the fault
    verdict.why = {"node_down": "node set DOWN", "gpu_fail": job.reason or "GPU failed",
                   "idle_gpu": "idle GPUs ([scheduler.idle_gpu])"}.get(
        mark.cause, "scontrol requeue")
    verdict.exit = mark.exit
    verdict.final = True


def judge_prolog_failed(job: Job, end: RunEnd, verdict: Verdict) -> None:
    """A run whose prolog failed never ran a process: the job goes back to the queue held
    (Slurm's ``launch failed requeued held``, without ``nohold_on_prolog_fail``), whatever
    its --requeue, until someone releases it (the node it failed on is drained)."""
    if verdict.final or not end.prolog_failed:
        return
    verdict.requeue, verdict.hold, verdict.final = True, True, True
    verdict.pending_reason = LAUNCH_FAILED_HELD
    verdict.why = end.detail or "prolog failed"


def judge_node_failed(job: Job, end: RunEnd, verdict: Verdict) -> None:
    """A run lost with its node is requeued when the job allows it (--requeue, the default)."""
    if not verdict.final and verdict.state == JobState.NODE_FAIL and job.requeue:
        verdict.requeue, verdict.why = True, end.detail or "node failure"


def forget_run(ctx: Context, job: Job, verdict: Verdict, now: float) -> None:
    ctx.agents.forget_run(job.id, job.generation)


def run_epilogs(ctx: Context, job: Job, verdict: Verdict, now: float) -> None:
    """The epilog of a multi-node job on its nodes other than the batch host (whose agent
    runs its own before it reports the end); none after a failed prolog."""
    if ctx.cfg.agent.epilog and len(verdict.allocation) > 1 and \
            verdict.pending_reason != LAUNCH_FAILED_HELD:
        exit_code, exit_signal = verdict.exit or (job.exit_code, job.exit_signal)
        ctx.agents.epilogs(job, verdict.allocation, exit_code, exit_signal)


def mail_ended(ctx: Context, job: Job, verdict: Verdict, now: float) -> None:
    """--mail-type END, FAIL, REQUEUE (lifecycle/mail.py)."""
    if job.mail_type:
        ctx.mail.ended(job, verdict.state, verdict.requeue, verdict.end_time, _siblings(ctx, job))
