"""The launcher with real processes, run as a throwaway Unix user (tests run as root in CI).

Every wait is a polling loop with a generous timeout; the asserts are about outcomes (state,
exit code, owner, which processes survive), never about how long something took.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from agentd import launcher as launcher_mod
from agentd import stepd
from agentd.launcher import Launcher, LaunchError
from tests.unit.agentd.launching import (
    WAIT,
    User,
    gone,
    group_gone,
    job_pid,
    kill_processes_of,
    output,
    spec,
    wait_for,
    wait_until,
)

# --- identity and files --------------------------------------------------------------------


def test_job_runs_as_the_user_with_its_groups(launcher, base, user):
    script = "#!/bin/sh\nid -u\nid -g\nid -G\npwd\necho job=$SLURM_JOB_ID\necho oops >&2\n"
    assert launcher.launch(spec(user, base, 1, script)) is True
    done = wait_for(launcher, 1)
    assert (done.state, done.exit_code, done.exit_signal) == ("COMPLETED", 0, 0)
    lines = output(base, 1).splitlines()
    assert lines[0] == str(user.uid) and lines[1] == str(user.gid)
    assert {user.gid, user.extra_gid} <= {int(g) for g in lines[2].split()}
    assert "0" not in lines[2].split()  # root's groups were dropped
    assert lines[3] == str(base / "out")
    assert lines[4:] == ["job=1", "oops"]
    st = (base / "out" / "slurm-1.out").stat()
    assert (st.st_uid, st.st_gid) == (user.uid, user.gid)


def test_environment_is_exactly_the_given_one(launcher, base, user):
    env = {"PATH": "/usr/bin:/bin", "ONLY": "this"}
    launcher.launch(spec(user, base, 2, "#!/bin/sh\nenv\n", environment=env))
    assert wait_for(launcher, 2).state == "COMPLETED"
    seen = dict(line.split("=", 1) for line in output(base, 2).splitlines() if "=" in line)
    assert seen.get("ONLY") == "this"
    assert not {"SLURM_JOB_ID", "HOME", "KILN_HOME"} & set(seen)


def test_exit_codes_and_signals(launcher, base, user, monkeypatch):
    monkeypatch.setattr(launcher_mod, "_oom_kills", lambda: 5)  # no OOM kill on this node
    launcher.launch(spec(user, base, 3, "#!/bin/sh\nexit 3\n"))
    launcher.launch(spec(user, base, 4, "#!/bin/sh\nkill -9 $$\n"))
    failed, killed = wait_for(launcher, 3), wait_for(launcher, 4)
    assert (failed.state, failed.exit_code, failed.exit_signal) == ("FAILED", 3, 0)
    assert (killed.state, killed.exit_code, killed.exit_signal) == ("FAILED", 0, 9)
    assert failed.exit_known and failed.end_time >= failed.start_time


def test_sigkill_during_an_oom_kill_is_out_of_memory(launcher, base, user, monkeypatch):
    counter = iter(range(7, 100))
    monkeypatch.setattr(launcher_mod, "_oom_kills", lambda: next(counter))
    launcher.launch(spec(user, base, 16, "#!/bin/sh\nkill -9 $$\n"))
    done = wait_for(launcher, 16)
    assert (done.state, done.exit_signal) == ("OUT_OF_MEMORY", 9)
    assert "Detected 1 oom_kill event in StepId=16.batch" in output(base, 16)


NON_ROOT_AGENT = """
import json, sys, time
from agentd.launcher import Launcher, LaunchError
spool, spec = sys.argv[1], json.loads(sys.argv[2])
lau = Launcher(spool, "node7")
try:
    lau.launch(dict(spec, job_id=2, uid=spec["uid"] + 1))
except LaunchError as exc:
    print("refused:", exc)
lau.launch(spec)
while not lau.poll():
    time.sleep(0.05)
