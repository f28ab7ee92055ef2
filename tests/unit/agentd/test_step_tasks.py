"""agentd.step_tasks: one node's share of an srun step, run for real (as the test's own user)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import pwd
import time
from pathlib import Path
from typing import Any

import pytest

from agentd.forward import BACKOFF
from agentd.forward import RESEND_AFTER as FORWARD_RESEND
from agentd.launcher import Launcher
from agentd.step_tasks import EXEC_FAILED, RESEND_AFTER, StepRunner
from schedd.domain.stepoutput import StepOutput


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


def _report(runner: StepRunner, limit: float = 30.0,
            buf: StepOutput | None = None) -> dict[str, Any]:
    """The step_ended report, acknowledged; with ``buf``, play schedd meanwhile: take every
    forwarded chunk the runner sends into it and answer with the offset expected next."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for token, chunk in runner.output_due() if buf is not None else []:
            key, data = (chunk["procid"], chunk["stream"]), base64.b64decode(chunk["data"])
            runner.output_answered(token, {"expected": buf.accept(key, chunk["offset"], data)})
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


# --- forwarded output (agentd/forward.py) ----------------------------------------------------


def _forwarded_spec(tmp_path: Path, argv: list[str], ntasks: int = 2,
                    **kw: Any) -> dict[str, Any]:
    spec = _spec(tmp_path, argv, ntasks=ntasks, **kw)
    for task in spec["tasks"]:
        task.update(stdout="", stderr="", forward=["out", "err"])
    return spec


def _text(buf: StepOutput) -> dict[tuple[int, str], bytes]:
    return {key: bytes(p.data) for key, p in buf.streams.items() if p.data}


def test_forwarded_output_is_sent_and_the_report_waits_for_it(runner: StepRunner,
                                                              tmp_path: Path) -> None:
    runner.launch(_forwarded_spec(tmp_path, ["sh", "-c", "echo o$SLURM_PROCID; echo e >&2; "
                                             "head -c 200000 /dev/zero"]))
    steps_dir = runner.launcher.spool.root / "steps" / "5.0"
    assert steps_dir.is_dir() and steps_dir.stat().st_mode & 0o777 == 0o700
    buf = StepOutput()
    body = _report(runner, buf=buf)
    assert body["state"] == "COMPLETED"
    text = _text(buf)
    assert text[(0, "out")] == b"o0\n" + b"\0" * 200000  # several chunks, in order
    assert text[(1, "out")] == b"o1\n" + b"\0" * 200000
    assert text[(0, "err")] == text[(1, "err")] == b"e\n"
    assert not steps_dir.exists()  # removed once schedd took everything
    assert list(tmp_path.glob("*.out")) == []  # nothing written where srun is


def test_no_report_while_schedd_has_not_taken_the_output(runner: StepRunner,
                                                         tmp_path: Path) -> None:
    runner.launch(_forwarded_spec(tmp_path, ["echo", "hi"], ntasks=1))
    deadline = time.monotonic() + 30
    while (5, 0) not in runner._draining:
        assert time.monotonic() < deadline, "the task never ended"
        assert runner.poll() == []
        time.sleep(0.01)
    sent = runner.output_due()
    assert [b["offset"] for _, b in sent] == [0]
    assert runner.output_due() == []  # in flight: not sent again at once
    now = time.time()
    assert runner.poll(now) == []
    full = StepOutput(cap=1)
    token, body = sent[0]
    runner.output_answered(token, {"expected": full.accept((0, "out"), 0, b"hi\n")}, now)
    assert runner.output_due(now) == []  # refused: back off before the resend
    again = runner.output_due(now + BACKOFF)
    assert [b["offset"] for _, b in again] == [0]
    assert runner.output_due(now + BACKOFF + 1) == []
    lost = runner.output_due(now + BACKOFF + FORWARD_RESEND + 0.1)  # no answer: go back
    assert [b["offset"] for _, b in lost] == [0]
    runner.output_answered(lost[0][0], {"expected": 3}, now)
    body = _report(runner, buf=StepOutput())
    assert body["tasks"] == [[0, 0, 0]]


def test_output_of_a_step_schedd_forgot_is_dropped(runner: StepRunner, tmp_path: Path) -> None:
    runner.launch(_forwarded_spec(tmp_path, ["echo", "hi"], ntasks=1))
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, "no report"
        for token, _ in runner.output_due():
            runner.output_answered(token, {"gone": True})
        if runner.poll():
            break
        time.sleep(0.01)
    assert not (runner.launcher.spool.root / "steps" / "5.0").exists()


