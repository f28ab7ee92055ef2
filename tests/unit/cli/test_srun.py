"""cli.srun without a cluster: options, the step request, output forwarding, exit status."""

from __future__ import annotations

import base64
import io
import shlex
from pathlib import Path

import pytest

from cli import srun, srun_hold
from cli.core import CommandError
from kiln.slurm import rlimits


def test_options_reuse_sbatchs_parsers_plus_sruns_own() -> None:
    settings, command = srun.parse(["-n2", "-N", "2", "--ntasks-per-node=1", "-c", "3", "-l",
                                    "-u", "--cpu-bind=q", "--gpus", "a100:2", "-o", "o_%t",
                                    "--mpi=pmix", "python", "-u", "x.py", "-n", "9"])
    assert command == ["python", "-u", "x.py", "-n", "9"]  # stops at the command
    assert (settings["num_tasks"], settings["num_nodes"], settings["ntasks_per_node"]) == (2, 2, 1)
    assert settings["cpus_per_task"] == 3 and settings["gpus"] == 2
    assert settings["label"] and settings["unbuffered"] and settings["cpu_bind"] == "q"
    assert settings["stdout"] == "o_%t"


@pytest.mark.parametrize("argv, message", [
    (["--multi-prog", "conf"], "--multi-prog is not supported"),
    (["--x11", "xterm"], "--x11 is not supported by kiln: no X11 forwarding"),
    (["-n", "0", "x"], 'Invalid numeric value "0" for --ntasks.'),
    (["--input=task0.txt", "x"], "--input other than 'none'"),
    (["--jobid=abc", "x"], 'Invalid numeric value "abc" for --jobid.'),
    (["--no-such-option", "x"], "unrecognized option '--no-such-option'"),
])
def test_bad_options_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError) as err:
        srun.parse(argv)
    assert message in err.value.lines[0]


def test_no_command_is_slurms_fatal_line(capsys) -> None:
    assert srun.main([]) == 1
    assert capsys.readouterr().err == "srun: fatal: No command given to execute.\n"
    assert srun.main(["--version"]) == 0


def test_step_request_carries_only_what_was_given(monkeypatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "12")
    settings, command = srun.parse(["-n", "4", "--export=NONE", "hostname"])
    body = srun.step_body(12, settings, command, "/w")
    assert body == {"job_id": 12, "argv": ["hostname"], "cwd": "/w",
                    "environment": rlimits.submitted(),  # whatever --export
                    "name": "hostname", "ntasks": 4, "forward": True}
    settings, command = srun.parse(["-o", "a", "-e", "b", "--open-mode=append", "-J", "s", "x"])
    body = srun.step_body(12, settings, command, "/w")
    assert (body["stdout"], body["stderr"], body["open_mode"], body["name"]) == \
        ("a", "b", "append", "s")
    assert "forward" not in body


def test_lines_are_copied_whole_with_labels_as_they_come() -> None:
    sink = io.BytesIO()
    lines = srun.Lines(sink, b"3: ")
    assert lines.write(b"one\ntw")
    assert sink.getvalue() == b"3: one\n"
    lines.write(b"o\nthree")
    assert sink.getvalue() == b"3: one\n3: two\n"
    lines.write(b"", final=True)
    assert sink.getvalue() == b"3: one\n3: two\n3: three"


def test_unbuffered_lines_copy_bytes_at_once() -> None:
    sink = io.BytesIO()
    srun.Lines(sink, raw=True).write(b"50%")
    assert sink.getvalue() == b"50%"


def test_exit_status_is_the_worst_tasks(capsys) -> None:
    ok = {"done": True, "state": "COMPLETED", "tasks": [[0, "n1", 0, 0], [1, "n2", 0, 0]]}
    assert srun._step_status(ok) == 0
    bad = {"done": True, "state": "FAILED", "tasks": [[0, "n1", 3, 0], [1, "n2", 1, 0]]}
    assert srun._step_status(bad) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == ["srun: error: n1: task 0: Exited with exit code 3",
                   "srun: error: n2: task 1: Exited with exit code 1"]
    killed = {"done": True, "state": "FAILED", "tasks": [[0, "n1", 3, 0], [1, "n1", 0, 9]]}
    assert srun._step_status(killed) == 137
    assert "task 1: Killed" in capsys.readouterr().err
    from_ledger = {"done": True, "state": "CANCELLED", "exit_code": 0, "exit_signal": 0,
                   "tasks": []}
    assert srun._step_status(from_ledger) == 1


def test_outside_an_allocation_the_job_only_holds_it_for_sruns_step() -> None:
    script = srun.HOLD_SCRIPT.format(python=shlex.quote("/opt/my venv/bin/python"))
    assert script.startswith("#!/bin/sh\n")
    assert shlex.split(script.splitlines()[-1]) == ["exec", "/opt/my venv/bin/python", "-P", "-m",
                                                    "cli.srun_hold"]


def test_the_holder_ends_with_its_steps_status() -> None:
    assert srun_hold.status({"done": True, "state": "COMPLETED", "exit_code": 0}) == 0
    assert srun_hold.status({"done": True, "state": "FAILED", "exit_code": 3}) == 3
    assert srun_hold.status({"done": True, "state": "FAILED", "exit_signal": 9}) == 137
    assert srun_hold.status({"done": True, "state": "CANCELLED", "exit_code": 0}) == 1


def test_the_holder_outside_a_job_says_so(capsys, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert srun_hold.main([]) == 1
    assert capsys.readouterr().err == "srun: error: not inside a job (no SLURM_JOB_ID)\n"


def test_shared_output_files_are_truncated_first(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SLURM_JOB_NAME", "jn")
    shared = tmp_path / "all-12-jn.txt"
    shared.write_text("old\n")
    per_task = tmp_path / "t-0.txt"
    per_task.write_text("old\n")
    srun.truncate_shared("all-%j-%x.txt", 12, str(tmp_path))
    srun.truncate_shared("t-%t.txt", 12, str(tmp_path))
    assert shared.read_text() == "" and per_task.read_text() == "old\n"


def test_forwarded_chunks_are_written_once_from_the_cursor_on() -> None:
    out, err = io.BytesIO(), io.BytesIO()
    fwd = srun.Forwarded({(0, "out"): srun.Lines(out, b"0: "), (0, "err"): srun.Lines(err)})
    b64 = [base64.b64encode(t).decode() for t in (b"one\ntw", b"o\nthree", b"oops")]
    assert fwd.take([[0, "out", 0, b64[0]], [0, "err", 0, b64[2]]])
    assert fwd.cursor_list() == [[0, "out", 6], [0, "err", 4]]
    assert not fwd.take([[0, "out", 0, b64[0]]])  # a resend of what srun wrote
    assert not fwd.take([[0, "out", 9, b64[1]]])  # a gap cannot be written
    assert not fwd.take([[5, "out", 0, b64[1]], [0, "out", 6, "!!"]])  # unknown, malformed
    fwd.take([[0, "out", 6, b64[1]]])
    assert out.getvalue() == b"0: one\n0: two\n"
    fwd.finish()
    assert out.getvalue() == b"0: one\n0: two\n0: three"
    assert err.getvalue() == b"oops"