print("ended:", lau.ended()[0].state)
"""


def test_unprivileged_agent_launches_jobs_of_its_own_user(base, user):
    job = spec(user, base, 17, "#!/bin/sh\nid -u\n")
    agent = subprocess.run(
        [sys.executable, "-c", NON_ROOT_AGENT, str(base / "out" / "spool"), json.dumps(job)],
        user=user.uid, group=user.gid, extra_groups=[], capture_output=True, text=True,
        cwd="/", env={"PATH": "/usr/bin:/bin"}, timeout=WAIT,
    )
    assert agent.returncode == 0, agent.stderr
    assert f"cannot start jobs for uid {user.uid + 1}" in agent.stdout
    assert "ended: COMPLETED" in agent.stdout
    assert output(base, 17).strip() == str(user.uid)


def test_script_without_shebang_runs_under_bash(launcher, base, user):
    launcher.launch(spec(user, base, 5, 'echo "bash=${BASH_VERSION:+yes}"\n'))
    assert wait_for(launcher, 5).state == "COMPLETED"
    assert output(base, 5).strip() == "bash=yes"


def test_separate_stderr_and_append_mode(launcher, base, user):
    out, err = base / "out" / "o.txt", base / "out" / "e.txt"
    out.write_text("before\n")
    os.chown(out, user.uid, user.gid)
    launcher.launch(spec(user, base, 6, "#!/bin/sh\necho to-out\necho to-err >&2\n",
                         stdout=str(out), stderr=str(err), open_mode="append"))
    assert wait_for(launcher, 6).state == "COMPLETED"
    assert out.read_text() == "before\nto-out\n"
    assert err.read_text() == "to-err\n"
    assert err.stat().st_uid == user.uid


def test_truncate_mode_empties_an_existing_file(launcher, base, user):
    out = base / "out" / "slurm-7.out"
    out.write_text("old content\n")
    os.chown(out, user.uid, user.gid)
    launcher.launch(spec(user, base, 7, "#!/bin/sh\necho new\n"))
    wait_for(launcher, 7)
    assert out.read_text() == "new\n"


def test_output_where_the_user_cannot_write_is_refused(launcher, base, user):
    locked = base / "locked"
    locked.mkdir(mode=0o755)  # root's
    with pytest.raises(LaunchError) as info:
        launcher.launch(spec(user, base, 8, "#!/bin/sh\ntrue\n", stdout=str(locked / "x.out")))
    assert "Permission denied" in str(info.value)
    assert not (locked / "x.out").exists()
    assert launcher.running() == []


def test_missing_workdir_falls_back_to_tmp(launcher, base, user):
    launcher.launch(spec(user, base, 9, "#!/bin/sh\npwd\n", workdir=str(base / "nowhere")))
    assert wait_for(launcher, 9).state == "COMPLETED"
    text = output(base, 9)
    assert f"couldn't chdir to `{base / 'nowhere'}': No such file or directory" in text
    assert text.splitlines()[-1] == "/tmp"


def test_script_is_spooled_privately_and_removed(launcher, base, user):
    launcher.launch(spec(user, base, 10, "#!/bin/sh\nsleep 600\n"))
    script = launcher.spool.script_path(10, 1)
    st = script.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (user.uid, 0o700)
    pid = job_pid(launcher)
    record = json.loads(launcher.spool.record_path(10, 1).read_text())
    assert psutil.Process(pid).ppid() == record["stepd_pid"]  # the job's supervisor
    assert os.getpgid(pid) == pid and os.getsid(pid) != os.getsid(record["stepd_pid"])
    assert record["stepd_create_time"] > 0 and record["launch_time"] > 0
    assert "script" not in record and "environment" not in record
    launcher.terminate(10, 1)
    wait_for(launcher, 10)
    assert not script.exists()
    record = json.loads(launcher.spool.record_path(10, 1).read_text())
    assert record["finished"]["state"] == "CANCELLED"
    launcher.forget(10, 1)
    assert not launcher.spool.record_path(10, 1).exists() and launcher.ended() == []


# --- refusals ------------------------------------------------------------------------------


def test_root_job_refused_unless_allowed(base, user):
    root_spec = spec(user, base, 11, "#!/bin/sh\nid -u\n", user="root", uid=0, gid=0)
    strict = Launcher(base / "spool", "node7")
    with pytest.raises(LaunchError) as info:
        strict.launch(root_spec)
    assert "root" in str(info.value)
    lenient = Launcher(base / "spool2", "node7", allow_root=True)
    assert lenient.launch(root_spec)
    assert wait_for(lenient, 11).state == "COMPLETED"
    assert output(base, 11).strip() == "0"


def test_unprivileged_agent_runs_only_its_own_uid(launcher, base, user, monkeypatch):
    monkeypatch.setattr(launcher_mod.os, "geteuid", lambda: user.uid + 1)
    monkeypatch.setattr(launcher_mod.os, "getuid", lambda: user.uid + 1)
    with pytest.raises(LaunchError) as info:
        launcher.launch(spec(user, base, 12, "#!/bin/sh\ntrue\n"))
    assert f"cannot start jobs for uid {user.uid}" in str(info.value)


@pytest.mark.parametrize("change,message", [
    ({"open_mode": "sideways"}, "invalid open_mode"),
    ({"time_limit": "soon"}, "wrong type"),
    ({"signal": "B:NOPE@5"}, "invalid signal name"),
    ({"environment": {"A=B": "x"}}, "invalid environment variable"),
    ({"user": "kiln-nobody-such"}, "unknown on this node"),
    ({"uid": 4242424}, "has uid"),
    ({"bogus": 1}, "unknown field"),
])
def test_bad_launch_specs_are_one_line_errors(launcher, base, user, change, message):
    with pytest.raises(LaunchError) as info:
        launcher.launch(spec(user, base, 13, "#!/bin/sh\ntrue\n", **change))
    assert message in str(info.value) and "\n" not in str(info.value)
    assert launcher.running() == []


def test_missing_interpreter_is_reported_in_stderr(launcher, base, user):
    launcher.launch(spec(user, base, 14, "#!/no/such/shell\ntrue\n"))
    done = wait_for(launcher, 14)
    # slurmstepd's words, and its _exit(errno): ENOENT
    assert done.error == "execve(): bad interpreter(/no/such/shell): No such file or directory"
    assert (done.state, done.exit_code, done.exit_known) == ("FAILED", 2, True)
    assert output(base, 14) == f"slurmstepd: error: {done.error}\n"
    assert not launcher.spool.script_path(14, 1).exists()


def test_interpreter_the_user_may_not_run_is_named(launcher, base, user):
    private = base / "private"
    private.mkdir(mode=0o700)  # root's
    shell = private / "sh"
    shell.symlink_to("/bin/sh")
    launcher.launch(spec(user, base, 16, f"#!{shell} -e\ntrue\n"))
    done = wait_for(launcher, 16)
    assert done.error.endswith(f": Permission denied (the script's #! interpreter {shell})")
    assert (done.state, done.exit_code) == ("FAILED", 13)


def test_resent_launch_is_ignored_and_other_generation_refused(launcher, base, user):
    s = spec(user, base, 15, "#!/bin/sh\nsleep 600\n")
    assert launcher.launch(s) is True
    assert launcher.launch(s) is False
    with pytest.raises(LaunchError):
        launcher.launch({**s, "generation": 2})
    assert [r["job_id"] for r in launcher.running()] == [15]
    launcher.terminate(15, 1)
    wait_for(launcher, 15)
    assert launcher.launch(s) is False  # ended, not yet forgotten: still not run twice


# --- walltime, cancel, signals -------------------------------------------------------------

STUBBORN = """#!/bin/sh
(trap '' TERM; exec sleep 600) &
echo $! > {pidfile}
sleep 600
"""


def test_time_limit_kills_the_whole_group(launcher, base, user):
    pidfile = base / "out" / "child.pid"
    launcher.launch(spec(user, base, 20, STUBBORN.format(pidfile=pidfile), time_limit=3))
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), "child started")
    child = int(pidfile.read_text())
    pgid = job_pid(launcher)
    done = wait_for(launcher, 20)
    assert done.state == "TIMEOUT"
    assert gone(child) and group_gone(pgid)
    text = output(base, 20)
    assert "slurmstepd: error: *** JOB 20 ON node7 CANCELLED AT " in text
    assert text.rstrip().endswith("DUE TO TIME LIMIT ***")


CHECKPOINT_ON_TERM = """#!/bin/bash
trap 'echo "checkpoint saved"; echo "exiting after TERM"; exit 0' TERM
echo started
sleep 600 &
wait
"""


@pytest.mark.parametrize("open_mode", ["truncate", "append"])
def test_time_limit_banner_is_not_overwritten_by_later_output(launcher, base, user, open_mode):
    """A job that prints after SIGTERM (checkpoint on TERM): the banner stays whole, and the
    job's later lines follow it, in truncate mode as in append mode."""
    out = base / "out" / "slurm-24.out"
    out.write_text("old content of an earlier run\n")
    os.chown(out, user.uid, user.gid)
    launcher.launch(spec(user, base, 24, CHECKPOINT_ON_TERM, time_limit=2,
                         open_mode=open_mode))
    assert wait_for(launcher, 24).state == "TIMEOUT"
    lines = out.read_text().splitlines()
    if open_mode == "append":
        assert lines.pop(0) == "old content of an earlier run"
    assert lines[0] == "started"
    assert re.fullmatch(r"slurmstepd: error: \*\*\* JOB 24 ON node7 CANCELLED AT "
                        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d DUE TO TIME LIMIT \*\*\*", lines[1]), lines
    assert lines[2:] == ["checkpoint saved", "exiting after TERM"]


def test_terminate_cancels_the_whole_group(launcher, base, user):
    pidfile = base / "out" / "child.pid"
    launcher.launch(spec(user, base, 21, STUBBORN.format(pidfile=pidfile)))
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), "child started")
    child = int(pidfile.read_text())
    assert launcher.terminate(21, 1) is True
    assert launcher.terminate(21, 1, state="PREEMPTED") is True  # the first reason stays
    done = wait_for(launcher, 21)
    assert done.state == "CANCELLED" and done.exit_signal == signal.SIGTERM
    assert gone(child)
    assert output(base, 21).rstrip().endswith(" ***")
    assert "CANCELLED AT" in output(base, 21)
    assert launcher.terminate(21, 1) is False
    assert launcher.terminate(999, 1) is False


