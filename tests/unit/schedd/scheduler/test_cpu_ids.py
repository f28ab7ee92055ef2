"""The scheduler's CPU ids: distinct per running job on a node, near the job's GPUs first."""

from kiln.model import GPU, NodeAllocation
from schedd.scheduler.profile import NodeTimeline
from schedd.scheduler.snapshot import NodeView


def _node() -> NodeTimeline:
    gpus = [GPU(0, "u0", "a100", 0, 0, [0, 1, 2, 3]), GPU(1, "u1", "a100", 0, 1, [4, 5, 6, 7])]
    return NodeTimeline(0, NodeView("n1", 8, 1000, gpus), 0.0)


def test_cpu_ids_are_never_shared_and_skip_held_ones() -> None:
    tl = _node()
    held = NodeAllocation("n1", 2, 0, [], [0, 1])
    tl.take_now(held.cpus, 0, held.gpus, held.cpu_ids)
    first, second = tl.pick_cpus(1), tl.pick_cpus(1)
    assert first == [2] and second == [3]


def test_cpus_near_the_chosen_gpu_are_preferred() -> None:
    tl = _node()
    assert tl.pick_cpus(2, [1]) == [4, 5]
    assert tl.pick_cpus(3) == [0, 1, 2]
