"""Start forecasts and the shape advisor as a user meets them: ``sbatch --test-only`` keeps
Slurm's line and adds kiln's after it on stderr, ``kiln why`` shows the same for a pending
job, ``kiln stats`` checks the published p90 starts against the real starts, and ``squeue
--start`` keeps Slurm's single expected start."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, release_file, until
from tests.integration.conftest import BACKENDS, _cluster

SLURM_LINE = (r"sbatch: Job \d+ to start at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d using 1 processors "
              r"on nodes node1 in partition gpu")
FORECAST = (r"sbatch: forecast from recent run times: p50 start \S+ \(in ~(\S+) h\), "
            r"p90 start \S+ \(in ~(\S+) h\)")


@pytest.fixture(scope="module", params=BACKENDS)
def forecasting(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One node of 8 GPUs; every waiting job's p50/p90 start published each second."""
    yield from _cluster(request, request.param, nodes=1, fake_gpus="8xH100-80GB", kill_wait=3,
                        scheduler_extra="forecast_interval = 1")


def test_test_only_and_why_give_quantiles_and_the_shapes_that_start_sooner(
        forecasting: Cluster, workdir: Path) -> None:
    cluster = forecasting
    # 4 of the 8 GPUs are busy for 3 h (by the limit): an 8-GPU job waits, a 4-GPU one not
    blocker = cluster.sbatch("--gres=gpu:4", "-t", "3:00:00", "--wrap", release_file(workdir),
                             cwd=workdir)
    cluster.wait(blocker, {"RUNNING"})
    res = cluster.run("sbatch", "--test-only", "--gres=gpu:8", "-t", "4:00:00", "--wrap",
                      "true", cwd=workdir)
    assert (res.returncode, res.stdout) == (0, "")
    lines = res.stderr.splitlines()
    assert re.fullmatch(SLURM_LINE, lines[0]), res.stderr  # Slurm's line, first and unchanged
    found = re.fullmatch(FORECAST, lines[1])
    assert found, res.stderr
    assert found.groups() == ("3.0", "3.0")  # no history yet: the limits bound both
    # the one nearby shape that starts sooner: neither a shorter --time (the GPUs are busy
    # either way) nor partition short (its MaxTime is 1 h)
    assert lines[2:] == ["sbatch: with --gres=gpu:4 instead of 8: starts now, not in ~3.0 h"]

    waiting = cluster.sbatch("--gres=gpu:8", "-t", "4:00:00", "--wrap", "true", cwd=workdir)
    until(lambda: cluster.job(waiting)["reason"] == "Resources", "the cycle to rank the job")
    why = cluster.run("kiln", "why", str(waiting))
    assert why.returncode == 0, why.stderr
    assert re.search(r"  Forecast from recent run times: p50 start \S+ \(in ~3\.0 h\), p90 "
                     r"start \S+ \(in ~3\.0 h\)\.\n", why.stdout), why.stdout
    assert "  With --gres=gpu:4 instead of 8: starts now, not in ~3.0 h.\n" in why.stdout
    start = cluster.run("squeue", "--start", "-h", "-j", str(waiting), "-o", "%i %S")
    assert re.fullmatch(rf"{waiting} \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\n", start.stdout), \
        start.stdout  # Slurm's one expected start, nothing more

    until(lambda: _band_published(cluster, waiting), "the forecast to be published")
    (workdir / "release").touch()
    cluster.wait(waiting, {"COMPLETED"})
    figures = json.loads(cluster.run("kiln", "stats", "--json").stdout)["quantiles"]
    assert figures["count"] >= 1
    assert figures["within_p90"] == 1.0  # it started well before its p90 (the 3 h limit)
    assert figures["p90_median_abs"] > 3600
    text = cluster.run("kiln", "stats").stdout
    assert "  started by their p90: 100.0% (target 90 %)" in text, text


def _band_published(cluster: Cluster, job_id: int) -> bool:
    """Whether schedd has published the job's band (the forecast timer has run since it was
    submitted): kiln why's figures are computed on demand, so ask the daemon's record."""
    from cli.core.client import Client

    with Client(endpoint=f"ipc://{cluster.socket}", timeout=10) as client:
        reply = client.call("forecast_stats", {"since": 0.0})
    return reply["pending_with_band"] >= 1


def test_test_only_for_a_job_that_starts_now_adds_no_advice(forecasting: Cluster,
                                                           workdir: Path) -> None:
    res = forecasting.run("sbatch", "--test-only", "--gres=gpu:1", "--wrap", "true",
                          cwd=workdir)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert re.fullmatch(SLURM_LINE, lines[0]), res.stderr
    assert len(lines) == 2 and "(now), p90 start" in lines[1], res.stderr