def test_terminate_after_exit_keeps_the_exit_state(launcher, base, user):
    launcher.launch(spec(user, base, 22, "#!/bin/sh\nexit 4\n"))
    pid = job_pid(launcher)
    wait_until(lambda: gone(pid), "script exited")
    assert launcher.terminate(22, 1) is True  # it ended before the cancel came
    done = wait_for(launcher, 22)
    assert (done.state, done.exit_code) == ("FAILED", 4)
    assert "CANCELLED" not in output(base, 22)


BATCH_TRAP = """#!/bin/bash
trap 'echo caught USR1; exit 7' USR1
sleep 600 &
wait
"""


def test_signal_before_the_limit_reaches_the_batch_shell(launcher, base, user):
    launcher.launch(spec(user, base, 23, BATCH_TRAP, time_limit=4, signal="B:USR1@2"))
    done = wait_for(launcher, 23)
    # the trap ended the job before the limit: it is not a TIMEOUT
    assert (done.state, done.exit_code) == ("FAILED", 7)
    assert output(base, 23).strip() == "caught USR1"


STEP_TRAP = """#!/bin/bash
trap 'echo shell-got-USR1' USR1
(trap 'echo step-got-USR1; exit 0' USR1; while :; do sleep 0.2; done) &
wait
"""


