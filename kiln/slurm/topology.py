"""Network topology, Slurm's two plugins: topology/tree (switches holding nodes or child
switches, topology.conf's ``SwitchName=``) and topology/block (blocks of nodes and the block
sizes a job may be placed in, ``BlockName=``, ``BlockSizes=``).

kiln.toml's ``[topology]`` (docs/admin-guide.md, "Network topology")::

    [topology]
    plugin = "tree"                      # or "block"
    switches = [{name = "s0", nodes = "n[1-4]"}, {name = "s1", nodes = "n[5-8]"},
                {name = "top", switches = "s[0-1]"}]
    # block: blocks = [{name = "b1", nodes = "n[1-4]"}, ...], block_sizes = [4, 8]

Validated at load with one-line errors. What the scheduler core reads is each node's
``Place``: its groups bottom-up (leaf switch or base block first, the top group last; every
node's path as long as the deepest), the size of its leaf, its address
(``SLURM_TOPOLOGY_ADDR``). Standard library only: the commands read it on their fast path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.slurm.hostlist import HostlistError, compress, expand

PLUGINS = ("tree", "block")


class TopologyError(ValueError):
    """A [topology] table that cannot be used, in one line."""


@dataclass(frozen=True, slots=True)
class Place:
    """Where a node sits in the network: ``path`` bottom-up (its leaf switch or base block
    first), ``leaf_size`` the nodes of that leaf, ``addr``/``pattern`` Slurm's
    ``SLURM_TOPOLOGY_ADDR`` / ``SLURM_TOPOLOGY_ADDR_PATTERN`` (top down, the node last)."""

    path: tuple[str, ...]
    leaf_size: int
    addr: str
    pattern: str


@dataclass(slots=True)
class Switch:
    name: str
    nodes: list[str] = field(default_factory=list)  # a leaf's own nodes
    children: list[str] = field(default_factory=list)  # child switches
    level: int = 0  # 0: a leaf; a parent is one above its highest child


@dataclass(slots=True)
class Block:
    name: str
    nodes: list[str]
    index: int


@dataclass(slots=True)
class Topology:
    plugin: str  # "tree" | "block"
    switches: dict[str, Switch] = field(default_factory=dict)  # in config order
    blocks: list[Block] = field(default_factory=list)
    block_sizes: list[int] = field(default_factory=list)  # nodes; the first is the base
    places: dict[str, Place] = field(default_factory=dict)  # node -> its place

    def nodes_under(self, name: str) -> list[str]:
        """Every node under switch ``name``."""
        sw = self.switches[name]
        out = list(sw.nodes)
        for child in sw.children:
            out += self.nodes_under(child)
        return out

    def show(self, node: str = "") -> list[str]:
        """``scontrol show topology [NODE]``: Slurm's lines (only the groups holding NODE)."""
        lines = []
        if self.plugin == "block":
            base = self.block_sizes[0]
            for b in self.blocks:
                if node and node not in b.nodes:
                    continue
                lines.append(f"BlockName={b.name} BlockIndex={b.index} "
                             f"Nodes={compress(b.nodes)} BlockSize={base}")
            return lines
        for sw in self.switches.values():
            under = self.nodes_under(sw.name)
            if node and node not in under:
                continue
            line = f"SwitchName={sw.name} Level={sw.level} LinkSpeed=1 Nodes={compress(under)}"
            if sw.children:
                line += f" Switches={compress(sw.children)}"
            lines.append(line)
        return lines


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str) or not value.strip():
        raise TopologyError(f"{where}: a hostlist such as \"n[1-4]\", not {value!r}")
    try:
        return expand(value)
    except HostlistError as exc:
        raise TopologyError(f"{where}: {exc}") from None


def parse(data: Any, where: str = "[topology]") -> Topology | None:
    """kiln.toml's ``[topology]`` table -> a validated Topology (None: no table, or empty)."""
    if not data:
        return None
    if not isinstance(data, dict):
        raise TopologyError(f"{where}: expected a table")
    known = {"plugin", "switches", "blocks", "block_sizes"}
    for key in data:
        if key not in known:
            raise TopologyError(f"{where}: unknown key {key!r}")
    plugin = data.get("plugin", "block" if "blocks" in data else "tree")
    if plugin not in PLUGINS:
        raise TopologyError(f"{where} plugin: \"tree\" or \"block\", not {plugin!r}")
    if plugin == "tree":
        if "blocks" in data or "block_sizes" in data:
            raise TopologyError(f"{where}: blocks and block_sizes are for plugin = \"block\"")
        return _tree(data.get("switches"), where)
    if "switches" in data:
        raise TopologyError(f"{where}: switches are for plugin = \"tree\"")
    return _block(data.get("blocks"), data.get("block_sizes"), where)


