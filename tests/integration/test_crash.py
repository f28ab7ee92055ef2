"""Chaos: schedd is kill -9'd while four users submit; nothing acknowledged may be lost.

Four submitters each run `sbatch` until 250 of theirs are acknowledged while schedd is killed
(SIGKILL) and brought back with `kiln up` three times at random moments. Afterwards every job id
any submitter printed exists with its script, ids are unique, and every job ran to completion
exactly once.

A submission refused while schedd is down is retried after a pause, as a user would, so the
number acknowledged does not depend on how many refusals a machine fits into a restart (a fixed
count of attempts left the floor to the ratio of the two speeds and failed on a slower host).

"Exactly once" is proven by evidence a second run could not erase: each run of a job appends a
line (its job id, a fresh random nonce, its shell's pid) to ``runs.log``, a file only the jobs
write (kiln never touches it; O_APPEND lines of this size are atomic). A job run twice leaves
two lines, whatever the ledger says after its rows were rewritten. The test counts exactly one
line per acknowledged job, every nonce different, and ``Restarts=0`` (no requeue) for each.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from schedd.ledger.store import Store
from tests.integration.cluster import Cluster, cleanup, world_tempdir
from tests.integration.conftest import BACKENDS, _cluster

SUBMITTERS = 4
JOBS_EACH = 250
KILLS = 3
ATTEMPTS_EACH = 4 * JOBS_EACH  # a submitter that cannot get its jobs in by then fails the test
RETRY_PAUSE = 0.2  # seconds between a refused sbatch and the next
# one line per run of a job: job id, a nonce no other run can repeat, the batch shell's pid
RUN_LINE = 'echo "$SLURM_JOB_ID $(cat /proc/sys/kernel/random/uuid) $$" >> runs.log'


def _runs(log: str) -> dict[int, list[tuple[str, int]]]:
    """runs.log as {job id: [(nonce, pid), ...]}, one entry per run."""
    out: dict[int, list[tuple[str, int]]] = {}
    for line in log.splitlines():
        job_id, nonce, pid = line.split()
        out.setdefault(int(job_id), []).append((nonce, int(pid)))
    return out


@pytest.fixture(scope="module", params=BACKENDS)
def chaos(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _cluster(request, request.param, nodes=1, fake_gpus="8xH100-80GB", kill_wait=2)


def _submitter(cluster: Cluster, index: int, workdir, printed: list[int], errors: list[str]):
    for n in range(ATTEMPTS_EACH):
        if len(printed) == JOBS_EACH:
            return
        try:
            res = cluster.run("sbatch", "--parsable", "-J", f"s{index}", "-t", "5", "--wrap",
                              f"echo chaos-{index}-{n}; {RUN_LINE}", cwd=workdir)
        except subprocess.TimeoutExpired:  # not acknowledged: allowed, counted
            errors.append(f"sbatch {index}-{n} hung")
            continue
        if res.returncode == 0:
            printed.append(int(res.stdout.strip()))
        else:
            errors.append(res.stderr.strip())
            time.sleep(RETRY_PAUSE)


def test_kill9_of_schedd_loses_no_acknowledged_job(chaos: Cluster) -> None:
    workdir = world_tempdir("kiln-chaos-")
    rng = random.Random(20261129)
    printed: list[list[int]] = [[] for _ in range(SUBMITTERS)]
    errors: list[str] = []
    threads = [threading.Thread(target=_submitter, args=(chaos, i, workdir, printed[i], errors))
               for i in range(SUBMITTERS)]
    try:
        for t in threads:
            t.start()
        for _ in range(KILLS):
            time.sleep(rng.uniform(1.0, 4.0))
            pid = int((chaos.home / "run" / "schedd.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            time.sleep(rng.uniform(0.0, 0.5))
            res = chaos.run("kiln", "up")
            assert res.returncode == 0, res.stderr
        for t in threads:
            t.join(timeout=600)
        ids = [i for chunk in printed for i in chunk]
        assert len(ids) == len(set(ids)), "an id was printed twice"
        short = [i for i, chunk in enumerate(printed) if len(chunk) < JOBS_EACH]
        assert not short, f"submitters {short} got too few jobs in: {errors[-3:]}"
        deadline = time.time() + 300
        res = chaos.run("squeue", "-h", "-o", "%i")
        while res.stdout.strip() and time.time() < deadline:
            time.sleep(1.0)
            res = chaos.run("squeue", "-h", "-o", "%i")
        assert not res.stdout.strip(), "jobs still queued long after the storm"
        store = Store(chaos.db_url)
        try:
            jobs = {j.id: j for j in store.query_jobs(job_ids=ids)}
            missing = sorted(set(ids) - set(jobs))
            assert not missing, f"acknowledged jobs lost: {missing[:10]}"
            for index, chunk in enumerate(printed):
                for job_id in chunk:
                    job = jobs[job_id]
                    assert job.name == f"s{index}" and "echo chaos-" in job.script
                    assert job.state.value == "COMPLETED", (job_id, job.state, job.reason)
                    assert job.start_time > 0 and job.end_time >= job.start_time
                    assert job.restart_count == 0, (job_id, "Restarts", job.restart_count)
            batch_rows = store.query_steps(ids)
            per_job: dict[int, int] = {}
            for step in batch_rows:
                if step.step_id == "batch":
                    per_job[step.job_id] = per_job.get(step.job_id, 0) + 1
            assert all(per_job.get(i) == 1 for i in ids), "a job has no or two batch records"
        finally:
            store.close()
        outputs = sorted(p.name for p in workdir.glob("slurm-*.out"))
        assert len(outputs) >= len(ids)
        runs = _runs((workdir / "runs.log").read_text())
        twice = {i: r for i, r in runs.items() if len(r) != 1}
        assert not twice, f"jobs that ran more than once: {dict(list(twice.items())[:5])}"
        never = sorted(set(ids) - set(runs))
        assert not never, f"acknowledged jobs that never ran: {never[:10]}"
        nonces = [nonce for r in runs.values() for nonce, _ in r]
        assert len(nonces) == len(set(nonces))

        print(f"chaos: {len(ids)} acknowledged, {len(jobs)} found, {len(errors)} sbatch errors "
              f"while schedd was down")
    finally:
        subprocess.run(["pkill", "-f", str(workdir)], capture_output=True)
        cleanup(workdir)
