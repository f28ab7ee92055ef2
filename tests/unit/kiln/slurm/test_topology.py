"""[topology] in kiln.toml (kiln/slurm/topology.py): places, addresses, Slurm's lines, the
grouping of `kiln up --topology-*`, and one-line errors at load."""

from __future__ import annotations

import pytest

from kiln import config
from kiln.paths import ConfigError
from kiln.slurm import topology
from schedd.domain.jobenv import topology_addr

TREE = {"switches": [
    {"name": "l1", "nodes": "n[1-2]"}, {"name": "l2", "nodes": "n[3-4]"},
    {"name": "l3", "nodes": "n5"},
    {"name": "pod", "switches": "l[1-2]"}, {"name": "top", "switches": "pod,l3"}]}


def test_tree_places_bottom_up_padded_to_the_deepest() -> None:
    topo = topology.parse(TREE)
    assert topo.places["n3"].path == ("l2", "pod", "top")
    assert topo.places["n5"].path == ("l3", "top", "top")  # a shallower leaf, padded
    assert topo.places["n3"].leaf_size == 2
    assert topology_addr(topo, "n3") == {"SLURM_TOPOLOGY_ADDR": "top.pod.l2.n3",
                                         "SLURM_TOPOLOGY_ADDR_PATTERN": "switch.switch.switch.node"}
    assert topology_addr(topo, "zz") == {"SLURM_TOPOLOGY_ADDR": "zz",
                                         "SLURM_TOPOLOGY_ADDR_PATTERN": "node"}
    assert topology_addr(None, "n1")["SLURM_TOPOLOGY_ADDR_PATTERN"] == "node"


def test_tree_lines_as_scontrol_show_topology_prints_them() -> None:
    topo = topology.parse(TREE)
    assert topo.show() == [
        "SwitchName=l1 Level=0 LinkSpeed=1 Nodes=n[1-2]",
        "SwitchName=l2 Level=0 LinkSpeed=1 Nodes=n[3-4]",
        "SwitchName=l3 Level=0 LinkSpeed=1 Nodes=n5",
        "SwitchName=pod Level=1 LinkSpeed=1 Nodes=n[1-4] Switches=l[1-2]",
        "SwitchName=top Level=2 LinkSpeed=1 Nodes=n[1-5] Switches=pod,l3",
    ]
    assert [line.split()[0] for line in topo.show("n5")] == ["SwitchName=l3", "SwitchName=top"]


def test_blocks_and_their_aggregates() -> None:
    topo = topology.parse({"plugin": "block", "block_sizes": [2, 4],
                           "blocks": [{"name": f"b{i}", "nodes": f"n[{2 * i - 1}-{2 * i}]"}
                                      for i in range(1, 5)]})
    # b1 and b2 form the first 4-node aggregate, b3 and b4 the second
    assert topo.places["n1"].path[1] == topo.places["n3"].path[1]
    assert topo.places["n1"].path[1] != topo.places["n5"].path[1]
    assert topo.places["n6"].addr == "b3.n6" and topo.places["n6"].pattern == "block.node"


def test_grouped_in_node_order() -> None:
    names = [f"node{i}" for i in range(1, 8)]
    table = topology.grouped(names, "block", 2)
    assert table["blocks"] == [{"name": "b1", "nodes": "node[1-4]"},
                               {"name": "b2", "nodes": "node[5-7]"}]
    table = topology.grouped(names, "switch", 3)
    assert table["switches"][-1] == {"name": "top", "switches": "s1,s2,s3"}
    with pytest.raises(topology.TopologyError, match="between 1 and the 7 nodes"):
        topology.grouped(names, "block", 9)


@pytest.mark.parametrize(("table", "words"), [
    ({"plugin": "tree", "blocks": []}, "blocks and block_sizes are for plugin"),
    ({"switches": [{"name": "a"}]}, "give either nodes or switches"),
    ({"switches": [{"name": "a", "nodes": "n[1-"}]}, "unbalanced brackets"),
    ({"switches": [{"name": "a", "nodes": "n1", "speed": 1}]}, "unknown key 'speed'"),
    ({"switches": "a"}, "a list of tables"),
    ({"plugin": "block", "blocks": [{"name": "b", "nodes": "n1"}, {"name": "b", "nodes": "n2"}]},
     "defined twice"),
    ({"plugin": "block", "blocks": [{"name": "b", "nodes": "n1"}], "block_sizes": [2, 1]},
     "rising"),
])
def test_bad_tables_are_refused_at_load_in_one_line(table: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as err:
        config.from_dict({"topology": table})
    assert "\n" not in str(err.value) and "[topology]" in str(err.value)


def test_no_table_is_no_topology() -> None:
    assert config.from_dict({}).topology is None
    cfg = config.from_dict({"topology": TREE, "scheduler": {"max_switch_wait": 60}})
    assert cfg.topology.plugin == "tree" and cfg.scheduler.max_switch_wait == 60