def test_signal_without_b_reaches_the_steps_but_not_the_batch_shell(launcher, base, user):
    launcher.launch(spec(user, base, 26, STEP_TRAP, time_limit=4, signal="USR1@2"))
    done = wait_for(launcher, 26)
    assert (done.state, done.exit_code) == ("COMPLETED", 0)  # ended by the step, before the limit
    text = output(base, 26)
    assert "step-got-USR1" in text and "shell-got-USR1" not in text


def test_signal_by_name_to_the_group_or_the_batch_shell(launcher, base, user):
    script = ("#!/bin/bash\ntrap 'echo shell-got-USR2' USR2\n"
              "(trap 'echo child-got-USR2; exit 0' USR2; while :; do sleep 0.1; done) &\n"
              "while :; do sleep 0.1; done\n")
    launcher.launch(spec(user, base, 24, script))
    wait_until(lambda: len(psutil.Process(job_pid(launcher)).children()) >= 2,
               "child started")
    assert launcher.signal(24, 1, "SIGUSR2", batch_only=True)
    wait_until(lambda: "shell-got-USR2" in output(base, 24), "shell trap")
    assert "child-got-USR2" not in output(base, 24)
    assert launcher.signal(24, 1, "usr2")
    wait_until(lambda: "child-got-USR2" in output(base, 24), "child trap")
    assert launcher.signal(24, 1, "NOPE") is False
    assert launcher.signal(24, 2, "USR2") is False
    assert launcher.signal(24, 1, str(int(signal.SIGTERM)), full=True)  # shell too: -f
    assert wait_for(launcher, 24).exit_signal == signal.SIGTERM


def test_leftover_processes_die_with_a_finished_script(launcher, base, user):
    pidfile = base / "out" / "bg.pid"
    launcher.launch(spec(user, base, 25, f"#!/bin/sh\nsleep 600 &\necho $! > {pidfile}\n"))
    done = wait_for(launcher, 25)
    assert done.state == "COMPLETED"
    assert gone(int(pidfile.read_text()))


# --- spool and restart ---------------------------------------------------------------------


