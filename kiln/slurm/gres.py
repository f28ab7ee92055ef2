"""GRES words: the GPU type users write in ``--gres=gpu:TYPE:N``.

Its own module (not ``kiln.model``) so that the commands that show GPUs (sinfo, scontrol)
need not import the domain's dataclasses: ``dataclasses`` pulls in ``inspect`` and ``ast``,
more than a command's whole run costs otherwise.
"""

from __future__ import annotations

MIG_MARK = " MIG "  # NVML names a MIG device 'NVIDIA A100-SXM4-80GB MIG 1g.10gb'


def gres_type(model: str) -> str:
    """'NVIDIA A100-SXM4-80GB' or 'A100-80GB' -> 'a100': the word users write in --gres=gpu:a100:2.
    A MIG instance's type is its profile: 'NVIDIA A100-SXM4-80GB MIG 1g.10gb' -> '1g.10gb'."""
    if MIG_MARK in model:
        return model.rpartition(MIG_MARK)[2].strip().split(" ")[0].lower()
    word = model.replace("NVIDIA", "").strip().split("-")[0].split(" ")[0]
    return word.lower()


def type_counts(gpus) -> dict[str, int]:
    """GPUs (anything with ``.model``) -> {type: count}, types in the order first seen: a MIG
    GPU of mixed profiles is several typed GPUs on one node (``gpu:3g.40gb:1``, ...)."""
    out: dict[str, int] = {}
    for g in gpus:
        kind = gres_type(g.model)
        out[kind] = out.get(kind, 0) + 1
    return out


def kinds_of(gpus) -> dict[int, str]:
    """GPU index -> type for GPUs of several types (a mixed MIG layout); {} when they are all
    one type (the placement core's fast path: the node's one ``gpu_type`` says it all)."""
    kinds = {g.index: gres_type(g.model) for g in gpus}
    return kinds if len(set(kinds.values())) > 1 else {}


class GpuTypes(dict):
    """Node -> its GPU type ('' for a node of several), for the typed TRES of allocations
    (``gres/gpu:<type>``); ``kinds``: node -> {GPU index: type} for the nodes of several."""

    def __init__(self, uniform=(), kinds=None) -> None:
        super().__init__(uniform)
        self.kinds: dict[str, dict[int, str]] = dict(kinds or {})


def allocation_types(node: str, gpus, gpu_types) -> dict[str, int]:
    """{type: count} of the GPU indices ``gpus`` a job holds on ``node``; {} where the type is
    not known. ``gpu_types``: a ``GpuTypes`` or a plain node -> type mapping."""
    kinds = getattr(gpu_types, "kinds", {}).get(node)
    out: dict[str, int] = {}
    if kinds:
        for i in gpus:
            kind = kinds.get(i, "")
            if kind:
                out[kind] = out.get(kind, 0) + 1
        return out
    kind = gpu_types.get(node, "")
    return {kind: len(gpus)} if kind and gpus else {}


# GPU shares a job may ask for with --gres=NAME:N, beside gpu (scheduler/shares.py): shard
# (Slurm 22.05's gres/shard: N of a GPU's shards) and mps (gres/mps: N units, of the
# node's mps_per_gpu, on one GPU: CUDA MPS's thread percentage).
SHARE_NAMES = ("shard", "mps")


class GresError(ValueError):
    """A --gres item that names a GPU share but not a count Slurm takes."""


def take_shares(items: list[str]) -> tuple[dict[str, int], list[str]]:
    """The non-GPU items of --gres (``parse_gres``'s ``others``) -> ({share name: count}, the
    rest). ``shard`` is one shard, ``shard:N`` N of them, likewise ``mps:N``; ``shard:0``,
    ``mps:x`` or both kinds at once (one GPU is shared one way) raise."""
    asked: dict[str, int] = {}
    rest = []
    for item in items:
        parts = item.split(":")
        if parts[0] not in SHARE_NAMES:
            rest.append(item)
            continue
        if len(parts) == 1:
            asked[parts[0]] = 1
        elif len(parts) == 2 and parts[1].isdigit() and 0 < int(parts[1]) <= 1 << 20:
            asked[parts[0]] = int(parts[1])
        else:
            raise GresError(item)
    if len(asked) > 1:
        raise GresError(",".join(asked))
    return asked, rest


def thread_percentage(units: int, per_gpu: int) -> int:
    """CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for ``units`` of a GPU's ``per_gpu`` MPS units:
    Slurm's units * 100 / per_gpu, an integer."""
    return units * 100 // per_gpu if per_gpu > 0 else 100
