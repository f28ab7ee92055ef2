"""``cancel``, ``hold``, ``release``: users act on their own jobs, operators on all."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kiln.identity import Caller, is_operator
from kiln.model import Job, JobState
from kiln.slurm.signals import SignalError
from kiln.slurm.signals import parse_signal as _parse_signal
from schedd import slicing
from schedd.handlers.selection import DENIED, INVALID_JOB_ID, select_jobs, select_jobs_reporting
from schedd.ledger.records import JobEvent
from schedd.lifecycle import transitions
from schedd.lifecycle.context import Context, RequestError


def parse_signal(name: str) -> int:
    try:
        return _parse_signal(name)
    except SignalError:
        raise RequestError(f"Invalid signal name: {name}") from None


def _owned(caller: Caller, job: Job) -> bool:
    return job.uid == caller.uid or is_operator(caller)


def cancel(ctx: Context, caller: Caller,
           body: dict[str, Any]) -> dict[str, Any] | Generator[None, None, dict[str, Any]]:
    """scancel. Of more than ``transitions.CANCEL_SLICE`` jobs, a long request: the jobs are
    ended a slice at a time, the loop serving others between slices, and the reply (the
    same) comes after the last."""
    jobs, unmatched = select_jobs_reporting(ctx, body)
    sig = parse_signal(body["signal"]) if body.get("signal") else None
    now = ctx.now()
    cancelled: list[str] = []
    errors = [{"job_id": t, "message": INVALID_JOB_ID} for t in unmatched]
    targets: list[Job] = []
    for job in jobs:
        if not _owned(caller, job):
            errors.append({"job_id": job.display_id, "message": DENIED})
            continue
        if job.state.finished or job.state == JobState.COMPLETING:
            if body.get("job_ids"):
                errors.append({"job_id": job.display_id,
                               "message": "Job/step already completing or completed"})
            continue
        if sig is not None:
            # scancel -s: deliver the signal; the job's end (if any) is reported by its agent
            if job.state != JobState.RUNNING:
                errors.append({"job_id": job.display_id, "message": "Job is pending execution"})
                continue
            ctx.agents.signal(job, sig, bool(body.get("batch_only")), bool(body.get("full")))
            cancelled.append(job.display_id)
            continue
        cancelled.append(job.display_id)
        targets.append(job)
    reply = {"cancelled": cancelled, "errors": errors}
    if len(targets) > transitions.CANCEL_SLICE:
        return _in_slices(ctx, caller, targets, reply)
    transitions.cancel(ctx, targets, caller.uid, now)
    return reply


@slicing.light
def _in_slices(ctx: Context, caller: Caller, jobs: list[Job],
               reply: dict[str, Any]) -> Generator[None, None, dict[str, Any]]:
    yield from transitions.cancel_in_slices(ctx, jobs, caller.uid)
    return reply


def _pending_by_ids(ctx: Context, caller: Caller, body: dict[str, Any]):
    jobs = select_jobs(ctx, {"job_ids": body["job_ids"]})
    for job in jobs:
        if not _owned(caller, job):
            yield job, DENIED
        elif job.state != JobState.PENDING:
            yield job, "Job is no longer pending execution"
        else:
            yield job, ""


def hold(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    level = "admin" if is_operator(caller) and body.get("admin", True) else "user"
    return _set_hold(ctx, caller, body, level)


def release(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    return _set_hold(ctx, caller, body, "")


def _set_hold(ctx: Context, caller: Caller, body: dict[str, Any], level: str) -> dict[str, Any]:
    now = ctx.now()
    errors, changes, events = [], [], []
    for job, problem in _pending_by_ids(ctx, caller, body):
        if not problem and not level and job.held == "admin" and not is_operator(caller):
            problem = DENIED
        if problem:
            errors.append({"job_id": job.display_id, "message": problem})
            continue
        reason = {"admin": "JobHeldAdmin", "user": "JobHeldUser", "": "None"}[level]
        changes.append((job, {"held": level, "reason": reason}))
        events.append(JobEvent(job.id, now, "PENDING", reason=reason, actor_uid=caller.uid,
                               detail="hold" if level else "release"))
    ctx.state.commit(changes, events)
    if changes:
        ctx.wake_scheduler()
    if not changes and not errors:
        raise RequestError(INVALID_JOB_ID)
    return {"errors": errors}
