"""Issue 30 item 2, on a real cluster: ``[agent] health_check_program`` (Slurm's
HealthCheckProgram) drains a node whose check fails, with the first line of the check's
output as the Reason (sinfo -R), and with ``health_check_resume`` resumes the node once the
check passes again, but never a node an admin drained; with ``health_check_node_state``
(Slurm's HealthCheckNodeState) the check runs only while the node is in the states named."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import (
    Cluster,
    cleanup,
    node_state,
    sqlite_cluster,
    until,
    world_tempdir,
)

CHECK = """#!/bin/sh
echo "$SLURMD_NODENAME" > {home}/checked-node
if [ -f {home}/unhealthy ]; then
    cat {home}/unhealthy
    echo "second line, not the reason"
    exit 1
fi
exit 0
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    home = world_tempdir("kiln-it-")
    try:
        check = Path(home) / "healthcheck.sh"
        check.write_text(CHECK.format(home=home))
        check.chmod(0o755)
        extra = (f'health_check_program = "{check}"\n'
                 "health_check_interval = 1\nhealth_check_resume = true\n"
                 # idle (drained idle too) and mixed, not allocated
                 'health_check_node_state = "IDLE,MIXED,CYCLE"\n')
        with sqlite_cluster(home, nodes=1, fake_gpus="2", agent_extra=extra) as c:
            yield c
    finally:
        cleanup(home)


def _reasons(cluster: Cluster) -> str:
    return cluster.run("sinfo", "-R", "-h", "-o", "%n|%E").stdout


def test_failing_check_drains_then_resumes(cluster: Cluster) -> None:
    home = Path(cluster.home)
    until(lambda: (home / "checked-node").exists(), "the health check ran")
    assert (home / "checked-node").read_text().strip() == "node1"  # SLURMD_NODENAME
    assert node_state(cluster, "node1") == "idle"
    (home / "unhealthy").write_text("gpu 1 lost its ECC\n")
    until(lambda: node_state(cluster, "node1").startswith("drain"), "drained by the check")
    assert "node1|gpu 1 lost its ECC" in _reasons(cluster)
    assert "second line" not in _reasons(cluster)
    os.unlink(home / "unhealthy")
    until(lambda: node_state(cluster, "node1") == "idle", "resumed once the check passes")
    assert "node1" not in _reasons(cluster)


def test_admin_drain_is_not_resumed(cluster: Cluster) -> None:
    home = Path(cluster.home)
    (home / "unhealthy").write_text("disk full\n")
    until(lambda: node_state(cluster, "node1").startswith("drain"), "drained by the check")
    # the admin takes the drain over (a reason of their own): the check no longer owns it
    cluster.run("scontrol", "update", "nodename=node1", "state=drain", "reason=maintenance")
    os.unlink(home / "unhealthy")
    mtime = (home / "checked-node").stat().st_mtime
    until(lambda: (home / "checked-node").stat().st_mtime > mtime + 2, "two more checks passed")
    assert node_state(cluster, "node1").startswith("drain")
    assert "node1|maintenance" in _reasons(cluster)
    cluster.run("scontrol", "update", "nodename=node1", "state=resume")
    until(lambda: node_state(cluster, "node1") == "idle", "resumed by the admin")


def test_no_check_runs_while_the_node_is_allocated(cluster: Cluster) -> None:
    home = Path(cluster.home)
    until(lambda: (home / "checked-node").exists(), "the health check ran")
    workdir = world_tempdir("kiln-it-hc-")
    try:
        job = cluster.sbatch("--exclusive", "--wrap", "sleep 600", cwd=workdir)
        cluster.wait(job, {"RUNNING"}, timeout=60)
        until(lambda: node_state(cluster, "node1") == "allocated", "the node allocated")
        time.sleep(1.5)  # a check started before the job (an interval at most) has ended
        mtime = (home / "checked-node").stat().st_mtime
        time.sleep(3)  # three intervals: no check while allocated
        assert (home / "checked-node").stat().st_mtime == mtime
        cluster.run("scancel", str(job))
        cluster.wait(job, {"CANCELLED"}, timeout=60)
        until(lambda: (home / "checked-node").stat().st_mtime > mtime,
              "checks again once the node is idle")
    finally:
        cleanup(workdir)
