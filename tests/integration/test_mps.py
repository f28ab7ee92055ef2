"""gres/mps, real schedd and agentd: one node of one fake A100 offering 100 MPS units (kiln up
--mps-per-gpu 100), and a stand-in MPS control program ([agent] mps_control, test-only) that
records its calls."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, cleanup, sqlite_cluster, world_tempdir

ENV = ("echo $CUDA_VISIBLE_DEVICES $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE $CUDA_MPS_PIPE_DIRECTORY "
       "$CUDA_MPS_LOG_DIRECTORY $SLURM_JOB_GPUS")
SLEEP = f"{ENV} > env-$SLURM_JOB_ID.txt; sleep 600"
# what the stand-in records: its arguments (or what it read: "quit"), the GPU and pipe dir
CONTROL = """#!/bin/sh
if [ $# -eq 0 ]; then read -r what; else what="$*"; fi
echo "$what $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY" >> {log}
"""


@pytest.fixture(scope="module")
def home() -> Iterator[Path]:
    path = world_tempdir("kiln-it-")
    try:
        yield path
    finally:
        cleanup(path)


@pytest.fixture(scope="module")
def cluster(home: Path) -> Iterator[Cluster]:
    control = home / "mps-control"
    control.write_text(CONTROL.format(log=home / "mps-control.log"))
    control.chmod(0o755)
    with sqlite_cluster(home, nodes=1, fake_gpus="1xA100", kill_wait=2,
                        schedd_extra="gpu_fault_grace = 2.0",
                        up_args=["--mps-per-gpu", "100"],
                        agent_extra=f'mps_control = "{control}"\n') as c:
        yield c


def _control_calls(home: Path) -> list[list[str]]:
    path = home / "mps-control.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def _until(what, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and not what():
        time.sleep(0.1)
    assert what()


def _env_of(workdir: Path, job_id: int) -> list[str]:
    path = workdir / f"env-{job_id}.txt"
    _until(lambda: path.exists() and path.read_text().strip())
    return path.read_text().split()


def _waits(cluster: Cluster, job_id: int, reasons: tuple[str, ...] = ("Resources",)) -> None:
    _until(lambda: cluster.job(job_id)["reason"] in reasons, 15)
    assert cluster.job(job_id)["state"] == "PENDING"


def _cancel(cluster: Cluster, jobs: list[int]) -> None:
    live = [j for j in jobs if cluster.job(j)["state"] in ("PENDING", "RUNNING")]
    if live:
        assert cluster.run("scancel", *map(str, live)).returncode == 0
    for job_id in jobs:
        cluster.wait(job_id, {"CANCELLED", "COMPLETED"})


def test_two_halves_share_the_gpu_a_third_and_a_whole_gpu_job_wait(
        cluster: Cluster, home: Path, workdir: Path) -> None:
    pipe = str(home / "spool" / "node1" / "mps" / "gpu0" / "pipe")
    logs = str(home / "spool" / "node1" / "mps" / "gpu0" / "log")
    jobs = [cluster.sbatch("--gres=mps:50", "--wrap", SLEEP, cwd=workdir) for _ in range(2)]
    for job_id in jobs:
        cluster.wait(job_id, {"RUNNING"})
    for job_id in jobs:
        assert _env_of(workdir, job_id) == ["0", "50", pipe, logs, "0"]
    # the control daemon: started once, for GPU 0, with the pipe directory the jobs got
    assert _control_calls(home) == [["-d", "0", pipe]]
    third = cluster.sbatch("--gres=mps:50", "--wrap", SLEEP, cwd=workdir)
    _waits(cluster, third)
    whole = cluster.sbatch("--gres=gpu:1", "--wrap", "true", cwd=workdir)
    _waits(cluster, whole, ("Resources", "Priority"))
    squeue = cluster.run("squeue", "-h", "-j", str(third), "-o", "%t %R %b")
    assert squeue.stdout.split() == ["PD", "(Resources)", "gres:mps:50"]
    sinfo = cluster.run("sinfo", "-h", "-N", "-O", "Gres:40,GresUsed:40").stdout.split()
    assert sinfo[0].endswith(",mps:100") and sinfo[1].endswith(",mps:100"), sinfo
    node = cluster.run("scontrol", "show", "node", "node1").stdout
    assert "gres/mps=100" in node.split("CfgTRES=")[1].split()[0]
    assert "gres/mps=100" in node.split("AllocTRES=")[1].split()[0]
    assert "TresPerNode=gres:mps:50" in cluster.run("scontrol", "show", "job",
                                                    str(jobs[0])).stdout
    assert cluster.run("scancel", str(jobs[0])).returncode == 0
    cluster.wait(third, {"RUNNING"})  # half the GPU came free: the third takes it
    assert _env_of(workdir, third)[:2] == ["0", "50"]
    assert cluster.job(whole)["state"] == "PENDING"  # the GPU is still in use by MPS
    assert _control_calls(home) == [["-d", "0", pipe]]  # not stopped while MPS jobs run
    _cancel(cluster, [jobs[1], third])
    cluster.wait(whole, {"COMPLETED"})  # the GPU whole again: the whole-GPU job runs
    # the last MPS job over: the daemon was told to quit, with the same GPU and pipe dir
    _until(lambda: len(_control_calls(home)) == 2)
    assert _control_calls(home) == [["-d", "0", pipe], ["quit", "0", pipe]]


def test_an_mps_job_waits_while_the_gpu_is_used_whole(cluster: Cluster, workdir: Path) -> None:
    whole = cluster.sbatch("--gres=gpu:1", "--wrap", "sleep 600", cwd=workdir)
    cluster.wait(whole, {"RUNNING"})
    part = cluster.sbatch("--gres=mps:10", "--wrap", "true", cwd=workdir)
    _waits(cluster, part)
    _cancel(cluster, [whole])
    cluster.wait(part, {"COMPLETED"})


def test_sacct_and_grp_tres_count_gres_mps(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("--gres=mps:30", "--wrap", "true", cwd=workdir)
    cluster.wait(job_id, {"COMPLETED"})
    res = cluster.run("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "AllocTRES,ReqTRES")
    assert res.returncode == 0, res.stderr
    alloc, req = res.stdout.strip().split("|")
    assert "gres/mps=30" in alloc and "gres/mps=30" in req and "gres/gpu" not in alloc
    sacctmgr = ["sacctmgr", "-i"]
    assert cluster.run(*sacctmgr, "add", "account", "mpsacct", "Parent=root").returncode == 0
    assert cluster.run(*sacctmgr, "add", "user", "root", "Account=mpsacct").returncode == 0
    assert cluster.run(*sacctmgr, "modify", "account", "mpsacct", "set",
                       "GrpTRES=gres/mps=60").returncode == 0
    first = cluster.sbatch("-A", "mpsacct", "--gres=mps:40", "--wrap", "sleep 600",
                           cwd=workdir)
    cluster.wait(first, {"RUNNING"})
    second = cluster.sbatch("-A", "mpsacct", "--gres=mps:40", "--wrap", "true", cwd=workdir)
    _waits(cluster, second, ("AssocGrpGRES",))
    _cancel(cluster, [first])
    cluster.wait(second, {"COMPLETED"})


def test_a_request_no_gpu_can_hold_is_refused_at_submit(cluster: Cluster,
                                                        workdir: Path) -> None:
    res = cluster.run("sbatch", "--gres=mps:150", "--wrap", "true", cwd=workdir)
    assert res.returncode != 0
    assert res.stderr.startswith("sbatch: error: Batch job submission failed: Requested node "
                                 "configuration is not available")
    assert "no node has mps:150 on one GPU (largest: 100, node1)" in res.stderr
    res = cluster.run("sbatch", "--gres=mps:x", "--wrap", "true", cwd=workdir)
    assert res.returncode != 0 and res.stderr.strip().count("\n") == 0


def test_srun_and_salloc_ask_for_mps(cluster: Cluster, home: Path, workdir: Path) -> None:
    before = len(_control_calls(home))
    res = cluster.run("srun", "--gres=mps:25", "bash", "-c", ENV, cwd=workdir)
    assert res.returncode == 0, res.stderr
    pipe = str(home / "spool" / "node1" / "mps" / "gpu0" / "pipe")
    assert res.stdout.split()[:3] == ["0", "25", pipe]
    res = cluster.run("salloc", "--gres=mps:20", "srun", "bash", "-c", ENV, cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[-5:-2] == ["0", "20", pipe]
    # each run started the daemon and stopped it after
    _until(lambda: len(_control_calls(home)) >= before + 4)
    assert [c[0] for c in _control_calls(home)[before:]] == ["-d", "quit", "-d", "quit"]


def test_a_failed_gpu_stops_its_mps_jobs_and_their_daemon(cluster: Cluster, home: Path,
                                                          workdir: Path) -> None:
    # the GPU's notice (USR1, --signal) taken, the jobs are then stopped NODE_FAIL
    script = "#!/bin/bash\ntrap 'echo noticed' USR1\nwhile true; do sleep 0.1; done\n"
    jobs = [cluster.sbatch("--gres=mps:50", "--signal=B:USR1@30", input=script, cwd=workdir)
            for _ in range(2)]
    for job_id in jobs:
        cluster.wait(job_id, {"RUNNING"})
    before = len(_control_calls(home))
    res = cluster.run("kiln", "fake-gpu", "node1", "0", "--xid", "79")
    assert res.returncode == 0, res.stderr
    try:
        for job_id in jobs:  # stopped and requeued: they wait for the GPU's RESUME
            _until(lambda j=job_id: cluster.job(j)["restart_count"] == 1
                   and cluster.job(j)["state"] == "PENDING")
        _until(lambda: len(_control_calls(home)) > before)
        assert [c[0] for c in _control_calls(home)[before:]] == ["quit"]
    finally:
        assert cluster.run("kiln", "fake-gpu", "node1", "0", "--clear").returncode == 0
        assert cluster.run("scontrol", "update", "NodeName=node1",
                           "State=RESUME").returncode == 0
        _cancel(cluster, jobs)