def _entries(value: Any, what: str, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
        raise TopologyError(f"{where} {what}: a list of tables, each with a name")
    return value


def _tree(value: Any, where: str) -> Topology:
    topo = Topology("tree")
    owner: dict[str, str] = {}  # node -> its leaf switch
    for entry in _entries(value, "switches", where):
        name = entry.get("name")
        at = f"{where} switch {name!r}"
        if not isinstance(name, str) or not name or any(c in name for c in " ,[]="):
            raise TopologyError(f"{where} switches: each needs a name, not {name!r}")
        if name in topo.switches:
            raise TopologyError(f"{at}: defined twice")
        for key in entry:
            if key not in ("name", "nodes", "switches"):
                raise TopologyError(f"{at}: unknown key {key!r}")
        if ("nodes" in entry) == ("switches" in entry):
            raise TopologyError(f"{at}: give either nodes or switches")
        sw = Switch(name)
        if "nodes" in entry:
            sw.nodes = _names(entry["nodes"], f"{at} nodes")
            for node in sw.nodes:
                if node in owner:
                    raise TopologyError(f"{at}: node {node} is already under switch "
                                        f"{owner[node]}")
                owner[node] = name
        else:
            sw.children = _names(entry["switches"], f"{at} switches")
        topo.switches[name] = sw
    parent: dict[str, str] = {}
    for sw in topo.switches.values():
        for child in sw.children:
            if child not in topo.switches:
                raise TopologyError(f"{where} switch {sw.name!r}: unknown switch {child!r}")
            if child in parent:
                raise TopologyError(f"{where} switch {child!r}: has two parents, "
                                    f"{parent[child]} and {sw.name}")
            parent[child] = sw.name
    for name in topo.switches:  # no switch may be its own ancestor
        seen, at = {name}, name
        while at in parent:
            at = parent[at]
            if at in seen:
                raise TopologyError(f"{where} switch {name!r}: a loop through {at}")
            seen.add(at)

    def level(name: str) -> int:
        sw = topo.switches[name]
        return 0 if not sw.children else 1 + max(level(c) for c in sw.children)

    for sw in topo.switches.values():
        sw.level = level(sw.name)
    chains: dict[str, tuple[str, ...]] = {}
    for node, leaf in owner.items():
        chain = [leaf]
        while chain[-1] in parent:
            chain.append(parent[chain[-1]])
        chains[node] = tuple(chain)
    depth = max(map(len, chains.values()), default=1)
    for node, chain in chains.items():
        padded = chain + (chain[-1],) * (depth - len(chain))
        addr = ".".join(reversed(chain)) + "." + node
        pattern = ".".join(["switch"] * len(chain)) + ".node"
        topo.places[node] = Place(padded, len(topo.switches[chain[0]].nodes), addr, pattern)
    return topo


def _block(value: Any, sizes: Any, where: str) -> Topology:
    topo = Topology("block")
    owner: dict[str, str] = {}
    names: set[str] = set()
    for i, entry in enumerate(_entries(value, "blocks", where)):
        name = entry.get("name")
        at = f"{where} block {name!r}"
        if not isinstance(name, str) or not name or any(c in name for c in " ,[]="):
            raise TopologyError(f"{where} blocks: each needs a name, not {name!r}")
        if name in names:
            raise TopologyError(f"{at}: defined twice")
        for key in entry:
            if key not in ("name", "nodes"):
                raise TopologyError(f"{at}: unknown key {key!r}")
        nodes = _names(entry.get("nodes"), f"{at} nodes")
        for node in nodes:
            if node in owner:
                raise TopologyError(f"{at}: node {node} is already in block {owner[node]}")
            owner[node] = name
        names.add(name)
        topo.blocks.append(Block(name, nodes, i))
    base = max(len(b.nodes) for b in topo.blocks)
    if sizes is None:
        sizes = [base]
    if not isinstance(sizes, list) or not sizes or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise TopologyError(f"{where} block_sizes: a list of node counts, not {sizes!r}")
    if sorted(set(sizes)) != sizes:
        raise TopologyError(f"{where} block_sizes: rising, each once, not {sizes!r}")
    if sizes[0] < base:
        raise TopologyError(f"{where} block_sizes: the first ({sizes[0]}) is the base block "
                            f"size and must hold the largest block ({base} nodes)")
    for s in sizes[1:]:
        if s % sizes[0] or (s // sizes[0]) & (s // sizes[0] - 1):
            raise TopologyError(f"{where} block_sizes: {s} is not the base size ({sizes[0]}) "
                                f"times a power of two")
    topo.block_sizes = list(sizes)
    span = [s // sizes[0] for s in sizes[1:]]  # base blocks per aggregate
    for b in topo.blocks:
        path = (b.name, *(f"@{n}:{b.index // n}" for n in span))
        for node in b.nodes:
            topo.places[node] = Place(path, len(b.nodes), f"{b.name}.{node}", "block.node")
    return topo


def grouped(nodes: list[str], plugin: str, count: int) -> dict[str, Any]:
    """``kiln up --topology-blocks N`` / ``--topology-switches N``: ``nodes`` in order in
    ``count`` groups (as even as they go), as a [topology] table; switches get a top switch."""
    if count < 1 or count > len(nodes):
        raise TopologyError(f"--topology-{plugin}s: between 1 and the {len(nodes)} nodes, "
                            f"not {count}")
    per, extra = divmod(len(nodes), count)
    groups, at = [], 0
    for i in range(count):
        n = per + (i < extra)
        groups.append(nodes[at:at + n])
        at += n
    if plugin == "block":
        return {"plugin": "block", "blocks": [
            {"name": f"b{i + 1}", "nodes": compress(g)} for i, g in enumerate(groups)]}
    leaves = [{"name": f"s{i + 1}", "nodes": compress(g)} for i, g in enumerate(groups)]
    return {"plugin": "tree", "switches": [
        *leaves, {"name": "top", "switches": ",".join(sw["name"] for sw in leaves)}]}
