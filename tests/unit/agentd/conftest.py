"""Fixtures of the tests that launch real jobs as a throwaway Unix user (tests run as root in
CI): the user (one per module), a directory for the jobs' files, and a launcher on it."""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from agentd.launcher import Launcher
from tests.unit.agentd.launching import User, kill_processes_of


@pytest.fixture(scope="module")
def user():
    """A throwaway Unix user the jobs run as. Making one needs root: without it these tests
    fail with that reason, never skip (bin/test and CI run as root)."""
    if os.geteuid() != 0:
        pytest.fail("the launcher tests create a Unix user and run jobs as it: run them as "
                    "root (bin/test does), not as uid " + str(os.geteuid()))
    name = f"kilnt{secrets.token_hex(3)}"
    extra = f"{name}x"
    subprocess.run(["groupadd", extra], check=True)
    subprocess.run(["useradd", "-M", "-U", "-s", "/bin/sh", "-G", extra, name], check=True)
    try:
        entry = pwd.getpwnam(name)
        yield User(name, entry.pw_uid, entry.pw_gid, grp.getgrnam(extra).gr_gid)
    finally:
        kill_processes_of(name)
        subprocess.run(["userdel", name], check=False)
        subprocess.run(["groupdel", extra], check=False)
        subprocess.run(["groupdel", name], check=False, stderr=subprocess.DEVNULL)


@pytest.fixture
def base(user):
    root = Path(tempfile.mkdtemp(prefix="kiln-agent-", dir="/tmp"))
    os.chmod(root, 0o755)
    out = root / "out"
    out.mkdir()
    os.chown(out, user.uid, user.gid)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def launcher(base):
    lau = Launcher(base / "spool", "node7", kill_wait=2)
    yield lau
    for job in lau.running():  # a failed test must not leave sleepers behind
        try:
            if job["pid"]:
                os.killpg(job["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
    lau.poll()
    lau.close()
