"""Issue 12 (items 3, 4, 14), played on a real cluster by unprivileged users: the agent enters
a job's directory as the user, does not follow another user's symlink in /tmp to open a job's
output, and holds at most its cap of srun's forwarded output in its root-owned spool."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, cleanup, make_user, user_home, world_tempdir
from tests.integration.conftest import BACKENDS
from tests.pgutil import fresh_database

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
CAP_MB = 1  # [agent] step_spool_cap_mb of this module's cluster
SEGMENT = 256 * 1024  # the spool's segment size at that cap (agentd.forward)


class CappedCluster(Cluster):
    """A one-node cluster whose agent holds at most CAP_MB of a step's forwarded output."""

    def write_config(self, port: int) -> None:
        super().write_config(port)
        path = self.home / "kiln.toml"
        path.write_text(path.read_text().replace(
            "[agent]\n", f"[agent]\nstep_spool_cap_mb = {CAP_MB}\nnode_spool_cap_mb = 8\n"))


@pytest.fixture(scope="module", params=BACKENDS)
def capped(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    home = world_tempdir("kiln-it-")
    try:
        if request.param == "postgresql":
            with fresh_database() as url:
                cluster = CappedCluster(home=home, db_url=url, nodes=1, fake_gpus="2",
                                        kill_wait=3)
                cluster.up()
                try:
                    yield cluster
                finally:
                    cluster.down()
        else:
            cluster = CappedCluster(home=home, db_url=f"sqlite:///{home}/kiln.db", nodes=1,
                                    fake_gpus="2", kill_wait=3)
            cluster.up()
            try:
                yield cluster
            finally:
                cluster.down()
    finally:
        cleanup(home)


@pytest.fixture(scope="module")
def attacker() -> str:
    """A third user, the one who plants things (other_user is the victim)."""
    return make_user()


def _out(workdir: Path, job_id: int) -> str:
    path = workdir / f"slurm-{job_id}.out"
    return path.read_text() if path.exists() else ""


# --- item 3: the working directory ------------------------------------------------------------


def test_a_workdir_symlinked_to_a_root_only_directory_is_not_entered(
        capped: Cluster, workdir: Path, other_user: str) -> None:
    secret = world_tempdir("kiln-rootonly-")
    os.chmod(secret, 0o700)
    (secret / "secret").write_text("root's secret\n")
    link = workdir / "link"
    link.symlink_to(secret)
    try:
        job_id = capped.sbatch("-o", str(workdir / "slurm-%j.out"), "-D", str(link),
                               "--wrap", "pwd; ls; cat secret", user=other_user, cwd=workdir)
        capped.wait(job_id, FINISHED)
        text = _out(workdir, job_id)
        assert "root's secret" not in text and "secret" not in text.splitlines(), text
        assert f"couldn't chdir to `{link}'" in text
        assert "/tmp" in text.splitlines()
    finally:
        cleanup(secret)


# --- item 4: output through a planted /tmp symlink --------------------------------------------


def test_a_symlink_planted_in_tmp_does_not_redirect_the_victims_output(
        capped: Cluster, workdir: Path, other_user: str, attacker: str) -> None:
    important = user_home(other_user) / f"important-{secrets.token_hex(3)}"
    subprocess.run(["runuser", "-u", other_user, "--", "sh", "-c",
                    f"echo precious > {important}"], check=True)
    planted = Path("/tmp") / f"kiln-victim-{secrets.token_hex(4)}.out"
    subprocess.run(["runuser", "-u", attacker, "--", "ln", "-s", str(important),
                    str(planted)], check=True)
    try:
        job_id = capped.sbatch("-o", str(planted), "--wrap", "echo clobbered",
                               user=other_user, cwd=workdir)
        job = capped.wait(job_id, FINISHED)
        assert job["state"] == "FAILED"
        assert important.read_text() == "precious\n"
        assert "refusing to follow a symlink owned by uid" in job["reason"], job["reason"]
        log = (capped.home / "log" / "agentd-node1.log").read_text()
        assert re.search(rf"launch of job {job_id} failed: could not open output file "
                         rf"{planted}: refusing to follow a symlink owned by uid", log)
    finally:
        planted.unlink(missing_ok=True)


# --- item 14: srun output and the agent's spool -----------------------------------------------

WRITER = """
import hashlib, random, sys
rng, left, digest = random.Random(12), 200 * 1000 * 1000, hashlib.sha256()
out = sys.stdout.buffer
while left:
    block = rng.randbytes(min(left, 1 << 20))
    digest.update(block)
    out.write(block)
    left -= len(block)
out.flush()
open(sys.argv[1], "w").write(digest.hexdigest())
"""


class SpoolWatch(threading.Thread):
    """Samples the size of the agent's step spool while a job runs (measurement only)."""

    def __init__(self, root: Path):
        super().__init__(daemon=True)
        self.root, self.peak, self.samples = root, 0, 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.005):
            total = 0
            for dirpath, _, names in os.walk(self.root):
                for name in names:
                    try:
                        total += os.lstat(os.path.join(dirpath, name)).st_size
                    except OSError:
                        pass  # taken and removed meanwhile
            self.peak, self.samples = max(self.peak, total), self.samples + 1


def test_200_mb_of_srun_output_stays_under_the_spool_cap_and_arrives_whole(
        capped: Cluster, workdir: Path, other_user: str) -> None:
    (workdir / "writer.py").write_text(WRITER)
    python = Path(sys.executable)
    script = workdir / "big.sh"
    script.write_text(f"#!/bin/bash\nsrun {python} writer.py sent.sha | sha256sum > got.sha\n")
    watch = SpoolWatch(capped.home / "spool")
    watch.start()
    try:
        job_id = capped.sbatch(str(script), user=other_user, cwd=workdir)
        job = capped.wait(job_id, FINISHED, timeout=600)
    finally:
        watch.stop.set()
        watch.join()
    assert job["state"] == "COMPLETED", _out(workdir, job_id)
    got = (workdir / "got.sha").read_text().split()[0]
    assert got == (workdir / "sent.sha").read_text()  # every byte, in order
    cap = CAP_MB * 1024 * 1024
    assert watch.samples > 0
    # a sample may count a segment just removed and the one begun after it
    assert watch.peak <= cap + SEGMENT, watch.peak
    log = (capped.home / "log" / "agentd-node1.log").read_text()
    [(total, peak)] = re.findall(rf"step {job_id}\.0: (\d+) bytes forwarded; the spool held "
                                 rf"at most (\d+)", log)
    assert int(total) == 200 * 1000 * 1000 and 0 < int(peak) <= cap
