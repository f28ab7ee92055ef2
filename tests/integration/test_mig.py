"""MIG (issue 33, item 3): a fake A100 80GB partitioned into seven 1g.10gb instances is seven
typed GPUs, ``gpu:1g.10gb``. Seven one-instance jobs run at once, each seeing its own instance
by UUID (``CUDA_VISIBLE_DEVICES=MIG-...``), an eighth waits; ``--gpus=1g.10gb:2`` gets two and
its srun step sees the same two; sinfo, scontrol, squeue and sacct name the profile; a fault of
the GPU itself fails every one of its instances; ``kiln up --fake-mig`` refuses what does not
fit the GPU in one line."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, until
from tests.integration.conftest import _cluster

UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture(scope="module")
def mig() -> Iterator[Cluster]:
    """One node: one fake A100 80GB in MIG mode, seven 1g.10gb instances (kiln.toml's
    [agent] fake_mig, which kiln up passes to the agent)."""
    yield from _cluster(None, "sqlite", nodes=1, fake_gpus="1xA100-80GB", kill_wait=2,
                        schedd_extra="gpu_fault_grace = 2.0", agent_extra='fake_mig = "1g.10gb:7"')


def _seen(workdir: Path, job_id: int) -> list[str]:
    path = workdir / f"seen-{job_id}"
    until(lambda: path.exists() and path.read_text().endswith("\n"), f"job {job_id} wrote")
    return path.read_text().split()


def test_seven_1g_jobs_run_at_once_with_seven_mig_uuids(mig: Cluster, workdir: Path) -> None:
    cmd = "echo $CUDA_VISIBLE_DEVICES $SLURM_JOB_GPUS > seen-$SLURM_JOB_ID; sleep 600"
    jobs = [mig.sbatch("--gres=gpu:1g.10gb:1", "--wrap", cmd, cwd=workdir) for _ in range(7)]
    for job_id in jobs:
        mig.wait(job_id, {"RUNNING"})
    seen = [_seen(workdir, j) for j in jobs]
    uuids = [s[0] for s in seen]
    assert all(UUID.match(u) for u in uuids), uuids
    assert len(set(uuids)) == 7
    assert sorted(int(s[1]) for s in seen) == list(range(7))  # SLURM_JOB_GPUS: the indices
    eighth = mig.sbatch("--gres=gpu:1g.10gb:1", "--wrap", "true", cwd=workdir)
    until(lambda: mig.job(eighth)["reason"] == "Resources", "the eighth waits for an instance")
    assert mig.job(eighth)["state"] == "PENDING"

    # what users see: the profile is the GPU type
    assert mig.ok("sinfo", "-h", "-p", "gpu", "-o", "%G").split() == ["gpu:1g.10gb:7"]
    node = mig.ok("scontrol", "show", "node", "node1")
    assert re.search(r"^\s*Gres=gpu:1g\.10gb:7$", node, re.M), node
    assert mig.ok("squeue", "-h", "-j", str(jobs[0]), "-o", "%b").split() == [
        "gres:gpu:1g.10gb:1"]
    shown = mig.ok("scontrol", "show", "job", str(jobs[0]))
    assert "TresPerNode=gres:gpu:1g.10gb:1" in shown, shown
    acct = mig.ok("sacct", "-X", "-n", "-P", "-j", str(jobs[0]), "-o", "AllocTRES")
    assert "gres/gpu=1" in acct.split("\n")[0].split(","), acct

    # a restarted job keeps seeing an instance by UUID, and the same node's UUIDs are stable
    mig.ok("scancel", *map(str, jobs))
    mig.wait(eighth, {"COMPLETED"})
    again = mig.sbatch("--gres=gpu:1g.10gb:7", "--wrap", cmd, cwd=workdir)
    mig.wait(again, {"RUNNING"})
    assert sorted(_seen(workdir, again)[0].split(",")) == sorted(uuids)
    mig.ok("scancel", str(again))
    mig.wait(again, {"CANCELLED"})


def test_gpus_option_and_srun_steps_see_the_same_instances(mig: Cluster,
                                                           workdir: Path) -> None:
    script = ("#!/bin/bash\necho $CUDA_VISIBLE_DEVICES > seen-$SLURM_JOB_ID\n"
              "srun bash -c 'echo $CUDA_VISIBLE_DEVICES' > step-$SLURM_JOB_ID\n")
    job = mig.sbatch("--gpus=1g.10gb:2", input=script, cwd=workdir)
    mig.wait(job, {"COMPLETED"})
    batch = _seen(workdir, job)[0].split(",")
    assert len(batch) == 2 and all(UUID.match(u) for u in batch), batch
    assert (workdir / f"step-{job}").read_text().split()[0].split(",") == batch


def test_other_types_and_whole_gpus_are_not_the_parent(mig: Cluster, workdir: Path) -> None:
    """The MIG-mode GPU is only its instances: no a100 to hand out, no 3g.40gb here."""
    res = mig.run("sbatch", "--gres=gpu:a100:1", "--wrap", "true", cwd=workdir)
    assert res.returncode != 0 and "no node has GPUs of type a100" in res.stderr, res.stderr
    res = mig.run("sbatch", "--gres=gpu:3g.40gb:1", "--wrap", "true", cwd=workdir)
    assert res.returncode != 0 and "no node has GPUs of type 3g.40gb" in res.stderr, res.stderr
    res = mig.run("sbatch", "--gres=gpu:8", "--wrap", "true", cwd=workdir)
    assert res.returncode != 0, res.stdout  # seven instances, never the GPU as an eighth


def test_a_fault_of_the_gpu_fails_all_its_instances(mig: Cluster, workdir: Path) -> None:
    script = "#!/bin/bash\ntrap 'echo noticed' USR1\nwhile true; do sleep 0.1; done\n"
    job = mig.sbatch("--gres=gpu:1g.10gb:1", "--signal=B:USR1@30", input=script, cwd=workdir)
    mig.wait(job, {"RUNNING"})
    mig.ok("kiln", "fake-gpu", "node1", "3", "--xid", "79")  # instance 3: its GPU fails
    until(lambda: "GresDrain=gpu:1g.10gb:7(IDX:0-6)" in mig.ok("scontrol", "show", "node",
                                                             "node1"),
          "every instance of the GPU failed", timeout=30)
    until(lambda: mig.job(job)["restart_count"] == 1 and mig.job(job)["state"] == "PENDING",
          "the job was requeued (NODE_FAIL), waiting for an instance", timeout=30)
    mig.ok("kiln", "fake-gpu", "node1", "3", "--clear")
    mig.ok("scontrol", "update", "NodeName=node1", "State=RESUME")
    mig.wait(job, {"RUNNING"}, timeout=30)
    until(lambda: "GresDrain" not in mig.ok("scontrol", "show", "node", "node1"),
          "the instances are back in service")
    mig.ok("scancel", str(job))
    mig.wait(job, {"CANCELLED"})


def test_kiln_up_refuses_instances_that_do_not_fit(mig: Cluster) -> None:
    began = time.monotonic()
    res = mig.run("kiln", "up", "--fake-gpus", "1xA100-80GB", "--fake-mig", "3g.40gb:3")
    assert res.returncode != 0
    assert res.stderr.strip().splitlines() == [
        "Error: invalid --fake-mig '3g.40gb:3': 9 compute slices and 12 memory slices do not "
        "fit a 80GB GPU as MIG places them (7 compute slices, 8 memory slices)"], res.stderr
    res = mig.run("kiln", "up", "--fake-gpus", "1xA100-40GB", "--fake-mig", "1g.10gb:7")
    assert res.returncode != 0 and "do not fit a 40GB GPU" in res.stderr, res.stderr
    assert time.monotonic() - began < 30
    # the running node keeps its partition: kiln up says what it runs as and does not reshape
    res = mig.run("kiln", "up", "--fake-gpus", "1xA100-80GB", "--fake-mig", "3g.40gb:2")
    assert res.returncode != 0
    assert "runs as 1 node(s), 1xA100-80GB, MIG 1g.10gb:7," in res.stderr, res.stderr
    assert "to 1 node(s), 1xA100-80GB, MIG 3g.40gb:2," in res.stderr, res.stderr
    assert mig.ok("sinfo", "-h", "-p", "gpu", "-o", "%G").split() == ["gpu:1g.10gb:7"]
