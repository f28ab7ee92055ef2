"""Issue 13, the relay, as on a real cluster: node2's agent runs in its own network namespace
(over veth, as test_netns.py) and its own mount namespace, where a private tmpfs hides the
directory of the head's socket; a login node's relay-only agent has a mount namespace of its
own the same way, in node2's network namespace (off the head's network too). So a command there reaches schedd only through its node's agent, which
serves the same path and relays over its CURVE channel, stamped with the uid the kernel gave."""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pexpect
import pytest

from kiln import keys
from tests.integration.cluster import BIN, CLI_TIMEOUT, Cluster, stop_process, until
from tests.integration.conftest import BACKENDS, _cluster
from tests.integration.netns import Netns, namespace

UNREACHABLE = "Unable to contact slurm controller"


@dataclass
class Relayed:
    cluster: Cluster
    ns: Netns
    node2: subprocess.Popen  # node2's agent: own network and mount namespaces
    login: subprocess.Popen  # login1's relay-only agent: own mount namespace
    user: str

    def serving(self, agent: subprocess.Popen) -> None:
        """Wait until the agent serves the socket in its namespace (its mark is there: until
        its tmpfs is mounted, the namespace still shows the head's socket)."""
        probe = ["/usr/bin/test", "-S", self.cluster.socket, "-a", "-f",
                 f"{self.cluster.socket}.agent"]
        until(lambda: self.inside(agent, *probe).returncode == 0,
              "the agent never served the commands' socket", 30)

    def inside(self, agent: subprocess.Popen, *args: str, user: str | None = None,
               ) -> subprocess.CompletedProcess[str]:
        """A command run in that agent's namespaces (as on its node), as ``user``."""
        argv = ["nsenter", "-t", str(agent.pid), "-m", "-n", "--"]
        if user is not None:
            argv += ["runuser", "-u", user, "--"]
        argv += ["env", f"KILN_HOME={self.cluster.home}", f"PATH={BIN}:/usr/bin:/bin",
                 *([str(BIN / args[0])] if not args[0].startswith("/") else [args[0]]),
                 *args[1:]]
        return subprocess.run(argv, capture_output=True, text=True, timeout=CLI_TIMEOUT,
                              cwd="/tmp")


