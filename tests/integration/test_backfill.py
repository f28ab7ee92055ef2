"""Backfill through the daemon: the scenario real Slurm 22.05 answers the same way.

One node of 8 GPUs; a 5-GPU job runs with a 30-minute limit; an 8-GPU head job waits for it.
Of the later 2-GPU/20-min, 2-GPU/40-min and 1-GPU/25-min jobs, the 20- and 25-minute ones fit
in the 30-minute hole and start at once; the 40-minute one would delay the head and waits.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from pathlib import Path

from tests.integration.cluster import Cluster


def _settled(cluster: Cluster, job_id: int, reason: str, timeout: float = 15) -> dict:
    deadline = time.time() + timeout
    job = cluster.job(job_id)
    while job["reason"] != reason and time.time() < deadline:
        time.sleep(0.1)
        job = cluster.job(job_id)
    return job


def test_backfill_fills_the_hole_before_the_head_job(cluster: Cluster, workdir: Path) -> None:
    def sub(gpus: int, minutes: int, name: str) -> int:
        return cluster.sbatch("-J", name, f"--gres=gpu:{gpus}", "-t", str(minutes),
                              "--wrap", "sleep 3600", cwd=workdir)

    running = sub(5, 30, "running")
    cluster.wait(running, {"RUNNING"})
    started_at = cluster.job(running)["start_time"]
    head = sub(8, 60, "head")
    j20 = sub(2, 20, "j20")
    j40 = sub(2, 40, "j40")
    j25 = sub(1, 25, "j25")
    try:
        cluster.wait(j20, {"RUNNING"}, timeout=15)
        cluster.wait(j25, {"RUNNING"}, timeout=15)
        assert _settled(cluster, head, "Resources")["state"] == "PENDING"
        job40 = _settled(cluster, j40, "Priority")
        assert (job40["state"], job40["reason"]) == ("PENDING", "Priority")
        expected = cluster.job(head)["expected_start"]
        assert expected is not None
        # the head starts when the 5-GPU job's 30 minutes are up, on bf_resolution's grid
        assert expected == math.ceil((started_at + 30 * 60) / 60) * 60
        res = cluster.run("squeue", "--start", "-h", "-j", str(head), "-o", "%i %S")
        assert res.returncode == 0, res.stderr
        job_id, start_text = res.stdout.split()
        shown = datetime.strptime(start_text, "%Y-%m-%dT%H:%M:%S").timestamp()
        assert job_id == str(head) and shown == expected
    finally:
        cluster.run("scancel", *map(str, (running, head, j20, j40, j25)))
    for job_id in (running, j20, j25):
        cluster.wait(job_id, {"CANCELLED"})
