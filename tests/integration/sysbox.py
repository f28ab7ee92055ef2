"""A private mount namespace holding a system install's directories (/etc/kiln, /run/kiln,
/var/lib/kiln, /var/log/kiln), so that a test of what root's ``kiln up`` writes never touches
the host's: every command is run inside it (``nsenter``), and what kiln wrote is read back
through ``/proc/PID/root``. The host keeps at most the empty mount points made, removed at the
end."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.cluster import BIN, CLI_TIMEOUT, cleanup, world_tempdir

SYSTEM_DIRS = ("/etc/kiln", "/run/kiln", "/var/lib/kiln", "/var/log/kiln")
BARE_PATH = f"{BIN}:/usr/bin:/bin"


@dataclass
class Box:
    """A mount namespace holding a system install's directories (see the module's doc)."""

    holder: subprocess.Popen

    @property
    def root(self) -> Path:
        return Path(f"/proc/{self.holder.pid}/root")

    def run(self, *argv: str, user: str | None = None, cwd: str = "/tmp"
            ) -> subprocess.CompletedProcess[str]:
        """``argv`` inside the namespace with an empty environment (only PATH, to find the
        commands), as root or as ``user``."""
        bare = ["env", "-i", f"--chdir={cwd}", f"PATH={BARE_PATH}", *argv]
        if user is not None:
            bare = ["runuser", "-u", user, "--", *bare]
        return subprocess.run(["nsenter", "-t", str(self.holder.pid), "-m", "--", *bare],
                              capture_output=True, text=True, timeout=CLI_TIMEOUT)


@pytest.fixture
def box() -> Iterator[Box]:
    made = [d for d in SYSTEM_DIRS if not os.path.exists(d)]
    for d in made:
        os.makedirs(d)  # an empty mount point; nothing of kiln's is ever written there
    scratch = world_tempdir("kiln-sys-")
    holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--",
                               "sleep", "infinity"], start_new_session=True)
    box = Box(holder)
    try:
        while not _in_own_namespace(holder.pid):
            assert holder.poll() is None, "unshare --mount failed (the tests run as root)"
            time.sleep(0.05)
        for i, d in enumerate(SYSTEM_DIRS):
            (scratch / str(i)).mkdir()
            res = subprocess.run(["nsenter", "-t", str(holder.pid), "-m", "--", "mount",
                                  "--bind", str(scratch / str(i)), d],
                                 capture_output=True, text=True, timeout=30)
            assert res.returncode == 0, f"mount --bind over {d}: {res.stderr}"
        yield box
    finally:
        box.run("kiln", "down")
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        for d in made:
            os.rmdir(d)
        cleanup(scratch)


def _in_own_namespace(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False
