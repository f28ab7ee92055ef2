"""Eligibility: whether a pending job may be offered to the scheduler core yet, and why not.

Held, BeginTime, a dependency (judged from the index ``State`` keeps: ``domain/dependents.py``)
and an array's ``%N`` throttle. Read-only: it judges the state ``schedd/state.py`` writes, for
the snapshot (``schedd/snapshots.py``) and ``kiln why``.
"""

from __future__ import annotations

from kiln.model import LAUNCH_FAILED_HELD, Job
from kiln.slurm import dependency
from schedd.state import State


def ineligible_reason(state: State, job: Job, now: float, running_per_array: dict[int, int]) -> str:
    """Why a pending job may not be considered at all yet ('' when it may)."""
    if job.held:
        if job.reason == LAUNCH_FAILED_HELD:  # kept until it is released
            return LAUNCH_FAILED_HELD
        return "JobHeldAdmin" if job.held == "admin" else "JobHeldUser"
    if job.begin_time and job.begin_time > now:
        return "BeginTime"
    if job.dependency:
        verdict = dependency_verdict(state, job)
        if verdict == dependency.NEVER:
            return "DependencyNeverSatisfied"
        if verdict == dependency.WAITING:
            return "Dependency"
    if job.array_max_running and job.array_job_id is not None:
        if running_per_array.get(job.array_job_id, 0) >= job.array_max_running:
            return "JobArrayTaskLimit"
    return ""


def dependency_verdict(state: State, job: Job) -> str:
    """MET, WAITING or NEVER, from the index (schedd/domain/dependents.py): judged in full
    when first seen, then only the references a state change covers. ``singleton``
    depends on every job of the user and name: one index by user and name, rebuilt after
    a change."""
    if state.dependents.expression(job.id) != job.dependency and not state.watch_dependency(job):
        return dependency.NEVER

    def singleton_clear() -> bool:
        """No other job of this user and name runs, nor waits ahead of this one."""
        running, first = state.singleton_index().get((job.user, job.name), (False, job.id))
        return not running and first >= job.id

    verdict = state.dependents.verdict(job.id, state.summaries, singleton_clear)
    return verdict if verdict is not None else dependency.NEVER
