"""One job's whole path, through the real commands: sbatch -> schedd -> agentd -> ledger."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from tests.integration.cluster import Cluster


def _group_alive(pgid: int) -> bool:
    return subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).returncode == 0


def _wait_file(path: Path, timeout: float = 30) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.1)
    raise AssertionError(f"{path} never written")


def test_job_completes_with_output_and_exit_code(cluster: Cluster, workdir: Path) -> None:
    script = workdir / "hello.sh"
    script.write_text("#!/bin/bash\n#SBATCH -J hello\necho hello from $SLURM_JOB_ID on "
                      "$SLURM_JOB_NODELIST\n")
    res = cluster.run("sbatch", str(script), cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Submitted batch job ")
    job_id = int(res.stdout.split()[3])
    job = cluster.wait(job_id, {"COMPLETED", "FAILED"})
    assert job["state"] == "COMPLETED"
    out = (workdir / f"slurm-{job_id}.out").read_text()
    assert out == f"hello from {job_id} on node1\n"
    show = cluster.scontrol_show_job(job_id)
    assert show["JobState"] == "COMPLETED"
    assert show["ExitCode"] == "0:0"
    assert show["JobName"] == "hello"


def test_failing_script_is_failed_with_its_exit_code(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("--wrap", "exit 3", cwd=workdir)
    job = cluster.wait(job_id, {"COMPLETED", "FAILED"})
    assert job["state"] == "FAILED"
    assert cluster.scontrol_show_job(job_id)["ExitCode"] == "3:0"


def test_killed_script_records_its_signal(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("--wrap", "kill -9 $$", cwd=workdir)
    job = cluster.wait(job_id, {"COMPLETED", "FAILED"})
    assert job["state"] == "FAILED"
    assert cluster.scontrol_show_job(job_id)["ExitCode"] == "0:9"


def test_walltime_kills_the_whole_group(cluster: Cluster, workdir: Path) -> None:
    script = workdir / "stubborn.sh"
    script.write_text(
        "#!/bin/bash\n"
        "ps -o pgid= $$ | tr -d ' ' > pgid\n"
        "bash -c 'trap \"\" TERM; sleep 600' &\n"
        "sleep 600\n"
    )
    job_id = cluster.sbatch("-t", "0:03", str(script), cwd=workdir)
    pgid = int(_wait_file(workdir / "pgid"))
    job = cluster.wait(job_id, {"TIMEOUT", "COMPLETED", "FAILED", "CANCELLED"}, timeout=60)
    assert job["state"] == "TIMEOUT"
    deadline = time.time() + cluster.kill_wait + 5
    while _group_alive(pgid) and time.time() < deadline:
        time.sleep(0.2)
    assert not _group_alive(pgid), "a process of the timed-out job survived SIGKILL"
    assert "DUE TO TIME LIMIT" in (workdir / f"slurm-{job_id}.out").read_text()


def test_time_limit_banner_survives_a_job_that_prints_after_term(cluster: Cluster,
                                                                   workdir: Path) -> None:
    """The checkpoint-on-TERM pattern: the job prints after SIGTERM into its stdout=stderr
    file; Slurm's banner stays whole and the job's later lines follow it."""
    script = workdir / "ckpt.sh"
    script.write_text(
        "#!/bin/bash\n"
        "trap 'echo checkpoint saved; echo exiting after TERM; exit 0' TERM\n"
        "echo started\n"
        "sleep 600 &\n"
        "wait\n"
    )
    job_id = cluster.sbatch("-t", "0:03", "-o", "ckpt-%j.txt", str(script), cwd=workdir)
    job = cluster.wait(job_id, {"TIMEOUT", "COMPLETED", "FAILED", "CANCELLED"}, timeout=60)
    assert job["state"] == "TIMEOUT"
    lines = (workdir / f"ckpt-{job_id}.txt").read_text().splitlines()
    assert lines[0] == "started", lines
    assert re.fullmatch(rf"slurmstepd: error: \*\*\* JOB {job_id} ON node1 CANCELLED AT "
                        r"\S+ DUE TO TIME LIMIT \*\*\*", lines[1]), lines
    assert lines[2:] == ["checkpoint saved", "exiting after TERM"], lines


def test_environment_inside_the_job(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("-J", "envjob", "--gres=gpu:2", "-n", "2", "-c", "3", "-o",
                            "env-%j-%x.txt", "--wrap", "env | grep -E '^(SLURM|CUDA)' | sort",
                            cwd=workdir)
    cluster.wait(job_id, {"COMPLETED"})
    env = dict(line.split("=", 1) for line in
               (workdir / f"env-{job_id}-envjob.txt").read_text().splitlines())
    assert env["SLURM_JOB_ID"] == str(job_id)
    assert env["SLURM_JOB_NAME"] == "envjob"
    assert env["SLURM_NTASKS"] == "2"
    assert env["SLURM_CPUS_PER_TASK"] == "3"
    assert env["SLURM_CPUS_ON_NODE"] == "6"
    assert env["SLURM_JOB_NODELIST"] == "node1"
    assert env["SLURM_SUBMIT_DIR"] == str(workdir)
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    assert env["SLURM_GPUS_ON_NODE"] == "2"


def test_array_tasks_and_dependency(cluster: Cluster, workdir: Path) -> None:
    array_id = cluster.sbatch("--array=0-2", "-o", "arr-%A_%a.out", "--wrap",
                              "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT",
                              cwd=workdir)
    after = cluster.sbatch(f"--dependency=afterok:{array_id}", "--wrap", "echo after",
                           "-o", "after.out", cwd=workdir)
    cluster.wait(after, {"COMPLETED"})
    for task in range(3):
        text = (workdir / f"arr-{array_id}_{task}.out").read_text()
        assert text == f"{array_id} {task} 3\n"
        assert cluster.job(f"{array_id}_{task}")["state"] == "COMPLETED"
    assert (workdir / "after.out").read_text() == "after\n"


def test_dependency_on_a_job_that_never_existed_is_refused(cluster: Cluster,
                                                           workdir: Path) -> None:
    before = cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout
    res = cluster.run("sbatch", "--dependency=afterok:987654", "--wrap", "true", cwd=workdir)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "sbatch: error: Batch job submission failed: Job dependency problem\n")
    assert cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout == before


def test_afterok_on_a_failed_job_never_runs(cluster: Cluster, workdir: Path) -> None:
    bad = cluster.sbatch("--wrap", "exit 1", cwd=workdir)
    cluster.wait(bad, {"FAILED"})
    dep = cluster.sbatch(f"--dependency=afterok:{bad}", "--wrap", "true", cwd=workdir)
    deadline = time.time() + 10
    while cluster.job(dep)["reason"] != "DependencyNeverSatisfied" and time.time() < deadline:
        time.sleep(0.1)
    assert cluster.job(dep)["reason"] == "DependencyNeverSatisfied"
    assert cluster.run("scancel", str(dep)).returncode == 0
    assert cluster.wait(dep, {"CANCELLED"})["state"] == "CANCELLED"


def test_hold_and_release(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("-H", "--wrap", "true", cwd=workdir)
    # a job submitted after it runs to its end: cycles have passed that left the held job be
    probe = cluster.sbatch("--wrap", "true", cwd=workdir)
    cluster.wait(probe, {"COMPLETED"})
    job = cluster.job(job_id)
    assert job["state"] == "PENDING" and job["reason"] == "JobHeldUser"
    squeue = cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%i %t %r")
    assert squeue.stdout.split() == [str(job_id), "PD", "JobHeldUser"]
    assert cluster.run("scontrol", "release", str(job_id)).returncode == 0
    cluster.wait(job_id, {"COMPLETED"})


def test_scancel_kills_the_process_group(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("--wrap", "ps -o pgid= $$ | tr -d ' ' > pgid; sleep 600 & sleep 600",
                            cwd=workdir)
    pgid = int(_wait_file(workdir / "pgid"))
    assert cluster.wait(job_id, {"RUNNING"})["state"] == "RUNNING"
    res = cluster.run("scancel", str(job_id))
    assert res.returncode == 0, res.stderr
    assert cluster.wait(job_id, {"CANCELLED"})["state"] == "CANCELLED"
    deadline = time.time() + cluster.kill_wait + 5
    while _group_alive(pgid) and time.time() < deadline:
        time.sleep(0.2)
    assert not _group_alive(pgid)


def test_users_cannot_cancel_each_others_jobs(cluster: Cluster, workdir: Path,
                                              other_user: str) -> None:
    mine = cluster.sbatch("--wrap", "sleep 600", cwd=workdir)
    theirs_dir = workdir / "theirs"
    theirs_dir.mkdir()
    os.chown(theirs_dir, *_ids(other_user))
    theirs = cluster.sbatch("--wrap", "id -u > uid.txt; sleep 600", user=other_user,
                            cwd=theirs_dir)
    assert cluster.job(theirs)["user"] == other_user
    res = cluster.run("scancel", "-u", "root", user=other_user)
    assert res.returncode == 1
    assert "Access/permission denied" in res.stderr
    res = cluster.run("scancel", str(mine), user=other_user)
    assert res.returncode == 1
    assert cluster.job(mine)["state"] in ("PENDING", "RUNNING")
    cluster.wait(theirs, {"RUNNING"})
    assert _wait_file(theirs_dir / "uid.txt").strip() == str(_ids(other_user)[0])
    out = theirs_dir / f"slurm-{theirs}.out"
    assert out.stat().st_uid == _ids(other_user)[0]
    assert cluster.run("scancel", str(theirs), user=other_user).returncode == 0
    assert cluster.run("scancel", str(mine)).returncode == 0
    cluster.wait(theirs, {"CANCELLED"})


def _ids(user: str) -> tuple[int, int]:
    import pwd

    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def test_bad_input_gives_one_line_errors(cluster: Cluster, workdir: Path) -> None:
    script = workdir / "bad.sh"
    script.write_text("#!/bin/bash\n#SBATCH --no-such-option=1\ntrue\n")
    res = cluster.run("sbatch", str(script), cwd=workdir)
    assert res.returncode == 1
    assert res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1
    assert "no-such-option" in res.stderr
    res = cluster.run("sbatch", "--time=1:xx", "--wrap", "true", cwd=workdir)
    assert res.returncode == 1
    assert res.stderr.strip() == "sbatch: error: Invalid --time specification"
    assert res.stdout == ""


def test_unknown_job_ids_are_errors(cluster: Cluster) -> None:
    res = cluster.run("scancel", "999999")
    assert res.returncode == 1
    assert "Invalid job id specified" in res.stderr
    res = cluster.run("squeue", "-j", "999999")
    assert res.returncode == 1
    assert res.stderr.strip() == "slurm_load_jobs error: Invalid job id specified"
    res = cluster.run("scontrol", "show", "job", "999999")
    assert res.returncode == 1
