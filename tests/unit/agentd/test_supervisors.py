"""The supervisors' fork server (agentd/forkserver.py, agentd/supervisors.py), with real processes.

A job's supervisor is forked by the node's fork server instead of started as a Python process
of its own; it must be the same supervisor either way (outliving the agent and the fork server,
its end read by a restarted agent), a job must inherit nothing of the fork server's, and a
launch must never wait on a fork server that is gone or stuck.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys

import psutil
import pytest

from agentd import stepd, stepfiles
from agentd.launcher import Launcher
from agentd.supervisors import SupervisorStarter
from tests.unit.agentd.launching import WAIT, gone, job_pid, output, spec, wait_for, wait_until

DIRECT = "starting job supervisors directly"


def _launcher(base, **starter) -> Launcher:
    return Launcher(base / "spool", "node7", kill_wait=2, starter=SupervisorStarter(**starter))


def _supervisor(lau: Launcher, job_id: int) -> psutil.Process:
    record = json.loads(lau.spool.record_path(job_id, 1).read_text())
    return psutil.Process(record["stepd_pid"])


@pytest.fixture
def forking(base):
    lau = _launcher(base, restart_backoff=0)
    yield lau
    for job in lau.running():
        if job["pid"]:
            try:
                os.killpg(job["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    lau.poll()
    lau.close()


def test_supervisors_are_forked_by_the_fork_server_and_run_the_job_alone(forking, base, user):
    """Forked, not a Python start; and the job gets only its stdin, stdout and stderr, and no
    ignored signal (Python ignores SIGXFSZ in every process it starts)."""
    forking.launch(spec(user, base, 60, "#!/bin/sh\ngrep SigIgn /proc/self/status\n"
                                        "exec ls /proc/self/fd\n"))
    server = forking.fork_server_pid
    assert server and _supervisor(forking, 60).ppid() == server
    assert wait_for(forking, 60).state == "COMPLETED"
    ignored, *fds = output(base, 60).split()[1:]
    assert int(ignored, 16) == 0
    assert fds == ["0", "1", "2", "3"]  # 3: ls's own look at /proc/self/fd


def test_a_job_outlives_kill9_of_the_fork_server_and_the_next_launch_gets_a_new_one(
        forking, base, user):
    go = base / "out" / "go"
    forking.launch(spec(user, base, 61, f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.1; done\n"
                                        "exit 3\n"))
    pid, server = job_pid(forking, 61), forking.fork_server_pid
    os.kill(server, signal.SIGKILL)
    wait_until(lambda: gone(server), "the fork server died")
    assert not gone(pid) and _supervisor(forking, 61).is_running()
    forking.launch(spec(user, base, 62, "#!/bin/sh\nexit 4\n"))
    assert forking.fork_server_pid not in (0, server)
    assert _supervisor(forking, 62).ppid() == forking.fork_server_pid
    go.touch()
    first, second = wait_for(forking, 61), wait_for(forking, 62)
    assert (first.state, first.exit_code, first.exit_known) == ("FAILED", 3, True)
    assert (second.state, second.exit_code, second.exit_known) == ("FAILED", 4, True)


def test_a_launch_falls_back_to_a_direct_start_when_the_fork_server_dies_and_says_so_once(
        base, user, caplog):
    lau = _launcher(base, server_command=[sys.executable, "-c", "import sys; sys.exit(1)"])
    try:
        with caplog.at_level(logging.WARNING, logger="agentd.supervisors"):
            lau.launch(spec(user, base, 63, "#!/bin/sh\nexit 5\n"))
            lau.launch(spec(user, base, 64, "#!/bin/sh\nexit 6\n"))
        assert _supervisor(lau, 64).ppid() == os.getpid()  # started by the agent itself
        assert [(d.state, d.exit_code, d.exit_known) for d in
                (wait_for(lau, 63), wait_for(lau, 64))] == [("FAILED", 5, True),
                                                            ("FAILED", 6, True)]
        assert sum(DIRECT in r.getMessage() for r in caplog.records) == 1
    finally:
        lau.close()


def test_a_stuck_fork_server_is_killed_and_the_job_runs_once(base, user):
    ran = base / "out" / "ran"
    lau = _launcher(base, reply_timeout=1.0, restart_backoff=3600)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the launch waited on a stuck server"))
    try:
        lau.launch(spec(user, base, 65, "#!/bin/sh\nexit 0\n"))
        assert wait_for(lau, 65).state == "COMPLETED"
        server = lau.fork_server_pid
        os.kill(server, signal.SIGSTOP)
        signal.alarm(int(WAIT))
        lau.launch(spec(user, base, 66, f"#!/bin/sh\necho once >> {ran}\n"))
        signal.alarm(0)
        assert gone(server) and lau.fork_server_pid == 0
        assert wait_for(lau, 66).state == "COMPLETED"
        assert ran.read_text() == "once\n"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        lau.close()


AGENT = """
import json, sys, time
from agentd.launcher import Launcher
lau = Launcher(sys.argv[1], "node7", kill_wait=2)
lau.launch(json.loads(sys.argv[2]))
print(lau.fork_server_pid, flush=True)
time.sleep(600)
"""


def test_the_fork_server_goes_with_its_agent_and_the_supervisor_stays(base, user):
    go = base / "out" / "go"
    job = spec(user, base, 67, f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.1; done\nexit 7\n")
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(base / "spool"), json.dumps(job)],
                             stdout=subprocess.PIPE, text=True)
    try:
        server = int(agent.stdout.readline())
    finally:
        agent.kill()
        agent.wait(timeout=WAIT)
    wait_until(lambda: gone(server), "the fork server exited once its agent was gone")
    spool = Launcher(base / "spool", "node7").spool
    wait_until(lambda: spool.stepd_path(67, 1, "pid").exists(), "the supervisor started it")
    go.touch()
    again = Launcher(base / "spool", "node7")
    ended = again.recover() or [wait_for(again, 67)]
    assert [(d.state, d.exit_code, d.exit_known) for d in ended] == [("FAILED", 7, True)]


def test_only_one_supervisor_takes_a_launch(base, capfd):
    """Two supervisors for one launch (a fork server that forked one, then died before it
    said so; and the one started directly after): the first takes it, the second finds it
    taken and says nothing in the job's stderr."""
    root = str(base / "spool")
    os.makedirs(stepfiles.stepd_dir(root))
    stepfiles.write_small(stepfiles.path(root, 68, 1, "launch"), json.dumps({"job_id": 68}))
    first = stepd.claim_launch(root, (68, 1))
    stepfiles.write_small(stepfiles.path(root, 68, 1, "pid"), "1\n")  # the first started it
    assert first == {"job_id": 68} and stepd.claim_launch(root, (68, 1)) is None
    assert capfd.readouterr().err == ""
    os.unlink(stepfiles.path(root, 68, 1, "pid"))
    assert stepd.claim_launch(root, (68, 1)) is None  # none was ever written: that is said
    assert "cannot read the job's launch file" in capfd.readouterr().err


def test_the_fork_server_reaps_the_supervisors_it_forked(forking, base, user):
    forking.launch(spec(user, base, 69, "#!/bin/sh\nexit 0\n"))
    supervisor = _supervisor(forking, 69)
    wait_for(forking, 69)
    wait_until(lambda: not supervisor.is_running(), "the server reaped its ended supervisor")
