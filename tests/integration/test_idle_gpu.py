"""Idle GPUs (issue 30, item 7): with ``[scheduler.idle_gpu]``, a running job whose GPUs all
read below ``below_util`` for ``after`` is flagged IdleGPU in squeue's reason column, ``kiln
why`` says since when and how idle, it is mailed when it asked for mail, and acted on
(notify, requeue); seff and sacct report its idle GPU-hours. Utilisation is set with ``kiln
fake-gpu NODE GPU --util PCT`` (the fake sampler reads 30-99 % otherwise)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, cleanup, until, world_tempdir
from tests.integration.conftest import _cluster

RECORDER = """#!/bin/sh
printf '%s|%s|%s\\n' "$SLURM_JOB_ID" "$4" "$2" >> {log}
"""


def _idle_cluster(request: pytest.FixtureRequest, action: str, where: Path) -> Iterator[Cluster]:
    prog, log = where / "mailprog", where / "mail.log"
    prog.write_text(RECORDER.format(log=log))
    prog.chmod(0o755)
    yield from _cluster(
        request, "sqlite", nodes=1, fake_gpus="4xA100", kill_wait=2,
        schedd_extra=f'[mail]\nmail_prog = "{prog}"\n',
        scheduler_extra=f'[scheduler.idle_gpu]\nafter = "3s"\nbelow_util = 10\n'
                        f'action = "{action}"\n',
        agent_extra="sample_interval = 0.5")


@pytest.fixture(scope="module")
def where() -> Iterator[Path]:
    path = world_tempdir("kiln-idle-")
    path.chmod(0o777)
    yield path
    cleanup(path)


@pytest.fixture(scope="module")
def notify(request: pytest.FixtureRequest, where: Path) -> Iterator[Cluster]:
    (where / "n").mkdir(mode=0o777)
    yield from _idle_cluster(request, "notify", where / "n")


@pytest.fixture(scope="module")
def requeue(request: pytest.FixtureRequest, where: Path) -> Iterator[Cluster]:
    (where / "r").mkdir(mode=0o777)
    yield from _idle_cluster(request, "requeue", where / "r")


def _gpus(cluster: Cluster, job_id: int) -> list[int]:
    return [g for a in cluster.job(job_id)["allocation"] for g in a["gpus"]]


def _set_util(cluster: Cluster, gpus: list[int], pct: str) -> None:
    for g in gpus:
        cluster.ok("kiln", "fake-gpu", "node1", str(g), "--util", pct)


def _reason(cluster: Cluster, job_id: int) -> str:
    return cluster.ok("squeue", "-h", "-j", str(job_id), "-o", "%T %r").strip()


def test_idle_job_is_flagged_mailed_and_reported(notify: Cluster, where: Path) -> None:
    log = where / "n" / "mail.log"
    job = notify.sbatch("--gres=gpu:2", "--mail-type=END", "-o", "/dev/null",
                        "--wrap", "sleep 300", cwd=where)
    notify.wait(job, {"RUNNING"})
    gpus = _gpus(notify, job)
    assert _reason(notify, job) == "RUNNING None"
    _set_util(notify, gpus, "2")
    try:
        until(lambda: _reason(notify, job) == "RUNNING IdleGPU", "the job flagged IdleGPU",
              timeout=30)
        why = notify.ok("kiln", "why", str(job))
        assert re.search(r"Idle GPUs: 2 GPUs below 10% since \S+ \(\d\d:\d\d:\d\d\), "
                         r"[\d.]+ idle GPU-hours", why), why
        mail = until(lambda: [m for m in (log.read_text().splitlines() if log.exists()
                                          else []) if m.startswith(f"{job}|")],
                     "the idle mail")
        assert re.fullmatch(rf"{job}\|root\|Slurm Job_id={job} Name=wrap GPUs idle, 2 GPUs "
                            r"below 10% for \d\d:\d\d:\d\d, [\d.]+ idle GPU-hours this run",
                            mail[0]), mail
        assert notify.job(job)["state"] == "RUNNING"  # notify only
        # busy again: the flag goes
        _set_util(notify, gpus, "80")
        until(lambda: _reason(notify, job) == "RUNNING None", "the flag cleared", timeout=30)
    finally:
        for g in gpus:
            notify.run("kiln", "fake-gpu", "node1", str(g), "--clear")
    notify.ok("scancel", str(job))
    notify.wait(job, {"CANCELLED"})
    out = notify.ok("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "JobID,IdleGPUHours")
    ((jid, hours),) = [line.split("|") for line in out.splitlines()]
    assert jid == str(job) and float(hours) > 0, out
    seff = notify.ok("seff", str(job))
    assert re.search(r"^GPU idle: [\d.]+ GPU-hours of [\d.]+$", seff, re.M), seff
    # Slurm's default sacct output is unchanged: no such column unless asked
    assert "IdleGPU" not in notify.ok("sacct", "-j", str(job))


def test_busy_job_is_never_flagged(notify: Cluster, where: Path) -> None:
    job = notify.sbatch("--gres=gpu:1", "-o", "/dev/null", "--wrap", "sleep 8", cwd=where)
    notify.wait(job, {"COMPLETED"}, timeout=60)
    out = notify.ok("sacct", "-j", str(job), "-X", "-n", "-P", "-o", "IdleGPUHours")
    assert float(out.strip()) == 0.0, out


def test_idle_job_is_requeued(requeue: Cluster, where: Path) -> None:
    job = requeue.sbatch("--gres=gpu:4", "-o", "/dev/null", "--wrap", "sleep 300",
                         cwd=where)
    requeue.wait(job, {"RUNNING"})
    _set_util(requeue, [0, 1, 2, 3], "0")
    try:
        until(lambda: requeue.job(job)["restart_count"] >= 1, "the idle job requeued",
              timeout=40)
        why = requeue.ok("kiln", "why", str(job))
        assert "idle GPUs" in why, why
    finally:
        for g in range(4):
            requeue.run("kiln", "fake-gpu", "node1", str(g), "--clear")
    requeue.wait(job, {"RUNNING"}, timeout=60)
    requeue.ok("scancel", str(job))
