"""What Slurm refuses at submit time before a job exists, with its messages: shared by sbatch
and srun (each passes its lead, ``Batch job submission failed`` or ``Unable to allocate
resources``). schedd checks the rest (partition, nodes, shape, account) at admission."""

from cli.errors import fail, submit_failure

# Annotations are written as strings rather than through `from __future__ import annotations`:
# importing `__future__` costs every command ~0.1 ms of CPU (docs/benchmarks.md, issue 13).
TYPE_CHECKING = False  # typing costs every command ms to import: checkers only
if TYPE_CHECKING:
    from typing import Any

INVALID_GRES = "Invalid generic resource (gres) specification"
GPUS_PER_TASK = ("Failed to validate job spec. --gpus-per-task used without either --gpus or "
                 "-n/--ntasks is not allowed.")


def check_request(settings: "dict[str, Any]", lead: str) -> None:
    """Raise the CommandError Slurm's client or controller answers a request with, if any."""
    check_clusters(settings.get("clusters") or settings.get("cluster"))
    gpus = any(settings.get(k) for k in ("gpus", "gpus_per_node", "gpus_per_task"))
    if settings.get("gres"):  # a generic resource other than gpu: none is configured
        fail(*submit_failure(INVALID_GRES, lead))
    if settings.get("mem_per_gpu_mb") and not gpus:
        fail(*submit_failure(INVALID_GRES, lead))
    tasks = "num_tasks" in settings or settings.get("ntasks_per_node")  # sbatch: N x per node
    if settings.get("gpus_per_task") and not settings.get("gpus") and not tasks:
        fail(*submit_failure(f"{GPUS_PER_TASK}\n{INVALID_GRES}", lead))


def check_clusters(value: "str | None") -> None:
    """-M/--clusters: kiln is one cluster; another name is what slurmdbd does not know."""
    if not value:
        return
    from schedd.config import load

    here = load().cluster_name
    for name in value.split(","):
        if name not in (here, "all"):
            fail(f"'{value}' can't be reached now, or it is an invalid entry for --cluster.  "
                 "Use 'sacctmgr list clusters' to see available clusters.")