def test_recover_adopts_running_jobs_and_keeps_timing_them(base, user):
    first = Launcher(base / "spool", "node7", kill_wait=2)
    first.launch(spec(user, base, 30, "#!/bin/sh\nsleep 600\n", time_limit=3))
    first.launch(spec(user, base, 31, "#!/bin/sh\nexit 5\n"))
    wait_for(first, 31)  # ended, reported, not forgotten
    pid = job_pid(first, 30)

    second = Launcher(base / "spool", "node7", kill_wait=2)
    again = second.recover()
    assert [(d.job_id, d.state, d.exit_code) for d in again] == [(31, "FAILED", 5)]
    assert [(r["job_id"], r["pid"]) for r in second.running()] == [(30, pid)]
    done = wait_for(second, 30)  # its supervisor kept the time and saw it end
    assert (done.state, done.exit_signal, done.exit_known) == ("TIMEOUT", signal.SIGTERM, True)
    assert gone(pid)
    second.forget(31, 1)
    second.forget(30, 1)
    assert Launcher(base / "spool", "node7").recover() == []
    first.poll()


def test_recover_reports_jobs_that_ended_while_no_agent_watched(base, user):
    first = Launcher(base / "spool", "node7", kill_wait=2)
    first.launch(spec(user, base, 32, "#!/bin/sh\nsleep 600\n"))
    pid = job_pid(first)
    os.killpg(pid, signal.SIGKILL)
    stepd = first.spool.stepd_path(32, 1, "exit")
    wait_until(stepd.exists, "the supervisor wrote the job's end")
    again = Launcher(base / "spool", "node7")
    [done] = again.recover() or [wait_for(again, 32)]  # its supervisor may be exiting
    assert (done.job_id, done.state, done.exit_signal, done.exit_known) == \
        (32, "FAILED", signal.SIGKILL, True)
    first.poll()


AGENT = """
import json, sys, time
from agentd.launcher import Launcher
lau = Launcher(sys.argv[1], "node7", kill_wait=2)
lau.launch(json.loads(sys.argv[2]))
print("launched", flush=True)
time.sleep(600)
"""


def _agent_kill9(base: Path, job: dict) -> None:
    """Launch ``job`` from an agent of its own, then ``kill -9`` that agent."""
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(base / "spool"), json.dumps(job)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout.readline() == "launched\n"
    finally:
        agent.kill()
        agent.wait(timeout=WAIT)


def test_job_outlives_its_agent_and_its_exit_status_is_read_after(base, user):
    go = base / "out" / "go"
    _agent_kill9(base, spec(user, base, 40, f"#!/bin/sh\nwhile [ ! -e {go} ]; do sleep 0.1; "
                                        f"done\nexit 3\n"))
    spool = Launcher(base / "spool", "node7").spool  # the agent is gone; its spool is not
    wait_until(lambda: spool.stepd_path(40, 1, "pid").exists(), "the supervisor started it")
    pid = int(spool.stepd_path(40, 1, "pid").read_text())
    assert not gone(pid)  # the job outlived its agent
    go.touch()
    wait_until(lambda: gone(pid), "the job exited")
    again = Launcher(base / "spool", "node7")
    ended = again.recover() or [wait_for(again, 40)]  # its supervisor may still be writing
    assert [(d.job_id, d.state, d.exit_code, d.exit_known) for d in ended] == \
        [(40, "FAILED", 3, True)]


def test_supervisor_keeps_the_time_limit_while_no_agent_runs(base, user):
    _agent_kill9(base, spec(user, base, 41, "#!/bin/sh\nsleep 600\n", time_limit=2))
    spool = Launcher(base / "spool", "node7").spool
    wait_until(lambda: spool.stepd_path(41, 1, "exit").exists(),
               "the supervisor ended the job at its limit, with no agent running")
    again = Launcher(base / "spool", "node7")
    [done] = again.recover() or [wait_for(again, 41)]  # its supervisor may be exiting
    assert (done.state, done.exit_signal, done.exit_known) == ("TIMEOUT", signal.SIGTERM, True)
    assert output(base, 41).rstrip().endswith("DUE TO TIME LIMIT ***")


def test_a_supervisor_killed_without_its_end_loses_only_the_exit_status(launcher, base, user):
    launcher.launch(spec(user, base, 42, "#!/bin/sh\nsleep 600\n"))
    pid = job_pid(launcher)
    record = json.loads(launcher.spool.record_path(42, 1).read_text())
    os.kill(record["stepd_pid"], signal.SIGKILL)
    done = wait_for(launcher, 42)
    assert (done.state, done.exit_known) == ("COMPLETED", False)
    wait_until(lambda: gone(pid), "what was left of the job was killed")


