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


SPRIO_HEADER = ("          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE  PARTITION"
                "        QOS")


def test_sprio_and_sdiag_on_a_queue_behind_a_blocker(live: Cluster, workdir: Path) -> None:
    """Two jobs wait behind one holding every GPU, a third is held: sprio lists the two with
    the factors that weigh (kiln's defaults: age, fair share, partition, QOS), and sdiag
    counts the cycles that saw them."""
    blocker = live.sbatch("--gres=gpu:8", "-o", "/dev/null", "--wrap", release_file(workdir),
                          cwd=workdir)
    try:
        live.wait(blocker, {"RUNNING"})
        waiting = [live.sbatch("--gres=gpu:1", "-o", "/dev/null", "--wrap", "true",
                               cwd=workdir) for _ in range(2)]
        held = live.sbatch("-H", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true",
                           cwd=workdir)
        for job in waiting:
            until(lambda job=job: live.job(job)["reason"] == "Resources" or
                  live.job(job)["reason"] == "Priority", f"job {job} waits for the blocker")
        res = live.run("sprio")
        assert res.returncode == 0 and res.stderr == ""
        header, *rows = res.stdout.splitlines()
        assert header == SPRIO_HEADER
        assert [int(r.split()[0]) for r in rows] == waiting  # not the running nor the held job
        assert held not in [int(r.split()[0]) for r in rows]
        for row in rows:
            job_id, part, prio, site, age, fairshare, part_factor, qos = row.split()
            assert (part, site, part_factor, qos) == ("gpu", "0", "1000", "0")
            # the factors add up to the priority, which is squeue's (sprio truncates the sum,
            # as Slurm's (long long) does; squeue rounds it; each factor is rounded)
            total = int(age) + int(fairshare) + int(part_factor) + int(qos)
            assert abs(int(prio) - total) <= 2 and int(fairshare) > 0
            squeue = live.run("squeue", "-h", "-j", job_id, "-o", "%Q").stdout.strip()
            assert int(prio) in (int(squeue), int(squeue) - 1)
            assert len(row) == len(header)
        res = live.run("sprio", "-w")
        assert res.stdout.splitlines() == [
            SPRIO_HEADER,
            "        Weights                               1       1000      10000       1000"
            "       1000"]
        res = live.run("sprio", "-n", "-l", "-h", "-j", str(waiting[0]))
        [row] = res.stdout.splitlines()
        assert row.split()[:3] == [str(waiting[0]), "gpu", "root"]
        weighted = live.run("sprio", "-h", "-j", str(waiting[0]), "-o", "%F").stdout.strip()
        assert round(float(row.split()[6]) * 10000) == int(weighted)  # FAIRSHARE, normalised
        assert row.endswith(" " * 20)  # the blank TRES column, as Slurm's
        res = live.run("sprio", "-j", str(waiting[1]), "-o", "%.15i %.10u %.10o %.10Y")
        assert res.stderr == "sprio: error: Invalid job format specification: o\n"
        assert res.stdout.splitlines()[0] == "          JOBID       USER   PRIORITY"
        res = live.run("sprio", "-j", "999999")
        assert (res.returncode, res.stdout) == (
            0, "Unable to find jobs matching user/id(s) specified\n")
        res = live.run("sprio", "-j", "x1")
        assert (res.returncode, res.stderr) == (1, "sprio: error: Invalid job id: x1\n")

        res = live.run("sdiag")
        assert res.returncode == 0, res.stderr
        text = res.stdout
        assert text.startswith("*" * 55 + "\nsdiag output at ")
        figures = dict(re.findall(r"^\t?([A-Z][\w ()]*?):\s+(\d+)$", text, re.M))
        assert int(figures["Total cycles"]) > 0 and figures["Jobs pending"] == "3"
        assert int(figures["Jobs submitted"]) >= 4 and int(figures["Jobs started"]) >= 1
        assert "\nBackfilling stats\n" in text
        res = live.run("sdiag", "--json")
        import json

        stats = json.loads(res.stdout)["statistics"]
        assert stats["jobs_pending"] == 3 and stats["schedule_cycle_total"] > 0
        assert stats["schedule_cycle_max"] >= stats["schedule_cycle_last"] > 0
    finally:
        (workdir / "release").touch()
        live.run("scancel", "-u", "root")


def test_kiln_top_once_and_live(live: Cluster, workdir: Path) -> None:
    """``kiln top`` over a pipe is one snapshot; on an 80x24 terminal it is the live view,
    which redraws in place on the alternate screen and leaves cleanly on q."""
    import fcntl
    import os
    import select
    import struct
    import subprocess
    import termios
    import time

    job = live.sbatch("--gres=gpu:2", "-J", "topjob", "-o", "/dev/null", "--wrap",
                      release_file(workdir), cwd=workdir)
    try:
        live.wait(job, {"RUNNING"})
        res = live.run("kiln", "top")  # stdout is a pipe: --once
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert lines[0].startswith("kiln top  ") and max(map(len, lines)) <= 80
        node = next(line.split() for line in lines if line.startswith(" node1"))
        assert node[:5] == ["node1", "mixed", "8", "2", "6"]
        assert any(line.split()[:3] == [str(job), "topjob", "R"] for line in lines)
        assert live.run("kiln", "top", "--once").returncode == 0

        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        proc = subprocess.Popen([str(Path(live.env["PATH"].split(":")[0]) / "kiln"), "top"],
                                stdin=slave, stdout=slave, stderr=slave,
                                env={**live.env, "TERM": "xterm-256color"},
                                start_new_session=True)
        os.close(slave)
        seen = b""

        def screen_shows(text: bytes) -> bool:
            nonlocal seen
            while select.select([master], [], [], 0.1)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
            return text in seen

        until(lambda: screen_shows(b"topjob"), "the live view shows the job")
        assert b"\x1b[?1049h" in seen  # the alternate screen: redrawn in place, no scrolling
        os.write(master, b"u")
        until(lambda: screen_shows(b"Queue (root's)"), "u filters the queue to my jobs")
        os.write(master, b"q")
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            screen_shows(b"")
        assert proc.wait(timeout=5) == 0
        screen_shows(b"")
        assert b"\x1b[?1049l" in seen and b"Traceback" not in seen  # the screen given back
        os.close(master)
    finally:
        (workdir / "release").touch()
    live.wait(job, {"COMPLETED"})
