"""What Slurm-driving software depends on (COMPAT.md), and kiln's visibility tools, through the
real commands: sbatch from a here-doc, squeue's MinJobAge window, seff, kiln why and stats,
sinfo/squeue --json and the Prometheus endpoint."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.sampler import fake_gpu_sample
from cli.seff import size_text
from tests.integration.cluster import Cluster, release_file, until
from tests.integration.conftest import BACKENDS, _cluster

MIN_JOB_AGE = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=BACKENDS)
def compat(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One node with 8 fake H100s, MinJobAge 4 s, metrics served on a free port."""
    yield from _cluster(request, request.param, nodes=1, fake_gpus="8xH100-80GB", kill_wait=3,
                        min_job_age=MIN_JOB_AGE, metrics_port=_free_port())


def _finished(cluster: Cluster, job_id: int) -> dict:
    return cluster.wait(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})


def test_heredoc_script_with_padded_directives_and_parsable(compat: Cluster,
                                                             workdir: Path) -> None:
    script = (
        "sbatch <<'EOF'\n"
        "#!/bin/bash\n"
        "#SBATCH --parsable\n"
        "#SBATCH --job-name           padded\n"
        "#SBATCH --time                0:3:0\n"
        "#SBATCH --mem=512MB\n"
        '#SBATCH --output="heredoc-%j.out"\n'
        "#SBATCH -n 1   \n"
        "echo ran $SLURM_JOB_ID as $SLURM_JOB_NAME\n"
        "EOF\n"
    )
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                         env=compat.env, cwd=workdir, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().isdigit() and res.stdout.endswith("\n"), repr(res.stdout)
    job_id = int(res.stdout)
    job = _finished(compat, job_id)
    assert job["state"] == "COMPLETED"
    assert (job["name"], job["time_limit"], job["mem_per_node_mb"]) == ("padded", 180, 512)
    assert (workdir / f"heredoc-{job_id}.out").read_text() == f"ran {job_id} as padded\n"


def test_dev_stdin_is_read_like_stdin(compat: Cluster, workdir: Path) -> None:
    res = compat.run("sbatch", "/dev/stdin", input="#!/bin/sh\n#SBATCH -J devstdin\ntrue\n",
                     cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Submitted batch job ")
    assert compat.job(int(res.stdout.split()[3]))["name"] == "devstdin"


def test_finished_job_listed_for_min_job_age_then_gone(compat: Cluster, workdir: Path) -> None:
    job_id = compat.sbatch("--wrap", "true", cwd=workdir)
    _finished(compat, job_id)
    argv = ("squeue", "-h", "-O", "JobArrayID,StateCompact,Reason", "-t", "all", "--me")
    listed = compat.run(*argv)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[1:] for line in listed.stdout.splitlines()}
    assert rows.get(str(job_id)) == ["CD", "None"], listed.stdout
    deadline = time.time() + MIN_JOB_AGE + 20  # MinJobAge, plus schedd's 5 s purge period
    while time.time() < deadline:
        gone = compat.run(*argv)
        if str(job_id) not in gone.stdout.split():
            break
        time.sleep(0.5)
    assert str(job_id) not in gone.stdout.split(), f"still listed after MinJobAge: {gone.stdout}"
    assert gone.returncode == 0


def test_seff_shows_the_synthetic_gpu_utilisation(compat: Cluster, workdir: Path) -> None:
    job_id = compat.sbatch("--gres=gpu:2", "--mem=1G", "--wrap", "sleep 1.5", cwd=workdir)
    job = _finished(compat, job_id)
    assert job["state"] == "COMPLETED"
    indices = [g for a in job["allocation"] for g in a["gpus"]]
    readings = [fake_gpu_sample(job_id, i, 80 * 1024) for i in indices]
    util = sum(u for u, _ in readings) / len(readings)
    res = compat.run("seff", str(job_id))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"Job ID: {job_id}"
    assert "State: COMPLETED (exit code 0)" in lines
    assert "GPUs: 2 (NVIDIA H100-80GB)" in lines, res.stdout
    # fake GPUs measure nothing: the figures are made up, and seff says so
    sim = " [simulated: fake GPUs, not measured]"
    assert f"GPU Efficiency: {util:.2f}% mean utilisation (peak {util:.2f}%){sim}" in lines
    held = sum(m for _, m in readings)
    assert (f"GPU Memory Utilized: {size_text(held)} ({100 * held / (160 * 1024):.2f}% of "
            f"160.00 GB){sim}") in lines
    assert any(line.startswith("Memory Efficiency: ") and line.endswith("of 1.00 GB")
               for line in lines), res.stdout


def test_a_job_shorter_than_the_sampling_interval_reports_its_peak_rss(
        compat: Cluster, workdir: Path) -> None:
    """Samples come every 10 s; this job's only one is taken as it starts (a shell and a
    sleep), before it holds 300 MiB for a moment: MaxRSS is the kernel's peak, not that."""
    job_id = compat.sbatch("--wrap", "sleep 1; python3 -c 'b = bytes(1) * (300 << 20)'; sleep 0.5",
                           cwd=workdir)
    assert _finished(compat, job_id)["state"] == "COMPLETED"
    res = compat.run("sacct", "-X", "-n", "-P", "--noconvert", "-o", "MaxRSS", "-j", str(job_id))
    assert res.returncode == 0, res.stderr
    text = res.stdout.strip()
    assert text.endswith("K") and int(text[:-1]) >= 300 * 1024, text


