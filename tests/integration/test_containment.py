"""Per-job cgroups through the real commands (issue 14): sbatch -> schedd -> agentd's cgroup.

Runs where the host's cgroups are writable (as on the test VMs: v1 controllers, a v2 mount for
membership and cgroup.kill); the agent's own tests (tests/unit/agentd/test_cgroups.py) cover
the rest. Waits are conditions with generous deadlines.
"""

from __future__ import annotations

import ast
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.cgroups import Cgroups, detect
from tests.integration.cluster import Cluster, until
from tests.integration.conftest import _cluster


def _writable() -> bool:
    if os.geteuid() != 0 or not {"memory", "pids"} <= set(detect().v1):
        return False
    probe = Cgroups(f"probe{os.getpid()}")
    probe.close()
    return probe.active


pytestmark = pytest.mark.skipif(
    not _writable(),
    reason="needs root and writable cgroup v1 controllers (memory, pids), not available here "
           "(a cgroup v2-only host, as stock Debian 12 and Ubuntu 22.04+); the v2 code is "
           "covered by tests/unit/agentd/test_cgroups.py's fake v2 tree")

HOG = "python3 -c 'b = b\"x\" * (256 * 1024 * 1024)'; echo after"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def test_over_its_mem_a_job_is_out_of_memory_and_the_node_runs_on(cluster: Cluster,
                                                                  workdir: Path) -> None:
    job_id = cluster.sbatch("--mem=64M", "--wrap", HOG, cwd=workdir)
    assert cluster.wait(job_id, {"COMPLETED", "FAILED", "OUT_OF_MEMORY"})["state"] == \
        "OUT_OF_MEMORY"
    acct = cluster.run("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State,ExitCode")
    assert acct.stdout == "OUT_OF_MEMORY|0:125\n", acct.stderr
    text = (workdir / f"slurm-{job_id}.out").read_text()
    assert f"slurmstepd: error: Detected 1 oom-kill event(s) in StepId={job_id}.batch. " \
           "Some of your processes may have been killed by the cgroup out-of-memory " \
           "handler.\n" in text
    next_id = cluster.sbatch("--mem=64M", "--wrap", "echo fine", cwd=workdir)
    assert cluster.wait(next_id, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    show = cluster.run("scontrol", "show", "node", "node1")
    assert "   CgroupPlugin=cgroup/" in show.stdout and "ConstrainRAMSpace=yes" in show.stdout


def test_scancel_leaves_no_setsid_child_behind(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("--wrap", "setsid sleep 1777 & echo $! > escaped; sleep 600",
                            cwd=workdir)
    pid = int(until(lambda: (workdir / "escaped").exists() and
                    (workdir / "escaped").read_text().strip(), "the child started"))
    assert cluster.wait(job_id, {"RUNNING"})["state"] == "RUNNING"
    assert _alive(pid)
    assert cluster.run("scancel", str(job_id)).returncode == 0
    assert cluster.wait(job_id, {"CANCELLED"})["state"] == "CANCELLED"
    deadline = time.monotonic() + 60
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)  # the job was reported CANCELLED only once its cgroup was empty


AFFINITY = ("python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))'; "
            "echo $SLURM_CPUS_ON_NODE; while [ ! -e release ]; do sleep 0.1; done")


def test_two_one_cpu_jobs_get_different_cpus_and_their_affinity_says_so(
        cluster: Cluster, workdir: Path) -> None:
    """The scheduler chooses each job's CPU ids; the job's cpuset holds exactly those, so
    sched_getaffinity and SLURM_CPUS_ON_NODE agree and two jobs on one node never share."""
    jobs = [cluster.sbatch("-c", "1", "-o", f"aff-{i}.out", "--wrap", AFFINITY, cwd=workdir)
            for i in range(2)]
    try:
        seen = []
        for i, _ in enumerate(jobs):
            out = workdir / f"aff-{i}.out"
            text = until(lambda out=out: out.exists() and out.read_text().count("\n") >= 2 and
                         out.read_text(), f"job {i} printed its affinity")
            cpus, on_node = text.splitlines()[:2]
            assert on_node == "1"
            seen.append(set(ast.literal_eval(cpus)))
        assert [len(s) for s in seen] == [1, 1]
        assert seen[0] != seen[1], seen
    finally:
        (workdir / "release").touch()
    for job_id in jobs:
        assert cluster.wait(job_id, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"


# --- CPUs near the GPUs, on every node of a job ------------------------------------------------

HOST_CPUS = sorted(os.sched_getaffinity(0))  # a node's CPU id i is the host's HOST_CPUS[i % n]


@pytest.fixture(scope="module")
def near(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two nodes of two CPUs with two fake H100s each, one per island, whose affinity the
    agents declare crossed (``gpu_island_cpus``): GPU 0 near CPU 1, GPU 1 near CPU 0. So a CPU
    chosen near its GPU is never the one the lowest-id choice would have taken. (SQLite only:
    the path under test is agent -> schedd's memory -> scheduler -> agent.)"""
    if len(HOST_CPUS) < 2:
        pytest.skip("needs two CPUs")
    yield from _cluster(request, "sqlite", nodes=2, fake_gpus="2xH100-80GB", cpus=2,
                        kill_wait=3, agent_extra='gpu_island_cpus = ["1", "0"]')


NEAR = ("python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))'; "
        "echo $SLURM_CPUS_ON_NODE $CUDA_VISIBLE_DEVICES; "
        "while [ ! -e release ]; do sleep 0.1; done")


def _printed(path: Path, lines: int) -> list[str]:
    return until(lambda: path.exists() and path.read_text().count("\n") >= lines and
                 path.read_text().splitlines(), f"{path.name} printed")


def _detail(cluster: Cluster, job_id: int) -> dict[str, tuple[str, str]]:
    """scontrol show job -d: node -> (CPU_IDs, GRES IDX)."""
    text = cluster.run("scontrol", "-d", "show", "job", str(job_id)).stdout
    return {m[1]: (m[2], m[3]) for m in
            re.finditer(r"Nodes=(\S+) CPU_IDs=(\S+) Mem=\d+ GRES=gpu:(?:\w+:)?1\(IDX:(\d+)\)", text)}


def test_a_jobs_cpus_are_the_ones_near_its_gpu(near: Cluster, workdir: Path) -> None:
    """The node's declared affinity reaches schedd with the registration (scontrol show
    node's Gres=...(S:...)), the scheduler picks the CPU near the job's GPU, and the job's
    cpuset, SLURM_CPUS_ON_NODE and scontrol show job -d's CPU_IDs all say that CPU."""
    show = near.run("scontrol", "show", "node", "node1").stdout
    assert "   Gres=gpu:h100:2(S:0-1)\n" in show, show
    jobs = [near.sbatch("-w", "node1", "--gres=gpu:1", "-c", "1", "-o", f"near-{i}.out",
                        "--wrap", NEAR, cwd=workdir) for i in range(2)]
    try:
        for i, job_id in enumerate(jobs):
            cpus, env = _printed(workdir / f"near-{i}.out", 2)[:2]
            gpu = int(env.split()[1])  # CUDA_VISIBLE_DEVICES
            want = 1 - gpu  # crossed: GPU 0 near CPU 1, GPU 1 near CPU 0
            assert _detail(near, job_id) == {"node1": (str(want), str(gpu))}
            assert ast.literal_eval(cpus) == [HOST_CPUS[want]]
            assert env.split()[0] == "1"  # SLURM_CPUS_ON_NODE
        assert sorted(_detail(near, j)["node1"][1] for j in jobs) == ["0", "1"]
    finally:
        (workdir / "release").touch()
    for job_id in jobs:
        assert near.wait(job_id, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"


def test_srun_tasks_on_every_node_get_the_jobs_cpus_there(near: Cluster, workdir: Path) -> None:
    """A two-node job's srun tasks: on the batch host in the job's cgroup, on the other node
    in the cgroup made there from what the job holds there: each sees exactly the job's CPU
    on its node (the one near its GPU), not the whole node."""
    step = ("srun -l bash -c 'echo $SLURMD_NODENAME $(python3 -c "
            "\"import os; print(min(os.sched_getaffinity(0)), len(os.sched_getaffinity(0)))\")'")
    job_id = near.sbatch("-N", "2", "--ntasks-per-node=1", "-c", "1", "--gres=gpu:1",
                         "-o", "steps.out", "--wrap", step, cwd=workdir)
    assert near.wait(job_id, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    detail = _detail(near, job_id)
    assert set(detail) == {"node1", "node2"}
    seen = {}
    for line in (workdir / "steps.out").read_text().splitlines():
        _rank, node, first, count = line.split()
        seen[node] = (int(first), int(count))
    assert seen == {node: (HOST_CPUS[int(cpu)], 1) for node, (cpu, _gpu) in detail.items()}