def test_before_exec_hooks_run_as_root_in_the_jobs_session_before_the_user_switch(
        base, user, monkeypatch):
    """The supervisor's fork..exec hook (where the cgroup join goes), played in-process."""
    seen = base / "hook"
    monkeypatch.setattr(stepd, "BEFORE_EXEC", [lambda launch: seen.write_text(
        f"{os.geteuid()} {int(os.getsid(0) == os.getpid())} {launch['job_id']}")])
    out = base / "out" / "hook.out"
    launch = {"job_id": 43, "generation": 1, "node": "node7", "argv": ["/usr/bin/id", "-u"],
              "environment": {}, "cwd": str(base / "out"), "umask": -1, "switch_user": True,
              "uid": user.uid, "gid": user.gid, "groups": [user.gid], "script_head": "",
              "time_limit": None, "warning": None, "kill_wait": 2, "launch_time": time.time()}
    control, wake = os.pipe(), os.pipe()
    saved = os.dup(1)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    try:
        result = stepd.Supervisor(str(Launcher(base / "spool", "node7").spool.root), launch,
                                  control[0], wake[0]).run()
    finally:
        os.dup2(saved, 1)
        os.close(fd)
    assert (result["state"], result["exit_code"]) == ("COMPLETED", 0)
    assert seen.read_text() == "0 1 43"  # root, in the job's own new session
    assert out.read_text().strip() == str(user.uid)  # and then the job ran as the user


def test_a_silent_schedd_fences_kill_partitions_and_spares_keep_ones(launcher, base, user):
    """The supervisor's fence: schedd last heard (the spool's schedd-heard file) long ago."""
    launcher.spool.touch_heard()
    later = time.time() + 3600  # no fence until job 46 has set its trap
    os.utime(launcher.spool.heard_path, (later, later))
    trapped = base / "out" / "trapped"
    launcher.launch(spec(user, base, 44, "#!/bin/sh\nsleep 600\n", on_isolation="keep",
                         fence_timeout=2.0))
    launcher.launch(spec(user, base, 45, "#!/bin/sh\nsleep 600\n", on_isolation="kill",
                         fence_timeout=2.0))
    # deaf to SIGTERM, with a KillWait far beyond the test's patience: the fence's own
    # KillWait (schedd's fence_kill_wait, which fits before node_timeout) kills it
    launcher.launch(spec(user, base, 46, f"#!/bin/sh\ntrap '' TERM\ntouch {trapped}\nsleep 600\n",
                         on_isolation="kill", fence_timeout=2.0, kill_wait=3600,
                         fence_kill_wait=1))
    kept = job_pid(launcher, 44)
    wait_until(trapped.exists, "job 46 deaf to SIGTERM")
    old = time.time() - 3600  # schedd last heard an hour ago
    os.utime(launcher.spool.heard_path, (old, old))
    done = wait_for(launcher, 45)
    assert (done.state, done.exit_signal, done.exit_known) == ("NODE_FAIL", signal.SIGTERM, True)
    text = output(base, 45)
    assert "has not heard the controller for" in text and "DUE TO NODE FAILURE ***" in text
    deaf = wait_for(launcher, 46)
    assert (deaf.state, deaf.exit_signal) == ("NODE_FAIL", signal.SIGKILL)
    assert not gone(kept)  # on_isolation = "keep": it runs on
    launcher.terminate(44, 1)
    assert wait_for(launcher, 44).state == "CANCELLED"

def test_a_job_that_ended_unwatched_ends_when_it_last_wrote_not_when_the_agent_returned(
        base, user):
    """No agent watched the job's end; the agent that comes back (an hour later, say) gives
    it the end its supervisor saw, not its own return."""
    first = Launcher(base / "spool", "node7", kill_wait=2)
    first.launch(spec(user, base, 33, "#!/bin/sh\necho started\nsleep 1\necho done\n"))
    pid = job_pid(first)
    supervisor = json.loads(first.spool.record_path(33, 1).read_text())["stepd_pid"]
    wait_until(lambda: gone(pid) or _zombie(pid), "the job ended, its agent not polling")
    wait_until(lambda: _zombie(supervisor), "its supervisor wrote the end and exited")
    ended_by = time.time()
    later = ended_by + 3600
    [done] = Launcher(base / "spool", "node7").recover(now=later)
    assert done.job_id == 33
    assert done.start_time + 1 <= done.end_time <= ended_by, (done.start_time, done.end_time)
    first.poll()


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


