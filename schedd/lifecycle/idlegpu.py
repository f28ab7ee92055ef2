"""Idle GPUs: a running job whose GPUs all stay below a utilisation for a window is flagged.

GPU-hours are the scarcest resource a lab has, and a job that holds GPUs it does not use (a
notebook left open, a job stuck on I/O or on a dead peer) takes them from everyone waiting.
With ``[scheduler.idle_gpu]`` in kiln.toml (off by default; ``kiln.config.IdleGPUConfig``):

- every heartbeat carries, per running job, the latest utilisation sample of each of its GPUs
  on that node (``gpu_util``, agentd/sampler.py ``Sampler.gpu_now``; a sample every ``[agent]
  sample_interval``, held until the next one);
- **a GPU is idle** while its latest reading is below ``below_util`` percent (strictly below:
  at ``below_util`` it is busy);
- **idle GPU-seconds** (``idle_seconds``): at each heartbeat from a node, each of the job's GPUs
  there that reads idle adds the time since that node's previous heartbeat for the run (at most
  ``MAX_GAP_BEATS`` heartbeat intervals: a node that went quiet does not count its silence).
  They are the run's (``Job.idle_gpu_s``, reset at each start; None: the run was never
  watched), written to the ledger at most every ``SAVE_EVERY`` seconds, when the flag changes
  and when the run ends; seff and sacct (``IdleGPUHours``) report them in GPU-hours;
- **the job is idle** while every GPU of its allocation, on every node, reads idle
  (``Job.idle_since``: since the heartbeat that first saw them all idle; 0: not idle). One GPU
  at or above the threshold, or one not read yet, and it is not;
- once idle for ``after``, the job is **flagged**: its Reason becomes ``IdleGPU`` (squeue
  ``%r``; Slurm shows ``None`` for every running job), ``kiln why`` says since when and how
  many GPU-hours; it is mailed when it asked for mail (any ``--mail-type`` but NONE), and
  ``action`` is taken: ``notify`` (nothing more), ``requeue`` (stopped and queued again, as
  ``scontrol requeue`` does; a ``--no-requeue`` job is only notified), or ``cancel``
  (stopped, CANCELLED). A notified job whose GPUs get busy again loses the flag, and is
  flagged (and mailed) again if they go idle for another window.

What the watch keeps in memory (``Watch``: when each node last reported each run, which nodes'
GPUs are all idle, the GPU-seconds not yet written) is lost with schedd; the ledger keeps the
rest, so a restarted schedd goes on from ``idle_since`` once every node has reported again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from kiln.model import Job, JobState
from schedd.lifecycle.context import Context
from schedd.lifecycle.idlewatch import Watch
from schedd.lifecycle.mail import mail_types, run_time
from schedd.lifecycle.transitions import Verdict, request_stop

log = logging.getLogger("schedd.idlegpu")

IDLE_REASON = "IdleGPU"  # a flagged running job's Reason (squeue %r)
SAVE_EVERY = 30.0  # seconds: the most a run's idle GPU-seconds wait to reach the ledger
MAX_GAP_BEATS = 3  # a heartbeat counts for at most this many heartbeat intervals



def idle_seconds(utils: Sequence[float], below_util: float, elapsed: float) -> float:
    """GPU-seconds one node's reading adds: ``elapsed`` for each GPU reading below
    ``below_util`` percent."""
    return max(elapsed, 0.0) * sum(1 for u in utils if u < below_util)


def all_idle(utils: Sequence[float], gpus: int, below_util: float) -> bool:
    """Every one of the node's ``gpus`` GPUs was read, and each is below ``below_util``."""
    return gpus > 0 and len(utils) == gpus and all(u < below_util for u in utils)


