"""GPU shards (gres/shard), real schedd and agentd: one node of one fake A100 in 4 shards."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, cleanup, sqlite_cluster, world_tempdir

SLEEP = "echo $CUDA_VISIBLE_DEVICES $SLURM_SHARDS_ON_NODE > env-$SLURM_JOB_ID.txt; sleep 600"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    home = world_tempdir("kiln-it-")
    try:
        with sqlite_cluster(home, nodes=1, fake_gpus="1xA100", kill_wait=3,
                            agent_extra="shards_per_gpu = 4\n") as c:
            yield c
    finally:
        cleanup(home)


def _env_of(workdir: Path, job_id: int) -> list[str]:
    path = workdir / f"env-{job_id}.txt"
    deadline = time.time() + 30
    while time.time() < deadline and not (path.exists() and path.read_text().strip()):
        time.sleep(0.1)
    return path.read_text().split()


def _waits_for_resources(cluster: Cluster, job_id: int, reasons: tuple[str, ...] = ("Resources",)
                         ) -> None:
    deadline = time.time() + 15
    while cluster.job(job_id)["reason"] not in reasons and time.time() < deadline:
        time.sleep(0.2)
    job = cluster.job(job_id)
    assert job["state"] == "PENDING" and job["reason"] in reasons


def _cancel(cluster: Cluster, jobs: list[int]) -> None:
    live = [j for j in jobs if cluster.job(j)["state"] in ("PENDING", "RUNNING")]
    assert cluster.run("scancel", *map(str, live)).returncode == 0
    for job_id in jobs:
        cluster.wait(job_id, {"CANCELLED", "COMPLETED"})


def test_four_shard_jobs_share_the_gpu_and_the_fifth_and_a_whole_gpu_job_wait(
        cluster: Cluster, workdir: Path) -> None:
    jobs = [cluster.sbatch("--gres=shard:1", "--wrap", SLEEP, cwd=workdir) for _ in range(4)]
    for job_id in jobs:
        cluster.wait(job_id, {"RUNNING"})
    for job_id in jobs:
        assert _env_of(workdir, job_id) == ["0", "1"]  # CUDA_VISIBLE_DEVICES, shards on node
    fifth = cluster.sbatch("--gres=shard:1", "--wrap", SLEEP, cwd=workdir)
    whole = cluster.sbatch("--gres=gpu:1", "--wrap", "true", cwd=workdir)
    _waits_for_resources(cluster, fifth)
    # behind the fifth, which waits for the same GPU: Priority, as Slurm says
    _waits_for_resources(cluster, whole, ("Resources", "Priority"))
    assert cluster.run("scancel", str(jobs[0])).returncode == 0
    cluster.wait(fifth, {"RUNNING"})  # a shard came free: the fifth takes it
    assert _env_of(workdir, fifth) == ["0", "1"]
    assert cluster.job(whole)["state"] == "PENDING"  # the GPU is still shared
    _cancel(cluster, jobs[1:] + [fifth])
    cluster.wait(whole, {"COMPLETED"})  # the GPU whole again: the whole-GPU job runs


def test_a_whole_gpu_job_waits_while_one_shard_is_in_use(cluster: Cluster,
                                                          workdir: Path) -> None:
    shard = cluster.sbatch("--gres=shard:1", "--wrap", "sleep 600", cwd=workdir)
    cluster.wait(shard, {"RUNNING"})
    whole = cluster.sbatch("--gres=gpu:1", "--wrap", "true", cwd=workdir)
    _waits_for_resources(cluster, whole)
    squeue = cluster.run("squeue", "-h", "-j", str(whole), "-o", "%t %R")
    assert squeue.stdout.split() == ["PD", "(Resources)"]
    assert cluster.run("squeue", "-h", "-j", str(shard), "-o", "%b").stdout.strip() \
        == "gres:shard:1"
    sinfo = cluster.run("sinfo", "-h", "-N", "-o", "%G|%N").stdout.strip()
    assert sinfo.startswith("gpu:a100:1") and sinfo.endswith(",shard:4|node1"), sinfo
    node = cluster.run("scontrol", "show", "node", "node1").stdout
    assert "gres/shard=4" in node.split("CfgTRES=")[1].split()[0]
    assert "gres/shard=1" in node.split("AllocTRES=")[1].split()[0]
    job = cluster.run("scontrol", "show", "job", str(shard)).stdout
    assert "TresPerNode=gres:shard:1" in job
    _cancel(cluster, [shard])
    cluster.wait(whole, {"COMPLETED"})


def test_a_shard_job_waits_while_the_gpu_is_used_whole(cluster: Cluster, workdir: Path) -> None:
    whole = cluster.sbatch("--gres=gpu:1", "--wrap", "sleep 600", cwd=workdir)
    cluster.wait(whole, {"RUNNING"})
    shard = cluster.sbatch("--gres=shard:2", "--wrap", "true", cwd=workdir)
    _waits_for_resources(cluster, shard)
    _cancel(cluster, [whole])
    cluster.wait(shard, {"COMPLETED"})


def test_sacct_shows_gres_shard(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("--gres=shard:3", "--wrap", "true", cwd=workdir)
    cluster.wait(job_id, {"COMPLETED"})
    res = cluster.run("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "AllocTRES,ReqTRES")
    assert res.returncode == 0, res.stderr
    alloc, req = res.stdout.strip().split("|")
    assert "gres/shard=3" in alloc and "gres/shard=3" in req
    assert "gres/gpu" not in alloc


def test_a_bad_shard_request_is_one_line(cluster: Cluster, workdir: Path) -> None:
    res = cluster.run("sbatch", "--gres=shard:x", "--wrap", "true", cwd=workdir)
    assert res.returncode != 0
    assert res.stderr.strip().count("\n") == 0 and "gres" in res.stderr
    res = cluster.run("sbatch", "--gres=shard:5", "--wrap", "true", cwd=workdir)
    assert res.returncode != 0
    assert res.stderr.startswith("sbatch: error: Batch job submission failed: Requested node "
                                 "configuration is not available")
    assert "no node has 5 GPU shards (largest: 4, node1)" in res.stderr


def test_srun_and_salloc_ask_for_shards(cluster: Cluster, workdir: Path) -> None:
    res = cluster.run("srun", "--gres=shard:2", "bash", "-c",
                      "echo $CUDA_VISIBLE_DEVICES $SLURM_SHARDS_ON_NODE", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["0", "2"]
    res = cluster.run("salloc", "--gres=shard:1", "srun", "bash", "-c",
                      "echo $CUDA_VISIBLE_DEVICES $SLURM_SHARDS_ON_NODE", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[-2:] == ["0", "1"]
