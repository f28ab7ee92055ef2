"""Signals and waits end to end, as a user types them (issue 19, items 4 and 7): sbatch
--signal before the time limit, scancel --signal with and without -b, sbatch -W's exit code,
squeue -i repeating itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.cluster import BIN, Cluster, until

# the batch shell writes which signal it got, then ends cleanly
TRAP = ("trap 'echo got USR1 > {name}; exit 0' USR1; trap 'echo got USR2 > {name}; exit 0' USR2; "
        "touch {name}.started; while :; do sleep 0.2; done")


def _trapping(cluster: Cluster, workdir: Path, name: str, *args: str) -> int:
    job_id = cluster.sbatch(*args, "--wrap", TRAP.format(name=name), cwd=workdir)
    until(lambda: (workdir / f"{name}.started").exists(), f"job {job_id} started its trap",
          timeout=90)
    return job_id


def test_sbatch_signal_reaches_the_batch_shell_before_the_time_limit(
        cluster: Cluster, workdir: Path) -> None:
    """--signal=B:USR1@50 with a 1-minute limit: USR1 about 10 s in, long before TIMEOUT."""
    job_id = _trapping(cluster, workdir, "limit.sig", "-t", "1", "--signal=B:USR1@50")
    job = cluster.wait(job_id, {"COMPLETED", "TIMEOUT", "FAILED"}, timeout=120)
    assert job["state"] == "COMPLETED", job
    assert (workdir / "limit.sig").read_text() == "got USR1\n"
    shown = cluster.run("sacct", "-X", "-n", "-P", "-o", "State,ExitCode", "-j", str(job_id))
    assert shown.stdout == "COMPLETED|0:0\n"


def test_scancel_signal_b_reaches_the_batch_shell(cluster: Cluster, workdir: Path) -> None:
    job_id = _trapping(cluster, workdir, "b.sig", "-t", "10")
    res = cluster.run("scancel", "--signal=USR2", "-b", str(job_id))
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    assert cluster.wait(job_id, {"COMPLETED", "FAILED", "CANCELLED"})["state"] == "COMPLETED"
    assert (workdir / "b.sig").read_text() == "got USR2\n"


def test_scancel_signal_without_b_spares_the_batch_shell(cluster: Cluster,
                                                         workdir: Path) -> None:
    """Slurm 22.05: without -b (--batch) or --full the signal goes to the job's steps only,
    so a batch shell with no step keeps running."""
    job_id = _trapping(cluster, workdir, "nob.sig", "-t", "10")
    res = cluster.run("scancel", "-s", "USR1", str(job_id))
    assert (res.returncode, res.stderr) == (0, "")
    assert cluster.job(job_id)["state"] == "RUNNING"
    assert not (workdir / "nob.sig").exists()
    cluster.run("scancel", str(job_id))
    cluster.wait(job_id, {"CANCELLED"})


def test_sbatch_wait_returns_the_jobs_exit_code(cluster: Cluster, workdir: Path) -> None:
    res = cluster.run("sbatch", "-W", "--wrap", "sleep 1; exit 3", cwd=workdir)
    assert res.returncode == 3, res.stderr
    assert res.stdout.startswith("Submitted batch job ")
    job_id = res.stdout.split()[-1]
    assert cluster.job(job_id)["state"] == "FAILED"  # already over when sbatch returned
    ok = cluster.run("sbatch", "--wait", "--wrap", "true", cwd=workdir)
    assert ok.returncode == 0, ok.stderr


def test_squeue_iterate_prints_the_table_again_and_again(cluster: Cluster) -> None:
    proc = subprocess.Popen([str(BIN / "squeue"), "-i", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cluster.env)
    headers = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.split()[:2] == ["JOBID", "PARTITION"]:
                headers.append(line)
            if len(headers) == 3:
                break
    finally:
        proc.kill()
        proc.wait()
    assert len(headers) == 3, proc.stderr.read() if proc.stderr else ""


def test_scancel_signal_reaches_the_srun_steps(cluster: Cluster, workdir: Path) -> None:
    """The agent runs srun's tasks itself (not under the batch shell): they get the signal
    too, as Slurm's steps do, while the batch shell does not."""
    (workdir / "step.sh").write_text(
        "#!/bin/bash\ntrap 'echo step-got-USR1 > step.sig; exit 0' USR1\n"
        "touch step.started\nwhile :; do sleep 0.2; done\n")
    (workdir / "step.sh").chmod(0o755)
    job_id = cluster.sbatch("-t", "10", "--wrap",
                            "trap 'echo shell-got-USR1 > shell.sig' USR1; srun ./step.sh",
                            cwd=workdir)
    until(lambda: (workdir / "step.started").exists(), "the srun step started", timeout=90)
    res = cluster.run("scancel", "--signal=USR1", str(job_id))
    assert (res.returncode, res.stderr) == (0, "")
    assert cluster.wait(job_id, {"COMPLETED", "FAILED", "CANCELLED"})["state"] == "COMPLETED"
    assert (workdir / "step.sig").read_text() == "step-got-USR1\n"
    assert not (workdir / "shell.sig").exists()
