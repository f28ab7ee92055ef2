"""Per-job cgroups through the real commands (issue 14): sbatch -> schedd -> agentd's cgroup.

Runs where the host's cgroups are writable (as on the test VMs: v1 controllers, a v2 mount for
membership and cgroup.kill); the agent's own tests (tests/unit/test_agent_cgroups.py) cover
the rest. Waits are conditions with generous deadlines.
"""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest

from agentd.cgroups import Cgroups, detect
from tests.integration.cluster import Cluster, until


def _writable() -> bool:
    if os.geteuid() != 0 or not {"memory", "pids"} <= set(detect().v1):
        return False
    probe = Cgroups(f"probe{os.getpid()}")
    probe.close()
    return probe.active


pytestmark = pytest.mark.skipif(not _writable(), reason="needs writable cgroups (root)")

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
