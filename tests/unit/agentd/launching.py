"""Helpers of the tests that launch real jobs (test_launcher.py, test_cgroups.py,
test_supervisors.py): the throwaway user's type, a job's launch spec, and polling waits with a
generous timeout (the asserts are about outcomes, never about how long something took). Their
fixtures (the user, a directory for the jobs, a launcher) are in conftest.py."""

from __future__ import annotations

import pwd
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from agentd import launcher as launcher_mod
from agentd.launcher import Finished, Launcher

WAIT = 60.0  # seconds any single outcome may take on a loaded CI machine


def spec(who: User, base: Path, job_id: int, script: str, **changes) -> dict:
    out = base / "out"
    s = {
        "job_id": job_id, "generation": 1, "name": "t", "user": who.name, "uid": who.uid,
        "gid": who.gid, "script": script, "workdir": str(out),
        "stdout": str(out / f"slurm-{job_id}.out"), "stderr": "", "open_mode": "truncate",
        "environment": {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": str(job_id)},
        "gpus": [], "cpus": 1, "memory_mb": 100, "time_limit": None, "kill_wait": 2,
        "start_time": time.time(),
    }
    s.update(changes)
    return s


def wait_for(launcher: Launcher, job_id: int, generation: int = 1) -> Finished:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        launcher.poll()
        for done in launcher.ended():  # kept until forget(), whichever poll found it
            if (done.job_id, done.generation) == (job_id, generation):
                return done
        time.sleep(0.05)
    pytest.fail(f"job {job_id} did not finish")


def job_pid(launcher: Launcher, job_id: int | None = None) -> int:
    """The batch shell's pid, once the job's supervisor has started it."""
    def known() -> int:
        return next((r["pid"] for r in launcher.running()
                     if job_id in (None, r["job_id"]) and r["pid"]), 0)
    wait_until(known, "the supervisor started the job")
    return known()


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"never happened: {what}")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def group_gone(pgid: int) -> bool:
    return not launcher_mod._group_alive(pgid)


def output(base: Path, job_id: int) -> str:
    return (base / "out" / f"slurm-{job_id}.out").read_text()


@dataclass
class User:
    name: str
    uid: int
    gid: int
    extra_gid: int


def kill_processes_of(name: str) -> None:
    """Whatever a failed test left running as the throwaway user (userdel refuses otherwise)."""
    uid = pwd.getpwnam(name).pw_uid
    for proc in psutil.process_iter(["uids"]):
        if proc.info["uids"] and proc.info["uids"].real == uid:
            try:
                proc.kill()
            except psutil.Error:
                pass
    psutil.wait_procs([p for p in psutil.process_iter(["uids"])
                       if p.info["uids"] and p.info["uids"].real == uid], timeout=10)
