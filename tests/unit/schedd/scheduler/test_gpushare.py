"""The fragmentation measure and each placement's choice, on nodes small enough to do by hand."""

from __future__ import annotations

import random

import pytest

from schedd.scheduler.gpushare import (
    NodeKind,
    NodeState,
    Task,
    Workload,
    options,
    pick_random,
    score,
    stranded,
)

KIND = NodeKind("A", 8000, 8000, 2)
SHARE600 = Task(1000, 1000, 1, 600)
WHOLE1 = Task(1000, 1000, 1, 1000)
CPU_ONLY = Task(1000, 1000, 0, 0)


def state(*frees, cpu=8000, mem=8000, kind=KIND):
    return NodeState(kind, cpu, mem, tuple(sorted(frees, reverse=True)))


def test_fragmentation_by_hand():
    # share-600 tasks cannot use the GPU with 500 left; whole-GPU tasks cannot use a partly
    # used GPU: 500 milli-GPU is a fragment to both
    assert Workload([SHARE600, WHOLE1]).fragmentation(state(1000, 500)) == pytest.approx(500)
    # CPU-only tasks use no GPU: all 1500 is a fragment to them (weight 1/2)
    workload = Workload([SHARE600, WHOLE1, CPU_ONLY, CPU_ONLY])
    assert workload.fragmentation(state(1000, 500)) == pytest.approx(
        0.25 * 500 + 0.25 * 500 + 0.5 * 1500)
    assert Workload([SHARE600]).fragmentation(state(1000, 1000)) == 0


def test_a_task_that_does_not_fit_sees_all_free_gpu_as_fragment():
    workload = Workload([SHARE600, WHOLE1])
    assert workload.fragmentation(state(1000, 500, cpu=500)) == pytest.approx(1500)
    assert Workload([Task(1000, 1000, 1, 1000, frozenset({"B"}))]).fragmentation(
        state(1000, 1000)) == pytest.approx(2000)
    # two whole GPUs wanted, one free: nothing usable
    assert Workload([Task(1000, 1000, 2, 1000)]).fragmentation(state(1000, 400)) == \
        pytest.approx(1400)


def test_options_whole_and_shared():
    assert options(state(1000, 1000), Task(0, 0, 2, 1000)) == [(1000, state(0, 0))]
    assert options(state(1000, 300), Task(0, 0, 2, 1000)) == []
    assert options(state(1000, 700, 700, kind=NodeKind("A", 8000, 8000, 3)),
                   Task(0, 0, 1, 500)) == [
        (1000, state(700, 700, 500, kind=NodeKind("A", 8000, 8000, 3))),
        (700, state(1000, 700, 200, kind=NodeKind("A", 8000, 8000, 3)))]
    assert options(state(1000, 1000, mem=10), WHOLE1) == []
    assert options(state(1000, 1000), Task(0, 0, 1, 1000, frozenset({"B"}))) == []


def best(placement, states, task, workload=None):
    """The state a placement chooses among ``states`` and the state after."""
    scored = [(score(placement, s, task, workload), i) for i, s in enumerate(states)]
    (rank, after), i = min((x for x in scored if x[0] is not None), key=lambda x: (x[0][0], x[1]))
    return i, after


def test_each_placement_on_a_tiny_cluster():
    partly, empty = state(1000, 300), state(1000, 1000)
    task = Task(1000, 1000, 1, 300)
    assert best("bestfit", [partly, empty], task) == (0, state(1000, 0, cpu=7000, mem=7000))
    assert best("worstfit", [partly, empty], task) == (1, state(1000, 700, cpu=7000, mem=7000))
    # whole-GPU workload: filling the 300 left removes a fragment (-300); any other choice adds
    # a partly used GPU (+700)
    workload = Workload([WHOLE1])
    assert best("fgd", [partly, empty], task, workload) == (0, state(1000, 0, cpu=7000, mem=7000))
    assert best("kiln", [partly, empty], task, workload) == (0, state(1000, 0, cpu=7000, mem=7000))
    # dotprod: a CPU-heavy task goes where most CPU is free
    rich, poor = state(1000, 1000, cpu=8000), state(1000, 1000, cpu=2000)
    heavy = Task(2000, 0, 1, 1000)
    assert best("dotprod", [poor, rich], heavy)[0] == 1
    assert best("bestfit", [poor, rich], heavy)[0] == 0


def test_kiln_keeps_an_untouched_8_gpu_box_for_8_gpu_tasks():
    box = NodeKind("G", 96000, 96000, 8)
    whole = NodeState.empty(box)
    used = NodeState(box, 96000, 96000, (1000,) * 7 + (0,))
    # a workload of one-GPU tasks only: fgd sees no difference (both +0), kiln keeps the box
    workload = Workload([WHOLE1])
    assert score("fgd", whole, WHOLE1, workload)[0][0] == 0
    assert best("kiln", [whole, used], WHOLE1, workload)[0] == 1


def test_random_picks_only_fitting_nodes():
    rng = random.Random(1)
    states = [(state(1000, 1000, cpu=0), 5), (state(1000, 200), 1)]
    for _ in range(20):
        assert pick_random(states, Task(1000, 0, 1, 500), rng) == (1, state(500, 200, cpu=7000))
    assert pick_random(states, Task(1000, 0, 2, 1000), rng) is None


def test_unknown_placement_and_missing_workload():
    with pytest.raises(ValueError):
        score("nope", state(1000), WHOLE1)
    with pytest.raises(ValueError):
        score("fgd", state(1000, 1000), WHOLE1)


def test_kiln_counts_gpu_the_free_cpu_cannot_feed():
    # the workload asks 1 GPU per 1000 milli-cores: a 2-GPU node with 1000 cores free strands one
    workload = Workload([WHOLE1])
    assert workload.gpu_per_cpu == 1.0
    assert stranded(state(1000, 1000, cpu=1000), workload) == 1000
    assert stranded(state(1000, 1000, cpu=8000), workload) == 0
    # a CPU-only task: fgd sees +0 on both nodes (WHOLE1 still fits) and takes the first;
    # kiln puts it where taking the cores strands no GPU
    tight, roomy = state(1000, 1000, cpu=2000), state(1000, 1000, cpu=8000)
    assert best("fgd", [tight, roomy], CPU_ONLY, workload)[0] == 0
    assert best("kiln", [tight, roomy], CPU_ONLY, workload)[0] == 1
