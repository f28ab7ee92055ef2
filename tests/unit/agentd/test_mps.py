"""agentd/mps.py: one MPS control daemon per GPU, from its first MPS job to its last; the
environment an MPS job gets; fake GPUs get the environment only, said once."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from agentd.mps import Mps, find_program


class Calls:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str, str, bytes | None]] = []

    def __call__(self, argv: list[str], env: dict[str, str], stdin: bytes | None) -> None:
        self.calls.append((argv, env["CUDA_VISIBLE_DEVICES"], env["CUDA_MPS_PIPE_DIRECTORY"],
                           stdin))


def test_the_daemon_starts_with_the_first_job_and_stops_after_the_last(tmp_path: Path) -> None:
    calls = Calls()
    mps = Mps(tmp_path / "mps", "/x/mps-control", False, runner=calls)
    env = mps.acquire(("job", 1, 0), [0])
    pipe = str(tmp_path / "mps" / "gpu0" / "pipe")
    assert env == {"CUDA_MPS_PIPE_DIRECTORY": pipe,
                   "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "mps" / "gpu0" / "log")}
    assert calls.calls == [(["/x/mps-control", "-d"], "0", pipe, None)]
    mps.acquire(("job", 2, 0), [0])  # the daemon already runs
    assert len(calls.calls) == 1
    mps.release(("job", 1, 0))
    assert len(calls.calls) == 1
    mps.release(("job", 2, 0))
    assert calls.calls[-1] == (["/x/mps-control"], "0", pipe, b"quit\n")
    mps.release(("job", 2, 0))  # twice: nothing more
    assert len(calls.calls) == 2


def test_each_gpu_has_its_own_daemon_and_directories(tmp_path: Path) -> None:
    calls = Calls()
    mps = Mps(tmp_path / "mps", "ctl", False, runner=calls)
    mps.acquire(("job", 1, 0), [0])
    env = mps.acquire(("step", 2, 0), [1])
    assert env["CUDA_MPS_PIPE_DIRECTORY"].endswith("gpu1/pipe")
    assert [(c[0][-1], c[1]) for c in calls.calls] == [("-d", "0"), ("-d", "1")]
    for path in (tmp_path / "mps" / "gpu1" / "pipe", tmp_path / "mps" / "gpu1" / "log"):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o755  # the job's user reaches them
    mps.release(("step", 2, 0))
    assert calls.calls[-1][1] == "1" and mps.holds(("job", 1, 0))


def test_fake_gpus_get_the_environment_and_a_log_line_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls = Calls()
    mps = Mps(tmp_path / "mps", find_program("", fake_gpus=True), True, runner=calls)
    with caplog.at_level(logging.INFO, logger="agentd.mps"):
        assert "CUDA_MPS_PIPE_DIRECTORY" in mps.acquire(("job", 1, 0), [0])
        mps.release(("job", 1, 0))
        mps.acquire(("job", 2, 0), [0])
    assert calls.calls == []
    said = [r.getMessage() for r in caplog.records if "no MPS control daemon" in r.getMessage()]
    assert said == ["gres/mps: no MPS control daemon runs for fake GPUs; MPS jobs get "
                    "CUDA_MPS_* only"]


def test_a_daemon_that_fails_is_logged_and_the_job_runs_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def broken(argv: list[str], env: dict[str, str], stdin: bytes | None) -> None:
        raise OSError("exit 1: no GPU")

    mps = Mps(tmp_path / "mps", "ctl", False, runner=broken)
    with caplog.at_level(logging.WARNING, logger="agentd.mps"):
        assert mps.acquire(("job", 1, 0), [0])
    assert "start failed: exit 1: no GPU" in caplog.text


def test_find_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_program("/opt/fake-ctl", fake_gpus=True) == "/opt/fake-ctl"
    program = tmp_path / "nvidia-cuda-mps-control"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_program("", fake_gpus=False) == str(program)
    assert find_program("", fake_gpus=True) is None
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert find_program("", fake_gpus=False) is None
