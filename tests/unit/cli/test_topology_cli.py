"""The commands' side of network topology: sbatch's --switches, --segment, --exclusive=topo;
scontrol show topology from kiln.toml; kiln up's [topology] text; kiln why's line."""

from __future__ import annotations

import tomllib

import pytest

from cli import sbatch, scontrol
from cli.up import topology_text
from cli.why import explain_lines
from kiln.model import Job
from kiln.slurm import topology
from schedd.reports.explain import topology_text as waits_for


def accept(op: str, body: dict) -> dict:
    if op == "submit":
        return {"job_id": 42, "array_task_ids": []}
    raise AssertionError(op)


@pytest.fixture
def submitted(fake_schedd):
    fake = fake_schedd(accept)
    return lambda: fake.ops("submit")[-1]["job"]


def test_topology_options_become_job_fields(submitted) -> None:
    assert sbatch.main(["-N4", "--switches=1@0:10", "--segment=2", "--wrap", "true"]) == 0
    job = submitted()
    assert (job["switches"], job["switch_wait"], job["segment"]) == (1, 10, 2)
    assert sbatch.main(["-N2", "--switches=2@5", "--exclusive=topo", "--wrap", "true"]) == 0
    job = submitted()
    assert (job["switches"], job["switch_wait"]) == (2, 300)  # Slurm's minutes
    assert job["exclusive"] is True and job["exclusive_topo"] is True
    assert sbatch.main(["-N2", "--switches=3", "--wrap", "true"]) == 0
    assert "switch_wait" not in submitted()  # the cluster's max_switch_wait


@pytest.mark.parametrize(("arg", "words"), [
    ("--switches=x", "Invalid --switches specification"),
    ("--switches=1@soon", "Invalid --switches specification"),
    ("--segment=0", "--segment"),
])
def test_bad_topology_options(fake_schedd, capsys, arg: str, words: str) -> None:
    fake_schedd(accept)
    assert sbatch.main([arg, "--wrap", "true"]) != 0
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_scontrol_show_topology(tmp_path, monkeypatch, capsys) -> None:
    conf = tmp_path / "kiln.toml"
    conf.write_text(topology_text([f"node{i}" for i in range(1, 5)], "switch", 2))
    monkeypatch.setenv("KILN_CONF", str(conf))
    assert scontrol.main(["show", "topology"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=node[1-2]",
        "SwitchName=s2 Level=0 LinkSpeed=1 Nodes=node[3-4]",
        "SwitchName=top Level=1 LinkSpeed=1 Nodes=node[1-4] Switches=s[1-2]"]
    assert scontrol.main(["show", "topology", "s2"]) == 0  # a switch by its name
    assert capsys.readouterr().out.splitlines()[0].startswith("SwitchName=s2 ")
    conf.write_text("")
    assert scontrol.main(["show", "topology"]) == 0
    assert capsys.readouterr().out == "No topology information available\n"


def test_up_writes_a_table_the_config_reads() -> None:
    text = topology_text([f"node{i}" for i in range(1, 9)], "block", 2)
    topo = topology.parse(tomllib.loads(text)["topology"])
    assert [b.nodes for b in topo.blocks] == [[f"node{i}" for i in range(1, 5)],
                                              [f"node{i}" for i in range(5, 9)]]


def test_kiln_why_says_what_the_network_must_give() -> None:
    topo = topology.parse(topology.grouped([f"n{i}" for i in range(1, 9)], "block", 2))
    job = Job(id=7, num_nodes=4, switches=1, switch_wait=10, submit_time=100.0)
    assert waits_for(job, topo, 104.0, 300) == (
        "at most 1 block (--switches=1), waited for 6 s more; then it takes the nodes there are")
    assert "is over" in waits_for(job, topo, 111.0, 300)
    seg = Job(id=8, num_nodes=4, segment=2)
    assert waits_for(seg, topo, 0.0, 300) == "2 segment(s) of 2 nodes (--segment=2), each " \
                                              "inside one block"
    assert waits_for(Job(id=9, num_nodes=1), topo, 0.0, 300) == ""
    assert waits_for(seg, None, 0.0, 300) == ""
    reply = {"now": 0.0, "job": {"job_id": "8", "state": "PENDING", "reason": "Resources",
                                 "partition": "gpu", "user": "u", "account": "a",
                                 "submit_time": 0.0},
             "reason_text": "it is at the front", "topology": waits_for(seg, topo, 0.0, 300)}
    lines = explain_lines(reply, None)
    assert "  Topology: it needs 2 segment(s) of 2 nodes (--segment=2), each inside one " \
           "block." in lines
