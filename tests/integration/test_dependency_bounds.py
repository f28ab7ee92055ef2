"""Issue 31 item 1, as a user meets it: sbatch refuses a --dependency that expands past
``[schedd] max_dependency_jobs`` (a whole array counts its tasks), or that would take the
user's pending jobs past ``max_dependency_edges_per_user``, with one line and exit 1, storing
nothing; repeats count once; ordinary afterok / afterany / singleton chains run as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, release_file, until
from tests.integration.conftest import BACKENDS, _cluster

REFUSED = "sbatch: error: Batch job submission failed: Job dependency problem: "


@pytest.fixture(scope="module", params=BACKENDS)
def bounded(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One node, 8 fake GPUs; a dependency may wait on 5 jobs, a user's pending ones on 12."""
    yield from _cluster(request, request.param, nodes=1, fake_gpus="8xH100-80GB", kill_wait=3,
                        schedd_extra="max_dependency_jobs = 5\n"
                                     "max_dependency_edges_per_user = 12\n")


def _ids(cluster: Cluster) -> str:
    return cluster.run("squeue", "-h", "-t", "all", "-r", "-o", "%i").stdout


def test_a_dependency_over_the_bounds_is_refused_and_nothing_is_stored(
        bounded: Cluster, workdir: Path) -> None:
    array = bounded.sbatch("-H", "--array=0-5", "-o", "/dev/null", "--wrap", "true",
                           cwd=workdir)
    before = _ids(bounded)
    res = bounded.run("sbatch", f"--dependency=afterok:{array}", "--wrap", "true", cwd=workdir)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", REFUSED + "it waits on 6 jobs (array tasks counted), over the limit of 5 "
                         "(max_dependency_jobs)\n")
    assert _ids(bounded) == before
    # the same task named 200 times is one job to wait on
    same = ":".join([f"{array}_0"] * 200)
    merged = bounded.sbatch("-H", f"--dependency=afterok:{same}", "--wrap", "true", cwd=workdir)
    # 3 tasks waiting on 4 jobs each: 12 edges with the one above... one too many
    res = bounded.run("sbatch", "--array=0-2", f"--dependency=afterany:{array}_1:{array}_2:"
                      f"{array}_3:{array}_4", "--wrap", "true", cwd=workdir)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", REFUSED + "your pending jobs would wait on 13 jobs in all (array tasks "
                         "counted), over the limit of 12 (max_dependency_edges_per_user)\n")
    assert set(_ids(bounded).split()) == set(before.split()) | {str(merged)}
    # the job that waited on one leaves the queue: its edge is freed, the array fits
    assert bounded.run("scancel", str(merged)).returncode == 0
    bounded.wait(merged, {"CANCELLED"})
    fits = bounded.sbatch("-H", "--array=0-2", f"--dependency=afterany:{array}_1:{array}_2:"
                          f"{array}_3:{array}_4", "--wrap", "true", cwd=workdir)
    assert bounded.run("scancel", str(fits), str(array)).returncode == 0


def test_afterok_afterany_and_singleton_chains_still_run(bounded: Cluster,
                                                         workdir: Path) -> None:
    first = bounded.sbatch("-o", "first.out", "--wrap", "echo first", cwd=workdir)
    ok = bounded.sbatch(f"--dependency=afterok:{first}", "-o", "ok.out", "--wrap",
                        "cat first.out; exit 3", cwd=workdir)
    anyway = bounded.sbatch(f"--dependency=afterany:{ok}", "-o", "any.out", "--wrap",
                            "echo any", cwd=workdir)
    never = bounded.sbatch(f"--dependency=afterok:{ok}", "-o", "/dev/null", "--wrap", "true",
                           cwd=workdir)
    assert bounded.wait(ok, {"FAILED"})["start_time"] >= bounded.job(first)["end_time"]
    assert bounded.wait(anyway, {"COMPLETED"})["start_time"] >= bounded.job(ok)["end_time"]
    assert (workdir / "ok.out").read_text() == "first\n"
    assert (workdir / "any.out").read_text() == "any\n"
    until(lambda: bounded.job(never)["reason"] == "DependencyNeverSatisfied",
          "afterok on a failed job is never satisfied")
    assert bounded.run("scancel", str(never)).returncode == 0

    solo = bounded.sbatch("-J", "solo", "-d", "singleton", "-o", "/dev/null", "--wrap",
                          release_file(workdir), cwd=workdir)
    second = bounded.sbatch("-J", "solo", "-d", "singleton", "-o", "/dev/null", "--wrap",
                            "true", cwd=workdir)
    bounded.wait(solo, {"RUNNING"})
    probe = bounded.sbatch("-o", "/dev/null", "--wrap", "true", cwd=workdir)
    bounded.wait(probe, {"COMPLETED"})
    assert (bounded.job(second)["state"], bounded.job(second)["reason"]) == (
        "PENDING", "Dependency")
    (workdir / "release").touch()
    done = bounded.wait(solo, {"COMPLETED"})
    assert bounded.wait(second, {"COMPLETED"})["start_time"] >= done["end_time"]