# --- issue 12: the working directory and output paths, played as a second user -------------


@pytest.fixture(scope="module")
def attacker():
    """A second throwaway user: the one who plants things in /tmp."""
    name = f"kilna{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-U", "-s", "/bin/sh", name], check=True)
    try:
        entry = pwd.getpwnam(name)
        yield User(name, entry.pw_uid, entry.pw_gid, entry.pw_gid)
    finally:
        kill_processes_of(name)
        subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", name], check=False, stderr=subprocess.DEVNULL)


@pytest.fixture
def root_only(base):
    """A directory only root may enter (0700), with a file only root may read: a job that
    got in as root's chdir could list it (and open whatever inside it is world-readable)."""
    secret = base / "rootonly"
    secret.mkdir(mode=0o700)
    (secret / "secret").write_text("root's secret\n")
    os.chmod(secret / "secret", 0o600)
    return secret


def _swap_after_check(monkeypatch, workdir: Path, target: Path) -> None:
    """Play the --chdir race without a race: the agent's check (as the user) sees the real
    directory, then the directory is swapped for a symlink to ``target`` before the job
    starts — what an attacker's loop achieves some of the time."""
    check = launcher_mod._workdir

    def check_then_swap(path):
        result = check(path)  # as the user: the directory is theirs, the check passes
        euid = os.geteuid()
        os.seteuid(0)  # the swap is the attacker's, outside the agent's identity switch
        try:
            workdir.rename(workdir.with_name(workdir.name + ".moved"))
            workdir.symlink_to(target)
        finally:
            os.seteuid(euid)
        return result

    monkeypatch.setattr(launcher_mod, "_workdir", check_then_swap)


def test_a_workdir_swapped_for_a_symlink_to_a_root_only_directory_is_not_entered(
        launcher, base, user, root_only, monkeypatch):
    workdir = base / "work"
    workdir.mkdir()
    os.chown(workdir, user.uid, user.gid)
    _swap_after_check(monkeypatch, workdir, root_only)
    launcher.launch(spec(user, base, 40, "#!/bin/sh\npwd\nls\ncat secret\n",
                           workdir=str(workdir)))
    done = wait_for(launcher, 40)
    text = output(base, 40)
    assert "root's secret" not in text and "secret" not in text.splitlines()  # not listed
    assert f"couldn't chdir to `{workdir}': Permission denied: going to /tmp instead" in text
    assert "/tmp" in text.splitlines()
    assert done.state == "FAILED"  # cat found no secret in /tmp


def test_a_step_task_does_not_enter_a_swapped_root_only_workdir(base, user, root_only,
                                                              monkeypatch):
    from agentd.step_tasks import StepRunner

    workdir = base / "work"
    workdir.mkdir()
    os.chown(workdir, user.uid, user.gid)
    _swap_after_check(monkeypatch, workdir, root_only)
    lau = Launcher(base / "spool", "node7", kill_wait=1)
    steps = StepRunner(lau, "node7")
    out = base / "out" / "task0.out"
    step = {"job_id": 41, "step_id": 0, "user": user.name, "uid": user.uid, "gid": user.gid,
            "argv": ["/bin/sh", "-c", "pwd; ls; cat secret"], "cwd": str(workdir),
            "environment": {"PATH": "/usr/bin:/bin"}, "time_limit": None,
            "job_start": time.time(), "kill_wait": 1,
            "tasks": [{"procid": 0, "env": {}, "stdout": str(out), "stderr": str(out),
                       "append": False}]}
    try:
        assert steps.launch(step)
        deadline = time.monotonic() + WAIT
        while not (due := steps.poll()) and time.monotonic() < deadline:
            time.sleep(0.05)
        [(_, body)] = due
    finally:
        steps.close()
        lau.close()
    text = out.read_text()
    assert "root's secret" not in text and "secret" not in text.splitlines()  # not listed
    assert f"couldn't chdir to `{workdir}': Permission denied: going to /tmp instead" in text
    assert "/tmp" in text.splitlines()
    assert body["tasks"][0][1] != 0


@pytest.fixture
def sticky(base):
    """A world-writable sticky directory like /tmp (owned by root)."""
    path = base / "tmp"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


def _plant(who: User, link: Path, target: Path) -> None:
    subprocess.run(["runuser", "-u", who.name, "--", "ln", "-s", str(target), str(link)],
                   check=True)


