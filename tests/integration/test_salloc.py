"""salloc through a real terminal (pexpect's pseudo-terminal): Slurm's messages, the shell with
the allocation's environment, srun inside it, signals, exit status, the time limit, sacct."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pexpect

from schedd.ledger.store import Store
from tests.integration.cluster import BIN, Cluster, until

PROMPT = "kiln-test$ "
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def _spawn(cluster: Cluster, args: list[str], cwd: Path, command: str = "") -> pexpect.spawn:
    """salloc (or a shell line running it, ``command``) under a fresh 24x80 terminal."""
    env = {**cluster.env, "PS1": PROMPT, "TERM": "dumb"}
    if command:
        return pexpect.spawn("/bin/sh", ["-c", command], env=env, cwd=str(cwd),
                             encoding="utf-8", timeout=90, dimensions=(24, 80))
    return pexpect.spawn(str(BIN / "salloc"), args, env=env, cwd=str(cwd), encoding="utf-8",
                         timeout=90, dimensions=(24, 80))


def _shell(cluster: Cluster, cwd: Path, *options: str) -> tuple[pexpect.spawn, int]:
    child = _spawn(cluster, [*options, "bash", "--norc", "--noprofile", "-i"], cwd)
    child.expect(r"salloc: Granted job allocation (\d+)")
    job_id = int(child.match.group(1))
    child.expect_exact(PROMPT)
    return child, job_id


def _run(child: pexpect.spawn, line: str, pattern: str) -> re.Match[str]:
    child.sendline(line)
    child.expect(pattern)
    match = child.match
    child.expect_exact(PROMPT)
    return match


def _steps(cluster: Cluster, job_id: int) -> dict[str, tuple[str, int]]:
    store = Store(cluster.db_url)
    try:
        return {r.step_id: (r.state, r.exit_code) for r in store.query_steps([job_id])}
    finally:
        store.close()


def test_an_interactive_shell_on_two_nodes(two_nodes: Cluster, workdir: Path) -> None:
    child, job_id = _shell(two_nodes, workdir, "-N", "2")
    assert "salloc: Nodes node[1-2] are ready for job" in child.before
    env = _run(child, "echo JOB=$SLURM_JOB_ID NODES=$SLURM_JOB_NODELIST N=$SLURM_NNODES",
               r"JOB=(\d+) NODES=(\S+) N=(\d+)")
    assert env.groups() == (str(job_id), "node[1-2]", "2")
    # the nodes share this machine's hostname: each task says which node it is
    hosts = _run(child, "srun sh -c 'echo $SLURMD_NODENAME' | sort | tr '\\n' ' '; echo",
                 r"(node\d) (node\d) \r\n")
    assert hosts.groups() == ("node1", "node2")
    assert _run(child, "stty size", r"(\d+ \d+)\r\n").group(1) == "24 80"
    child.setwinsize(40, 100)
    assert _run(child, "stty size", r"(\d+ \d+)\r\n").group(1) == "40 100"
    child.sendline("sh -c 'echo sleeping; exec sleep 100'")
    child.expect_exact("sleeping\r\n")  # running in the foreground: Ctrl-C is for it
    child.sendintr()  # Ctrl-C: the foreground sleep dies, the shell stays
    child.expect_exact(PROMPT)
    assert _run(child, "echo still $((6*7))", r"still (\d+)").group(1) == "42"
    child.sendline("exit 7")
    child.expect_exact(f"salloc: Relinquishing job allocation {job_id}")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 7
    job = two_nodes.wait(job_id, FINISHED)
    assert (job["state"], job["exit_code"]) == ("FAILED", 7)
    assert _steps(two_nodes, job_id) == {"extern": ("COMPLETED", 0), "0": ("COMPLETED", 0)}
    sacct = two_nodes.run("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State,ExitCode")
    assert sacct.stdout.split() == [f"{job_id}|FAILED|7:0", f"{job_id}.extern|COMPLETED|0:0",
                                    f"{job_id}.0|COMPLETED|0:0"], sacct.stdout


def test_a_command_runs_here_with_the_allocation(two_nodes: Cluster, workdir: Path) -> None:
    res = two_nodes.run("salloc", "-N", "2", "srun", "sh", "-c", "echo $SLURMD_NODENAME",
                        cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == ["node1", "node2"]
    lines = res.stderr.splitlines()
    job_id = int(re.match(r"salloc: Granted job allocation (\d+)", lines[0]).group(1))
    assert lines[-1] == f"salloc: Relinquishing job allocation {job_id}"
    assert two_nodes.wait(job_id, FINISHED)["state"] == "COMPLETED"
    res = two_nodes.run("salloc", "sh", "-c", "exit 3", cwd=workdir)
    assert res.returncode == 3, res.stderr


def test_no_shell_keeps_the_allocation_for_srun(two_nodes: Cluster, workdir: Path) -> None:
    res = two_nodes.run("salloc", "--no-shell", "-N", "1", cwd=workdir)
    assert res.returncode == 0, res.stderr
    job_id = int(re.fullmatch(r"salloc: Granted job allocation (\d+)\n", res.stderr).group(1))
    job = two_nodes.job(job_id)
    assert job["state"] == "RUNNING"
    step = two_nodes.run("srun", "--jobid", str(job_id), "sh", "-c", "echo $SLURMD_NODENAME",
                         cwd=workdir)
    assert (step.returncode, step.stdout) == (0, f"{job['node_list']}\n"), step.stderr
    assert two_nodes.run("scancel", str(job_id)).returncode == 0
    assert two_nodes.wait(job_id, FINISHED)["state"] == "CANCELLED"


def test_immediate_gives_up_on_a_job_that_cannot_start(two_nodes: Cluster,
                                                       workdir: Path) -> None:
    res = two_nodes.run("salloc", "-I", "--begin=now+1hour", "true", cwd=workdir)
    assert res.returncode == 1
    assert res.stderr == "salloc: error: Unable to allocate resources: Requested nodes are busy\n"


def test_interrupt_while_pending_cancels_the_request(two_nodes: Cluster, workdir: Path) -> None:
    child = _spawn(two_nodes, ["--begin=now+1hour", "true"], workdir)
    child.expect(r"salloc: Pending job allocation (\d+)")
    job_id = int(child.match.group(1))
    child.expect_exact(f"salloc: job {job_id} queued and waiting for resources")
    child.sendintr()
    child.expect_exact(f"salloc: Job allocation {job_id} has been revoked.")
    child.expect_exact("salloc: Job aborted due to signal")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    assert two_nodes.wait(job_id, FINISHED)["state"] == "CANCELLED"


def test_the_time_limit_ends_it_and_the_terminal_is_sane(two_nodes: Cluster,
                                                         workdir: Path) -> None:
    # the command puts the terminal in raw mode and is ended by the time limit (SIGHUP)
    raw = "import sys, time, tty; tty.setraw(0); print('raw', flush=True); time.sleep(300)"
    line = (f"{BIN / 'salloc'} -t 0:03 {BIN / 'python'} -c \"{raw}\"; echo rc=$?; "
            "stty -a | tr ' ' '\\n' | grep -x -e icanon -e -icanon -e echo -e -echo")
    child = _spawn(two_nodes, [], workdir, command=line)
    child.expect(r"salloc: Granted job allocation (\d+)")
    job_id = int(child.match.group(1))
    child.expect_exact("raw")
    child.expect_exact(f"salloc: Job {job_id} has exceeded its time limit and its allocation "
                       "has been revoked.")
    child.expect(r"rc=(\d+)")
    assert child.match.group(1) == "0"  # a command ended by SIGHUP: salloc exits 0, as Slurm's
    child.expect(pexpect.EOF)
    assert child.before.split() == ["icanon", "echo"]
    until(lambda: two_nodes.job(job_id)["state"] == "TIMEOUT", "the job to time out")
    assert _steps(two_nodes, job_id)["extern"][0] == "CANCELLED"


def test_a_hangup_ends_the_allocation(two_nodes: Cluster, workdir: Path) -> None:
    child, job_id = _shell(two_nodes, workdir)
    child.kill(signal.SIGHUP)  # the terminal went away: salloc passes it on, then relinquishes
    child.expect_exact(f"salloc: Relinquishing job allocation {job_id}")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0  # the shell was ended by SIGHUP: a normal exit, as Slurm's
    assert two_nodes.wait(job_id, FINISHED)["state"] in ("COMPLETED", "FAILED")
