"""The core's input, built from schedd's state: ``build`` (nodes, running and pending jobs,
associations, limits, reservations, licenses) and the reasons of the pending jobs it must not
consider (``schedd/eligibility.py``). Read-only, bar setting aside a job whose fields cannot
be viewed (through ``State.set_aside``, the write door). ``lifecycle/planner.py`` adds
preemption and the last cycle's promises.
"""

from __future__ import annotations

from kiln.model import Job, NodeState
from kiln.slurm.gres import kinds_of
from schedd.eligibility import ineligible_reason
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot, job_licenses
from schedd.state import State


def build(state: State, now: float) -> tuple[Snapshot, dict[int, str]]:
    """The core's input, plus the reasons of pending jobs it must not consider."""
    places = state.cfg.topology.places if state.cfg.topology is not None else {}
    nodes = [
        NodeView(
            name=n.name, cpus=n.cpus, memory_mb=n.memory_mb, gpus=n.healthy_gpus,
            gpu_type="" if kinds_of(n.healthy_gpus) else n.gpu_model,
            gpu_kinds=kinds_of(n.healthy_gpus), features=frozenset(n.features),
            partitions=frozenset(n.partitions),
            failed_gpus=len(n.gpus) - len(n.healthy_gpus),
            shards_per_gpu=state.shards_per_gpu(n), mps_per_gpu=state.mps_per_gpu(n),
            available=n.state == NodeState.IDLE and state.node_alive(n, now)
            and n.reboot != "issued",
            topo=places.get(n.name),
        )
        for n in state.nodes.values()
    ]
    running_per_array: dict[int, int] = {}
    running = running_views(state, now)
    for job in state.running():
        if job.array_job_id is not None:
            running_per_array[job.array_job_id] = running_per_array.get(job.array_job_id, 0) + 1
    pending: list[PendingJob] = []
    blocked: dict[int, str] = {}
    broken: list[tuple[Job, str]] = []
    for job in state.pending():
        if job.set_aside:
            blocked[job.id] = "JobHeldAdmin"
            continue
        try:
            reason = ineligible_reason(state, job, now, running_per_array)
            view = None if reason else state.pending_view(job)
        except Exception as exc:  # noqa: BLE001 - one bad job must not stop the cycle
            broken.append((job, f"cannot be scheduled: {type(exc).__name__}: {exc}"))
            continue
        if reason:
            blocked[job.id] = reason
            continue
        pending.append(view)
        if job.array_max_running and job.array_job_id is not None:
            # %N: a task offered to the core takes a slot, or one cycle starts them all
            running_per_array[job.array_job_id] = running_per_array.get(job.array_job_id,
                                                                        0) + 1
    for job, why in broken:
        state.set_aside(job, why, now)
        blocked[job.id] = "JobHeldAdmin"
    limits = (state.accounts.limit_table(state.usage.tres_mins)
              if state.accounts.has_limits() else None)
    return Snapshot(now=now, nodes=nodes, running=running, pending=pending,
                    associations=state.usage.fairshare.views(), limits=limits,
                    reservations=[r.view() for r in state.reservations.values()
                                  if r.end_time > now],
                    licenses={lic.name: lic.count for lic in state.cfg.licenses}), blocked

def running_views(state: State, now: float) -> list[RunningJob]:
    """The running jobs as the core sees them, each ending by its time limit."""
    out = []
    default = state.cfg.scheduler.default_time_limit
    for job in state.running():
        limit = state.time_limit(job)
        end = job.start_time + (limit if limit is not None else default)
        out.append(RunningJob(job.id, job.allocation, job.start_time, max(end, now),
                              job.user, job.account, job.qos, job.partition,
                              reservation=job.reservation, licenses=job_licenses(job),
                              exclusive_topo=job.exclusive_topo))
    return out
