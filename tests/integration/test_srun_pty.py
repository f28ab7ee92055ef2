"""srun --pty through a real terminal (pexpect): keys both ways, window size, Ctrl-C, exit
status, raw mode restored, inside salloc's allocation and outside one."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pexpect

from tests.integration.cluster import BIN, Cluster, until
from tests.integration.test_salloc import PROMPT, _run, _shell, _spawn

REMOTE = "remote$ "
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
SANE = "stty -a | tr ' ' '\\n' | grep -x -e icanon -e -icanon -e echo -e -echo | tr '\\n' ' '"


def _remote_shell(child: pexpect.spawn) -> None:
    child.sendline(f"srun --pty env PS1='{REMOTE}' bash --norc --noprofile -i")
    child.expect_exact(REMOTE)


def _remote(child: pexpect.spawn, line: str, pattern: str) -> re.Match[str]:
    child.sendline(line)
    child.expect(pattern)
    match = child.match
    child.expect_exact(REMOTE)
    return match


def test_an_interactive_shell_on_a_node(two_nodes: Cluster, workdir: Path) -> None:
    child, job_id = _shell(two_nodes, workdir, "-N", "2")
    _remote_shell(child)
    node = _remote(child, "echo on $SLURMD_NODENAME step $SLURM_STEP_ID", r"on (node\d) step 0")
    assert node.group(1) in ("node1", "node2")
    assert _remote(child, "tty", r"(/dev/pts/\d+)\r\n").group(1).startswith("/dev/pts/")
    assert _remote(child, "stty size", r"(\d+ \d+)\r\n").group(1) == "24 80"
    child.setwinsize(33, 101)  # SIGWINCH to srun, TIOCSWINSZ on the node
    until(lambda: _remote(child, "stty size", r"(\d+ \d+)\r\n").group(1) == "33 101",
          "the new size on the node")
    child.sendline("sh -c 'echo sleeping; exec sleep 100'")
    child.expect_exact("sleeping\r\n")  # running in the foreground: Ctrl-C is for it
    child.sendintr()  # Ctrl-C, a byte in raw mode: the node's pty makes it SIGINT
    child.expect_exact(REMOTE)
    assert _remote(child, "echo alive $((6*7))", r"alive (\d+)").group(1) == "42"
    child.sendline("sh -c 'echo sleeping; exec sleep 100'")
    child.expect_exact("sleeping\r\n")
    child.sendcontrol("z")  # Ctrl-Z: SIGTSTP, the node's shell has a stopped job
    child.expect("Stopped")
    child.expect_exact(REMOTE)
    child.sendline("fg")
    child.expect_exact("sleep 100")
    child.sendcontrol("\\")  # Ctrl-\: SIGQUIT
    child.expect("Quit")
    child.expect_exact(REMOTE)
    child.sendline("exit 7")
    child.expect(r"srun: error: node\d: task 0: Exited with exit code 7")
    child.expect_exact(PROMPT)
    assert _run(child, "echo rc=$?", r"rc=(\d+)").group(1) == "7"
    assert _run(child, SANE, r"(-?icanon) (-?echo) ").groups() == ("icanon", "echo")
    child.sendline("exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert two_nodes.wait(job_id, FINISHED)["state"] == "COMPLETED"


def test_input_is_echoed_and_read(two_nodes: Cluster, workdir: Path) -> None:
    child, job_id = _shell(two_nodes, workdir)
    child.sendline("srun --pty python3 -c 'print(\"got\", input(\"name? \"))'")
    child.expect_exact("name? ")
    child.send("kiln\r")
    child.expect_exact("kiln\r\n")  # the node's pty echoes
    child.expect_exact("got kiln\r\n")
    child.expect_exact(PROMPT)
    assert _run(child, "echo rc=$?", r"rc=(\d+)").group(1) == "0"
    child.sendline("exit")
    child.expect(pexpect.EOF)


def test_kill_9_of_the_task_leaves_the_terminal_sane(two_nodes: Cluster,
                                                     workdir: Path) -> None:
    child, job_id = _shell(two_nodes, workdir)
    child.sendline("srun --pty python3 -c 'import os; print(\"pid\", os.getpid(), flush=True);"
                   " input()'")
    child.expect(r"pid (\d+)\r\n")
    os.kill(int(child.match.group(1)), signal.SIGKILL)
    child.expect(r"srun: error: node\d: task 0: Killed")
    child.expect_exact(PROMPT)
    assert _run(child, "echo rc=$?", r"rc=(\d+)").group(1) == "137"
    assert _run(child, SANE, r"(-?icanon) (-?echo) ").groups() == ("icanon", "echo")
    child.sendline("exit")
    child.expect(pexpect.EOF)


def test_outside_an_allocation_it_allocates_first(two_nodes: Cluster, workdir: Path) -> None:
    line = (f"{BIN / 'srun'} --pty bash -c 'test -t 0 && test -t 1 && echo on a terminal; "
            f"exit 3'; echo rc=$?; {SANE}")
    child = _spawn(two_nodes, [], workdir, command=line)
    child.expect_exact("on a terminal")
    child.expect(r"rc=(\d+)")
    assert child.match.group(1) == "3"
    child.expect(r"(-?icanon) (-?echo) ")
    assert child.match.groups() == ("icanon", "echo")
    child.expect(pexpect.EOF)


def test_x11_is_refused(two_nodes: Cluster, workdir: Path) -> None:
    for command in ("srun", "salloc"):
        res = two_nodes.run(command, "--x11", "true", cwd=workdir)
        assert res.returncode == 1
        assert res.stderr == (f"{command}: error: --x11 is not supported by kiln: no X11 "
                              "forwarding (use ssh -X to a node)\n")


def test_full_screen_programs_work(two_nodes: Cluster, workdir: Path) -> None:
    res = two_nodes.run("salloc", "--no-shell", cwd=workdir)
    job_id = re.search(r"Granted job allocation (\d+)", res.stderr).group(1)
    env = {**two_nodes.env, "TERM": "xterm"}
    try:
        top = pexpect.spawn(str(BIN / "srun"), ["--jobid", job_id, "--pty", "top", "-d", "1"],
                            env=env, cwd=str(workdir), encoding="utf-8", timeout=90,
                            dimensions=(24, 80))
        top.expect("Tasks:")  # its screen, drawn on the node's terminal
        top.send("q")
        top.expect(pexpect.EOF)
        top.close()
        assert top.exitstatus == 0
        vim = pexpect.spawn(str(BIN / "srun"), ["--jobid", job_id, "--pty", "vim", "-u", "NONE",
                                                "-i", "NONE", "-n", "-N", "note.txt"],
                            env=env, cwd=str(workdir), encoding="utf-8", timeout=90,
                            dimensions=(24, 80))
        vim.expect("note.txt")  # the status line of an empty buffer
        vim.send("ihello from vim\x1b")
        vim.send(":wq\r")
        vim.expect(pexpect.EOF)
        vim.close()
        assert vim.exitstatus == 0
        assert (workdir / "note.txt").read_text() == "hello from vim\n"
    finally:
        two_nodes.run("scancel", job_id)


def test_the_terminal_is_restored_when_schedd_dies(two_nodes: Cluster, workdir: Path) -> None:
    """Last in this module: it kills schedd (and brings it back for the module's teardown)."""
    res = two_nodes.run("salloc", "--no-shell", cwd=workdir)
    job_id = re.search(r"Granted job allocation (\d+)", res.stderr).group(1)
    line = f"{BIN / 'srun'} --jobid {job_id} --pty cat; echo rc=$?; {SANE}"
    child = _spawn(two_nodes, [], workdir, command=line)
    child.send("typed\r")
    child.expect_exact("typed\r\n")  # the node's pty echoes: the step runs, srun is raw
    two_nodes.expect_exit("schedd")
    os.kill(int((two_nodes.home / "run" / "schedd.pid").read_text()), signal.SIGKILL)
    child.expect(r"rc=(\d+)")
    assert child.match.group(1) == "1"
    child.expect(r"(-?icanon) (-?echo) ")
    assert child.match.groups() == ("icanon", "echo")
    child.expect(pexpect.EOF)
    assert two_nodes.run("kiln", "up").returncode == 0
    until(lambda: two_nodes.run("scancel", job_id).returncode == 0, "schedd back")
    assert two_nodes.wait(job_id, FINISHED)["state"] == "CANCELLED"
