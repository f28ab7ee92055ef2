"""Topology-aware placement (scheduler/topology.py): fewest leaves, best fit among groups,
--segment, --switches with its wait, --exclusive=topo, reservations under the same rule."""

from __future__ import annotations

from dataclasses import replace

from kiln.config import SchedulerConfig
from kiln.slurm import topology as vocab
from schedd.scheduler.cycle import schedule
from schedd.scheduler.snapshot import Snapshot
from tests.builders import node_view, pending, running

NOW = 1_000_020.0
NAMES = [f"n{i}" for i in range(1, 9)]


def cluster(table: dict | None = None, gpus: int = 4) -> list:
    topo = vocab.parse(table or vocab.grouped(NAMES, "block", 2))
    return [node_view(n, gpus, topo=topo.places[n]) for n in NAMES]


def busy(job_id: int, node: str, gpus: int = 1, end: float = NOW + 3600):
    return running(job_id, node, range(gpus), start=NOW - 60, end=end)


def nodes_of(decisions, job_id: int) -> list[str]:
    for s in decisions.starts:
        if s.job_id == job_id:
            return sorted(a.node for a in s.allocation)
    return []


def test_gang_goes_in_the_whole_block_not_the_fragmented_one() -> None:
    # n1 has a GPU busy: block b1 (n1-n4) is fragmented, b2 (n5-n8) whole
    nodes = cluster()
    job = pending(1, 4, nodes=4, segment=4)
    d = schedule(Snapshot(NOW, nodes, [busy(9, "n1", 4)], [job]), SchedulerConfig())
    assert nodes_of(d, 1) == ["n5", "n6", "n7", "n8"]
    # flat (no topology), best fit would take the partly used node first
    flat = [replace(n, topo=None) for n in nodes]
    d = schedule(Snapshot(NOW, flat, [busy(9, "n1", 1)], [pending(1, 2, nodes=4)]),
                 SchedulerConfig())
    assert "n1" in nodes_of(d, 1)


def test_best_fit_block_keeps_the_emptiest_whole() -> None:
    # 3 blocks of 4 (n1-n12): b1 has 2 free nodes, b2 3, b3 4. A 3-node job takes b2.
    names = [f"n{i}" for i in range(1, 13)]
    topo = vocab.parse(vocab.grouped(names, "block", 3))
    nodes = [node_view(n, 4, topo=topo.places[n]) for n in names]
    run = [busy(90, "n1", 4), busy(91, "n2", 4), busy(92, "n5", 4)]
    d = schedule(Snapshot(NOW, nodes, run, [pending(1, 4, nodes=3)]), SchedulerConfig())
    assert nodes_of(d, 1) == ["n6", "n7", "n8"]


def test_fewest_blocks_for_a_job_wider_than_a_block() -> None:
    names = [f"n{i}" for i in range(1, 13)]
    topo = vocab.parse(vocab.grouped(names, "block", 3))
    nodes = [node_view(n, 4, topo=topo.places[n]) for n in names]
    run = [busy(90, "n1", 4), busy(91, "n5", 4), busy(92, "n6", 4)]
    # 6 nodes: b3 (4 free) and the smallest block that completes it, b2 (2 free)
    d = schedule(Snapshot(NOW, nodes, run, [pending(1, 4, nodes=6)]), SchedulerConfig())
    assert nodes_of(d, 1) == ["n10", "n11", "n12", "n7", "n8", "n9"]


def test_tree_uses_the_lowest_switch_that_holds_the_job() -> None:
    # two pods of two leaves each (2 nodes a leaf): a 3-node job stays in one pod
    names = [f"n{i}" for i in range(1, 9)]
    table = {"switches": [
        {"name": "l1", "nodes": "n[1-2]"}, {"name": "l2", "nodes": "n[3-4]"},
        {"name": "l3", "nodes": "n[5-6]"}, {"name": "l4", "nodes": "n[7-8]"},
        {"name": "p1", "switches": "l[1-2]"}, {"name": "p2", "switches": "l[3-4]"},
        {"name": "top", "switches": "p[1-2]"}]}
    topo = vocab.parse(table)
    nodes = [node_view(n, 4, topo=topo.places[n]) for n in names]
    run = [busy(90, "n1", 4), busy(91, "n3", 4), busy(92, "n5", 4)]  # p1: 2 free, p2: 3 free
    d = schedule(Snapshot(NOW, nodes, run, [pending(1, 4, nodes=3)]), SchedulerConfig())
    assert nodes_of(d, 1) == ["n6", "n7", "n8"]


