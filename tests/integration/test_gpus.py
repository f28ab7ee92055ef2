"""GPUs across two nodes of 4 fake A100s: whole-node jobs, sharing, and waiting."""

from __future__ import annotations

import time
from pathlib import Path

from tests.integration.cluster import Cluster


def _gpus_of(workdir: Path, job_id: int) -> tuple[str, set[int]]:
    deadline = time.time() + 30
    path = workdir / f"gpu-{job_id}.txt"
    while time.time() < deadline and not (path.exists() and path.read_text().strip()):
        time.sleep(0.1)
    node, devices = path.read_text().split()
    return node, {int(d) for d in devices.split(",")}


def test_two_whole_node_jobs_run_at_once(two_nodes: Cluster, workdir: Path) -> None:
    cmd = "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES > gpu-$SLURM_JOB_ID.txt; sleep 600"
    jobs = [two_nodes.sbatch("--gres=gpu:4", "--wrap", cmd, cwd=workdir) for _ in range(2)]
    for job_id in jobs:
        two_nodes.wait(job_id, {"RUNNING"})
    placed = [_gpus_of(workdir, j) for j in jobs]
    assert {p[0] for p in placed} == {"node1", "node2"}
    assert all(p[1] == {0, 1, 2, 3} for p in placed)
    res = two_nodes.run("scancel", *map(str, jobs))
    assert res.returncode == 0, res.stderr
    for job_id in jobs:
        two_nodes.wait(job_id, {"CANCELLED"})


def test_gpu_jobs_never_share_and_the_fifth_waits(two_nodes: Cluster, workdir: Path) -> None:
    cmd = "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES > gpu-$SLURM_JOB_ID.txt; sleep 600"
    jobs = [two_nodes.sbatch("--gres=gpu:2", "--wrap", cmd, cwd=workdir) for _ in range(4)]
    for job_id in jobs:
        two_nodes.wait(job_id, {"RUNNING"})
    used: dict[str, set[int]] = {}
    for job_id in jobs:
        node, devices = _gpus_of(workdir, job_id)
        assert len(devices) == 2
        assert not used.setdefault(node, set()) & devices, "two jobs were given the same GPU"
        used[node] |= devices
    fifth = two_nodes.sbatch("--gres=gpu:2", "--wrap", "true", cwd=workdir)
    deadline = time.time() + 10
    while two_nodes.job(fifth)["reason"] != "Resources" and time.time() < deadline:
        time.sleep(0.1)
    job = two_nodes.job(fifth)
    assert job["state"] == "PENDING" and job["reason"] == "Resources"
    squeue = two_nodes.run("squeue", "-h", "-o", "%i %t %R")
    assert f"{fifth} PD (Resources)" in squeue.stdout.splitlines() or \
        f"{fifth} PD Resources" in squeue.stdout.splitlines()
    assert two_nodes.run("scancel", str(jobs[0])).returncode == 0
    two_nodes.wait(fifth, {"RUNNING", "COMPLETED"})
    two_nodes.run("scancel", *map(str, jobs))


def test_squeue_and_sinfo_look_like_slurm(two_nodes: Cluster, workdir: Path) -> None:
    job_id = two_nodes.sbatch("-J", "sleeper", "--gres=gpu:1", "--wrap", "sleep 600",
                              cwd=workdir)
    two_nodes.wait(job_id, {"RUNNING"})
    lines = two_nodes.run("squeue").stdout.splitlines()
    assert lines[0] == ("             JOBID PARTITION     NAME     USER ST       TIME  NODES "
                        "NODELIST(REASON)")
    row = next(line for line in lines[1:] if line.split()[0] == str(job_id))
    fields = row.split()
    assert fields[1:5] == ["gpu", "sleeper", "root", "R"]
    assert fields[6] == "1" and fields[7] in ("node1", "node2")
    sinfo = two_nodes.run("sinfo").stdout.splitlines()
    assert sinfo[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    assert any(line.startswith("gpu*") for line in sinfo[1:])
    two_nodes.run("scancel", str(job_id))
    two_nodes.wait(job_id, {"CANCELLED"})
