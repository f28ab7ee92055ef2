"""salloc's allocations in schedd: the environment of a granted one, relinquishing it with the
command's exit status (COMPLETED/FAILED, the .extern row, no .batch), and who may."""

from __future__ import annotations

import pytest

from kiln.identity import Caller
from kiln.model import Job, JobState, NodeAllocation
from kiln.wire import operations, protocol
from schedd.handlers import salloc as h
from schedd.ledger.records import StepRecord
from schedd.lifecycle import transitions
from schedd.lifecycle.context import RequestError

OWNER, STRANGER, ROOT = Caller(1000, 1000), Caller(1001, 1001), Caller(0, 0)  # ctx: conftest.py


def _allocation(ctx, started: bool = True) -> Job:
    job = Job(id=9, name="bash", user="alice", uid=1000, gid=1000, state=JobState.RUNNING,
              workdir="/work", num_nodes=2, start_time=990.0, batch_host="node1",
              generation=1, interactive=True, node_list="node[1-2]", partition="gpu",
              allocation=[NodeAllocation("node1", 4, 100, [0]),
                          NodeAllocation("node2", 4, 100, [1])])
    ctx.state.store.insert_jobs([job])
    ctx.state.jobs[9] = job
    ctx.state.store.save_steps([StepRecord(job_id=9, step_id="extern", name="extern",
                                           node_list="node[1-2]", num_nodes=2, num_tasks=2,
                                           cpus=8, state="RUNNING", start_time=990.0)])
    if started:  # its node said so (job_started), after its prolog
        ctx.agents.confirmed.add((9, 1))
    return job


def _call(ctx, handler, caller, **body):
    """The handler as the daemon calls it: the body checked against the op's schema first."""
    op = handler.__name__
    protocol.check(body, operations.CLIENT_OPS[op], op)
    return handler(ctx, caller, body)


def test_the_allocation_environment_is_the_jobs_not_a_nodes(ctx) -> None:
    _allocation(ctx)
    reply = _call(ctx, h.allocation, OWNER, job_id=9)
    env = reply["environment"]
    assert (reply["state"], env["SLURM_JOB_ID"], env["SLURM_JOB_NODELIST"],
            env["SLURM_JOB_NUM_NODES"], env["SLURM_JOB_CPUS_PER_NODE"]) == (
        "RUNNING", "9", "node[1-2]", "2", "4,4")
    assert "SLURMD_NODENAME" not in env and "CUDA_VISIBLE_DEVICES" not in env


def test_the_allocation_is_ready_only_once_its_node_has_started_it(ctx) -> None:
    """PrologFlags=Alloc: salloc's command waits while the node's prolog runs."""
    _allocation(ctx, started=False)
    reply = _call(ctx, h.allocation, OWNER, job_id=9)
    assert reply["state"] == "RUNNING" and "environment" not in reply
    ctx.agents.confirmed.add((9, 1))
    assert "environment" in _call(ctx, h.allocation, OWNER, job_id=9)


def test_only_the_owner_root_may_and_only_for_allocations(ctx) -> None:
    _allocation(ctx)
    for handler in (h.allocation, h.relinquish):
        with pytest.raises(RequestError, match="permission denied"):
            _call(ctx, handler, STRANGER, job_id=9)
        with pytest.raises(RequestError, match="not an allocation"):
            _call(ctx, handler, OWNER, job_id=7)  # a batch job
    assert _call(ctx, h.allocation, ROOT, job_id=9)["state"] == "RUNNING"


def test_relinquishing_records_the_commands_exit_status(ctx) -> None:
    job = _allocation(ctx)
    assert _call(ctx, h.relinquish, OWNER, job_id=9, exit_code=7) == {"ended": True}
    assert job.state == JobState.COMPLETING and ctx.agents.sent[-1][0] == "terminate"
    # the holder dies of the agent's SIGTERM; the run is recorded with salloc's status
    transitions.end_run(ctx, job, transitions.RunEnd(1, "CANCELLED", 1010.0, 0, 15))
    assert (job.state, job.exit_code, job.exit_signal) == (JobState.FAILED, 7, 0)
    rows = {r.step_id: (r.state, r.exit_code) for r in ctx.state.store.query_steps([9])}
    assert rows == {"extern": ("COMPLETED", 0)}
    assert _call(ctx, h.relinquish, OWNER, job_id=9) == {"ended": False}  # already over
