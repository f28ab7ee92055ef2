"""A private /tmp and /dev/shm per job, Slurm's job_container/tmpfs (``[agent] job_tmp``,
agentd/jobtmp.py), on a real two-node cluster: a job's steps share them on each node, no other
job and not the node's own /tmp sees them, and they are gone when the job ends. The cluster's
home and the jobs' working directory are outside /tmp, which a job cannot reach."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, cleanup, sqlite_cluster, until, world_tempdir

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    home = world_tempdir("kiln-it-", under="/var/tmp")
    try:
        with sqlite_cluster(home, nodes=2, fake_gpus="", job_tmp=True) as c:
            yield c
    finally:
        cleanup(home)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = world_tempdir("kiln-job-", under="/var/tmp")
    os.chmod(path, 0o777)
    yield path
    cleanup(path)


def _dirs(cluster: Cluster, job_id: int) -> list[Path]:
    return [cluster.home / "spool" / node / "jobtmp" / str(job_id) for node in ("node1", "node2")]


def test_a_jobs_steps_share_it_on_each_node_and_nothing_else_sees_it(
        cluster: Cluster, workdir: Path) -> None:
    res = cluster.run("salloc", "--no-shell", "-N", "2", cwd=workdir)
    assert res.returncode == 0, res.stderr
    job_id = int(re.fullmatch(r"salloc: Granted job allocation (\d+)\n", res.stderr).group(1))
    mark = f"kiln-mark-{job_id}"
    write = cluster.run("srun", "--jobid", str(job_id), "-N", "2", "sh", "-c",
                        f"echo $SLURMD_NODENAME > /tmp/{mark}; echo shm > /dev/shm/{mark}",
                        cwd=workdir)
    assert write.returncode == 0, write.stderr
    read = cluster.run("srun", "--jobid", str(job_id), "-N", "2", "sh", "-c",
                       f"cat /tmp/{mark} /dev/shm/{mark}", cwd=workdir)
    assert read.returncode == 0, read.stderr
    assert sorted(read.stdout.split()) == ["node1", "node2", "shm", "shm"]
    assert not Path(f"/tmp/{mark}").exists() and not Path(f"/dev/shm/{mark}").exists()
    # another job on the same nodes sees none of it
    other = cluster.run("srun", "-N", "2", "sh", "-c",
                        f"test ! -e /tmp/{mark} && test ! -e /dev/shm/{mark} && echo clean",
                        cwd=workdir)
    assert other.stdout.split() == ["clean", "clean"], other.stderr
    dirs = _dirs(cluster, job_id)
    assert all(d.is_dir() for d in dirs)
    assert cluster.run("scancel", str(job_id)).returncode == 0
    assert cluster.wait(job_id, FINISHED)["state"] == "CANCELLED"
    until(lambda: not any(d.exists() for d in dirs), "the job's private /tmp removed")


def test_a_batch_script_and_its_steps_share_it_and_the_nodes_tmp_is_hidden(
        cluster: Cluster, workdir: Path) -> None:
    host_file = Path(f"/tmp/kiln-host-{os.getpid()}")
    host_file.write_text("the node's own\n")
    try:
        job_id = cluster.sbatch(
            "-N", "1", "--wrap",
            f"echo from-batch > /tmp/shared; srun cat /tmp/shared; "
            f"test -e {host_file} && echo host-visible || echo host-hidden", cwd=workdir)
        assert cluster.wait(job_id, FINISHED)["state"] == "COMPLETED"
        out = (workdir / f"slurm-{job_id}.out").read_text()
        assert out.split() == ["from-batch", "host-hidden"], out
        until(lambda: not any(d.exists() for d in _dirs(cluster, job_id)),
              "the job's private /tmp removed")
    finally:
        host_file.unlink()


def test_a_cluster_whose_home_is_under_tmp_still_runs_its_jobs(workdir: Path) -> None:
    """A personal cluster's home in /tmp (the agent's spool, with each job's script, under
    it): the spool stays reachable inside the job's own /tmp, the node's /tmp stays hidden
    (before, every job failed: ``execve(): bad interpreter(/bin/sh)``, its script hidden)."""
    home = world_tempdir("kiln-it-", under="/tmp")
    host_file = Path(f"/tmp/kiln-host-{os.getpid()}-home")
    host_file.write_text("the node's own\n")
    try:
        with sqlite_cluster(home, nodes=1, fake_gpus="", job_tmp=True) as c:
            job_id = c.sbatch("--wrap", f"test -e {host_file} && echo host-visible || "
                                        f"echo host-hidden; echo private > /tmp/mine; "
                                        f"cat /tmp/mine", cwd=workdir)
            assert c.wait(job_id, FINISHED)["state"] == "COMPLETED"
            out = (workdir / f"slurm-{job_id}.out").read_text()
            assert out.split() == ["host-hidden", "private"], out
            assert not Path("/tmp/mine").exists()
    finally:
        host_file.unlink()
        cleanup(home)
