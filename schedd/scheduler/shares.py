"""GPU shares: a GPU's capacity divided into equal shares, several jobs on one GPU.

Slurm 22.05's gres/shard: a node offers ``shards_per_gpu`` shards on each of its GPUs, and
``--gres=shard:N`` asks for N of them on each node of the job. Slurm's rule couples the two
kinds: a GPU some shards of which are in use is not handed out whole, and a GPU in use whole
offers no shards. So in the availability profile (``profile.NodeTimeline``) a GPU in use by
shards counts as one GPU taken, from the first share-holder's start until the last one's end;
which shares of it are taken is kept beside (``NodeTimeline.shares``), for now only: the plan
for the future counts whole GPUs, as it does for every job (a share job planned ahead is
planned on fresh GPUs, which is conservative: it may start sooner, on a GPU already shared).

The arithmetic is on "units per GPU", not on shards as such, so MPS (``--gres=mps:N``, its
percent of a GPU) can reuse it with other units. Pure: no clock, no database, no sockets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def whole_gpus(units: int, per_gpu: int) -> int:
    """The fresh GPUs ``units`` shares need at most (what the plan counts for a share job)."""
    if units <= 0 or per_gpu <= 0:
        return 0
    return -(-units // per_gpu)


def pick(units: int, per_gpu: int, shared_free: Mapping[int, int], fresh: Sequence[int]
         ) -> tuple[dict[int, int], list[int]] | None:
    """Where ``units`` shares go on one node: ``{GPU index: shares}`` and which of them are
    fresh (whole-free GPUs opened for shares), or None if the node cannot hold them now.

    ``shared_free`` is each GPU already in use by shares -> its shares still free; ``fresh``
    the node's whole-free GPU indices, in the order they should be opened. Best fit: the
    shared GPU with the fewest free shares that holds them all, else one fresh GPU, else the
    shares spread over the shared GPUs (most free first), then fresh GPUs, so what stays free
    is in as few, as large pieces as can be.
    """
    if units <= 0 or per_gpu <= 0:
        return None
    fitting = [(free, g) for g, free in shared_free.items() if free >= units]
    if fitting:
        _free, g = min(fitting)
        return {g: units}, []
    if fresh and units <= per_gpu:
        return {fresh[0]: units}, [fresh[0]]
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
