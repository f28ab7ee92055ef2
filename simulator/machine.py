"""The simulated cluster a trace is replayed on, and how a trace job's processors map onto it.

Two models:

- **pool** (default): ONE node with ``MaxProcs`` CPUs and no GPUs; a job of ``p`` processors asks
  for ``p`` CPUs on it. This is the textbook model (a machine is a pool of interchangeable
  processors), so figures compare with published pool simulators.
- **gpu** (``--nodes N --gpus-per-node G``): N nodes of G GPUs each. One trace processor is one
  GPU. A job of ``p`` processors becomes a gang of ``k = ceil(p / G)`` nodes with
  ``ceil(p / k)`` GPUs on each (balanced, as ``sbatch -N k --gpus=p`` spreads them), so it holds
  at most ``k - 1`` GPUs more than it asked for. Each node has G CPUs and a job takes one CPU per
  GPU, so CPUs never bind before GPUs. Jobs needing more than N nodes are dropped. Without
  ``--nodes``, N = ceil(MaxProcs / G); without ``--gpus-per-node``, G = 8.

Trace users and groups become ``u<user>`` and account ``g<group>`` (``default`` when the group is
unknown), so the kiln policy's fair share has associations to weigh.

Utilisation is measured in the unit the model allocates: CPU-seconds in the pool, GPU-seconds
(including the rounding above) on the GPU cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.model import GPU
from schedd.scheduler.snapshot import NodeView, PendingJob
from simulator.swf import TraceJob

DEFAULT_GPUS_PER_NODE = 8
GPU_MODEL = "SIM"


@dataclass(slots=True, frozen=True)
class Shape:
    """What a job holds: ``num_nodes`` nodes, each with ``per_node`` units (CPUs or GPUs)."""

    num_nodes: int
    per_node: int

    @property
    def units(self) -> int:
        return self.num_nodes * self.per_node


@dataclass(slots=True)
class Machine:
    nodes: list[NodeView]
    gpus_per_node: int  # 0 for the pool model

    @property
    def capacity(self) -> int:
        """Units (CPUs in the pool, GPUs otherwise) the whole machine has."""
        if self.gpus_per_node:
            return len(self.nodes) * self.gpus_per_node
        return sum(n.cpus for n in self.nodes)

    def shape(self, procs: int) -> Shape | None:
        """The gang a job of ``procs`` processors becomes, or None if it can never run here."""
        if not self.gpus_per_node:
            return Shape(1, procs) if procs <= self.nodes[0].cpus else None
        k = -(-procs // self.gpus_per_node)
        if k > len(self.nodes):
            return None
        return Shape(k, -(-procs // k))

    def pending(self, job: TraceJob, shape: Shape) -> PendingJob:
        """The core's view of a trace job: its shape, its estimate as the time limit. Every job
        keeps the defaults of nice (0), admin priority (none), partition, QOS and
        association priority and reservation (none): the replay vouches for that (``Snapshot.plain_arrivals``)."""
        return PendingJob(
            job_id=job.job_id,
            name=f"{job.job_id:010d}",  # name ties sort as job numbers do
            user=f"u{job.user}" if job.user >= 0 else "",
            account=f"g{job.group}" if job.group >= 0 else "default",
            num_nodes=shape.num_nodes,
            cpus_per_node=shape.per_node,
            gpus_per_node=shape.per_node if self.gpus_per_node else 0,
            time_limit=int(-(-job.estimate // 1)),
            submit_time=job.submit,
        )


def pool(max_procs: int) -> Machine:
    return Machine(nodes=[NodeView(name="pool", cpus=max_procs, memory_mb=0)], gpus_per_node=0)


def gpu_cluster(max_procs: int, nodes: int | None, gpus_per_node: int | None) -> Machine:
    g = gpus_per_node or DEFAULT_GPUS_PER_NODE
    n = nodes or -(-max_procs // g)
    width = len(str(n))
    views = [
        NodeView(
            name=f"sim{i:0{width}d}",
            cpus=g,
            memory_mb=0,
            gpus=[GPU(index=x, uuid=f"GPU-sim-{i}-{x}", model=GPU_MODEL, memory_mb=0)
                  for x in range(g)],
            gpu_type=GPU_MODEL.lower(),
        )
        for i in range(1, n + 1)
    ]
    return Machine(nodes=views, gpus_per_node=g)
