"""sattach to a running step: its output from then on, -l, --output-filter; nobody else's."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

from tests.integration.cluster import BIN, Cluster

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
TICKS = "while :; do echo tick $SLURM_PROCID; sleep 0.2; done"


def test_sattach_follows_a_step_and_only_its_owner_may(two_nodes: Cluster, workdir: Path,
                                                       other_user: str) -> None:
    res = two_nodes.run("salloc", "--no-shell", "-N", "2", cwd=workdir)
    job_id = int(re.fullmatch(r"salloc: Granted job allocation (\d+)\n", res.stderr).group(1))
    step = subprocess.Popen([str(BIN / "srun"), "--jobid", str(job_id), "-n", "2", "sh", "-c",
                             TICKS], env=two_nodes.env, cwd=workdir, stdout=subprocess.PIPE,
                            text=True)
    attached = None
    try:
        assert step.stdout.readline().startswith("tick ")  # the step runs
        attached = subprocess.Popen([str(BIN / "sattach"), "-l", "--output-filter=1",
                                     f"{job_id}.0"], env=two_nodes.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = [attached.stdout.readline() for _ in range(3)]
        assert lines == ["1: tick 1\n"] * 3, attached.communicate(timeout=30)
        attached.send_signal(signal.SIGINT)  # detaches; the step runs on
        assert attached.wait(timeout=30) == 0
        assert step.poll() is None and step.stdout.readline().startswith("tick ")
        denied = two_nodes.run("sattach", f"{job_id}.0", user=other_user)
        assert (denied.returncode, denied.stderr) == (
            1, f"sattach: error: Unable to attach to step {job_id}.0: Access/permission "
               "denied\n")
        missing = two_nodes.run("sattach", f"{job_id}.9")
        assert missing.returncode == 1 and "is not known" in missing.stderr
    finally:
        if attached is not None and attached.poll() is None:
            attached.kill()
        two_nodes.run("scancel", str(job_id))
        step.wait(timeout=60)
    assert two_nodes.wait(job_id, FINISHED)["state"] == "CANCELLED"


def test_sattach_types_into_a_terminal_step(two_nodes: Cluster, workdir: Path) -> None:
    import pexpect

    res = two_nodes.run("salloc", "--no-shell", cwd=workdir)
    job_id = int(re.fullmatch(r"salloc: Granted job allocation (\d+)\n", res.stderr).group(1))
    srun = pexpect.spawn(str(BIN / "srun"), ["--jobid", str(job_id), "--pty", "cat"],
                         env=two_nodes.env, cwd=str(workdir), encoding="utf-8", timeout=60)
    try:
        srun.send("mine\r")
        srun.expect_exact("mine\r\nmine\r\n")  # the node's pty's echo, then cat's copy
        attached = subprocess.Popen([str(BIN / "sattach"), "--input-filter=0", f"{job_id}.0"],
                                    env=two_nodes.env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        attached.stdin.write("theirs\n")
        attached.stdin.close()
        srun.expect_exact("theirs")  # typed by sattach, seen on srun's terminal
        assert attached.stdout.readline() == "theirs\n"  # the echo, through sattach's tap
        srun.send("\x04")  # Ctrl-D: cat ends, and the step
        srun.expect(pexpect.EOF)
        srun.close()
        assert srun.exitstatus == 0
        assert attached.wait(timeout=60) == 0
    finally:
        two_nodes.run("scancel", str(job_id))
