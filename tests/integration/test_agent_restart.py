"""An agent restart keeps its jobs: each job runs under a supervisor of its own
(agentd/stepd.py) that survives a kill -9 of agentd, keeps the job's walltime while no agent
runs and writes the job's end to the spool; the agent `kiln up` brings back re-attaches to the
live supervisors and reads the ends of jobs that ended meanwhile, with their true exit codes."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, cleanup, pid_exists, world_tempdir
from tests.integration.conftest import BACKENDS, _cluster

FINAL = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL"}


@pytest.fixture(scope="module", params=BACKENDS)
def restartable(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One node; a silent agent is DOWN after 30 s, far longer than a restart takes."""
    yield from _cluster(request, request.param, nodes=1, fake_gpus="4xA100", kill_wait=2)


def _agent_pid(cluster: Cluster) -> int:
    return int((cluster.home / "run" / "agentd-node1.pid").read_text())


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, what
        time.sleep(0.1)


def _job_pid(workdir: Path) -> int:
    pid_file = workdir / "pid"
    _wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 30,
              "the job never wrote its pid")
    return int(pid_file.read_text())


def _kill9_agent_and_restart(cluster: Cluster) -> None:
    old = _agent_pid(cluster)
    os.kill(old, signal.SIGKILL)
    _wait_for(lambda: not pid_exists(old) or _zombie(old), 10, "agentd survived SIGKILL")
    res = cluster.run("kiln", "up")
    assert res.returncode == 0, res.stderr
    assert "started agentd node1" in res.stdout
    assert _agent_pid(cluster) != old


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def test_job_outlives_agent_kill9_and_still_times_out(restartable: Cluster) -> None:
    workdir = world_tempdir("kiln-ar-")
    try:
        job_id = restartable.sbatch("-t", "0:12", "--wrap", "echo $$ > pid; sleep 600",
                                    cwd=workdir)
        restartable.wait(job_id, {"RUNNING"})
        pid = _job_pid(workdir)
        _kill9_agent_and_restart(restartable)
        assert pid_exists(pid), "the job died with its agent"
        job = restartable.job(job_id)
        assert job["state"] == "RUNNING" and job["restart_count"] == 0
        log = (restartable.home / "log" / "agentd-node1.log").read_text()
        assert "registered with schedd" in log
        job = restartable.wait(job_id, FINAL, timeout=60)
        assert job["state"] == "TIMEOUT", job
        _wait_for(lambda: not pid_exists(pid), 10, "the timed-out job's process survived")
        assert "DUE TO TIME LIMIT" in (workdir / f"slurm-{job_id}.out").read_text()
        assert job["restart_count"] == 0  # one run, never relaunched
    finally:
        cleanup(workdir)


def test_job_that_ends_while_no_agent_watches_is_completed(restartable: Cluster) -> None:
    workdir = world_tempdir("kiln-ar-")
    try:
        job_id = restartable.sbatch("--wrap", "echo $$ > pid; sleep 4; echo done > out",
                                    cwd=workdir)
        restartable.wait(job_id, {"RUNNING"})
        pid = _job_pid(workdir)
        old = _agent_pid(restartable)
        os.kill(old, signal.SIGKILL)
        _wait_for(lambda: not pid_exists(pid), 30, "the job never ended")
        res = restartable.run("kiln", "up")
        assert res.returncode == 0, res.stderr
        job = restartable.wait(job_id, FINAL, timeout=30)
        assert job["state"] == "COMPLETED"
        assert (workdir / "out").read_text() == "done\n"
        assert job["restart_count"] == 0
    finally:
        cleanup(workdir)


def test_job_that_exits_3_while_no_agent_watches_is_failed_3_0_in_sacct(
        restartable: Cluster) -> None:
    workdir = world_tempdir("kiln-ar-")
    try:
        job_id = restartable.sbatch(
            "--wrap", "echo $$ > pid; while [ ! -e go ]; do sleep 0.1; done; exit 3",
            cwd=workdir)
        restartable.wait(job_id, {"RUNNING"})
        pid = _job_pid(workdir)
        old = _agent_pid(restartable)
        os.kill(old, signal.SIGKILL)
        _wait_for(lambda: not pid_exists(old) or _zombie(old), 10, "agentd survived SIGKILL")
        assert pid_exists(pid), "the job died with its agent"
        (workdir / "go").touch()
        _wait_for(lambda: not pid_exists(pid) or _zombie(pid), 30, "the job never ended")
        res = restartable.run("kiln", "up")
        assert res.returncode == 0, res.stderr
        job = restartable.wait(job_id, FINAL, timeout=30)
        assert (job["state"], job["restart_count"]) == ("FAILED", 0), job
        res = restartable.run("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o",
                              "JobID,State,ExitCode")
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines() == [f"{job_id}|FAILED|3:0"]
    finally:
        cleanup(workdir)


def test_walltime_is_kept_while_no_agent_runs(restartable: Cluster) -> None:
    workdir = world_tempdir("kiln-ar-")
    try:
        job_id = restartable.sbatch("-t", "0:06", "--wrap", "echo $$ > pid; sleep 600",
                                    cwd=workdir)
        restartable.wait(job_id, {"RUNNING"})
        pid = _job_pid(workdir)
        old = _agent_pid(restartable)
        os.kill(old, signal.SIGKILL)
        # no agent runs: the job's supervisor alone ends it at its limit
        _wait_for(lambda: not pid_exists(pid) or _zombie(pid), 60,
                  "the job outlived its limit while its agent was down")
        assert "DUE TO TIME LIMIT" in (workdir / f"slurm-{job_id}.out").read_text()
        res = restartable.run("kiln", "up")
        assert res.returncode == 0, res.stderr
        job = restartable.wait(job_id, FINAL, timeout=30)
        assert (job["state"], job["restart_count"]) == ("TIMEOUT", 0), job
        res = restartable.run("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o",
                              "State,ExitCode")
        assert res.stdout.splitlines() == ["TIMEOUT|0:0"], res.stdout  # as Slurm shows it
    finally:
        cleanup(workdir)


def test_kiln_up_is_idempotent_and_status_lists_each_pid(restartable: Cluster) -> None:
    before = _agent_pid(restartable)
    res = restartable.run("kiln", "up")
    assert res.returncode == 0, res.stderr
    assert "all already running" in res.stdout
    assert _agent_pid(restartable) == before
    res = restartable.run("kiln", "status")
    assert res.returncode == 0, res.stderr
    schedd_pid = int((restartable.home / "run" / "schedd.pid").read_text())
    lines = res.stdout.splitlines()
    assert any(line.split()[0] == "schedd" and line.endswith(f"pid {schedd_pid}")
               for line in lines), res.stdout
    assert any(line.startswith("agentd node1") and line.endswith(f"pid {before}")
               for line in lines), res.stdout
    assert "1 node(s) up: node1" in res.stdout
