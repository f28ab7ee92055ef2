"""salloc's allocations: ``allocation`` (the granted job's environment) and ``relinquish``.

salloc submits a job marked ``interactive`` (admission gives it Slurm's extern step as its only
process on the nodes: ``EXTERN_HOLDER``), waits for it to run, asks ``allocation`` for the
SLURM_* variables its command runs with (where salloc runs, not on the nodes), and when that
command exits it ``relinquish``-es the allocation with the command's exit status: the job is
stopped through the lifecycle's one door (``request_stop``) and ends COMPLETED (status 0) or
FAILED, recorded with that status, as ``slurm_complete_job`` does. srun inside the command
starts steps in the job as in a batch script (``handlers/srun.py``).

Only the job's owner (and operators) may do either; who asks comes from the socket.
"""

from __future__ import annotations

from typing import Any

from kiln.identity import Caller, is_operator
from kiln.model import Job, JobState
from kiln.wire import protocol
from schedd.domain.jobenv import allocation_environment
from schedd.lifecycle import transitions
from schedd.lifecycle.context import Context, RequestError

NOT_ALLOCATION = "Job is not an allocation of salloc"


def allocation(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """The state of salloc's job and, once it runs, the environment of salloc's command."""
    job = _own_allocation(ctx, caller, body["job_id"])
    reply: dict[str, Any] = {"state": job.state.value, "node_list": job.node_list}
    # ready once its node has started it: after the prolog (Slurm's PrologFlags=Alloc)
    if job.state == JobState.RUNNING and job.allocation and \
            (job.id, job.generation) in ctx.agents.confirmed:
        reply["environment"] = allocation_environment(job, ctx.cfg.cluster_name)
    return reply


def relinquish(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """salloc's command has exited: end the allocation with its exit status (a pending one,
    salloc interrupted while waiting, is cancelled)."""
    job = _own_allocation(ctx, caller, body["job_id"])
    now = ctx.now()
    if job.state == JobState.PENDING:
        transitions.cancel_pending(ctx, [job], caller.uid, now)
        ctx.wake_scheduler()
        return {"ended": True}
    if job.state != JobState.RUNNING:
        return {"ended": False}
    code, sig = int(body.get("exit_code") or 0), int(body.get("exit_signal") or 0)
    ended = JobState.COMPLETED if code == 0 and sig == 0 else JobState.FAILED
    transitions.request_stop(ctx, [job], "relinquish", ended, now, actor=caller.uid,
                             detail="salloc relinquished", exit=(code, sig))
    return {"ended": True}


def _own_allocation(ctx: Context, caller: Caller, job_id: int) -> Job:
    job = ctx.state.jobs.get(job_id)
    if job is None:
        raise RequestError("Invalid job id specified", protocol.E_INVALID_JOB)
    if caller.uid not in (0, job.uid) and not is_operator(caller):
        raise RequestError("Access/permission denied", protocol.E_PERMISSION)
    if not job.interactive:
        raise RequestError(NOT_ALLOCATION)
    return job
