"""agentd.steps: one node's share of an srun step, run for real (as the test's own user)."""

from __future__ import annotations

import os
import pwd
import time
from pathlib import Path
from typing import Any

import pytest

from agentd.launcher import Launcher
from agentd.steps import EXEC_FAILED, RESEND_AFTER, StepRunner


@pytest.fixture
def runner(tmp_path: Path):
    launcher = Launcher(tmp_path / "spool", "node1", kill_wait=1, allow_root=True)
    steps = StepRunner(launcher, "node1")
    yield steps
    for job_id in steps.job_ids():
        steps.terminate(job_id, None, "CANCELLED")
        steps.poll(time.time() + 60)  # past KillWait: SIGKILL what is left
    steps.close()
    launcher.close()


def _spec(tmp_path: Path, argv: list[str], ntasks: int = 2, step_id: int = 0,
          **kw: Any) -> dict[str, Any]:
    me = pwd.getpwuid(os.getuid())
    tasks = [{"procid": p, "env": {"SLURM_PROCID": str(p), "SLURM_LOCALID": str(p)},
              "stdout": str(tmp_path / f"{p}.out"), "stderr": str(tmp_path / f"{p}.err"),
              "append": False} for p in range(ntasks)]
    spec = {"job_id": 5, "step_id": step_id, "user": me.pw_name, "uid": me.pw_uid,
            "gid": me.pw_gid, "argv": argv, "cwd": str(tmp_path),
            "environment": {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                            "SLURM_STEP_ID": str(step_id)},
            "tasks": tasks, "time_limit": None, "job_start": time.time(), "kill_wait": 1}
    spec.update(kw)
    return spec


def _report(runner: StepRunner, limit: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        due = runner.poll()
        if due:
            (key, body), = due
            runner.acknowledged(key)
            return body
        time.sleep(0.02)
    raise AssertionError(f"no step_ended report within {limit} s")


def test_each_task_runs_with_its_rank_and_writes_its_own_files(runner: StepRunner,
                                                               tmp_path: Path) -> None:
    spec = _spec(tmp_path, ["sh", "-c", 'echo "$SLURM_PROCID $SLURM_STEP_ID $PWD"; echo e >&2'])
    assert runner.launch(spec)
    assert not runner.launch(spec)  # a resend of the same launch starts nothing
    assert runner.job_ids() == [5]
    body = _report(runner)
    assert body["state"] == "COMPLETED"
    assert body["tasks"] == [[0, 0, 0], [1, 0, 0]]
    assert (tmp_path / "0.out").read_text() == f"0 0 {tmp_path}\n"
    assert (tmp_path / "1.out").read_text() == f"1 0 {tmp_path}\n"
    assert (tmp_path / "1.err").read_text() == "e\n"
    assert runner.job_ids() == []


def test_exit_codes_and_signals_of_every_task_are_reported(runner: StepRunner,
                                                           tmp_path: Path) -> None:
    runner.launch(_spec(tmp_path, ["sh", "-c", '[ "$SLURM_PROCID" = 0 ] && exit 3; kill -9 $$'],
                        ntasks=2))
    body = _report(runner)
    assert body["state"] == "FAILED"
    assert body["tasks"] == [[0, 3, 0], [1, 0, 9]]


def test_a_command_that_cannot_run_is_execve_error_and_exit_2(runner: StepRunner,
                                                              tmp_path: Path) -> None:
    runner.launch(_spec(tmp_path, ["no-such-command-kiln"], ntasks=1))
    body = _report(runner)
    assert body["tasks"] == [[0, EXEC_FAILED, 0]]
    assert "execve(): no-such-command-kiln: No such file or directory" in \
        (tmp_path / "0.err").read_text()


def test_tasks_naming_one_file_share_it(runner: StepRunner, tmp_path: Path) -> None:
    spec = _spec(tmp_path, ["sh", "-c", "echo $SLURM_PROCID"], ntasks=3)
    for task in spec["tasks"]:
        task["stdout"] = task["stderr"] = str(tmp_path / "all.txt")
    runner.launch(spec)
    _report(runner)
    assert sorted((tmp_path / "all.txt").read_text().split()) == ["0", "1", "2"]


def test_terminate_stops_every_task_and_kills_after_kill_wait(runner: StepRunner,
                                                              tmp_path: Path) -> None:
    runner.launch(_spec(tmp_path, ["sh", "-c", "trap '' TERM; echo up; sleep 600 & wait"],
                        ntasks=2))
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"{p}.out").exists() and (tmp_path / f"{p}.out").read_text()
                  for p in range(2)):
        assert time.monotonic() < deadline, "tasks never started"
        time.sleep(0.02)
    assert runner.terminate(5, 0, "CANCELLED") == 1
    body = _report(runner)
    assert body["state"] == "CANCELLED"
    assert all(sig == 9 for _, _, sig in body["tasks"])
    assert "*** STEP 5.0 ON node1 CANCELLED AT" in (tmp_path / "0.err").read_text()


def test_the_jobs_walltime_ends_the_step_as_timeout(runner: StepRunner, tmp_path: Path) -> None:
    runner.launch(_spec(tmp_path, ["sleep", "600"], ntasks=1, time_limit=1,
                        job_start=time.time() - 5))
    body = _report(runner)
    assert body["state"] == "TIMEOUT"
    assert "DUE TO TIME LIMIT" in (tmp_path / "0.err").read_text()


def test_unacknowledged_reports_are_sent_again(runner: StepRunner, tmp_path: Path) -> None:
    runner.launch(_spec(tmp_path, ["true"], ntasks=1))
    deadline = time.monotonic() + 30
    due: list = []
    while not due:
        assert time.monotonic() < deadline, "no report"
        due = runner.poll()
        time.sleep(0.02)
    now = time.time()
    assert runner.reports_due(now) == []
    again = runner.reports_due(now + RESEND_AFTER + 1)
    assert [key for key, _ in again] == [(5, 0)]
    runner.acknowledged((5, 0))
    assert runner.reports_due(now + 10 * RESEND_AFTER) == []


def test_a_step_for_an_unknown_user_fails_at_once(runner: StepRunner, tmp_path: Path) -> None:
    spec = _spec(tmp_path, ["true"], ntasks=2, user="no-such-user-kiln")
    assert runner.launch(spec)
    body = _report(runner)
    assert body["state"] == "FAILED" and body["tasks"] == [[0, 1, 0], [1, 1, 0]]
