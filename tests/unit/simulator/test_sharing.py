"""The GPU-sharing replay's protocol and ``kiln sim --nodes-csv`` end to end through click."""

from __future__ import annotations

import gzip
import json
import sys

import pytest
from click.testing import CliRunner

from cli.kiln import main
from schedd.scheduler.gpushare import NodeKind, Task
from simulator.openb import OpenbError, read_nodes, read_pods
from simulator.sharing import SharingError, replay

ONE_GPU_NODE = NodeKind("T4", 4000, 4000, 1)


def test_arrivals_stop_at_capacity_and_everything_fits():
    result = replay([Task(1000, 1000, 1, 1000)], [ONE_GPU_NODE] * 3, "bestfit", seed=0)
    end = result.end.fractions(result.capacity)
    assert (end["tasks"], end["failed_tasks"]) == (3, 0)
    assert end["arrived_gpu_fraction"] == 1.0
    assert end["unallocated_gpu_fraction"] == 0.0
    assert len(result.curve) == 100 and result.curve[-1].arrived == result.capacity


def test_a_task_that_fits_nowhere_is_failed():
    too_big = Task(5000, 1000, 1, 500)  # more CPU than any node has
    fits = Task(1000, 1000, 1, 500)
    result = replay([too_big, fits], [ONE_GPU_NODE] * 2, "fgd", seed=3)
    end = result.end
    assert end.arrived >= result.capacity
    assert end.failed + end.allocated == end.arrived
    assert end.failed_tasks >= 1  # with 4 draws of two kinds, seed 3 draws the big one
    assert end.failed == 500 * end.failed_tasks


def test_every_placement_sees_the_same_draws():
    tasks = [Task(1000, 1000, 1, 300), Task(500, 500, 1, 1000), Task(100, 100, 0, 0)]
    kinds = [NodeKind("A", 4000, 8000, 2)] * 4
    counts = {replay(tasks, kinds, p, seed=7).end.tasks
              for p in ("random", "bestfit", "worstfit", "dotprod", "fgd", "kiln")}
    assert len(counts) == 1


def test_no_gpu_demand_is_an_error():
    with pytest.raises(SharingError):
        replay([Task(1, 1, 0, 0)], [ONE_GPU_NODE], "fgd")
    with pytest.raises(SharingError):
        replay([Task(1, 1, 1, 1000)], [NodeKind("", 4000, 4000, 0)], "fgd")


PODS = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos
p0,1000,1024,1,500,,LS
p1,2000,2048,1,1000,T4|A10,LS
p2,500,512,0,0,,BE
p3,4000,4096,2,1000,,LS
"""
NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,8000,16384,2,T4
n1,8000,16384,4,G2
"""


@pytest.fixture
def csvs(tmp_path):
    pods, nodes = tmp_path / "pods.csv.gz", tmp_path / "nodes.csv"
    pods.write_bytes(gzip.compress(PODS.encode()))
    nodes.write_text(NODES)
    return pods, nodes


def run(*args):
    return CliRunner().invoke(main, ["sim", *map(str, args)])


def test_reading_the_csvs(csvs):
    pods, nodes = csvs
    assert read_pods(pods)[1] == Task(2000, 2048, 1, 1000, frozenset({"T4", "A10"}))
    assert read_pods(pods)[2] == Task(500, 512, 0, 0)
    assert read_nodes(nodes) == [NodeKind("T4", 8000, 16384, 2), NodeKind("G2", 8000, 16384, 4)]


def test_cli_json(csvs):
    pods, nodes = csvs
    result = run(pods, "--nodes-csv", nodes, "--placement", "fgd", "--seed", 2, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["placement"] == "fgd" and data["gpus"] == 6
    for key in ("unallocated_gpu_fraction", "failed_gpu_fraction", "tasks", "failed_tasks"):
        assert key in data
    assert 0 <= data["unallocated_gpu_fraction"] <= 1


def test_cli_several_placements_table_and_curve(csvs, tmp_path):
    pods, nodes = csvs
    curve = tmp_path / "curve.csv"
    result = run(pods, "--nodes-csv", nodes, "--placement", "bestfit,kiln",
                 "--placement", "random", "--curve", curve)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines[-3:]] == ["bestfit", "kiln", "random"]
    rows = curve.read_text().splitlines()
    assert rows[0].startswith("placement,seed,percent,arrived_gpu_fraction")
    assert len(rows) == 1 + 3 * 100
    json_run = run(pods, "--nodes-csv", nodes, "--placement", "bestfit,kiln", "--json")
    assert [r["placement"] for r in json.loads(json_run.stdout)] == ["bestfit", "kiln"]


@pytest.mark.parametrize("pods_text, message", [
    ("name,cpu_milli\np0,1\n", "no column memory_mib, num_gpu, gpu_milli"),
    ("cpu_milli,memory_mib,num_gpu,gpu_milli\n1,1,one,1000\n", "line 2: num_gpu 'one'"),
    ("cpu_milli,memory_mib,num_gpu,gpu_milli\n1,1,2,500\n", "only single-GPU tasks share"),
    ("cpu_milli,memory_mib,num_gpu,gpu_milli\n", "no rows after the header"),
])
def test_cli_bad_csv_is_one_line(csvs, tmp_path, pods_text, message):
    _, nodes = csvs
    bad = tmp_path / "bad.csv"
    bad.write_text(pods_text)
    result = run(bad, "--nodes-csv", nodes)
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert result.stderr.startswith("kiln sim: error: ") and message in result.stderr


def test_cli_other_errors(csvs, tmp_path):
    pods, nodes = csvs
    for args, message in (((pods, "--nodes-csv", tmp_path / "none.csv"), "no such file"),
                          ((pods, "--nodes-csv", nodes, "--placement", "x"), "unknown placement"),
                          ((pods, "--json"), "--json needs --nodes-csv")):
        result = run(*args)
        assert result.exit_code == 1 and message in result.stderr, result.output
        assert result.stderr.count("\n") == 1


def test_cli_plot_without_matplotlib_is_one_line(csvs, tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.pyplot"):  # as on a host without it
        monkeypatch.setitem(sys.modules, name, None)
    pods, nodes = csvs
    result = run(pods, "--nodes-csv", nodes, "--plot", tmp_path / "x.png")
    assert result.exit_code == 1
    assert result.stderr == ("kiln sim: error: --plot needs matplotlib, which is not installed "
                             "(pip install matplotlib)\n")


def test_openb_error_names_the_file(tmp_path):
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,8000,1024,2,\n")
    with pytest.raises(OpenbError, match="nodes.csv line 2: a node with 2 GPUs and no model"):
        read_nodes(path)


def test_cli_plot_with_matplotlib(csvs, tmp_path):
    pods, nodes = csvs
    png = tmp_path / "curves.png"
    result = run(pods, "--nodes-csv", nodes, "--placement", "bestfit,fgd", "--plot", png)
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
