"""Network topology, real schedd and agentd: 8 nodes of 4 fake GPUs in 2 blocks of 4
(``kiln up --topology-blocks 2``): --segment, --switches with its wait, --exclusive=topo,
scontrol show topology, SLURM_TOPOLOGY_ADDR, kiln why."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiln.slurm.hostlist import expand
from tests.integration.cluster import Cluster, cleanup, sqlite_cluster, world_tempdir

SLEEP = "sleep 600"
B1 = {f"node{i}" for i in range(1, 5)}
B2 = {f"node{i}" for i in range(5, 9)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    home = world_tempdir("kiln-it-")
    try:
        with sqlite_cluster(home, nodes=8, fake_gpus="4xA100", kill_wait=3,
                            up_args=["--topology-blocks", "2"]) as c:
            yield c
    finally:
        cleanup(home)


def _nodes(cluster: Cluster, job_id: int) -> set[str]:
    return set(expand(cluster.job(job_id)["node_list"]))


def _cancel_all(cluster: Cluster, jobs: list[int]) -> None:
    assert cluster.run("scancel", *map(str, jobs)).returncode == 0
    for job_id in jobs:
        cluster.wait(job_id, {"CANCELLED", "COMPLETED"})


def _squeue_reason(cluster: Cluster, job_id: int) -> str:
    res = cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%T %r")
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_scontrol_show_topology_as_slurm_prints_it(cluster: Cluster) -> None:
    res = cluster.run("scontrol", "show", "topology")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "BlockName=b1 BlockIndex=0 Nodes=node[1-4] BlockSize=4",
        "BlockName=b2 BlockIndex=1 Nodes=node[5-8] BlockSize=4"]
    res = cluster.run("scontrol", "show", "topology", "node6")
    assert res.stdout.splitlines() == ["BlockName=b2 BlockIndex=1 Nodes=node[5-8] BlockSize=4"]
    res = cluster.run("scontrol", "show", "topology", "node99")
    assert res.returncode == 1
    assert res.stderr.strip() == ("scontrol: error: Topology information contains no switch "
                                  "or node named node99")


def test_segment_job_lands_in_the_whole_block(cluster: Cluster, workdir: Path) -> None:
    # node1 has one GPU busy: block b1 is fragmented (3 nodes with 4 GPUs free), b2 whole;
    # in node order the first 4 whole nodes free would be node[2-5], across both blocks
    blocker = cluster.sbatch("-w", "node1", "--gres=gpu:1", "--wrap", SLEEP, cwd=workdir)
    cluster.wait(blocker, {"RUNNING"})
    seg = cluster.sbatch("-N4", "--segment=4", "--gres=gpu:4", "--wrap",
                         "echo $SLURM_TOPOLOGY_ADDR $SLURM_TOPOLOGY_ADDR_PATTERN > addr.txt; "
                         + SLEEP, cwd=workdir)
    cluster.wait(seg, {"RUNNING"})
    assert _nodes(cluster, seg) == B2
    path = workdir / "addr.txt"
    deadline = time.time() + 30
    while time.time() < deadline and not (path.exists() and path.read_text().strip()):
        time.sleep(0.1)
    assert path.read_text().split() == ["b2.node5", "block.node"]
    _cancel_all(cluster, [blocker, seg])


def test_segment_that_divides_nothing_is_refused(cluster: Cluster) -> None:
    res = cluster.run("sbatch", "-N4", "--segment=3", "--wrap", "true")
    assert res.returncode != 0
    assert "Requested node configuration is not available" in res.stderr
    assert "--segment=3 does not divide the job's 4 nodes" in res.stderr


def test_switches_waits_then_starts_spread(cluster: Cluster, workdir: Path) -> None:
    # a GPU busy on node1 and node5: no block has 4 whole nodes free, the cluster has 6
    blockers = [cluster.sbatch("-w", n, "--gres=gpu:1", "--wrap", SLEEP, cwd=workdir)
                for n in ("node1", "node5")]
    for b in blockers:
        cluster.wait(b, {"RUNNING"})
    submitted = time.time()
    job = cluster.sbatch("-N4", "--gres=gpu:4", "--switches=1@0:10", "--wrap", SLEEP,
                         cwd=workdir)
    time.sleep(3)
    assert _squeue_reason(cluster, job) == "PENDING Resources"
    why = cluster.run("kiln", "why", str(job))
    assert why.returncode == 0, why.stderr
    assert "Topology: it needs at most 1 block (--switches=1)" in why.stdout
    info = cluster.wait(job, {"RUNNING"}, timeout=40)
    assert time.time() - submitted >= 9  # it waited out its 10 s
    spread = _nodes(cluster, job)
    assert len(spread) == 4 and spread & B1 and spread & B2
    assert info["state"] == "RUNNING"
    _cancel_all(cluster, blockers + [job])


def test_exclusive_topo_takes_a_block_to_itself(cluster: Cluster, workdir: Path) -> None:
    blocker = cluster.sbatch("-w", "node1", "--gres=gpu:1", "--wrap", SLEEP, cwd=workdir)
    cluster.wait(blocker, {"RUNNING"})
    job = cluster.sbatch("-N2", "--exclusive=topo", "--wrap", SLEEP, cwd=workdir)
    cluster.wait(job, {"RUNNING"})
    mine = _nodes(cluster, job)
    assert len(mine) == 2 and mine <= B2  # the whole block, not the one with node1 busy
    # the rest of its block is its own: a small job asking for another node of it waits
    spare = sorted(B2 - mine)[0]
    other = cluster.sbatch("-w", spare, "--gres=gpu:1", "--wrap", "true", cwd=workdir)
    time.sleep(3)
    assert _squeue_reason(cluster, other) == "PENDING Resources"
    elsewhere = cluster.sbatch("-w", "node2", "--gres=gpu:1", "--wrap", "true", cwd=workdir)
    cluster.wait(elsewhere, {"COMPLETED"})
    assert cluster.run("scancel", str(job)).returncode == 0
    cluster.wait(other, {"COMPLETED"})
    _cancel_all(cluster, [blocker])
