"""Job and node control through the real commands: scontrol update job / requeue / update node,
and the dependency and array-throttle rules that hold jobs back."""

from __future__ import annotations

import time
from pathlib import Path

from tests.integration.cluster import Cluster, release_file, until


def update(cluster: Cluster, job_id: int, *pairs: str, user: str | None = None):
    return cluster.run("scontrol", "update", f"JobId={job_id}", *pairs, user=user)


def test_time_limit_down_by_owner_up_only_by_operator(cluster: Cluster, other_user: str,
                                                      workdir: Path) -> None:
    mine = cluster.sbatch("-H", "-t", "10", "--wrap", "true", user=other_user, cwd=workdir)
    roots = cluster.sbatch("-H", "-t", "10", "--wrap", "true", cwd=workdir)
    try:
        up = update(cluster, mine, "TimeLimit=20", user=other_user)
        assert (up.returncode, up.stderr) == (1, f"Access/permission denied for job {mine}\n")
        theirs = update(cluster, roots, "TimeLimit=5", user=other_user)
        assert (theirs.returncode, theirs.stderr) == (
            1, f"Access/permission denied for job {roots}\n")
        down = update(cluster, mine, "TimeLimit=5", user=other_user)
        assert (down.returncode, down.stderr) == (0, "")
        assert cluster.job(mine)["time_limit"] == 300
        assert update(cluster, mine, "TimeLimit=30").returncode == 0  # root: an operator
        assert cluster.job(mine)["time_limit"] == 1800

        nice = update(cluster, mine, "Nice=-5", user=other_user)
        assert nice.returncode == 1 and "Access/permission denied" in nice.stderr
        assert update(cluster, mine, "Nice=10", user=other_user).returncode == 0
        prio = update(cluster, mine, "Priority=5", user=other_user)
        assert prio.returncode == 1 and "Access/permission denied" in prio.stderr
        assert update(cluster, mine, "Priority=4242").returncode == 0
        job = cluster.job(mine)
        assert (job["nice"], job["admin_priority"]) == (10, 4242)

        assert update(cluster, mine, "Partition=short", "StartTime=now+1hour",
                      user=other_user).returncode == 0
        job = cluster.job(mine)
        assert job["partition"] == "short" and job["begin_time"] > time.time() + 3000
        bad = update(cluster, mine, "Partition=nosuch", user=other_user)
        assert (bad.returncode, bad.stderr) == (
            1, f"Invalid partition name specified for job {mine}\n")
        account = update(cluster, mine, "Account=nosuch", user=other_user)
        assert (account.returncode, account.stderr) == (
            1, "Invalid account or account/partition combination specified for job "
               f"{mine}\n")
        qos = update(cluster, mine, "QOS=nosuch", user=other_user)
        assert (qos.returncode, qos.stderr) == (1, f"Invalid qos specification for job {mine}\n")
        assert update(cluster, mine, "QOS=normal", "Account=root", user=other_user
                      ).returncode == 0
        missing = update(cluster, 999999, "TimeLimit=5")
        assert missing.returncode == 1 and "Invalid job id specified" in missing.stderr
    finally:
        cluster.run("scancel", str(mine), str(roots))


def test_running_job_limit_lowered_is_enforced(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("-t", "10", "-o", "/dev/null", "--wrap", "sleep 300", cwd=workdir)
    cluster.wait(job_id, {"RUNNING"})
    raised = update(cluster, job_id, "TimeLimit=20")
    assert raised.returncode == 1 and "can only be lowered" in raised.stderr
    assert update(cluster, job_id, "TimeLimit=0:02").returncode == 0
    job = cluster.wait(job_id, {"TIMEOUT", "COMPLETED", "FAILED", "CANCELLED"}, timeout=60)
    assert job["state"] == "TIMEOUT"


def test_requeue_running_job_runs_again_with_the_same_id(cluster: Cluster,
                                                         workdir: Path) -> None:
    log = workdir / "runs"
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap",
                            f"echo run $SLURM_RESTART_COUNT >> {log}; sleep 300", cwd=workdir)
    pending = cluster.sbatch("-H", "--wrap", "true", cwd=workdir)  # held: never runs
    try:
        cluster.wait(job_id, {"RUNNING"})
        until(lambda: log.exists() and "run 0" in log.read_text(), "first run wrote its line")
        not_running = cluster.run("scontrol", "requeue", str(pending))
        assert (not_running.returncode, not_running.stderr) == (
            1, f"Job is pending execution for job {pending}\n")
        res = cluster.run("scontrol", "requeue", str(job_id))
        assert (res.returncode, res.stderr) == (0, "")
        until(lambda: log.exists() and "run 1" in log.read_text(), "second run wrote its line")
        job = cluster.job(job_id)
        assert (job["id"], job["state"], job["restart_count"]) == (job_id, "RUNNING", 1)
        assert cluster.scontrol_show_job(job_id)["Restarts"] == "1"
        held = cluster.run("scontrol", "requeuehold", str(job_id))
        assert held.returncode == 0, held.stderr
        job = until(lambda: (j := cluster.job(job_id))["state"] == "PENDING" and j,
                    "requeuehold made it pending")
        assert (job["reason"], job["restart_count"]) == ("JobHeldUser", 2)
    finally:
        cluster.run("scancel", str(job_id), str(pending))


def _node_state(cluster: Cluster) -> str:
    return cluster.run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%t").stdout.strip()


