"""The submitter's umask and soft resource limits reach the job (Slurm's
PropagateResourceLimits, kiln/slurm/rlimits.py), as real Slurm 22.05 shows them: in a batch
script and in an srun task, ``umask`` and ``ulimit -S`` are the submitter's, no
``SLURM_RLIMIT_*`` is left in the environment, ``SLURM_TASK_PID`` is the batch shell's pid,
and an srun task has ``SLURM_UMASK``."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import BIN, CLI_TIMEOUT, Cluster, cleanup, world_tempdir

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
REPORT = ('echo umask=$(umask) nofile=$(ulimit -S -n) core=$(ulimit -S -c) '
          'rlimit_vars=$(env | grep -c ^SLURM_RLIMIT_) slurm_umask=${SLURM_UMASK:-none} '
          'pid_ok=$([ "$SLURM_TASK_PID" = "$$" ] && echo yes || echo no)')


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = world_tempdir("kiln-job-")
    os.chmod(path, 0o777)
    yield path
    cleanup(path)


def _submit_as_shell(cluster: Cluster, cwd: Path, shell: str, *args: str) -> str:
    """A command run under ``shell``'s umask and ulimits, as a user's terminal would."""
    res = subprocess.run(["sh", "-c", f'{shell}; exec "$0" "$@"', str(BIN / args[0]), *args[1:]],
                         capture_output=True, text=True, env=cluster.env, cwd=cwd,
                         timeout=CLI_TIMEOUT)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_a_batch_script_has_the_submitters_umask_and_soft_limits(
        cluster: Cluster, workdir: Path) -> None:
    out = _submit_as_shell(cluster, workdir, "umask 027; ulimit -S -n 512; ulimit -S -c 0",
                           "sbatch", "--parsable", "--wrap", REPORT)
    job_id = int(out.strip().split(";")[0])
    assert cluster.wait(job_id, FINISHED)["state"] == "COMPLETED"
    text = (workdir / f"slurm-{job_id}.out").read_text()
    assert text.split() == ["umask=0027", "nofile=512", "core=0", "rlimit_vars=0",
                            "slurm_umask=none", "pid_ok=yes"], text


def test_export_none_still_carries_them(cluster: Cluster, workdir: Path) -> None:
    out = _submit_as_shell(cluster, workdir, "umask 077; ulimit -S -n 300",
                           "sbatch", "--parsable", "--export=NONE", "--wrap",
                           "/bin/sh -c 'echo $(umask) $(ulimit -S -n)'")
    job_id = int(out.strip().split(";")[0])
    assert cluster.wait(job_id, FINISHED)["state"] == "COMPLETED"
    assert (workdir / f"slurm-{job_id}.out").read_text().split() == ["0077", "300"]


def test_an_srun_task_has_the_sruns_umask_and_soft_limits(
        cluster: Cluster, workdir: Path) -> None:
    """srun inside the batch script sends its own: the script lowers them before it."""
    script = workdir / "job.sh"
    script.write_text("#!/bin/sh\numask 007\nulimit -S -n 256\n"
                      "srun sh -c 'echo umask=$(umask) nofile=$(ulimit -S -n) "
                      "rlimit_vars=$(env | grep -c ^SLURM_RLIMIT_) "
                      "slurm_umask=${SLURM_UMASK:-none}'\n")
    script.chmod(0o755)
    out = _submit_as_shell(cluster, workdir, "umask 022", "sbatch", "--parsable", str(script))
    job_id = int(out.strip().split(";")[0])
    assert cluster.wait(job_id, FINISHED)["state"] == "COMPLETED"
    text = (workdir / f"slurm-{job_id}.out").read_text()
    assert text.split() == ["umask=0007", "nofile=256", "rlimit_vars=0",
                            "slurm_umask=0007"], text
