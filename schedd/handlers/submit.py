"""``submit``: turn what sbatch parsed into Job rows, committed before the id is given out."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from schedd import protocol
from schedd.context import Context, RequestError
from schedd.handlers import resv as reservations
from schedd.handlers.sacctmgr import admit, check_submit_limits
from schedd.identity import Caller
from schedd.ledger.records import JobEvent
from schedd.model import Job, JobState
from schedd.scheduler.cycle import schedule
from schedd.slurm import arrayspec, dependency

SUBMITTABLE = protocol.SUBMIT_FIELDS
_FIELD_TYPES = {f.name: f for f in dataclasses.fields(Job)}
_NULLABLE = {"time_limit", "time_min"}

INVALID_TIME = "Requested time limit is invalid (missing or exceeds some limit)"
INVALID_PARTITION = "Invalid partition name specified"
NODE_CONFIG = "Requested node configuration is not available"


def submit(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    now = ctx.now()
    template = build_job(ctx, caller, body["job"], now)
    if body.get("test_only"):
        return test_only(ctx, template, now)
    jobs = expand_array(ctx, template)
    check_submit_limits(ctx, template, len(jobs))
    events = [JobEvent(job_id=j.id, time=now, state="PENDING", actor_uid=caller.uid,
                       detail="submitted") for j in jobs]
    ctx.state.add_jobs(jobs, events)
    ctx.wake_scheduler()
    first = jobs[0].array_job_id if template.array_spec else jobs[0].id
    return {"job_id": first, "array_task_ids": [j.array_task_id for j in jobs
                                                if j.array_task_id is not None]}


def build_job(ctx: Context, caller: Caller, spec: dict[str, Any], now: float) -> Job:
    """Validate a submission and fill in what schedd decides: owner, partition, account."""
    if caller.uid == 0 and not ctx.cfg.allow_root_jobs:
        raise RequestError("Access/permission denied: jobs of root are not allowed on this "
                           "cluster (set allow_root_jobs = true in kiln.toml)",
                           protocol.E_PERMISSION)
    fields: dict[str, Any] = {}
    for key, value in spec.items():
        if key not in SUBMITTABLE:
            raise RequestError(f"field {key!r} cannot be set at submission")
        fields[key] = _checked(key, value)
    job = Job(id=0, **fields)
    job.user, job.uid, job.gid = caller.user, caller.uid, caller.gid
    job.submit_time = job.eligible_time = now
    job.state, job.reason = JobState.PENDING, "None"
    if not job.script.startswith("#!"):
        raise RequestError("This does not look like a batch script")
    if not job.workdir or not os.path.isabs(job.workdir):
        raise RequestError("working directory must be an absolute path")
    job.name = job.name or "sbatch"
    _check_partition(ctx, job)
    _check_shape(ctx, job)
    if job.dependency:
        _check_dependency(ctx, job.dependency)
    admit(ctx, job, spec)  # account, QOS and DenyOnLimit (handlers/accounts.py)
    reservations.check_submit(ctx, job)  # --reservation: exists and admits the job
    return job


def _check_dependency(ctx: Context, expr: str) -> None:
    """Slurm's "Job dependency problem" for bad syntax and for a job id that never existed.
    A job that has left memory is still found in the ledger, so, unlike Slurm after MinJobAge,
    depending on a long-finished job works."""
    try:
        parsed = dependency.parse(expr)
    except dependency.DependencyError as exc:
        raise RequestError(str(exc)) from None
    for term in parsed.terms:
        for job_id, task in term.job_ids:
            if not ctx.state.states_of(job_id, task):
                raise RequestError("Job dependency problem")


def _checked(key: str, value: Any) -> Any:
    default = _FIELD_TYPES[key].default
    if default is dataclasses.MISSING:
        default = _FIELD_TYPES[key].default_factory()  # type: ignore[misc]
    if value is None and key in _NULLABLE:
        return None
    expected = type(default) if default is not None else int
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) != (expected is bool) or not isinstance(value, expected):
        raise RequestError(f"field {key!r} has the wrong type")
    if expected is int and not (-(2**62) < value < 2**62):
        raise RequestError(f"field {key!r} is out of range")
    if key == "environment" and not all(isinstance(v, str) for v in value.values()):
        raise RequestError("environment values must be strings")
    return value


def _check_partition(ctx: Context, job: Job) -> None:
    partitions = ctx.state.partitions
    if job.partition:
        if "," in job.partition:
            job.partition = job.partition.split(",")[0]
        if job.partition not in partitions:
            raise RequestError(INVALID_PARTITION)
    else:
        job.partition = ctx.cfg.default_partition.name
    part = partitions[job.partition]
    limit = job.time_limit if job.time_limit is not None else part.default_time
    if job.time_limit is not None and job.time_limit <= 0:
        raise RequestError(INVALID_TIME)
    if part.max_time is not None and (limit is None or limit > part.max_time):
        raise RequestError(INVALID_TIME)


def _check_shape(ctx: Context, job: Job) -> None:
    """Refuse what no node of the partition could ever hold (Slurm does so at submit)."""
    for name in ("num_nodes", "num_tasks", "cpus_per_task"):
        if getattr(job, name) < 1:
            raise RequestError(NODE_CONFIG)
    for name in ("gpus", "gpus_per_node", "gpus_per_task", "mem_per_node_mb", "mem_per_cpu_mb",
                 "mem_per_gpu_mb", "ntasks_per_node"):
        if getattr(job, name) < 0:
            raise RequestError(NODE_CONFIG)
    view = ctx.state.pending_view(job)
    nodes = [n for n in ctx.state.nodes.values() if job.partition in n.partitions]
    if not nodes:
        return  # no node has registered yet: the job waits for one
    fitting = [
        n for n in nodes
        if n.cpus >= view.cpus_per_node and n.memory_mb >= view.mem_per_node_mb
        and len(n.gpus) >= view.gpus_per_node
        and (not view.gpu_type or n.gpu_model == view.gpu_type.lower())
        and view.features <= set(n.features)
    ]
    if len(fitting) < view.num_nodes:
        raise RequestError(NODE_CONFIG)


def expand_array(ctx: Context, template: Job) -> list[Job]:
    """One Job per array task; the last task keeps the array's own id, as in Slurm."""
    if not template.array_spec:
        template.id = ctx.state.next_job_id
        return [template]
    try:
        spec = arrayspec.parse(template.array_spec, ctx.cfg.max_array_size)
    except arrayspec.ArraySpecError as exc:
        raise RequestError(str(exc)) from None
    base = ctx.state.next_job_id
    ids = list(range(base + 1, base + len(spec.task_ids))) + [base]
    jobs = []
    for job_id, task in zip(ids, spec.task_ids, strict=True):
        job = dataclasses.replace(template, id=job_id, array_job_id=base, array_task_id=task,
                                  array_max_running=spec.max_running,
                                  environment=template.environment, extra=dict(template.extra))
        jobs.append(job)
    return jobs


def test_only(ctx: Context, job: Job, now: float) -> dict[str, Any]:
    """sbatch --test-only: where and when the job would start, without submitting it."""
    job.id = ctx.state.next_job_id
    snapshot, _ = ctx.state.snapshot(now)
    snapshot.pending.append(ctx.state.pending_view(job))
    decisions = schedule(snapshot, ctx.cfg.scheduler)
    start = next((s for s in decisions.starts if s.job_id == job.id), None)
    if start is not None:
        when, nodes, cpus = now, [a.node for a in start.allocation], start_cpus(start)
    else:
        when = decisions.expected_start.get(job.id, 0.0)
        nodes, cpus = [], ctx.state.pending_view(job).cpus_per_node * max(job.num_nodes, 1)
    from schedd.slurm.hostlist import compress

    return {"job_id": job.id, "start_time": when, "nodes": compress(nodes),
            "partition": job.partition, "cpus": cpus}


def start_cpus(start: Any) -> int:
    return sum(a.cpus for a in start.allocation)