def test_segment_job_waits_when_no_block_holds_a_segment() -> None:
    nodes = cluster()
    run = [busy(90, "n1", 4), busy(91, "n5", 4)]  # 3 free in each block
    job = pending(1, 4, nodes=4, segment=4)
    d = schedule(Snapshot(NOW, nodes, run, [job]), SchedulerConfig())
    assert not d.starts and d.reasons[1] == "Resources"
    # it is planned at the end of the first block's blocker, in that block
    assert d.expected_start[1] >= NOW + 3600
    assert len({n[:2] for n in d.reserved_nodes[1]}) >= 1
    assert set(d.reserved_nodes[1]) in ({"n1", "n2", "n3", "n4"}, {"n5", "n6", "n7", "n8"})
    # without --segment the same 4 nodes start now, spread
    d = schedule(Snapshot(NOW, nodes, run, [pending(1, 4, nodes=4)]), SchedulerConfig())
    assert len(nodes_of(d, 1)) == 4


def test_switches_waits_then_takes_what_there_is() -> None:
    nodes = cluster()
    run = [busy(90, "n1", 4), busy(91, "n5", 4)]
    job = pending(1, 4, nodes=4, switches=1, switch_wait=10, submit=NOW - 5)
    d = schedule(Snapshot(NOW, nodes, run, [job]), SchedulerConfig())
    assert not d.starts and d.reasons[1] == "Resources"
    later = replace(job, submit_time=NOW - 10)
    d = schedule(Snapshot(NOW, nodes, run, [later]), SchedulerConfig())
    assert len(nodes_of(d, 1)) == 4


def test_exclusive_topo_takes_a_whole_block_and_holds_the_rest() -> None:
    nodes = cluster()
    job = pending(1, 1, nodes=2, exclusive=True, exclusive_topo=True)
    d = schedule(Snapshot(NOW, nodes, [busy(90, "n1", 1)], [job]), SchedulerConfig())
    assert nodes_of(d, 1) == ["n5", "n6"]
    # running, it keeps n7 and n8 from everyone else
    alloc = d.starts[0].allocation
    held = running(1, "n5", [], start=NOW, end=NOW + 3600, exclusive_topo=True)
    held = replace(held, allocation=alloc)
    small = [pending(k, 1) for k in (2, 3, 4, 5, 6, 7)]
    d = schedule(Snapshot(NOW, nodes, [busy(90, "n1", 1), held], small), SchedulerConfig())
    used = {a.node for s in d.starts for a in s.allocation}
    assert used and not used & {"n5", "n6", "n7", "n8"}


def test_reservation_of_a_segment_job_is_not_broken_by_a_later_job() -> None:
    # a promised segment job's block stays free for it: a later small job does not start there
    nodes = cluster()
    run = [busy(90, "n1", 4, end=NOW + 600), busy(91, "n5", 4, end=NOW + 7200)]
    seg = pending(1, 4, nodes=4, segment=4, minutes=60)
    long_small = pending(2, 4, nodes=1, minutes=600)
    d = schedule(Snapshot(NOW, nodes, run, [seg, long_small]), SchedulerConfig())
    assert set(d.reserved_nodes[1]) == {"n1", "n2", "n3", "n4"}
    assert nodes_of(d, 2) and not set(nodes_of(d, 2)) & {"n2", "n3", "n4"}


def test_validation_errors_are_one_line() -> None:
    import pytest

    cases = [
        ({"plugin": "mesh"}, "plugin"),
        ({"switches": [{"name": "a", "nodes": "n1"}, {"name": "b", "nodes": "n1"}]},
         "already under switch a"),
        ({"switches": [{"name": "a", "switches": "zz"}]}, "unknown switch 'zz'"),
        ({"switches": [{"name": "a", "switches": "b"}, {"name": "b", "switches": "a"}]},
         "a loop"),
        ({"plugin": "block", "blocks": [{"name": "b1", "nodes": "n[1-4]"}],
          "block_sizes": [4, 12]}, "power of two"),
        ({"plugin": "block", "blocks": [{"name": "b1", "nodes": "n[1-4]"}],
          "block_sizes": [2]}, "must hold the largest block"),
    ]
    for table, words in cases:
        with pytest.raises(vocab.TopologyError, match=words) as err:
            vocab.parse(table)
        assert "\n" not in str(err.value)