def test_why_explains_a_job_waiting_for_resources(compat: Cluster, workdir: Path) -> None:
    blocker = compat.sbatch("--gres=gpu:8", "-t", "0:20", "--wrap", release_file(workdir),
                            cwd=workdir)
    compat.wait(blocker, {"RUNNING"})
    waiting = compat.sbatch("--gres=gpu:8", "-t", "0:10", "--wrap", "true", cwd=workdir)
    held = compat.sbatch("-H", "--wrap", "true", cwd=workdir)
    until(lambda: compat.job(waiting)["reason"] == "Resources", "the cycle to rank the job")
    res = compat.run("kiln", "why", str(waiting))
    assert res.returncode == 0, res.stderr
    assert f"Job {waiting} (root, account " in res.stdout
    assert "is PENDING: Resources." in res.stdout
    assert "Position: 1 of 1 jobs" in res.stdout
    assert "Expected start: " in res.stdout and "(in " in res.stdout
    assert f"{blocker:>10} root       8 GPUs on node1" in res.stdout
    res = compat.run("kiln", "why", str(held))
    assert "you held it (scontrol hold / sbatch -H)" in res.stdout
    compat.run("scancel", str(held))
    (workdir / "release").touch()
    compat.wait(waiting, {"COMPLETED"})
    stats = compat.run("kiln", "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    figures = json.loads(stats.stdout)
    assert figures["first"]["count"] >= 1 and figures["started"] >= 2
    assert figures["first"]["p90_abs"] >= figures["first"]["median_abs"]
    text = compat.run("kiln", "stats").stdout
    assert "median |err|" in text and "p90 |err|" in text


def test_why_refuses_an_unknown_job(compat: Cluster) -> None:
    res = compat.run("kiln", "why", "999999")
    assert res.returncode == 1
    assert "Invalid job id specified" in res.stderr


def test_sinfo_and_squeue_json(compat: Cluster, workdir: Path) -> None:
    info = json.loads(compat.run("sinfo", "--json").stdout)
    node = info["nodes"][0]
    assert (node["name"], node["cpus"] > 0, node["gres"]) == ("node1", True, "gpu:h100:8")
    assert [p["name"] for p in info["partitions"]] == ["gpu", "short"]
    assert info["partitions"][0]["flags"] == ["default"]
    job_id = compat.sbatch("-H", "-J", "jsonjob", "--wrap", "true", cwd=workdir)
    queue = json.loads(compat.run("squeue", "--json", "-j", str(job_id)).stdout)
    assert [(j["job_id"], j["name"], j["job_state"], j["state_reason"])
            for j in queue["jobs"]] == [(job_id, "jsonjob", "PENDING", "JobHeldUser")]
    compat.run("scancel", str(job_id))


def test_scontrol_and_sinfo_lookups_clients_use(compat: Cluster) -> None:
    config = compat.run("scontrol", "show", "config").stdout
    assert f"MinJobAge               = {MIN_JOB_AGE} sec" in config.splitlines()
    assert "MaxArraySize            = 1001" in config.splitlines()
    assert compat.run("sinfo", "-h", "-o", "%P").stdout.split() == ["gpu*", "short"]
    hosts = compat.run("scontrol", "show", "hostnames", "n[1-3],x",
                       env={"SLURM_JOB_NODELIST": ""})
    assert hosts.stdout.split() == ["n1", "n2", "n3", "x"]
    part = compat.run("scontrol", "show", "partition", "gpu").stdout
    assert part.startswith("PartitionName=gpu")


def test_ignored_option_warns_once_and_submits(compat: Cluster, workdir: Path) -> None:
    # (--mail-type is acted on and -M refuses another cluster since issue 16)
    res = compat.run("sbatch", "--hint=compute_bound", "--cpu-freq=high", "--wrap", "true",
                     cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Submitted batch job ")
    warnings = [line for line in res.stderr.splitlines() if "ignored" in line]
    assert len(warnings) == 2, res.stderr


def test_metrics_endpoint_serves_the_named_series(compat: Cluster, workdir: Path) -> None:
    job_id = compat.sbatch("--gres=gpu:1", "--wrap", "true", cwd=workdir)
    _finished(compat, job_id)
    url = f"http://127.0.0.1:{compat.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    for series in ('kiln_jobs{partition="gpu",state="PENDING"}',
                   'kiln_queue_wait_seconds_bucket{le="1.0",partition="gpu"}',
                   "kiln_scheduler_cycle_seconds_count", 'kiln_gpus_total{partition="gpu"} 8.0',
                   'kiln_gpus_allocated{partition="gpu"}', "kiln_jobs_started_total",
                   'kiln_agent_heartbeat_age_seconds{node="node1"}', "kiln_fairshare_factor{"):
        assert series in text, series
    # Every node counted once, under a state sinfo uses (which one depends on what the
    # module's other tests left running, so the test does not name it).
    shown = dict(re.findall(r'^kiln_nodes\{state="([A-Z+*~#]+)"\} ([0-9.]+)$', text, re.M))
    nodes = compat.run("sinfo", "-N", "-h", "-o", "%N").stdout.split()
    assert sum(float(n) for n in shown.values()) == len(set(nodes)), text
    assert set(shown) <= {"IDLE", "MIXED", "ALLOCATED", "COMPLETING", "DRAINING", "DRAINED",
                          "DOWN", "RESERVED", "PLANNED"}, shown
