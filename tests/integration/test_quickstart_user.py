"""The README's first command as an ordinary user (issue 29): from a fresh clone in the user's
home, ``bin/quickstart --nodes 2 --fake-gpus 4xA100`` makes the venv, brings up a personal
cluster in ``~/.kiln`` whose daemons run as that user, and ends with the first job's output;
``kiln down`` then says what it leaves running, and ``kiln down --cancel`` cancels it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import psutil

from tests.integration.cluster import make_user, user_home

PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _as(user: str, cwd: Path, *argv: str, timeout: float = 120
        ) -> subprocess.CompletedProcess[str]:
    """``argv`` as ``user`` with a login's bare environment (HOME, USER, PATH)."""
    home = user_home(user)
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", f"HOME={home}",
                           f"USER={user}", f"PATH={cwd / '.venv' / 'bin'}:{PATH}",
                           *argv], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_quickstart_as_an_ordinary_user_runs_a_personal_cluster() -> None:
    user = make_user()
    home = user_home(user)
    repo = Path(__file__).resolve().parents[2]
    clone = home / "kiln"
    res = subprocess.run(["git", "clone", "-q", str(repo), str(clone)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    subprocess.run(["chown", "-R", f"{user}:{user}", str(clone)], check=True)
    try:
        quick = _as(user, clone, "bin/quickstart", "--nodes", "2", "--fake-gpus", "4xA100",
                    timeout=900)
        assert quick.returncode == 0, quick.stdout + quick.stderr
        assert re.search(r"JobState=COMPLETED ", quick.stdout), quick.stdout
        assert re.search(r"^hello from node[12], GPU 0$", quick.stdout, re.M), quick.stdout
        assert (home / ".kiln" / "kiln.toml").exists()
        # the daemons are the user's own, not root's
        pid_files = sorted((home / ".kiln").rglob("*.pid"))
        assert [p.name for p in pid_files] == ["agentd-node1.pid", "agentd-node2.pid",
                                               "schedd.pid"], pid_files
        owners = {psutil.Process(int(p.read_text().split()[0])).username() for p in pid_files}
        assert owners == {user}

        job = _as(user, clone, "sbatch", "--parsable", "--wrap", "sleep 300")
        assert job.returncode == 0, job.stderr
        _wait_running(user, clone, job.stdout.strip())
        down = _as(user, clone, "kiln", "down")
        assert down.returncode == 0, down.stderr
        assert down.stdout == (
            "kiln is down (3 daemon(s) stopped)\n"
            "1 job(s) left: 1 running (their processes go on; 'kiln up' takes them back), "
            "0 pending; 'kiln down --cancel' cancels them before stopping\n"), down.stdout

        up = _as(user, clone, "kiln", "up", "--nodes", "2", "--fake-gpus", "4xA100")
        assert up.returncode == 0, up.stdout + up.stderr
        cancel = _as(user, clone, "kiln", "down", "--cancel")
        assert cancel.returncode == 0, cancel.stderr
        assert cancel.stdout == "cancelled 1 job(s)\nkiln is down (3 daemon(s) stopped)\n", \
            cancel.stdout
    finally:
        _as(user, clone, "kiln", "down")


def _wait_running(user: str, clone: Path, job: str) -> None:
    import time

    deadline = time.time() + 60
    while time.time() < deadline:
        state = _as(user, clone, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
        if state == "RUNNING":
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job} is not running after 60 s")
