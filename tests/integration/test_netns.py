"""Partitions for real: node2's agent runs in its own network namespace, reaching schedd over a
veth pair whose link the test cuts. A short cut: the agent keeps time alone, ends a job at its
walltime, and the TIMEOUT report reaches schedd once the link is back. A long cut: the job's
supervisor fences it after fence_timeout; then node DOWN, its job NODE_FAIL and requeued
elsewhere: the old run is gone before its requeued copy starts. A long cut under a partition
with on_isolation = "keep": the job runs on, overlaps its requeued copy, and is killed as a
stale run once the node is heard again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from kiln import keys
from tests.integration.cluster import (
    Cluster,
    cleanup,
    node_state,
    pid_exists,
    stop_process,
    until,
    world_tempdir,
)
from tests.integration.conftest import BACKENDS, _cluster
from tests.integration.netns import Netns, namespace

NODE_TIMEOUT = 12.0  # SlurmdTimeout: longer than a short cut plus TCP's retransmit backoff
FENCE_TIMEOUT = 8.0  # the default (two thirds of node_timeout), named for the reader
KEEP_PARTITION = """[[partition]]
name = "keep"
on_isolation = "keep"
"""


@dataclass
class Split:
    cluster: Cluster
    ns: Netns
    agent: subprocess.Popen


@pytest.fixture(scope="module", params=BACKENDS)
def split(request: pytest.FixtureRequest) -> Iterator[Split]:
    """node1's agent on the host; node2's in a namespace; schedd listens on the veth address."""
    with ExitStack() as stack:
        ns = stack.enter_context(namespace())
        gen = _cluster(request, request.param, nodes=1, fake_gpus="4xA100", kill_wait=2,
                       node_timeout=NODE_TIMEOUT, agent_host=ns.host_addr,
                       schedd_extra=f"fence_timeout = {FENCE_TIMEOUT}",
                       config_extra=KEEP_PARTITION)
        cluster = next(gen)
        stack.callback(next, gen, None)
        keys.generate_cluster(cluster.home / "keys", ["node2"])
        log = cluster.home / "log" / "agentd-node2.log"
        agent = subprocess.Popen(
            ns.argv(sys.executable, "-m", "agentd.daemon", "--config",
                    str(cluster.home / "kiln.toml"), "--node", "node2", "--fake-gpus", "4xA100",
                    "--cpus", "64", "--spool", str(cluster.home / "spool" / "node2"),
                    "--log-file", str(log)),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=cluster.env)
        stack.callback(stop_process, agent)
        until(lambda: node_state(cluster, "node2") == "idle", "node2 never registered", 30)
        yield Split(cluster, ns, agent)



def _pid(path: Path) -> int:
    until(lambda: path.exists() and path.read_text().strip(), f"{path} never written", 30)
    return int(path.read_text().split()[0])


def test_agent_enforces_walltime_while_cut_off_and_reports_after(split: Split) -> None:
    cluster, ns = split.cluster, split.ns
    workdir = world_tempdir("kiln-ns-")
    try:
        job_id = cluster.sbatch("-w", "node2", "-t", "0:04", "--wrap",
                                "echo $$ > pid; sleep 600", cwd=workdir)
        cluster.wait(job_id, {"RUNNING"})
        pid = _pid(workdir / "pid")
        ns.cut()
        try:
            until(lambda: not pid_exists(pid), "the cut-off agent did not end the job", 20)
            # schedd heard nothing: to it the job still runs, and node2 is not DOWN yet
            assert cluster.job(job_id)["state"] == "RUNNING"
        finally:
            ns.restore()
        job = cluster.wait(job_id, {"TIMEOUT", "NODE_FAIL", "COMPLETED", "FAILED"}, timeout=30)
        assert job["state"] == "TIMEOUT", job
        assert job["restart_count"] == 0
        assert "DUE TO TIME LIMIT" in (workdir / f"slurm-{job_id}.out").read_text()
        until(lambda: node_state(cluster, "node2") == "idle", "node2 not idle again", 30)
    finally:
        cleanup(workdir)


def test_long_cut_fences_the_job_before_it_is_requeued_elsewhere(split: Split) -> None:
    cluster, ns = split.cluster, split.ns
    workdir = world_tempdir("kiln-ns-")
    try:
        blocker = cluster.sbatch("--gres=gpu:4", "-w", "node1", "--wrap", "sleep 600",
                                 cwd=workdir)
        cluster.wait(blocker, {"RUNNING"})
        victim = cluster.sbatch("--gres=gpu:2", "--requeue", "--wrap",
                                "echo $$ >> pids; sleep 600", cwd=workdir)
        assert cluster.wait(victim, {"RUNNING"})["node_list"] == "node2"
        first = _pid(workdir / "pids")
        ns.cut()
        try:
            until(lambda: cluster.job(victim)["restart_count"] == 1,
                  "the cut-off node's job was never requeued", NODE_TIMEOUT + 20)
            # fenced on the cut-off node (fence_timeout) before schedd requeued it
            assert not pid_exists(first), "the old run lives on beside its requeued copy"
            assert node_state(cluster, "node2") == "down"
            assert cluster.job(victim)["state"] == "PENDING"
            assert "DUE TO NODE FAILURE" in (workdir / f"slurm-{victim}.out").read_text()
            cluster.run("scancel", str(blocker))  # room for it on node1
            assert cluster.wait(victim, {"RUNNING"}, timeout=30)["node_list"] == "node1"
        finally:
            ns.restore()
        assert cluster.job(victim)["state"] == "RUNNING"
        assert cluster.job(victim)["node_list"] == "node1"
        until(lambda: node_state(cluster, "node2") == "idle", "node2 did not come back", 30)
        cluster.run("scancel", str(victim))
        cluster.wait(victim, {"CANCELLED"})
        assert len((workdir / "pids").read_text().split()) == 2  # two runs, one after the other
    finally:
        cleanup(workdir)


def test_keep_runs_on_when_cut_off_and_its_stale_run_dies_once_heard(split: Split) -> None:
    """on_isolation = "keep" as docs/robustness.md says: the cut-off node's job of a keep
    partition is not fenced (it outlives fence_timeout, while a kill partition's job beside it
    is fenced); schedd requeues it after node_timeout and its copy runs elsewhere beside the
    old run; once the node is heard again the stale generation is killed."""
    cluster, ns = split.cluster, split.ns
    workdir = world_tempdir("kiln-ns-")
    try:
        blocker = cluster.sbatch("--gres=gpu:4", "-w", "node1", "--wrap", "sleep 600",
                                 cwd=workdir)
        cluster.wait(blocker, {"RUNNING"})
        kept = cluster.sbatch("-p", "keep", "--gres=gpu:2", "--requeue", "--wrap",
                              "echo $$ >> kept; sleep 600", cwd=workdir)
        fenced = cluster.sbatch("--gres=gpu:2", "--no-requeue", "--wrap",
                                "echo $$ > fenced; sleep 600", cwd=workdir)
        assert cluster.wait(kept, {"RUNNING"})["node_list"] == "node2"
        assert cluster.wait(fenced, {"RUNNING"})["node_list"] == "node2"
        old, other = _pid(workdir / "kept"), _pid(workdir / "fenced")
        ns.cut()
        try:
            until(lambda: not pid_exists(other), "the kill job was not fenced", FENCE_TIMEOUT + 20)
            assert pid_exists(old), "a keep partition's job was fenced"
            until(lambda: cluster.job(kept)["restart_count"] == 1,
                  "the cut-off node's keep job was never requeued", NODE_TIMEOUT + 20)
            assert pid_exists(old)  # schedd cannot stop it: the documented overlap begins
            cluster.run("scancel", str(blocker))  # room for the copy on node1
            assert cluster.wait(kept, {"RUNNING"}, timeout=30)["node_list"] == "node1"
            until(lambda: len((workdir / "kept").read_text().split()) == 2,
                  "the requeued copy never started", 30)
            assert pid_exists(old), "the two runs should overlap while node2 is cut off"
        finally:
            ns.restore()
        until(lambda: not pid_exists(old), "the stale run lived on after node2 was heard", 60)
        job = cluster.job(kept)
        assert (job["state"], job["node_list"], job["restart_count"]) == ("RUNNING", "node1", 1)
        assert pid_exists(int((workdir / "kept").read_text().split()[1]))  # the copy runs on
        until(lambda: node_state(cluster, "node2") == "idle", "node2 did not come back", 30)
        cluster.run("scancel", str(kept))
        cluster.wait(kept, {"CANCELLED"})
    finally:
        cleanup(workdir)
