"""Preemption cannot livelock (issue 12, item 7): what a preemptor's victims free is held for
it until it starts, a requeued victim does not start ahead of the job that preempted it, and a
run younger than PreemptExemptTime is nobody's victim.

The loop as it was found: the preemptor, unable to start, was promised the node where a
non-preemptible job ends first; its victim was on the other node. Once the victim ended, the
preemptor was kept to its promise, the requeued victim took the node just freed, and a few
seconds later the preemptor preempted it again (9 times in 45 s, a whole node idle)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, until
from tests.integration.conftest import BACKENDS, _cluster

GRACE = 2


def acct(cluster: Cluster, *args: str) -> None:
    res = cluster.run("sacctmgr", "-i", *args)
    assert res.returncode == 0, res.stdout + res.stderr


def _qos(cluster: Cluster) -> None:
    acct(cluster, "add", "qos", "low", f"GraceTime={GRACE}")
    acct(cluster, "add", "qos", "high", "Priority=100", "Preempt=low", "PreemptMode=REQUEUE")
    acct(cluster, "modify", "account", "root", "set", "QOS=normal,low,high")


@pytest.fixture(scope="module", params=BACKENDS)
def pair(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two nodes of 4 GPUs; PreemptExemptTime off, so only the hold keeps the loop away."""
    for cluster in _cluster(request, request.param, nodes=2, fake_gpus="4xA100",
                            kill_wait=2):
        _qos(cluster)
        yield cluster


@pytest.fixture(scope="module", params=BACKENDS)
def exempting(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One node of 4 GPUs and PreemptExemptTime = 20 s."""
    for cluster in _cluster(request, request.param, nodes=1, fake_gpus="4xA100",
                            kill_wait=2, preempt_exempt_time=20):
        _qos(cluster)
        yield cluster


def cancel_all(cluster: Cluster) -> None:
    cluster.run("scancel", "-u", "root")
    until(lambda: not cluster.run("squeue", "-h", "-o", "%i").stdout.split())


def test_preemptor_gets_what_its_victim_freed(pair: Cluster, workdir: Path) -> None:
    try:
        # node A: a job nobody may preempt, which ends first (5 min); node B: the victim (1 h)
        steady = pair.sbatch("--gres=gpu:4", "-t", "5", "-J", "steady", "--wrap", "sleep 600",
                             cwd=workdir)
        node_a = pair.wait(steady, {"RUNNING"})["node_list"]
        victim = pair.sbatch("--qos=low", "--gres=gpu:4", "-t", "60", "-J", "victim",
                             "--wrap", "sleep 600", cwd=workdir)
        node_b = pair.wait(victim, {"RUNNING"})["node_list"]
        assert node_a != node_b
        high = pair.sbatch("--qos=high", "--gres=gpu:4", "-t", "10", "-J", "high",
                           "--wrap", "sleep 600", cwd=workdir)
        started = pair.wait(high, {"RUNNING"}, timeout=60)
        assert started["node_list"] == node_b  # where its victim was, held for it
        job = pair.job(victim)
        assert job["restart_count"] == 1, job
        assert job["state"] == "PENDING"  # nowhere to go: it waits, nobody is preempted again
        assert pair.job(steady)["state"] == "RUNNING"
        # a few more cycles: still one preemption, the preemptor keeps its node
        deadline = time.time() + 3 * GRACE
        while time.time() < deadline:
            assert pair.job(victim)["restart_count"] == 1
            assert pair.job(high)["state"] == "RUNNING"
            time.sleep(0.5)
        runs = pair.run("sacct", "-D", "-X", "-n", "-P", "-j", str(victim),
                        "-o", "State").stdout.split()
        assert runs.count("PREEMPTED") == 1, runs
    finally:
        cancel_all(pair)


def test_a_young_run_is_nobodys_victim(exempting: Cluster, workdir: Path) -> None:
    try:
        victim = exempting.sbatch("--qos=low", "--gres=gpu:4", "-t", "60", "-J", "victim",
                                  "--wrap", "sleep 600", cwd=workdir)
        begun = exempting.wait(victim, {"RUNNING"})["start_time"]
        high = exempting.sbatch("--qos=high", "--gres=gpu:4", "-t", "10", "-J", "high",
                                "--wrap", "sleep 600", cwd=workdir)
        until(lambda: exempting.job(high)["reason"] == "Resources")
        assert exempting.job(victim)["state"] == "RUNNING"
        assert exempting.job(victim)["preempt"] is None  # not chosen while exempt
        started = exempting.wait(high, {"RUNNING"}, timeout=90)
        assert started["start_time"] - begun >= 20  # preempted once its exempt time was over
        assert exempting.job(victim)["restart_count"] == 1
    finally:
        cancel_all(exempting)
