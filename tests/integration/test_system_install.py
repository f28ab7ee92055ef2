"""A cluster root starts with ``kiln up`` is every user's (issue 17, item 1): a second user runs a
plain ``sbatch`` with no environment at all and it works.

The system install writes the machine's real paths (/etc/kiln, /run/kiln, /var/lib/kiln,
/var/log/kiln). So that the test suite (which runs as root, with other clusters in parallel)
never touches the host's, the whole test runs in a private mount namespace (``unshare -m``) in
which an empty temp directory is bind-mounted over each of those four: every command below is
what a user types, run inside that namespace (``nsenter``), and what kiln wrote is read back
through ``/proc/PID/root``. The host keeps at most the empty mount points this test made, which
it removes at the end.
"""

from __future__ import annotations

import os
import re
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


def _wait_done(box: Box, job: str, user: str) -> str:
    deadline = time.time() + 120
    state = ""
    while time.time() < deadline:
        res = box.run("sacct", "-n", "-X", "-P", "-j", job, "-o", "State", user=user)
        state = res.stdout.strip()
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            return state
        time.sleep(0.2)
    raise AssertionError(f"job {job} is {state!r} after 120 s")


def test_root_kiln_up_is_a_system_install_every_user_reaches(box: Box, other_user: str) -> None:
    up = box.run("kiln", "up", "--fake-gpus", "2xA100")
    assert up.returncode == 0, up.stderr + up.stdout
    assert "  config:           /etc/kiln/kiln.toml\n" in up.stdout
    assert "  state:            /var/lib/kiln  (ledger sqlite:////var/lib/kiln/kiln.db)\n" \
        in up.stdout
    assert "  logs:             /var/log/kiln\n" in up.stdout
    assert "any user, no environment needed: sbatch" in up.stdout
    assert "KILN_HOME" not in up.stdout
    assert "root's jobs are refused (allow_root_jobs = false in /etc/kiln/kiln.toml)" \
        in up.stdout

    conf = box.root / "etc/kiln/kiln.toml"
    assert oct(conf.stat().st_mode & 0o777) == "0o644"
    assert "allow_root_jobs = false" in conf.read_text()
    assert (box.root / "run/kiln/schedd.sock").exists()
    assert (box.root / "var/lib/kiln/kiln.db").exists()
    assert (box.root / "var/log/kiln/schedd.log").exists()

    # a second user, no environment at all: the commands find /etc/kiln/kiln.toml
    workdir = world_tempdir("kiln-sys-job-")
    try:
        os.chown(workdir, *_ids(other_user))
        sub = box.run("sbatch", "--gres=gpu:1", "--wrap", "id -un; echo $CUDA_VISIBLE_DEVICES",
                      user=other_user, cwd=str(workdir))
        assert sub.returncode == 0, sub.stderr
        assert sub.stdout.startswith("Submitted batch job ")
        job = sub.stdout.split()[-1]
        assert _wait_done(box, job, other_user) == "COMPLETED"
        assert (workdir / f"slurm-{job}.out").read_text() == f"{other_user}\n0\n"
        squeue = box.run("squeue", "-h", "-u", other_user, user=other_user)
        assert (squeue.returncode, squeue.stderr) == (0, "")
    finally:
        cleanup(workdir)

    # root's own jobs are refused on a system install, as the config says
    root_job = box.run("sbatch", "--wrap", "true")
    assert root_job.returncode == 1
    assert "jobs of root are not allowed on this cluster" in root_job.stderr

    # kiln status and kiln up again find the same install, with no environment either
    status = box.run("kiln", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.startswith("schedd           running, pid ")
    again = box.run("kiln", "up")
    assert again.returncode == 0, again.stderr
    assert "all already running" in again.stdout


def _ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def test_quickstart_from_a_clean_clone_as_root(box: Box, other_user: str) -> None:
    """bin/quickstart as the README says, from a fresh clone: its own venv, kiln installed,
    a system install up, and the first GPU job run as the user who ran sudo."""
    clone = world_tempdir("kiln-clone-")
    try:
        repo = Path(__file__).resolve().parents[2]
        res = subprocess.run(["git", "clone", "-q", str(repo), str(clone / "kiln")],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        assert not (clone / "kiln" / ".venv").exists()
        run = subprocess.run(
            ["nsenter", "-t", str(box.holder.pid), "-m", "--", "env", "-i",
             f"--chdir={clone / 'kiln'}", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", f"SUDO_USER={other_user}",
             "bin/quickstart", "--fake-gpus", "2xA100"],
            capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stdout + run.stderr
        out = run.stdout
        assert "any user, no environment needed: sbatch" in out, out
        assert re.search(r"^submitted job \d+; waiting for it$", out, re.M), out
        assert re.search(r"JobState=COMPLETED ", out), out
        assert "hello from node1, GPU 0\n" in out, out
        who = box.run("squeue", "-h", "-t", "all", "-o", "%u", user=other_user)
        assert who.stdout.split() == [other_user], who.stdout
        box.run("kiln", "down")
        # root in a plain root shell (no sudo): the cluster comes up and quickstart says how a
        # user submits; it ran into `set -u` on the hint's $CUDA_VISIBLE_DEVICES and failed
        root = subprocess.run(
            ["nsenter", "-t", str(box.holder.pid), "-m", "--", "env", "-i",
             f"--chdir={clone / 'kiln'}", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
             "bin/quickstart", "--fake-gpus", "2xA100"],
            capture_output=True, text=True, timeout=900)
        assert root.returncode == 0, root.stdout + root.stderr
        assert "kiln is running for every user of this machine; root's jobs are refused.\n" \
            f"As any user, no environment needed: {clone / 'kiln' / '.venv' / 'bin' / 'sbatch'} " \
            "--gres=gpu:1 --wrap 'echo $CUDA_VISIBLE_DEVICES'\n" in root.stdout, root.stdout
    finally:
        box.run("kiln", "down")
        cleanup(clone)


def test_root_personal_cluster_says_it_runs_roots_jobs(box: Box) -> None:
    """Root with KILN_HOME set gets a personal cluster, whose kiln.toml allows root's jobs
    (they are root's own): ``kiln up`` says so when it writes that, never silently."""
    home = world_tempdir("kiln-root-home-")
    try:
        up = box.run(f"KILN_HOME={home}", "kiln", "up", "--fake-gpus", "1xA100")
        assert up.returncode == 0, up.stderr + up.stdout
        conf = home / "kiln.toml"
        assert f"  root's jobs run here: allow_root_jobs = true in {conf} (a personal " \
               "cluster of root's)\n" in up.stdout
        assert "allow_root_jobs = true" in conf.read_text()
        again = box.run(f"KILN_HOME={home}", "kiln", "up")  # nothing written: nothing said
        assert again.returncode == 0, again.stderr
        assert "root's jobs run here" not in again.stdout
    finally:
        box.run(f"KILN_HOME={home}", "kiln", "down")
        cleanup(home)