def test_drained_node_runs_its_job_but_takes_no_new_one(cluster: Cluster, other_user: str,
                                                        workdir: Path) -> None:
    running = cluster.sbatch("--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 300",
                             cwd=workdir)
    cluster.wait(running, {"RUNNING"})
    try:
        denied = cluster.run("scontrol", "update", "NodeName=node1", "State=DRAIN",
                             "Reason=test", user=other_user)
        assert (denied.returncode, denied.stderr) == (
            1, "slurm_update error: Access/permission denied\n")
        drain = cluster.run("scontrol", "update", "NodeName=node1", "State=DRAIN",
                            "Reason=maintenance")
        assert (drain.returncode, drain.stderr) == (0, "")
        assert until(lambda: _node_state(cluster) == "drng", "node draining")
        waiting = cluster.sbatch("--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 1",
                                 cwd=workdir)
        until(lambda: cluster.job(waiting)["reason"] == "ReqNodeNotAvail", "new job held back")
        assert cluster.job(running)["state"] == "RUNNING"
        assert "maintenance" in cluster.run("sinfo", "-R").stdout
        cluster.run("scancel", str(running))
        assert until(lambda: _node_state(cluster) == "drain", "node drained")
        assert cluster.job(waiting)["state"] == "PENDING"
        resume = cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME")
        assert resume.returncode == 0, resume.stderr
        cluster.wait(waiting, {"COMPLETED"})
        assert _node_state(cluster) == "idle"
    finally:
        cluster.run("scancel", str(running))
        cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME")


def test_afternotok_runs_only_after_a_failure(cluster: Cluster, workdir: Path) -> None:
    failing = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 1; exit 3", cwd=workdir)
    on_fail = cluster.sbatch("-d", f"afternotok:{failing}", "-o", "/dev/null", "--wrap", "true",
                             cwd=workdir)
    on_ok = cluster.sbatch("-d", f"afterok:{failing}", "-o", "/dev/null", "--wrap", "true",
                           cwd=workdir)
    assert cluster.job(on_fail)["state"] == "PENDING"
    cluster.wait(failing, {"FAILED"})
    cluster.wait(on_fail, {"COMPLETED"})
    until(lambda: cluster.job(on_ok)["reason"] == "DependencyNeverSatisfied", "afterok is never")
    cluster.run("scancel", str(on_ok))


def test_singleton_runs_one_job_of_a_name_at_a_time(cluster: Cluster, workdir: Path) -> None:
    first = cluster.sbatch("-J", "solo", "-d", "singleton", "-o", "/dev/null", "--wrap",
                           release_file(workdir), cwd=workdir)
    second = cluster.sbatch("-J", "solo", "-d", "singleton", "-o", "/dev/null", "--wrap",
                            "true", cwd=workdir)
    cluster.wait(first, {"RUNNING"})
    # a third job, submitted after the second, runs to its end: cycles have passed that
    # kept the second waiting on the first
    probe = cluster.sbatch("-o", "/dev/null", "--wrap", "true", cwd=workdir)
    cluster.wait(probe, {"COMPLETED"})
    second_job = cluster.job(second)
    assert (second_job["state"], second_job["reason"]) == ("PENDING", "Dependency")
    (workdir / "release").touch()
    done_first = cluster.wait(first, {"COMPLETED"})
    done_second = cluster.wait(second, {"COMPLETED"})
    assert done_second["start_time"] >= done_first["end_time"]


def test_array_throttle_runs_at_most_n_tasks(cluster: Cluster, workdir: Path) -> None:
    array = cluster.sbatch("--array=0-3%2", "-o", "/dev/null", "--wrap", "sleep 4",
                           cwd=workdir)
    most, reasons = 0, set()
    deadline = time.time() + 60
    while time.time() < deadline:
        rows = cluster.run("squeue", "-h", "-r", "-j", str(array),
                           "-o", "%T %r").stdout.splitlines()
        running = sum(1 for r in rows if r.startswith("RUNNING"))
        most = max(most, running)
        reasons.update(r.split(" ", 1)[1] for r in rows if r.startswith("PENDING"))
        if not any(r.startswith(("PENDING", "RUNNING", "COMPLETING")) for r in rows):
            break  # every task has ended (squeue lists ended ones for MinJobAge)
        time.sleep(0.2)
    assert most == 2
    assert "JobArrayTaskLimit" in reasons
    states = cluster.run("sacct", "-X", "-n", "-P", "-j", str(array), "-o", "State").stdout
    assert states.split() == ["COMPLETED"] * 4


def test_node_set_down_requeues_its_job_until_resumed(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 300", cwd=workdir)
    cluster.wait(job_id, {"RUNNING"})
    try:
        down = cluster.run("scontrol", "update", "NodeName=node1", "State=DOWN",
                           "Reason=broken fan")
        assert (down.returncode, down.stderr) == (0, "")
        job = until(lambda: (j := cluster.job(job_id))["state"] == "PENDING" and j,
                    "job requeued")
        assert job["restart_count"] == 1
        assert _node_state(cluster) == "down"
        until(lambda: cluster.job(job_id)["reason"] == "ReqNodeNotAvail", "job held back")
        assert cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME").returncode == 0
        cluster.wait(job_id, {"RUNNING"})
    finally:
        cluster.run("scancel", str(job_id))
        cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME")
