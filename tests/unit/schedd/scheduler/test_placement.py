"""Placement: hard filters, best fit across nodes, NVLink islands inside a node, exclusive."""

from __future__ import annotations

from kiln.config import SchedulerConfig
from kiln.model import NodeAllocation
from schedd.scheduler.cycle import schedule
from schedd.scheduler.profile import NodeTimeline
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot
from tests.builders import node_view, running

NOW = 1_000_020.0


def node(name: str, gpus: int = 8, islands: int = 2, **kw) -> NodeView:
    return node_view(name, gpus, model="H100", per_island=max(gpus // islands, 1), **kw)


def run(job_id: int, name: str, gpus: list[int], cpus: int = 1) -> RunningJob:
    return running(job_id, name, gpus, cpus=cpus, start=NOW - 60, end=NOW + 3600)


def one(job: PendingJob, nodes: list[NodeView], running: list[RunningJob] = ()):
    d = schedule(Snapshot(NOW, nodes, list(running), [job]), SchedulerConfig())
    return d, (d.starts[0].allocation if d.starts else None)


def test_best_fit_fills_partly_used_node_first() -> None:
    nodes = [node("a"), node("b"), node("c")]
    _d, alloc = one(PendingJob(1, gpus_per_node=2), nodes, [run(9, "b", [0, 1, 2, 3, 4])])
    assert alloc[0].node == "b"
    assert alloc[0].gpus == [5, 6]


def test_islands_kept_whole() -> None:
    # island 0 = 0-3, island 1 = 4-7; 1 and 5 used: island 0 has 3 free, island 1 has 3 free
    _d, alloc = one(PendingJob(1, gpus_per_node=3), [node("a")], [run(9, "a", [1, 5])])
    assert alloc[0].gpus in ([0, 2, 3], [4, 6, 7])
    # a 4-GPU job takes a whole free island rather than pieces of two
    _d, alloc = one(PendingJob(1, gpus_per_node=4), [node("a")], [run(9, "a", [1])])
    assert alloc[0].gpus == [4, 5, 6, 7]
    # a 2-GPU job goes where it leaves the largest island whole
    _d, alloc = one(PendingJob(1, gpus_per_node=2), [node("a")], [run(9, "a", [0, 1])])
    assert alloc[0].gpus == [2, 3]


def test_pick_gpus_spanning_islands_takes_whole_islands_first() -> None:
    tl = NodeTimeline(0, node("a", gpus=8, islands=4), NOW)  # islands of 2
    assert tl.pick_gpus(5) == [0, 1, 2, 3, 4]
    assert tl.gpus_free == [5, 6, 7]


def test_hard_filters() -> None:
    nodes = [
        node("a", partitions=frozenset({"gpu"}), features=frozenset({"ib"})),
        node("b", partitions=frozenset({"debug"}), features=frozenset({"ib", "nvme"})),
        node("c", partitions=frozenset({"gpu"}), gpu_type="a100"),
    ]
    assert one(PendingJob(1, partition="debug", gpus_per_node=1), nodes)[1][0].node == "b"
    assert one(PendingJob(1, features=frozenset({"nvme"})), nodes)[1][0].node == "b"
    assert one(PendingJob(1, gpu_type="a100", gpus_per_node=1), nodes)[1][0].node == "c"
    assert one(PendingJob(1, nodelist=frozenset({"c"})), nodes)[1][0].node == "c"
    got = one(PendingJob(1, exclude=frozenset({"a", "b"}), partition="gpu"), nodes)[1]
    assert got[0].node == "c"


def test_never_fits_and_unavailable_reasons() -> None:
    nodes = [node("a"), node("b", available=False)]
    d, alloc = one(PendingJob(1, gpus_per_node=9), nodes)
    assert alloc is None and d.reasons[1] == "BadConstraints"
    d, alloc = one(PendingJob(1, gpu_type="a100", gpus_per_node=1), nodes)
    assert d.reasons[1] == "BadConstraints"
    d, alloc = one(PendingJob(1, num_nodes=2, gpus_per_node=1), nodes)
    assert alloc is None and d.reasons[1] == "ReqNodeNotAvail"
    d, alloc = one(PendingJob(1, nodelist=frozenset({"b"})), nodes)
    assert alloc is None and d.reasons[1] == "ReqNodeNotAvail"


def test_unavailable_node_takes_nothing_new() -> None:
    nodes = [node("a", available=False), node("b")]
    assert one(PendingJob(1, gpus_per_node=1), nodes)[1][0].node == "b"


def test_exclusive_takes_whole_idle_node() -> None:
    nodes = [node("a"), node("b")]
    _d, alloc = one(PendingJob(1, exclusive=True, gpus_per_node=1), nodes,
                    [run(9, "a", [0])])
    assert alloc[0].node == "b"
    assert alloc[0].cpus == 64 and len(alloc[0].gpus) == 8 and alloc[0].memory_mb == 512_000
    d, alloc = one(PendingJob(1, exclusive=True), [node("a")], [run(9, "a", [], cpus=1)])
    assert alloc is None and d.reasons[1] == "Resources"


def test_nodelist_is_part_of_the_gang() -> None:
    nodes = [node("a"), node("b"), node("c")]
    _d, alloc = one(PendingJob(1, num_nodes=2, gpus_per_node=8, nodelist=frozenset({"c"})),
                    nodes)
    assert {a.node for a in alloc} == {"a", "c"}


def test_cpu_job_avoids_free_gpus() -> None:
    nodes = [node("gpu1"), NodeView("cpu1", 64, 512_000)]
    assert one(PendingJob(1, cpus_per_node=4), nodes)[1][0].node == "cpu1"


def test_memory_is_a_resource() -> None:
    nodes = [node("a"), node("b")]
    running = [RunningJob(9, [NodeAllocation("a", 1, 500_000, [])], NOW - 60, NOW + 3600)]
    assert one(PendingJob(1, mem_per_node_mb=100_000), nodes, running)[1][0].node == "b"


def test_no_nodes_or_no_size_never_fits() -> None:
    d = schedule(Snapshot(NOW, [], [], [PendingJob(1)]), SchedulerConfig())
    assert d.starts == [] and d.reasons == {1: "BadConstraints"}
    d, alloc = one(PendingJob(1, num_nodes=0), [node("a")])
    assert alloc is None and d.reasons[1] == "BadConstraints"
