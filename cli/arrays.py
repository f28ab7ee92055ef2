"""Job arrays as Slurm's commands show them: an array's tasks that have not started yet are one
record in slurmctld (the array's meta record, split as tasks start), so squeue and scontrol
fold kiln's per-task records of them into one."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from typing import Any


def fold_pending_arrays(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Slurm keeps an array's not-yet-started tasks in one record: squeue shows it as
    '123_[4-9%2]' (``display_id``), scontrol as ``JobId=123 ArrayTaskId=4-9%2``
    (``array_task_ranges``)."""
    from kiln.slurm.hostlist import compress

    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    out: list[dict[str, Any]] = []
    for job in jobs:
        aid = job.get("array_job_id")
        if (aid is None or job.get("array_task_id") is None or job["state"] != "PENDING"
                or job.get("restart_count")):
            out.append(job)
            continue
        key = (aid, job.get("reason") or "")
        if key not in groups:
            groups[key] = []
            out.append({"_fold": key})
        groups[key].append(job)
    result = []
    for job in out:
        if "_fold" not in job:
            result.append(job)
            continue
        tasks = groups[job["_fold"]]
        if len(tasks) == 1:
            result.append(tasks[0])
            continue
        ids = compress([f"t{t['array_task_id']}" for t in tasks])
        ranges = ids[2:-1] if ids.startswith("t[") else ids[1:]
        first = dict(tasks[0])
        throttle = first.get("array_max_running") or 0
        first["array_task_ranges"] = f"{ranges}{f'%{throttle}' if throttle else ''}"
        first["display_id"] = f"{first['array_job_id']}_[{first['array_task_ranges']}]"
        first["array_task_id"] = None
        first["_folded"] = True
        result.append(first)
    return result
