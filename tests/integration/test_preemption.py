"""Preemption through the real commands: QOS Preempt lists with GraceTime (the victim hears at
once, is killed after its grace, requeued, and runs again with SLURM_RESTART_COUNT=1), and
guaranteed quotas that reclaim just enough burst work (docs/preemption.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, until

GRACE = 3  # seconds, GraceTime of QOS low


def acct(cluster: Cluster, *args: str) -> None:
    res = cluster.run("sacctmgr", "-i", *args)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.fixture(scope="module")
def qos(cluster: Cluster) -> None:
    """QOS low (GraceTime 3 s), high (Preempt=low), burst; accounts a and b, each guaranteed
    4 GPUs, with root in both."""
    acct(cluster, "add", "qos", "low", f"GraceTime={GRACE}")
    acct(cluster, "add", "qos", "high", "Priority=100", "Preempt=low", "PreemptMode=REQUEUE")
    acct(cluster, "add", "qos", "burst")
    acct(cluster, "modify", "account", "root", "set", "QOS=normal,low,high,burst")
    for name in ("a", "b"):
        acct(cluster, "add", "account", name, "Guarantee=gres/gpu=4")
        acct(cluster, "add", "user", "root", f"Account={name}")


def cancel_all(cluster: Cluster) -> None:
    cluster.run("scancel", "-u", "root")
    until(lambda: not cluster.run("squeue", "-h", "-o", "%i").stdout.split())


VICTIM = """#!/bin/bash
echo "start restart=$SLURM_RESTART_COUNT" >> {dir}/{name}.log
if [ "$SLURM_RESTART_COUNT" = 1 ]; then exit 0; fi
trap 'echo "$(date +%s.%N)" >> {dir}/{name}.sig' TERM
touch "$KILN_CHECKPOINT_FILE"
while true; do sleep 0.1; done
"""


def test_high_qos_preempts_the_cheapest_low_job(cluster: Cluster, qos: None,
                                                workdir: Path) -> None:
    try:
        # x: 4 GPUs, an hour to restart; y: 4 GPUs, a minute, a fresh checkpoint -> y goes
        x = cluster.sbatch("-A", "a", "--qos=low", "--gres=gpu:4", "--restart-cost=60",
                           "-J", "x", "-t", "10", input=VICTIM.format(dir=workdir, name="x"),
                           cwd=workdir)
        y = cluster.sbatch("-A", "a", "--qos=low", "--gres=gpu:4", "--restart-cost=1",
                           "-J", "y", "-t", "10", input=VICTIM.format(dir=workdir, name="y"),
                           cwd=workdir)
        cluster.wait(x, {"RUNNING"})
        cluster.wait(y, {"RUNNING"})
        until(lambda: (workdir / "y.log").exists() and (workdir / "x.log").exists())
        high = cluster.sbatch("-A", "b", "--qos=high", "--gres=gpu:4", "-t", "5",
                              "--wrap", "sleep 3", cwd=workdir)
        signals = workdir / "y.sig"
        until(signals.exists)
        assert cluster.job(y)["state"] == "RUNNING"  # told at once, still within its grace
        cluster.wait(high, {"RUNNING", "COMPLETED"})
        notice, *later = [float(t) for t in until(
            lambda: signals.read_text().split() if len(signals.read_text().split()) >= 2
            else None)]
        assert later[0] - notice >= GRACE - 0.5  # the SIGTERM of the kill came after the grace
        assert cluster.job(x)["state"] == "RUNNING"
        assert not (workdir / "x.sig").exists()
        cluster.wait(high, {"COMPLETED"})
        cluster.wait(y, {"COMPLETED"}, timeout=90)
        assert (workdir / "y.log").read_text() == "start restart=0\nstart restart=1\n"
        assert cluster.scontrol_show_job(y)["Restarts"] == "1"
        runs = cluster.run("sacct", "-D", "-X", "-n", "-P", "-j", str(y),
                           "-o", "JobID,State").stdout.split()
        assert runs == [f"{y}|PREEMPTED", f"{y}|COMPLETED"]
        out = cluster.run("sacct", "-X", "-n", "-P", "-j", str(y), "-o", "State").stdout
        assert out.split() == ["COMPLETED"]  # without -D: the last run only
    finally:
        cancel_all(cluster)


def test_guarantee_reclaims_exactly_enough_burst_work(cluster: Cluster, qos: None,
                                                      workdir: Path) -> None:
    try:
        burst = [cluster.sbatch("-A", "a", "--qos=burst", "--gres=gpu:2", "-t", "10",
                                "-J", f"burst{i}", "--wrap", "sleep 120", cwd=workdir)
                 for i in range(4)]
        for job_id in burst:
            cluster.wait(job_id, {"RUNNING"})
        shown = cluster.run("squeue", "-h", "-o", "%i %q", "-A", "a").stdout.split("\n")
        assert {line.split()[1] for line in shown if line} == {"burst"}
        b = cluster.sbatch("-A", "b", "--gres=gpu:4", "-t", "5", "--wrap", "sleep 2",
                           cwd=workdir)
        cluster.wait(b, {"RUNNING", "COMPLETED"})
        restarted = [j for j in burst if cluster.job(j)["restart_count"]]
        assert len(restarted) == 2  # 4 GPUs of a's 8: down to its guarantee, not below
        assert all(cluster.job(j)["state"] == "RUNNING" for j in burst if j not in restarted)
        cluster.wait(b, {"COMPLETED"})
        for job_id in restarted:  # they come back once b is done
            cluster.wait(job_id, {"RUNNING"})
        assert sorted(cluster.job(j)["restart_count"] for j in burst) == [0, 0, 1, 1]
    finally:
        cancel_all(cluster)


def test_guarantee_through_sacctmgr(cluster: Cluster, qos: None) -> None:
    shown = cluster.run("sacctmgr", "-n", "-P", "show", "assoc", "where", "account=a",
                        "format=Account,User,Guarantee").stdout
    assert shown == "a||gres/gpu=4\na|root|\n"
    bad = cluster.run("sacctmgr", "-i", "modify", "account", "a", "set", "Guarantee=gres/gpu=x")
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    on_user = cluster.run("sacctmgr", "-i", "modify", "user", "root", "set", "Guarantee=cpu=1")
    assert on_user.returncode == 1 and "Unknown option" in on_user.stderr, on_user.stderr
    acct(cluster, "modify", "account", "a", "set", "GrpTRESGuarantee=gres/gpu=6")
    shown = cluster.run("sacctmgr", "-n", "-P", "show", "assoc", "where", "account=a",
                        "format=Guarantee").stdout
    acct(cluster, "modify", "account", "a", "set", "Guarantee=gres/gpu=4")
    assert shown.splitlines()[0] == "gres/gpu=6"
