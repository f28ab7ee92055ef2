"""A node whose agent falls silent: DOWN, its job NODE_FAIL and requeued elsewhere, and the
stale copy fenced when the agent comes back — a job never runs twice at once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.integration.cluster import Cluster, cleanup, world_tempdir
from tests.integration.conftest import BACKENDS, _cluster


@pytest.fixture(scope="module", params=BACKENDS)
def flaky(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two nodes of 4 fake GPUs; a node is DOWN after 3 s without a heartbeat."""
    yield from _cluster(request, request.param, nodes=2, fake_gpus="4xA100", kill_wait=2,
                        node_timeout=3.0)


def _agent_pid(cluster: Cluster, node: str) -> int:
    return int((cluster.home / "run" / f"agentd-{node}.pid").read_text())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


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
        os.kill(agent, signal.SIGSTOP)  # the node falls silent; its job keeps running
        try:
            deadline = time.time() + 20
            while time.time() < deadline and flaky.job(victim)["restart_count"] == 0:
                time.sleep(0.2)
            job = flaky.job(victim)
            assert job["restart_count"] == 1 and job["state"] == "PENDING"
            nodes = flaky.run("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
            assert "node2 down" in [line.strip().lower() for line in nodes]
            # the old run is still alive on the silent node: nobody could reach it
            assert _alive(first_pid)
            flaky.run("scancel", str(blocker))
            job = flaky.wait(victim, {"RUNNING"}, timeout=30)
            assert job["node_list"] == "node1"
        finally:
            os.kill(agent, signal.SIGCONT)
        # the agent is back: schedd fences the stale generation, the old process dies
        deadline = time.time() + 20
        while _alive(first_pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(first_pid), "the requeued job's old run survived its node's return"
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