def observe(ctx: Context, node: str, running: Iterable[dict[str, Any]], now: float) -> None:
    """A heartbeat's ``running`` items from ``node``: count idle GPU-seconds, then judge each
    run it reported (flag, mail, act; see the module)."""
    conf = ctx.cfg.scheduler.idle_gpu
    if not conf.enabled:
        return
    watch: Watch = ctx.agents.idle_gpu
    gap = MAX_GAP_BEATS * float(ctx.cfg.heartbeat_interval)
    for item in running:
        utils = item.get("gpu_util")
        if utils is None:
            continue
        job = ctx.state.jobs.get(int(item["job_id"]))
        if job is None or job.generation != int(item["generation"]) \
                or job.state != JobState.RUNNING:
            continue
        gpus = next((len(a.gpus) for a in job.allocation if a.node == node), 0)
        if not gpus:
            continue
        run = (job.id, job.generation)
        last = watch.heard.get((*run, node))
        watch.heard[(*run, node)] = now
        if last is not None:
            added = idle_seconds(utils[:gpus], conf.below_util, min(now - last, gap))
            watch.unsaved[run] = watch.unsaved.get(run, 0.0) + added
        watch.idle_nodes.setdefault(run, {})[node] = all_idle(utils, gpus, conf.below_util)
        judge(ctx, job, now)


def judge(ctx: Context, job: Job, now: float) -> None:
    """Update the run's idle state and ledger figures; flag it once idle for ``after``."""
    conf = ctx.cfg.scheduler.idle_gpu
    watch: Watch = ctx.agents.idle_gpu
    run = (job.id, job.generation)
    reported = watch.idle_nodes.get(run, {})
    idle = all(reported.get(a.node, False) for a in job.allocation if a.gpus)
    fields: dict[str, Any] = {}
    if idle and not job.idle_since:
        fields["idle_since"] = now
    elif not idle and job.idle_since:
        fields["idle_since"] = 0.0
        if run in watch.flagged or job.reason == IDLE_REASON:
            watch.flagged.discard(run)
            if job.reason == IDLE_REASON:
                fields["reason"] = "None"
            log.info("JobId=%d: its GPUs are busy again", job.id)
    if fields or job.idle_gpu_s is None or now - watch.saved_at.get(run, 0.0) >= SAVE_EVERY:
        fields["idle_gpu_s"] = round(watch.total(job), 3)
        watch.unsaved[run] = 0.0
        watch.saved_at[run] = now
    if fields:
        ctx.state.commit([(job, fields)])
    flagged = run in watch.flagged or job.reason == IDLE_REASON
    if idle and not flagged and now - job.idle_since >= float(conf.after):
        flag(ctx, job, now)


def describe(job: Job, now: float, total: float, below_util: float) -> str:
    """How idle: "4 GPUs below 5% since <when> (0:31:00), 2.07 idle GPU-hours"."""
    gpus = job.total_gpus
    return (f"{gpus} GPU{'s' if gpus != 1 else ''} below {below_util:g}% for "
            f"{run_time(now - job.idle_since)}, {total / 3600:.2f} idle GPU-hours this run")


def flag(ctx: Context, job: Job, now: float) -> None:
    """The run has been idle for the window: Reason IdleGPU, mail, then the action."""
    conf = ctx.cfg.scheduler.idle_gpu
    watch: Watch = ctx.agents.idle_gpu
    watch.flagged.add((job.id, job.generation))
    ctx.state.commit([(job, {"reason": IDLE_REASON})])
    how = describe(job, now, watch.total(job), conf.below_util)
    action = conf.action
    if action == "requeue" and not job.requeue:
        action = "notify"  # --no-requeue: the user said it must not run twice
    log.warning("JobId=%d: idle GPUs (%s): %s", job.id, how, action)
    if mail_types(job.mail_type):
        verb = {"notify": "", "requeue": ", requeued", "cancel": ", cancelled"}[action]
        ctx.mail.send(job, f"{ctx.mail._head(job)} GPUs idle, {how}{verb}")
    detail = f"idle GPUs: {how}"
    if action == "requeue":
        request_stop(ctx, [job], "idle_gpu", JobState.REQUEUED, now, requeue=True,
                     detail=detail)
    elif action == "cancel":
        request_stop(ctx, [job], "idle_gpu", JobState.CANCELLED, now, detail=detail)


def ended(ctx: Context, job: Job, verdict: Verdict, now: float) -> None:
    """A run ended: its idle GPU-seconds not yet written go to the ledger; forget the run."""
    watch: Watch = ctx.agents.idle_gpu
    run = (job.id, job.generation)
    if watch.unsaved.get(run):
        ctx.state.commit([(job, {"idle_gpu_s": round(watch.total(job), 3)})])
    watch.forget(run)
