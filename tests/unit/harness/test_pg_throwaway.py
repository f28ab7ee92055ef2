"""A fresh machine: with nothing listening at KILN_TEST_PG, the run starts a throwaway
PostgreSQL (tests/pgutil.py), the PostgreSQL tests run on it and pass, and it is stopped
afterwards, also when the test process is killed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import pgutil

REPO = Path(__file__).resolve().parents[3]


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_closed(port: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout  # bounds a hang only
    while _listening(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture
def nothing_at_pg(monkeypatch):
    if pgutil.postgres_bindir() is None:
        pytest.fail("no PostgreSQL server binaries (initdb): bin/test installs them",
                    pytrace=False)
    port = _dead_port()
    env = {**os.environ, "KILN_TEST_PG": f"postgresql://postgres@127.0.0.1:{port}/postgres",
           "PYTHONPATH": str(REPO)}
    env.pop("PYTEST_ADDOPTS", None)
    return env


def test_postgresql_tests_run_on_a_throwaway_server(nothing_at_pg):
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
         "tests/unit/schedd/ledger/test_ledger.py", "-k", "postgresql and (upgrade_then_check or unmigrated)"],
        capture_output=True, text=True, cwd=REPO, env=nothing_at_pg, timeout=280)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed.group(1)) > 0, out[-3000:]
    assert "skipped" not in out and "deselected" in out, out[-3000:]
    used = re.search(r"a throwaway server at postgresql://postgres@127\.0\.0\.1:(\d+)/", out)
    assert used, out[-3000:]
    assert _wait_closed(int(used.group(1))), "the throwaway server still listens after the run"


def test_the_throwaway_server_dies_with_a_killed_run(nothing_at_pg):
    script = ("from tests import pgutil; import sys, time; url = pgutil.admin_url(); "
              "print(url, pgutil._throwaway.dir, flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            cwd=REPO, env=nothing_at_pg)
    try:
        url, datadir = proc.stdout.readline().split()
        port = int(re.search(r":(\d+)/", url).group(1))
        assert url != nothing_at_pg["KILN_TEST_PG"] and _listening(port)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _wait_closed(port), "the throwaway server outlived the process that started it"
    shutil.rmtree(datadir, ignore_errors=True)  # what atexit would have removed
