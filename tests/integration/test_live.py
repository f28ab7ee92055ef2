"""The live views through the real commands: sstat on running jobs (the agents' samples),
sprio on pending ones, sdiag's scheduler figures.

One cluster (SQLite: none of this reads the ledger) with sampling every 0.2 s, so a running
job's usage reaches schedd with the next heartbeat.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import (
    Cluster,
    cleanup,
    make_user,
    release_file,
    until,
    world_tempdir,
)

ALLOC_MB = 200
# a task that holds ALLOC_MB MiB written (so resident), says so, and waits for the test
HOLD = ("python3 -c \"import pathlib, time; b = b'x' * ({mb} * 1024 * 1024); "
        "pathlib.Path('{ready}').touch(); "
        "[time.sleep(0.1) for _ in iter(lambda: pathlib.Path('{release}').exists(), True)]\"")


class LiveCluster(Cluster):
    def write_config(self, port: int) -> None:
        super().write_config(port)
        conf = self.home / "kiln.toml"
        conf.write_text(conf.read_text().replace("[agent]\n", "[agent]\nsample_interval = 0.2\n",
                                                 1))


@pytest.fixture(scope="module")
def live() -> Iterator[Cluster]:
    home = world_tempdir("kiln-live-")
    cluster = LiveCluster(home=home, db_url=f"sqlite:///{home}/kiln.db", kill_wait=3)
    try:
        cluster.up()
        yield cluster
        cluster.down()
    finally:
        cleanup(home)


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = world_tempdir("kiln-live-job-")
    yield path
    cleanup(path)


def mib(text: str) -> float:
    """'204800K' / '200M' / '1.5G' -> MiB."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?)", text)
    assert m, text
    return float(m.group(1)) * {"K": 1 / 1024, "": 1 / 2**20, "M": 1, "G": 1024, "T": 2**20}[
        m.group(2)]


def sstat(cluster: Cluster, *args: str, user: str | None = None) -> tuple[list[str], str]:
    res = cluster.run("sstat", *args, user=user)
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines(), res.stderr


def test_sstat_reports_a_running_jobs_rss_and_gpus(live: Cluster, workdir: Path) -> None:
    """The issue's test: a job holding a 200 MB allocation shows MaxRSS >= 200 MB, in the
    batch step (by default and by name); its fake GPUs' figures are there, said simulated."""
    script = HOLD.format(mb=ALLOC_MB, ready=workdir / "ready", release=workdir / "release")
    job = live.sbatch("--gres=gpu:1", "-o", str(workdir / "out"), "--wrap", script,
                      cwd=workdir)
    try:
        until(lambda: (workdir / "ready").exists(), "the job holds its memory")

        def rss() -> list[str] | None:
            lines, _ = sstat(live, "-n", "-P", "-o", "JobID,MaxRSS,NTasks,MaxRSSNode,MaxRSSTask",
                             "-j", str(job))
            return lines if lines and mib(lines[0].split("|")[1] or "0") >= ALLOC_MB else None

        [line] = until(rss, f"sstat shows MaxRSS >= {ALLOC_MB} MB")
        job_id, max_rss, ntasks, node, task = line.split("|")
        assert (job_id, ntasks, node, task) == (f"{job}.batch", "1", "node1", "0")
        lines, err = sstat(live, "-j", f"{job}.batch", "-o", "JobID,MaxRSS,TRESUsageInMax")
        header, dashes, row = lines
        assert header.split() == ["JobID", "MaxRSS", "TRESUsageInMax"]
        assert dashes == "------------ ---------- -------------- "
        assert row.startswith(f"{job}.batch ") and row.endswith("+ ")  # cut, as Slurm's
        [row], err = sstat(live, "-n", "-P", "-j", f"{job}.batch", "-o", "TRESUsageInMax")
        tres = dict(item.split("=", 1) for item in row.split(","))
        assert list(tres) == ["cpu", "energy", "fs/disk", "gres/gpumem", "gres/gpuutil", "mem",
                              "pages", "vmem"]
        assert mib(tres["mem"]) >= ALLOC_MB and mib(tres["vmem"]) >= ALLOC_MB
        assert 30 <= int(tres["gres/gpuutil"]) <= 99  # agentd.sampler.fake_gpu_sample's range
        assert "simulated" in err
    finally:
        (workdir / "release").touch()
    live.wait(job, {"COMPLETED"})
    lines, err = sstat(live, "-n", "-j", str(job))
    assert lines == [] and err == f"sstat: error: no steps running for job {job}\n"


def test_sstat_srun_steps_and_all_steps(live: Cluster, workdir: Path) -> None:
    hold = HOLD.format(mb=ALLOC_MB, ready=workdir / "ready", release=workdir / "release")
    job = live.sbatch("-n", "2", "-o", str(workdir / "out"), "--wrap",
                      f"srun -n 2 {hold}", cwd=workdir)
    try:
        until(lambda: (workdir / "ready").exists(), "the step's tasks hold their memory")

        def step() -> list[str] | None:
            lines, _ = sstat(live, "-n", "-P", "-o", "JobID,NTasks,MaxRSS,AveRSS", "-j",
                             f"{job}.0")
            return lines if lines and lines[0].split("|")[1] == "2" and \
                mib(lines[0].split("|")[3] or "0") >= ALLOC_MB else None

        [line] = until(step, "sstat shows both tasks of step 0")
        assert line.split("|")[0] == f"{job}.0" and mib(line.split("|")[2]) >= ALLOC_MB
        lines, _ = sstat(live, "-a", "-n", "-P", "-o", "JobID", "-j", str(job))
        assert lines == [f"{job}.batch", f"{job}.0"]
    finally:
        (workdir / "release").touch()
    live.wait(job, {"COMPLETED"})


def test_sstat_others_jobs_and_unknown_ids(live: Cluster, workdir: Path) -> None:
    job = live.sbatch("-o", "/dev/null", "--wrap", release_file(workdir), cwd=workdir)
    try:
        live.wait(job, {"RUNNING"})
        user = make_user()
        lines, err = sstat(live, "-o", "JobID,MaxRSS", "-j", str(job), user=user)
        assert len(lines) == 2  # the header only
        assert err == (f"sstat: error: problem getting step_layout for {job}.batch: "
                       "Access/permission denied\n")
        lines, err = sstat(live, "-n", "-j", "999999")
        assert lines == [] and err == "sstat: error: couldn't get steps for job 999999\n"
        res = live.run("sstat", "-j", "12x")
        assert (res.returncode, res.stderr) == (1, "sstat: error: Invalid job id: 12x\n")
        res = live.run("sstat")
        assert res.returncode == 1
        assert res.stderr == "sstat: error: You didn't give me any jobs to stat.\n"
    finally:
        (workdir / "release").touch()
    live.wait(job, {"COMPLETED"})