def test_a_cancelled_steps_banner_goes_to_its_forwarded_stderr(runner: StepRunner,
                                                               tmp_path: Path) -> None:
    runner.launch(_forwarded_spec(tmp_path, ["sleep", "600"], ntasks=1))
    runner.terminate(5, 0, "CANCELLED")
    buf = StepOutput()
    assert _report(runner, buf=buf)["state"] == "CANCELLED"
    assert b"*** STEP 5.0 ON node1 CANCELLED AT" in _text(buf)[(0, "err")]


# --- the spool cap (issue 12, item 14) -------------------------------------------------------


def _spool_bytes(runner: StepRunner) -> int:
    """What the agent's step spool holds on disk now, every file of every step."""
    root = runner.launcher.spool.root / "steps"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def _drain(runner: StepRunner, watch, steps: int = 1, limit: float = 120.0) -> tuple[dict[tuple[int, int, str], bytearray], list[dict[str, Any]]]:
    """Play schedd and a reading srun at once: take every chunk at the offset expected next;
    ``watch()`` runs after every agent turn. Returns what arrived and the step_ended reports."""
    got: dict[tuple[int, int, str], bytearray] = {}
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + limit
    while len(reports) < steps:
        assert time.monotonic() < deadline, "the steps never ended"
        for token, chunk in runner.output_due():
            data = got.setdefault((chunk["step_id"], chunk["procid"], chunk["stream"]),
                                  bytearray())
            if chunk["offset"] == len(data):
                data += base64.b64decode(chunk["data"])
            runner.output_answered(token, {"expected": len(data)})
        watch()
        for key, body in runner.poll():
            runner.acknowledged(key)
            reports.append(body)
        watch()
    return got, reports


def test_forwarded_output_never_makes_the_spool_exceed_the_step_cap(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(20 * 1024 * 1024))
    cap = 256 * 1024
    launcher = Launcher(tmp_path / "spool", "node1", kill_wait=1, allow_root=True)
    runner = StepRunner(launcher, "node1", step_cap=cap)
    seen = []

    def watch() -> None:
        seen.append(_spool_bytes(runner))
        assert runner.held() <= cap

    try:
        runner.launch(_forwarded_spec(tmp_path, ["cat", str(blob)], ntasks=1))
        got, [report] = _drain(runner, watch)
    finally:
        runner.close()
        launcher.close()
    assert report["state"] == "COMPLETED"
    assert max(seen) <= cap  # the task waited in write(), not the bytes on the agent's disk
    assert max(seen) > 0
    assert hashlib.sha256(got[(0, 0, "out")]).hexdigest() == \
        hashlib.sha256(blob.read_bytes()).hexdigest()


def test_the_node_cap_holds_over_every_step(tmp_path: Path) -> None:
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(4 * 1024 * 1024))
    node_cap = 300 * 1024
    launcher = Launcher(tmp_path / "spool", "node1", kill_wait=1, allow_root=True)
    runner = StepRunner(launcher, "node1", step_cap=256 * 1024, node_cap=node_cap)
    seen = []

    def watch() -> None:
        seen.append(_spool_bytes(runner))

    try:
        for step_id in range(3):
            runner.launch(_forwarded_spec(tmp_path, ["cat", str(blob)], ntasks=2,
                                          step_id=step_id))
        got, reports = _drain(runner, watch, steps=3)
    finally:
        runner.close()
        launcher.close()
    assert sorted(r["step_id"] for r in reports) == [0, 1, 2]
    assert max(seen) <= node_cap
    want = hashlib.sha256(blob.read_bytes()).hexdigest()
    assert {k: hashlib.sha256(v).hexdigest() for k, v in got.items() if k[2] == "out"} == \
        {(s, p, "out"): want for s in range(3) for p in range(2)}


def test_caps_must_be_positive(tmp_path: Path) -> None:
    launcher = Launcher(tmp_path / "spool", "node1", allow_root=True)
    with pytest.raises(ValueError):
        StepRunner(launcher, "node1", step_cap=0)
    launcher.close()


def test_a_process_that_escaped_the_task_does_not_keep_the_step_open(runner: StepRunner,
                                                                     tmp_path: Path) -> None:
    """A task's child that left its process group (setsid) and writes on holds the pipe
    open; the step still ends with what the pipe held when the tasks were gone, and the
    escaped writer is left with a closed pipe (it dies of SIGPIPE at its next write)."""
    pidfile = tmp_path / "spammer.pid"
    runner.launch(_forwarded_spec(tmp_path, [
        "sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; while :; do echo spam; done' & "
                    f"while [ ! -s {pidfile} ]; do :; done; echo done"], ntasks=1))
    try:
        got, [report] = _drain(runner, lambda: None)
        assert report["state"] == "COMPLETED"
        assert b"done\n" in got[(0, 0, "out")]
        pid = int(pidfile.read_text())
        deadline = time.monotonic() + 30
        while _alive(pid):
            assert time.monotonic() < deadline, "the escaped writer lives on"
            time.sleep(0.02)
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pidfile.read_text()), 9)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
