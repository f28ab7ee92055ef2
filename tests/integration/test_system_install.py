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
import shutil
import subprocess
import time
from pathlib import Path

from tests.integration.cluster import cleanup, world_tempdir
from tests.integration.sysbox import Box


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
    # outside /tmp: a system install gives each job a private /tmp (agentd/jobtmp.py)
    workdir = world_tempdir("kiln-sys-job-", under="/var/tmp")
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


def _user_exists(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _ids(user: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def test_quickstart_from_a_clean_clone_as_root(box: Box, other_user: str) -> None:
    """bin/quickstart as the README says, from a fresh clone: its own venv, kiln installed,
    a system install up, and the first GPU job run as the user who ran sudo; then as root
    without sudo, where it runs as kiln-demo."""
    clone = world_tempdir("kiln-clone-")
    made: list[str] = []
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
        # root in a plain root shell (a container, a fresh VM: no sudo), with the README's
        # exact arguments, over a venv an interrupted run left half-made (pip gone): the venv
        # is made again and the first job runs as kiln-demo, a system account made for it
        for pip in (clone / "kiln" / ".venv" / "lib").glob("python3*/site-packages/pip"):
            shutil.rmtree(pip)
        demo_existed = _user_exists("kiln-demo")
        root = subprocess.run(
            ["nsenter", "-t", str(box.holder.pid), "-m", "--", "env", "-i",
             f"--chdir={clone / 'kiln'}", "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
             "bin/quickstart", "--nodes", "2", "--fake-gpus", "4xA100"],
            capture_output=True, text=True, timeout=900)
        if not demo_existed:
            made.append("kiln-demo")
        assert root.returncode == 0, root.stdout + root.stderr
        assert "is not a whole virtualenv of /usr/bin/python3: making it again" in root.stderr
        assert "the first job runs as kiln-demo, a system account made for it" in root.stdout
        assert re.search(r"JobState=COMPLETED ", root.stdout), root.stdout
        assert re.search(r"^hello from node[12], GPU 0$", root.stdout, re.M), root.stdout
        who = box.run("sacct", "-n", "-X", "-P", "-o", "User", "-j",
                      re.search(r"submitted job (\d+)", root.stdout).group(1))
        assert who.stdout.split() == ["kiln-demo"], who.stdout
    finally:
        box.run("kiln", "down")
        cleanup(clone)
        for name in made:
            subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
            subprocess.run(["userdel", "--remove", name], capture_output=True)


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
