"""The daemon's GPU placement (scheduler/fragment.py) on a real cluster: two nodes of 8 fake
GPUs, where a 1-GPU job's node decides whether an 8-GPU job can start beside it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import (
    Cluster,
    cleanup,
    release_file,
    sqlite_cluster,
    world_tempdir,
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    home = world_tempdir("kiln-it-")
    try:
        with sqlite_cluster(home, nodes=2, fake_gpus="8xH100-80GB", cpus=4) as c:
            yield c
    finally:
        cleanup(home)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = world_tempdir("kiln-job-")
    path.chmod(0o777)
    try:
        yield path
    finally:
        cleanup(path)


def _memory(cluster: Cluster, node: str) -> int:
    res = cluster.run("scontrol", "show", "node", node)
    assert res.returncode == 0, res.stderr
    return int(dict(re.findall(r"(\w[\w/:]*)=(\S*)", res.stdout))["RealMemory"])


def test_one_gpu_job_then_eight_gpu_job_both_start(cluster: Cluster, workdir: Path) -> None:
    """Both nodes have their 8 GPUs and 3 of 4 CPUs free; node2 has almost no memory free.
    The 1-GPU job goes where the 8-GPU job, which needs memory, cannot: node2. Best fit by
    free GPUs and CPUs alone took node1, the first of two alike, and the 8-GPU job waited."""
    mem = _memory(cluster, "node2")
    hold = release_file(workdir)
    blockers = [cluster.sbatch("-w", "node1", "-c", "1", "--mem", "100", "-o", "/dev/null",
                               "--wrap", hold),
                cluster.sbatch("-w", "node2", "-c", "1", "--mem", str(mem - 1000), "-o",
                               "/dev/null", "--wrap", hold)]
    try:
        for job in blockers:
            cluster.wait(job, {"RUNNING"})
        small = cluster.sbatch("--gres=gpu:1", "-c", "1", "--mem", "100", "-o", "/dev/null",
                               "--wrap", hold)
        big = cluster.sbatch("--gres=gpu:8", "-c", "1", "--mem", "2000", "-o", "/dev/null",
                             "--wrap", hold)
        got = {job: cluster.wait(job, {"RUNNING"}, timeout=30) for job in (small, big)}
        assert [(a["node"], len(a["gpus"])) for a in got[small]["allocation"]] == [("node2", 1)]
        assert [(a["node"], len(a["gpus"])) for a in got[big]["allocation"]] == [("node1", 8)]
    finally:
        (workdir / "release").touch()
    for job in (*blockers, small, big):
        cluster.wait(job, {"COMPLETED"})
