"""Claims the docs make, each checked as a user meets it on a running cluster (issue 19, item
7): --begin, typed GPUs, --export's default, --mem-per-gpu, srun --jobid/--overlap/--exact,
sbatch --test-only against the real handler, and a ledger schedd must refuse."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.cluster import Cluster, until


def _out(workdir: Path, job_id: int) -> str:
    return (workdir / f"slurm-{job_id}.out").read_text()


def _done(cluster: Cluster, job_id: int) -> dict:
    return cluster.wait(job_id, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=90)


def test_begin_holds_a_job_until_its_time(cluster: Cluster, workdir: Path) -> None:
    before = time.time()
    job_id = cluster.sbatch("--begin=now+4", "--wrap", "date +%s", cwd=workdir)
    shown = cluster.run("squeue", "-h", "-j", str(job_id), "-o", "%T %r")
    assert shown.stdout.strip() in ("PENDING BeginTime", ""), shown.stdout
    job = _done(cluster, job_id)
    assert job["state"] == "COMPLETED"
    assert job["start_time"] >= int(before) + 4, (job["start_time"], before)
    assert int(_out(workdir, job_id)) >= int(before) + 4


def test_typed_gpus_run_on_the_gpus_of_that_type(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("--gres=gpu:h100:2", "--wrap", "echo $CUDA_VISIBLE_DEVICES",
                            cwd=workdir)
    assert _done(cluster, job_id)["state"] == "COMPLETED"
    assert len(_out(workdir, job_id).strip().split(",")) == 2
    shown = cluster.scontrol_show_job(job_id)
    assert "gres/gpu=2" in shown["TRES"], shown["TRES"]
    assert shown["TresPerNode"] == "gres:gpu:h100:2"
    wrong = cluster.run("sbatch", "--gres=gpu:a100:1", "--wrap", "true", cwd=workdir)
    assert wrong.returncode == 1 and "no node has GPUs of type a100" in wrong.stderr


def test_export_defaults_to_all_and_none_exports_nothing(cluster: Cluster,
                                                         workdir: Path) -> None:
    env = {"KILN_CLAIM_VAR": "from-the-submitter"}
    every = cluster.run("sbatch", "--parsable", "--wrap", 'echo "[$KILN_CLAIM_VAR]"',
                        cwd=workdir, env=env)
    none = cluster.run("sbatch", "--parsable", "--export=NONE", "--wrap",
                       'echo "[$KILN_CLAIM_VAR]"', cwd=workdir, env=env)
    for res in (every, none):
        assert res.returncode == 0, res.stderr
    every_id, none_id = int(every.stdout), int(none.stdout)
    _done(cluster, every_id)
    _done(cluster, none_id)
    assert _out(workdir, every_id) == "[from-the-submitter]\n"
    assert _out(workdir, none_id) == "[]\n"


def test_mem_per_gpu_gives_the_job_memory_per_gpu(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("--gres=gpu:2", "--mem-per-gpu=1G", "--wrap", "true", cwd=workdir)
    _done(cluster, job_id)
    shown = cluster.scontrol_show_job(job_id)
    assert shown["MemPerTres"] == "gres:gpu:1024"
    assert "mem=2G" in shown["TRES"], shown["TRES"]


def test_srun_jobid_overlap_and_exact(cluster: Cluster, workdir: Path) -> None:
    """srun from outside the job, into it (--jobid), alongside what runs there (--overlap);
    --exact is accepted (kiln binds no CPUs, so it changes nothing: docs/srun.md)."""
    job_id = cluster.sbatch("-c", "4", "-t", "5", "--wrap", "sleep 300", cwd=workdir)
    cluster.wait(job_id, {"RUNNING"})
    try:
        inside = cluster.run("srun", f"--jobid={job_id}", "--overlap", "bash", "-c",
                             'echo "$SLURM_JOB_ID $SLURM_STEP_ID"', cwd=workdir)
        assert inside.returncode == 0, inside.stderr
        job, step = inside.stdout.split()
        assert job == str(job_id) and step.isdigit()
        exact = cluster.run("srun", f"--jobid={job_id}", "--overlap", "--exact", "-c", "1",
                            "echo", "exact", cwd=workdir)
        assert (exact.returncode, exact.stdout, exact.stderr) == (0, "exact\n", "")
    finally:
        cluster.run("scancel", str(job_id))
        cluster.wait(job_id, {"CANCELLED"})


def test_test_only_says_where_and_when_and_submits_nothing(cluster: Cluster,
                                                           workdir: Path) -> None:
    before = cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()
    res = cluster.run("sbatch", "--test-only", "--gres=gpu:1", "-c", "2", "--wrap", "true",
                      cwd=workdir)
    assert (res.returncode, res.stdout) == (0, "")
    first, *kiln = res.stderr.splitlines()
    assert re.fullmatch(r"sbatch: Job \d+ to start at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d using 2 "
                        r"processors on nodes node1 in partition gpu", first), res.stderr
    # kiln's own lines come after Slurm's (the p50/p90 start: tests/integration/test_forecasts)
    assert all(line.startswith("sbatch: forecast from recent run times: ") for line in kiln)
    after = cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()
    assert after == before


def test_schedd_refuses_an_unmigrated_ledger(tmp_path: Path) -> None:
    conf = tmp_path / "kiln.toml"
    conf.write_text(f'[schedd]\ndb_url = "sqlite:///{tmp_path}/fresh.db"\n'
                    f'client_endpoint = "ipc://{tmp_path}/s.sock"\n'
                    'agent_endpoint = "tcp://127.0.0.1:1"\n')
    res = subprocess.run([sys.executable, "-m", "schedd.daemon", "--config", str(conf),
                          "--log-file", str(tmp_path / "schedd.log")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "kiln db upgrade" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "s.sock").exists()


def test_schedd_refuses_a_ledger_from_a_newer_kiln(tmp_path: Path) -> None:
    import sqlite3

    from schedd.ledger.migrate import upgrade

    url = f"sqlite:///{tmp_path}/newer.db"
    upgrade(url)
    with sqlite3.connect(tmp_path / "newer.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '9999_future'")
    conf = tmp_path / "kiln.toml"
    conf.write_text(f'[schedd]\ndb_url = "{url}"\nclient_endpoint = "ipc://{tmp_path}/s.sock"\n'
                    'agent_endpoint = "tcp://127.0.0.1:1"\n')
    res = subprocess.run([sys.executable, "-m", "schedd.daemon", "--config", str(conf),
                          "--log-file", str(tmp_path / "schedd.log")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "is newer than this kiln (revision 9999_future); upgrade kiln" in res.stderr, \
        res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "s.sock").exists()


def test_squeue_start_names_the_nodes_the_plan_holds(cluster: Cluster, workdir: Path) -> None:
    blocker = cluster.sbatch("--gres=gpu:8", "-t", "10", "--wrap", "sleep 300", cwd=workdir)
    cluster.wait(blocker, {"RUNNING"})
    waiting = cluster.sbatch("--gres=gpu:8", "-t", "5", "--wrap", "true", cwd=workdir)
    try:
        def planned() -> str:
            res = cluster.run("squeue", "--start", "-h", "-j", str(waiting), "-o", "%Y %S")
            return res.stdout.strip() if res.stdout.split()[:1] == ["node1"] else ""
        sched, start = until(planned, "a planned start on node1", timeout=60).split()
        assert sched == "node1" and start != "N/A"
    finally:
        cluster.run("scancel", str(blocker), str(waiting))
