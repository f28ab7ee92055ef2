"""A node whose agent falls silent: its job's supervisor fences the job (NODE_FAIL) after
fence_timeout, before schedd's node_timeout marks the node DOWN and requeues the job
elsewhere — a job never runs twice at once, even while its agent is frozen."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.integration.cluster import Cluster, cleanup, pid_exists, world_tempdir
from tests.integration.conftest import BACKENDS, _cluster


@pytest.fixture(scope="module", params=BACKENDS)
def flaky(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two nodes of 4 fake GPUs; a node is DOWN after 5 s without a heartbeat, and a node
    that has not heard schedd for 3 s fences its jobs (SIGKILL at once: fence_kill_wait is
    5 - 3 - 1 - 1 = 0 s)."""
    yield from _cluster(request, request.param, nodes=2, fake_gpus="4xA100", kill_wait=2,
                        node_timeout=5.0, schedd_extra="fence_timeout = 3.0")


def _agent_pid(cluster: Cluster, node: str) -> int:
    return int((cluster.home / "run" / f"agentd-{node}.pid").read_text())


def test_silent_node_requeues_its_job_and_fences_the_old_run(flaky: Cluster) -> None:
    workdir = world_tempdir("kiln-nf-")
    try:
        # both nodes busy except for one 4-GPU job's worth: the victim lands on node2
        blocker = flaky.sbatch("--gres=gpu:4", "-w", "node1", "--wrap", "sleep 600", cwd=workdir)
        flaky.wait(blocker, {"RUNNING"})
        victim = flaky.sbatch("--gres=gpu:2", "--requeue", "-o", "run-%j.log", "--wrap",
                              "echo $$ >> pids; sleep 600", cwd=workdir)
        job = flaky.wait(victim, {"RUNNING"})
        assert job["node_list"] == "node2"
        pid_file = workdir / "pids"
        deadline = time.time() + 20
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.time() < deadline:
            time.sleep(0.1)
        first_pid = int(pid_file.read_text().split()[0])

        agent = _agent_pid(flaky, "node2")
        os.kill(agent, signal.SIGSTOP)  # the node falls silent (its agent frozen)
        try:
            deadline = time.time() + 20
            while time.time() < deadline and flaky.job(victim)["restart_count"] == 0:
                time.sleep(0.2)
            # the old run was fenced by its supervisor before schedd requeued the job
            assert not pid_exists(first_pid), "the old run lives on beside its requeued copy"
            job = flaky.job(victim)
            assert job["restart_count"] == 1 and job["state"] == "PENDING"
            nodes = flaky.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
            assert "node2 down" in [line.strip().lower() for line in nodes]
            assert "DUE TO NODE FAILURE" in (workdir / f"run-{victim}.log").read_text()
            flaky.run("scancel", str(blocker))
            job = flaky.wait(victim, {"RUNNING"}, timeout=30)
            assert job["node_list"] == "node1"
        finally:
            os.kill(agent, signal.SIGCONT)
        # the agent is back: its stale report changes nothing, the new run goes on
        assert not pid_exists(first_pid)
        assert flaky.job(victim)["state"] == "RUNNING"
        deadline = time.time() + 20
        while "node2 idle" not in flaky.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.lower():
            assert time.time() < deadline, "node2 did not come back"
            time.sleep(0.2)
        flaky.run("scancel", str(victim))
        flaky.wait(victim, {"CANCELLED"})
        pids = pid_file.read_text().split()
        assert len(pids) == 2  # two runs, one after the other
    finally:
        subprocess.run(["pkill", "-f", str(workdir)], capture_output=True)
        cleanup(workdir)
