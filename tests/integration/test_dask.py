"""dask-jobqueue's SLURMCluster, unchanged, against a kiln cluster: it writes a batch script,
submits it with sbatch (parsing ``Submitted batch job N``), the worker job connects back, a sum
is computed on it, and scaling down cancels the job with scancel."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from dask_jobqueue import SLURMCluster
from distributed import Client

from tests.integration.cluster import BIN, Cluster

FINISHED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT"}


@pytest.mark.timeout(180)
def test_slurmcluster_computes_a_sum_and_scales_down(cluster: Cluster, workdir: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in cluster.env.items():  # dask-jobqueue runs sbatch/scancel from our env
        monkeypatch.setenv(key, value)
    for key in [k for k in os.environ if k.startswith("SLURM_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(workdir)
    with SLURMCluster(cores=1, processes=1, memory="1GB", walltime="00:05:00",
                      python=str(BIN / "python"), scheduler_options={"host": "127.0.0.1"},
                      log_directory=str(workdir), local_directory=str(workdir),
                      worker_extra_args=["--host", "127.0.0.1"]) as dask_cluster:
        dask_cluster.scale(jobs=1)
        with Client(dask_cluster, timeout=60) as client:
            client.wait_for_workers(1, timeout=90)
            job_ids = list(dask_cluster.workers)
            assert len(job_ids) == 1
            job_id = dask_cluster.workers[job_ids[0]].job_id
            assert cluster.job(job_id)["state"] == "RUNNING"
            total = client.submit(sum, range(101)).result(timeout=60)
            assert total == 5050
            dask_cluster.scale(0)
            deadline = time.time() + 60
            while time.time() < deadline and cluster.job(job_id)["state"] not in FINISHED:
                time.sleep(0.2)
            assert cluster.job(job_id)["state"] in FINISHED, cluster.job(job_id)
