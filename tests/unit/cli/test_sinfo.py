"""sinfo: grouping of nodes into lines, the default layout, -N, -o, -R and -s."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from cli import sinfo
from kiln.model import GPU, Node, NodeState


def node(name: str, display: str = "IDLE", gpus: int = 8, alloc_gpus: int = 0,
         alloc_cpus: int = 0, reason: str = "", partitions=("gpu",)) -> dict[str, Any]:
    state = {"DOWN": NodeState.DOWN, "DRAIN": NodeState.DRAIN}.get(display, NodeState.IDLE)
    n = Node(name, cpus=64, memory_mb=512000, partitions=list(partitions), state=state,
             reason=reason, gpus=[GPU(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", 81559)
                                  for i in range(gpus)])
    d = dataclasses.asdict(n)
    d.update(state_display=display, alloc_cpus=alloc_cpus, alloc_mem_mb=0, alloc_gpus=alloc_gpus)
    return d


NODES = [node("gpu01", "MIXED", alloc_gpus=3, alloc_cpus=3), node("gpu02"), node("gpu03"),
         node("gpu04", "DRAIN", reason="bad fan"), node("cpu1", gpus=0, partitions=("cpu",))]
PARTITIONS = [
    {"name": "gpu", "nodes": [], "default": True, "max_time": None, "default_time": None,
     "state": "UP"},
    {"name": "cpu", "nodes": ["cpu1"], "default": False, "max_time": 86400,
     "default_time": 3600, "state": "UP"},
]


@pytest.fixture
def cluster(fake_schedd):
    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        if op == "query_nodes":
            return {"nodes": NODES, "now": 0.0}
        return {"partitions": PARTITIONS}
    return fake_schedd(handler)


def run(capsys, argv: list[str]) -> str:
    assert sinfo.main(argv) == 0
    return capsys.readouterr().out


def test_default_layout(cluster, capsys) -> None:
    assert run(capsys, []) == (
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
        "gpu*         up   infinite      1    mix gpu01\n"
        "gpu*         up   infinite      2   idle gpu[02-03]\n"
        "gpu*         up   infinite      1  drain gpu04\n"
        "cpu          up 1-00:00:00      1   idle cpu1\n")


def test_percent_format_partition_and_gres(cluster, capsys) -> None:
    assert run(capsys, ["-h", "-o", "%P"]) == "gpu*\ncpu\n"
    assert run(capsys, ["-o", "%R %G %D %C"]) == (
        "PARTITION GRES NODES CPUS(A/I/O/T)\n"
        "gpu gpu:h100:8 4 3/189/64/256\n"
        "cpu (null) 1 0/64/0/64\n")


def test_node_oriented(cluster, capsys) -> None:
    out = run(capsys, ["-N", "-p", "cpu"])
    assert out == "NODELIST   NODES PARTITION STATE \ncpu1           1       cpu idle  \n"


def test_reasons_and_summary(cluster, capsys) -> None:
    assert run(capsys, ["-R", "-h"]) == (  # nobody known set it: no user, no time invented
        "bad fan              Unknown   Unknown             gpu04\n")
    assert run(capsys, ["-s"]) == (
        "PARTITION AVAIL  TIMELIMIT   NODES(A/I/O/T) NODELIST\n"
        "gpu*         up   infinite          1/2/1/4 gpu[01-04]\n"
        "cpu          up 1-00:00:00          0/1/0/1 cpu1\n")


def test_state_filter_and_errors(cluster, capsys) -> None:
    assert run(capsys, ["-h", "-t", "idle", "-o", "%N"]) == "gpu[02-03]\ncpu1\n"
    assert sinfo.main(["--nope"]) == 1
    assert capsys.readouterr().err == "sinfo: unrecognized option '--nope'\n"


def test_partition_without_nodes(fake_schedd, capsys) -> None:
    empty = {"name": "debug", "nodes": [], "default": True, "max_time": None,
             "default_time": None, "state": "UP"}
    fake_schedd(lambda op, body: {"nodes": [], "now": 0.0} if op == "query_nodes"
                else {"partitions": [empty]})
    assert run(capsys, []) == ("PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
                               "debug*       up   infinite      0    n/a \n")