def test_output_through_a_symlink_planted_by_another_user_is_refused(
        launcher, base, user, attacker, sticky):
    important = base / "out" / "important"
    important.write_text("precious\n")
    os.chown(important, user.uid, user.gid)
    _plant(attacker, sticky / "x.out", important)
    with pytest.raises(LaunchError) as info:
        launcher.launch(spec(user, base, 42, "#!/bin/sh\necho clobbered\n",
                             stdout=str(sticky / "x.out")))
    assert "refusing to follow a symlink" in str(info.value)
    assert important.read_text() == "precious\n"
    assert launcher.running() == []


def test_the_refusal_is_written_to_a_separate_stderr_file(launcher, base, user, attacker,
                                                          sticky):
    important = base / "out" / "important"
    important.write_text("precious\n")
    os.chown(important, user.uid, user.gid)
    _plant(attacker, sticky / "y.out", important)
    err = base / "out" / "y.err"
    with pytest.raises(LaunchError):
        launcher.launch(spec(user, base, 43, "#!/bin/sh\necho clobbered\n",
                             stdout=str(sticky / "y.out"), stderr=str(err)))
    assert "refusing to follow a symlink" in err.read_text()
    assert important.read_text() == "precious\n"


def test_the_users_own_symlink_in_a_sticky_directory_is_followed(launcher, base, user,
                                                                 sticky):
    target = base / "out" / "mine.out"
    _plant(user, sticky / "mine.out", target)
    launcher.launch(spec(user, base, 44, "#!/bin/sh\necho hello\n",
                         stdout=str(sticky / "mine.out")))
    assert wait_for(launcher, 44).state == "COMPLETED"
    assert target.read_text() == "hello\n"


def test_a_symlink_planted_after_the_check_is_not_followed(base, user, attacker, sticky):
    important = base / "out" / "important"
    important.write_text("precious\n")
    os.chown(important, user.uid, user.gid)
    real_lstat = os.lstat

    def lstat_then_plant(path, *a, dir_fd=None, **kw):
        try:
            return real_lstat(path, *a, dir_fd=dir_fd, **kw)
        finally:
            if path == "z.out":
                euid = os.geteuid()
                os.seteuid(0)  # the attacker's move, between the agent's check and its open
                try:
                    if not (sticky / "z.out").is_symlink():
                        _plant(attacker, sticky / "z.out", important)
                finally:
                    os.seteuid(euid)

    try:
        os.lstat = lstat_then_plant
        lau = Launcher(base / "spool", "node7")
        with pytest.raises(LaunchError) as info:
            lau.launch(spec(user, base, 45, "#!/bin/sh\necho clobbered\n",
                            stdout=str(sticky / "z.out")))
    finally:
        os.lstat = real_lstat
    lau.close()
    assert "refusing to follow a symlink" in str(info.value)
    assert important.read_text() == "precious\n"


def test_a_directory_symlink_planted_by_another_user_is_not_followed(launcher, base, user,
                                                                     attacker, sticky):
    victim_dir = base / "out" / "results"
    victim_dir.mkdir()
    os.chown(victim_dir, user.uid, user.gid)
    (victim_dir / "x.out").write_text("precious\n")
    os.chown(victim_dir / "x.out", user.uid, user.gid)
    _plant(attacker, sticky / "mydir", victim_dir)
    with pytest.raises(LaunchError) as info:
        launcher.launch(spec(user, base, 46, "#!/bin/sh\necho clobbered\n",
                             stdout=str(sticky / "mydir" / "x.out")))
    assert "refusing to follow a symlink owned by uid" in str(info.value)
    assert (victim_dir / "x.out").read_text() == "precious\n"


def test_an_srun_task_ignores_nothing_the_agent_was_started_ignoring(tmp_path):
    """A shell's ``agentd &`` ignores SIGINT and SIGQUIT, and an ignored signal stays ignored
    across exec: srun's tasks (``enter_workdir``, their ``preexec_fn``) put every signal back
    to its default, so Ctrl-C and Ctrl-\\ of ``srun --pty`` reach the task, as the batch
    script's child (``stepd.child_setup``) always did."""
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGQUIT)}
    try:
        out = subprocess.run(["grep", "SigIgn", "/proc/self/status"], capture_output=True,
                             text=True, preexec_fn=launcher_mod.enter_workdir(str(tmp_path)),
                             check=True).stdout
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert int(out.split()[1], 16) == 0
