"""GPU shares: a GPU's capacity divided into equal shares, several jobs on one GPU.

Slurm 22.05's gres/shard: a node offers ``shards_per_gpu`` shards on each of its GPUs, and
``--gres=shard:N`` asks for N of them on each node of the job. Slurm's rule couples the two
kinds: a GPU some shards of which are in use is not handed out whole, and a GPU in use whole
offers no shards. So in the availability profile (``profile.NodeTimeline``) a GPU in use by
shards counts as one GPU taken, from the first share-holder's start until the last one's end;
which shares of it are taken is kept beside (``NodeTimeline.shares``), for now only: the plan
for the future counts whole GPUs, as it does for every job (a share job planned ahead is
planned on fresh GPUs, which is conservative: it may start sooner, on a GPU already shared).

The arithmetic is on "units per GPU", not on shards as such, and two kinds of share use it
(``KINDS``): ``shard`` and ``mps`` (Slurm 22.05's gres/mps: a node offers ``mps_per_gpu``
units on each GPU, e.g. 100, and ``--gres=mps:N`` asks for N of them on ONE GPU of each node;
the job runs under CUDA MPS with N/mps_per_gpu of the GPU's threads). A GPU is shared one way
at a time: one in use by shards offers no MPS and one in use by MPS no shards, and neither is
handed out whole. Everything that differs between the kinds is here (``asked``,
``per_gpu``, ``most_on_node``, ``pick``'s ``one_gpu``). Pure: no clock, no database, no
sockets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schedd.scheduler.snapshot import NodeView, PendingJob

SHARD, MPS = "shard", "mps"
KINDS = (SHARD, MPS)


def asked(job: PendingJob) -> tuple[str, int]:
    """The share a job asks for on each node: (kind, units); ("", 0) for none."""
    if job.mps_per_node:
        return MPS, job.mps_per_node
    if job.shards_per_node:
        return SHARD, job.shards_per_node
    return "", 0


def per_gpu(node: NodeView, kind: str) -> int:
    """The units of ``kind`` each of the node's GPUs offers (0: none)."""
    return node.mps_per_gpu if kind == MPS else node.shards_per_gpu


def most_on_node(kind: str, units_per_gpu: int, gpus: int) -> int:
    """The most units of ``kind`` one job may hold on a node of ``gpus`` GPUs: shards span
    its GPUs, MPS stays on one (Slurm 22.05)."""
    if units_per_gpu <= 0 or gpus <= 0:
        return 0
    return units_per_gpu if kind == MPS else units_per_gpu * gpus


def holds(job: PendingJob, node: NodeView, gpus: int) -> bool:
    """Whether a node of ``gpus`` GPUs could ever hold the job's share (True for none)."""
    kind, units = asked(job)
    return not units or units <= most_on_node(kind, per_gpu(node, kind), gpus)


def whole_gpus(units: int, per_gpu: int) -> int:
    """The fresh GPUs ``units`` shares need at most (what the plan counts for a share job)."""
    if units <= 0 or per_gpu <= 0:
        return 0
    return -(-units // per_gpu)


def pick(units: int, per_gpu: int, shared_free: Mapping[int, int], fresh: Sequence[int],
         one_gpu: bool = False) -> tuple[dict[int, int], list[int]] | None:
    """Where ``units`` shares go on one node: ``{GPU index: shares}`` and which of them are
    fresh (whole-free GPUs opened for shares), or None if the node cannot hold them now.

    ``shared_free`` is each GPU already in use by shares -> its shares still free; ``fresh``
    the node's whole-free GPU indices, in the order they should be opened. Best fit: the
    shared GPU with the fewest free shares that holds them all, else one fresh GPU, else the
    shares spread over the shared GPUs (most free first), then fresh GPUs, so what stays free
    is in as few, as large pieces as can be. ``one_gpu`` (MPS): never spread.
    """
    if units <= 0 or per_gpu <= 0:
        return None
    fitting = [(free, g) for g, free in shared_free.items() if free >= units]
    if fitting:
        _free, g = min(fitting)
        return {g: units}, []
    if fresh and units <= per_gpu:
        return {fresh[0]: units}, [fresh[0]]
    if one_gpu:
        return None
    out: dict[int, int] = {}
    need = units
    for free, g in sorted(((free, g) for g, free in shared_free.items() if free > 0),
                          key=lambda p: (-p[0], p[1])):
        take = min(free, need)
        out[g] = take
        need -= take
        if not need:
            return out, []
    opened = []
    for g in fresh:
        take = min(per_gpu, need)
        out[g] = take
        opened.append(g)
        need -= take
        if not need:
            return out, opened
    return None


def share_of_gpu(units: int, per_gpu: int) -> float:
    """The part of one GPU ``units`` shares are (accounting's GPU-hours)."""
    return units / per_gpu if per_gpu > 0 else 0.0