def _agent(cluster: Cluster, name: str, prefix: list[str], *extra: str) -> subprocess.Popen:
    """agentd for ``name`` in a mount namespace of its own, where the socket's directory is a
    private tmpfs (the head's socket is not there)."""
    home = cluster.home
    agent = [sys.executable, "-m", "agentd.daemon", "--config", str(home / "kiln.toml"),
             "--node", name, "--spool", str(home / "spool" / name),
             "--log-file", str(home / "log" / f"agentd-{name}.log"), *extra]
    script = (f"mount -t tmpfs -o mode=755 kiln-{name} {shlex.quote(str(home / 'sock'))} "
              f"&& exec {shlex.join(agent)}")
    return subprocess.Popen(
        [*prefix, "unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=cluster.env)



def _nodes(cluster: Cluster) -> dict[str, str]:
    out = cluster.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
    return dict(line.split(None, 1) for line in out.splitlines() if line.strip())


@pytest.fixture(scope="module", params=BACKENDS)
def relayed(request: pytest.FixtureRequest, other_user: str) -> Iterator[Relayed]:
    with ExitStack() as stack:
        ns = stack.enter_context(namespace())
        gen = _cluster(request, request.param, nodes=1, fake_gpus="4xA100", kill_wait=2,
                       agent_host=ns.host_addr, socket_subdir=True)
        cluster = next(gen)
        stack.callback(next, gen, None)
        keys.generate_cluster(cluster.home / "keys", ["node2", "login1"])
        node2 = _agent(cluster, "node2", ns.argv(), "--fake-gpus", "4xA100", "--cpus", "64")
        stack.callback(stop_process, node2)
        login = _agent(cluster, "login1", ns.argv(), "--relay-only")
        stack.callback(stop_process, login)
        r = Relayed(cluster, ns, node2, login, other_user)
        r.serving(node2)
        r.serving(login)
        until(lambda: _nodes(cluster).get("node2", "").strip() == "idle",
              "node2 never registered", 30)
        until(lambda: r.inside(login, "squeue", "-h", user=other_user).returncode == 0,
              "the login node's agent never relayed", 30)
        yield r


def _socket_inode(r: Relayed, agent: subprocess.Popen) -> str:
    res = r.inside(agent, "/usr/bin/stat", "-c", "%i", r.cluster.socket)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_the_nodes_see_their_agents_socket_not_the_heads(relayed: Relayed) -> None:
    head = str(os.stat(relayed.cluster.socket).st_ino)
    assert _socket_inode(relayed, relayed.node2) != head
    assert _socket_inode(relayed, relayed.login) != head
    log = (relayed.cluster.home / "log" / "agentd-node2.log").read_text()
    assert "serving the commands' endpoint" in log
    for name in ("node1",):  # kiln up's agents share the head's path: schedd keeps it
        log = (relayed.cluster.home / "log" / f"agentd-{name}.log").read_text()
        assert "not serving the commands' endpoint" in log


def test_commands_inside_a_job_on_node2_act_as_its_user(relayed: Relayed, workdir: Path) -> None:
    cluster, user = relayed.cluster, relayed.user
    (workdir / "job.sh").write_text(
        "#!/bin/sh\n"
        "squeue -j $SLURM_JOB_ID -h -o %T > state 2>&1\n"
        "scontrol show job $SLURM_JOB_ID > show 2>&1\n"
        "sbatch --parsable -H --wrap 'sleep 300' > follow 2> follow.err\n"
        "squeue -j $(cat follow) -h -o %u > follow.user 2>&1\n"
        "scancel $(cat follow) > cancel.out 2>&1; echo $? > cancel\n"
        "stat -c %i " + shlex.quote(cluster.socket) + " > inode\n"
        "srun -n 2 hostname > srun.out 2>&1; echo $? > srun.rc\n")
    job_id = cluster.sbatch("-w", "node2", "-n", "2", "job.sh", user=user, cwd=workdir)
    job = cluster.wait(job_id, {"COMPLETED", "FAILED"}, timeout=60)
    assert job["state"] == "COMPLETED", (workdir / f"slurm-{job_id}.out").read_text()
    assert job["node_list"] == "node2"
    assert (workdir / "inode").read_text().strip() != str(os.stat(cluster.socket).st_ino)
    assert (workdir / "state").read_text().strip() == "RUNNING"
    show = (workdir / "show").read_text()
    assert f"JobId={job_id} " in show and f"UserId={user}(" in show, show
    follow = (workdir / "follow").read_text().strip()
    assert follow.isdigit(), (workdir / "follow.err").read_text()
    assert (workdir / "follow.user").read_text().strip() == user
    assert (workdir / "cancel").read_text().strip() == "0", (workdir / "cancel.out").read_text()
    followed = cluster.job(follow)
    assert followed["user"] == user and followed["state"] == "CANCELLED"
    srun = (workdir / "srun.out").read_text()
    assert (workdir / "srun.rc").read_text().strip() == "0", srun
    assert len(srun.split()) == 2, srun


def test_a_job_on_node2_requeues_itself(relayed: Relayed, workdir: Path) -> None:
    cluster, user = relayed.cluster, relayed.user
    (workdir / "job.sh").write_text(
        "#!/bin/sh\n"
        "echo $SLURM_RESTART_COUNT >> runs\n"
        "if [ \"$SLURM_RESTART_COUNT\" = 0 ]; then\n"
        "  scontrol requeue $SLURM_JOB_ID > requeue.out 2>&1; echo $? > requeue.rc\n"
        "  sleep 60\n"
        "fi\n")
    job_id = cluster.sbatch("-w", "node2", "--requeue", "job.sh", user=user, cwd=workdir)
    job = cluster.wait(job_id, {"COMPLETED", "FAILED"}, timeout=60)
    # (the requeue ends the run at once: scontrol itself is killed with it, before it exits)
    assert job["state"] == "COMPLETED" and job["restart_count"] == 1, job
    assert (workdir / "runs").read_text().split() == ["0", "1"]


def test_a_user_on_node2_cannot_act_on_someone_elses_job(relayed: Relayed,
                                                          workdir: Path) -> None:
    cluster, user = relayed.cluster, relayed.user
    victim = cluster.sbatch("-w", "node1", "--wrap", "sleep 300", cwd=workdir)  # root's
    try:
        cluster.wait(victim, {"RUNNING"})
        (workdir / "job.sh").write_text(
            "#!/bin/sh\n"
            f"scancel {victim} > cancel.out 2>&1; echo $? > rc\n"
            f"scontrol requeue {victim} >> cancel.out 2>&1; echo $? >> rc\n"
            f"scontrol hold {victim} >> cancel.out 2>&1; echo $? >> rc\n")
        job_id = cluster.sbatch("-w", "node2", "job.sh", user=user, cwd=workdir)
        cluster.wait(job_id, {"COMPLETED", "FAILED"}, timeout=60)
        codes = (workdir / "rc").read_text().split()
        assert len(codes) == 3 and "0" not in codes, (workdir / "cancel.out").read_text()
        job = cluster.job(victim)
        assert job["state"] == "RUNNING" and job["restart_count"] == 0
    finally:
        cluster.run("scancel", str(victim))


_RAW = r"""
import json, sys
from cli.core.client import Client
job = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", "held": "user"}
with Client() as c:
    outer = {"v": 1, "op": "submit", "id": 1, "uid": 0, "gid": 0, "user": "root",
             "body": {"job": job}}
    print(c.exchange(json.dumps(outer).encode()).decode())
    inner = {"v": 1, "op": "submit", "id": 2, "body": {"job": {**job, "uid": 0}}}
    print(c.exchange(json.dumps(inner).encode()).decode())
"""


def test_a_uid_written_in_a_request_is_ignored(relayed: Relayed) -> None:
    cluster, user = relayed.cluster, relayed.user
    res = relayed.inside(relayed.node2, "python", "-c", _RAW, user=user)
    assert res.returncode == 0, res.stderr
    outer, inner = (json.loads(line) for line in res.stdout.splitlines())
    assert outer["ok"], outer
    job = cluster.job(outer["body"]["job_id"])
    assert job["user"] == user and job["uid"] == pwd.getpwnam(user).pw_uid
    assert not inner["ok"] and "unknown field 'uid'" in inner["error"]["message"]
    cluster.run("scancel", str(outer["body"]["job_id"]))


def test_root_is_not_relayed_unless_configured(relayed: Relayed) -> None:
    for agent in (relayed.node2, relayed.login):
        res = relayed.inside(agent, "squeue", "-h")
        assert res.returncode != 0
        assert "relay_root_nodes" in res.stderr, res.stderr


def test_a_login_node_relays_and_is_no_node(relayed: Relayed) -> None:
    cluster, user, login = relayed.cluster, relayed.user, relayed.login
    nodes = _nodes(cluster)
    assert "login1" not in nodes and {"node1", "node2"} <= set(nodes)
    res = relayed.inside(login, "sbatch", "--parsable", "-H", "--wrap", "true", user=user)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    res = relayed.inside(login, "squeue", "-h", "-j", job_id, "-o", "%i %u %T", user=user)
    assert res.stdout.split() == [job_id, user, "PENDING"], res.stderr
    res = relayed.inside(login, "sinfo", "-h", "-N", "-o", "%N", user=user)
    assert res.returncode == 0 and "login1" not in res.stdout and "node2" in res.stdout
    assert relayed.inside(login, "scancel", job_id, user=user).returncode == 0
    assert cluster.wait(job_id, {"CANCELLED"})["user"] == user
    res = relayed.inside(login, "sacct", "-n", "-X", "-j", job_id, "-o", "JobID,State",
                         user=user)
    assert res.returncode == 0 and job_id in res.stdout and "CANCELLED" in res.stdout, \
        res.stdout + res.stderr


_MANY = r"""
import json
from cli.core.client import Client
job = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", "held": "user", "comment": "c" * 1500}
with Client() as c:
    ids = [c.call("submit", {"job": job})["job_id"] for _ in range(1000)]
    raw = c.exchange(json.dumps({"v": 1, "op": "query_jobs", "id": 1,
                                 "body": {"job_ids": [str(i) for i in ids]}}).encode())
    print(len(raw), len(json.loads(raw)["body"]["jobs"]))
"""


def test_a_reply_of_megabytes_comes_through_in_chunks(relayed: Relayed) -> None:
    cluster, user = relayed.cluster, relayed.user
    try:
        res = relayed.inside(relayed.login, "python", "-c", _MANY, user=user)
        assert res.returncode == 0, res.stderr
        size, count = map(int, res.stdout.split())
        assert count == 1000 and size > 2 * (1 << 20)  # three relay chunks or more
        listed = relayed.inside(relayed.login, "squeue", "-h", "-u", user, "-o", "%i",
                                user=user)
        assert len(listed.stdout.split()) == 1000, listed.stderr
    finally:
        cluster.run("scancel", "-u", user)


def _srun_on_login(r: Relayed, *args: str) -> subprocess.CompletedProcess[str]:
    """srun outside an allocation on the login node; TMPDIR names a directory nobody can make,
    so no spool can be made anywhere: the output must come over the wire."""
    return r.inside(r.login, "/usr/bin/env", "TMPDIR=/nonexistent/kiln-no-tmp", "srun", *args,
                    user=r.user)


def test_srun_on_the_login_node_outside_an_allocation_streams_over_the_wire(
        relayed: Relayed) -> None:
    res = _srun_on_login(relayed, "-N1", "-w", "node2", "hostname")
    assert (res.returncode, res.stdout) == (0, f"{socket.gethostname()}\n"), res.stderr
    res = _srun_on_login(relayed, "-n", "2", "echo", "hi")
    assert (res.returncode, res.stdout) == (0, "hi\nhi\n"), res.stderr


def test_srun_on_the_login_node_exits_with_the_tasks_status(relayed: Relayed) -> None:
    res = _srun_on_login(relayed, "-w", "node2", "-J", "fails3", "sh", "-c",
                         "echo out; echo err >&2; exit 3")
    assert res.returncode == 3, res.stderr
    assert res.stdout == "out\n"
    assert res.stderr.splitlines() == ["err", "srun: error: node2: task 0: Exited with exit code 3"]
    listed = relayed.inside(relayed.login, "sacct", "-n", "-X", "--name", "fails3", "-o",
                            "State,ExitCode", "-P", user=relayed.user)
    assert listed.stdout.split() == ["FAILED|3:0"], listed.stdout + listed.stderr


def test_an_agent_whose_key_is_not_authorised_cannot_relay(relayed: Relayed) -> None:
    cluster, user = relayed.cluster, relayed.user
    keys.generate(cluster.home / "keys" / "agents", "rogue")  # a key pair, never authorised
    rogue = _agent(cluster, "rogue", [], "--relay-only")
    try:
        relayed.serving(rogue)
        res = relayed.inside(rogue, "squeue", "-h", user=user)
        assert res.returncode != 0 and UNREACHABLE in res.stderr, res.stdout + res.stderr
        res = relayed.inside(rogue, "sbatch", "--wrap", "true", user=user)
        assert res.returncode != 0 and UNREACHABLE in res.stderr
    finally:
        stop_process(rogue)


def test_a_node_cut_off_from_schedd_says_so_at_once(relayed: Relayed) -> None:
    """Once its agent has heard nothing for three heartbeats, a command on node2 is told at
    once (not after a timeout); when the link is back, commands work again."""
    user = relayed.user

    def refused() -> bool:
        res = relayed.inside(relayed.node2, "squeue", "-h", user=user)
        return res.returncode != 0 and f"{UNREACHABLE} (connect failure)" in res.stderr

    relayed.ns.cut()
    try:
        until(refused, "node2's commands never said schedd was unreachable", 30)
    finally:
        relayed.ns.restore()
    until(lambda: relayed.inside(relayed.node2, "squeue", "-h", user=user).returncode == 0,
          "node2's commands did not come back with the link", 30)


def test_a_request_in_flight_when_schedd_goes_silent_is_told_lost(relayed: Relayed) -> None:
    """Relayed just after the link is cut (the agent heard schedd a moment ago): the command is
    told "connection lost" once the agent gives schedd up, and is not resent."""
    user = relayed.user
    until(lambda: relayed.inside(relayed.node2, "squeue", "-h", user=user).returncode == 0,
          "node2's commands do not work", 30)
    relayed.ns.cut()
    try:
        res = relayed.inside(relayed.node2, "squeue", "-h", user=user)
    finally:
        relayed.ns.restore()
    assert res.returncode != 0
    assert "connection lost; the request may or may not have been carried out" in res.stderr, \
        res.stderr
    until(lambda: relayed.inside(relayed.node2, "squeue", "-h", user=user).returncode == 0,
          "node2's commands did not come back with the link", 30)
    log = (relayed.cluster.home / "log" / "agentd-node2.log").read_text()
    assert "relayed commands told the connection was lost" in log


# --- issue 15: salloc and srun --pty from the login node, through its relay ----------------------

LOGIN_PROMPT = "login$ "


def _spawn_on_login(r: Relayed, *args: str) -> pexpect.spawn:
    """A command on the login node, as the job's user, under a fresh 24x80 terminal."""
    argv = ["-t", str(r.login.pid), "-m", "-n", "--", "runuser", "-u", r.user, "--", "env",
            f"KILN_HOME={r.cluster.home}", f"PATH={BIN}:/usr/bin:/bin", f"PS1={LOGIN_PROMPT}",
            "TERM=dumb", *args]
    return pexpect.spawn("nsenter", argv, cwd="/tmp", encoding="utf-8", timeout=90,
                         dimensions=(24, 80))


def test_salloc_on_the_login_node_runs_its_command_in_the_allocation(relayed: Relayed) -> None:
    res = relayed.inside(relayed.login, "salloc", "-N1", "-w", "node2", "sh", "-c",
                         "srun sh -c 'echo on $SLURMD_NODENAME'; exit 5", user=relayed.user)
    assert res.returncode == 5, res.stderr
    assert res.stdout == "on node2\n"
    granted = re.search(r"salloc: Granted job allocation (\d+)", res.stderr)
    assert granted, res.stderr
    assert f"salloc: Relinquishing job allocation {granted.group(1)}" in res.stderr
    job = relayed.cluster.wait(granted.group(1), {"COMPLETED", "FAILED"})
    assert job["user"] == relayed.user


def test_salloc_no_shell_on_the_login_node_then_srun_into_it(relayed: Relayed) -> None:
    user, login = relayed.user, relayed.login
    res = relayed.inside(login, "salloc", "-N1", "--no-shell", user=user)
    assert res.returncode == 0, res.stderr
    job_id = re.search(r"salloc: Granted job allocation (\d+)", res.stderr).group(1)
    try:
        res = relayed.inside(login, "srun", f"--jobid={job_id}", "sh", "-c",
                             "echo job=$SLURM_JOB_ID", user=user)
        assert (res.returncode, res.stdout) == (0, f"job={job_id}\n"), res.stderr
    finally:
        assert relayed.inside(login, "scancel", job_id, user=user).returncode == 0
    relayed.cluster.wait(job_id, {"CANCELLED", "COMPLETED"})


def test_srun_pty_on_the_login_node_reads_keys_and_gives_the_status(relayed: Relayed) -> None:
    child = _spawn_on_login(relayed, "srun", "--pty", "python3", "-c",
                            "print('got', input('name? '))")
    child.expect_exact("name? ")
    child.send("kiln\r")
    child.expect_exact("kiln\r\n")  # echoed by the node's pty
    child.expect_exact("got kiln\r\n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    child = _spawn_on_login(relayed, "salloc", "-N1", "bash", "--norc", "--noprofile", "-i")
    child.expect(r"salloc: Granted job allocation (\d+)")
    job_id = child.match.group(1)
    child.expect_exact(LOGIN_PROMPT)
    child.sendline("srun --pty env PS1='remote$ ' bash --norc --noprofile -i")
    child.expect_exact("remote$ ")
    child.sendline("echo step $SLURM_STEP_ID of $SLURM_JOB_ID")
    child.expect_exact(f"step 0 of {job_id}\r\n")
    child.expect_exact("remote$ ")
    child.sendline("exit 7")
    child.expect(r"srun: error: node\d: task 0: Exited with exit code 7")
    child.expect_exact(LOGIN_PROMPT)
    child.sendline("echo rc=$?")
    child.expect_exact("rc=7")
    child.expect_exact(LOGIN_PROMPT)
    child.sendline("exit")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert relayed.cluster.wait(job_id, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"


def test_sattach_on_the_login_node_taps_and_types_into_a_pty_step(relayed: Relayed) -> None:
    user, login = relayed.user, relayed.login
    res = relayed.inside(login, "salloc", "--no-shell", user=user)
    assert res.returncode == 0, res.stderr
    job_id = re.search(r"salloc: Granted job allocation (\d+)", res.stderr).group(1)
    srun = _spawn_on_login(relayed, "srun", "--jobid", job_id, "--pty", "cat")
    try:
        srun.send("mine\r")
        srun.expect_exact("mine\r\nmine\r\n")  # the node's pty's echo, then cat's copy
        argv = ["nsenter", "-t", str(login.pid), "-m", "-n", "--", "runuser", "-u", user, "--",
                "env", f"KILN_HOME={relayed.cluster.home}", f"PATH={BIN}:/usr/bin:/bin",
                "sattach", "--input-filter=0", f"{job_id}.0"]
        attached = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd="/tmp")
        attached.stdin.write("theirs\n")  # step_input and step_attach, relayed
        attached.stdin.close()
        srun.expect_exact("theirs")
        assert attached.stdout.readline() == "theirs\n"
        srun.send("\x04")  # Ctrl-D: cat ends, and the step
        srun.expect(pexpect.EOF)
        srun.close()
        assert srun.exitstatus == 0
        assert attached.wait(timeout=60) == 0
    finally:
        srun.close(force=True)
        relayed.inside(login, "scancel", job_id, user=user)
    relayed.cluster.wait(job_id, {"CANCELLED", "COMPLETED"})
