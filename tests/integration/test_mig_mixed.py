"""MIG of mixed profiles (issue 33): one fake A100 80GB partitioned as real ones are,
3g.40gb + 2g.20gb + two 1g.10gb, is four typed GPUs of three types on one node. A 3g.40gb job
and two 1g.10gb jobs run at once on their own instances (distinct MIG UUIDs), a third
1g.10gb job waits though the 2g.20gb is free; sinfo and scontrol list each type; sacct
names the typed TRES (kiln.toml's accounting_storage_tres, Slurm's AccountingStorageTRES);
GrpTRES on one profile holds back that profile only."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, until
from tests.integration.conftest import _cluster

UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
LAYOUT = "3g.40gb:1,2g.20gb:1,1g.10gb:2"


@pytest.fixture(scope="module")
def mixed() -> Iterator[Cluster]:
    yield from _cluster(None, "sqlite", nodes=1, fake_gpus="1xA100-80GB", kill_wait=2,
                        agent_extra=f'fake_mig = "{LAYOUT}"',
                        scheduler_extra='accounting_storage_tres = ["gres/gpu:1g.10gb", '
                                        '"gres/gpu:3g.40gb"]')


def _seen(workdir: Path, job_id: int) -> list[str]:
    path = workdir / f"seen-{job_id}"
    until(lambda: path.exists() and path.read_text().endswith("\n"), f"job {job_id} wrote")
    return path.read_text().split()


def test_a_3g_and_two_1g_jobs_share_one_gpu(mixed: Cluster, workdir: Path) -> None:
    assert mixed.ok("sinfo", "-h", "-p", "gpu", "-o", "%G").split() == [
        "gpu:1g.10gb:2,gpu:2g.20gb:1,gpu:3g.40gb:1"]
    node = mixed.ok("scontrol", "show", "node", "node1")
    assert re.search(r"^\s*Gres=gpu:1g\.10gb:2,gpu:2g\.20gb:1,gpu:3g\.40gb:1$", node, re.M), node

    cmd = "echo $CUDA_VISIBLE_DEVICES $SLURM_JOB_GPUS > seen-$SLURM_JOB_ID; sleep 600"
    big = mixed.sbatch("--gres=gpu:3g.40gb:1", "--wrap", cmd, cwd=workdir)
    small = [mixed.sbatch("--gpus=1g.10gb:1", "--wrap", cmd, cwd=workdir) for _ in range(2)]
    for job_id in (big, *small):
        mixed.wait(job_id, {"RUNNING"})
    seen = {j: _seen(workdir, j) for j in (big, *small)}
    uuids = [s[0] for s in seen.values()]
    assert all(UUID.match(u) for u in uuids) and len(set(uuids)) == 3, seen
    assert seen[big][1] == "0"  # the 3g.40gb instance; the 1g.10gb ones are 2 and 3
    assert sorted(seen[j][1] for j in small) == ["2", "3"]
    third = mixed.sbatch("--gres=gpu:1g.10gb:1", "--wrap", "true", cwd=workdir)
    until(lambda: mixed.job(third)["reason"] == "Resources", "a third 1g.10gb job waits")
    used = mixed.ok("sinfo", "-h", "-p", "gpu", "-O", "GresUsed:60").split()
    assert used == ["gpu:1g.10gb:2,gpu:2g.20gb:0,gpu:3g.40gb:1"], used
    mixed.ok("scancel", str(big), *map(str, small))
    mixed.wait(third, {"COMPLETED"})
    mixed.wait(big, {"CANCELLED"})

    acct = mixed.ok("sacct", "-X", "-n", "-P", "-j", str(big), "-o", "AllocTRES,ReqTRES")
    alloc, req = acct.strip().split("\n")[0].split("|")
    items = alloc.split(",")
    assert "gres/gpu:3g.40gb=1" in items and "gres/gpu=1" in items, alloc
    assert items.index("gres/gpu:3g.40gb=1") < items.index("gres/gpu=1"), alloc  # Slurm's
    assert "gres/gpu:3g.40gb=1" in req.split(","), req
    small_acct = mixed.ok("sacct", "-X", "-n", "-P", "-j", str(small[0]), "-o", "AllocTRES")
    assert "gres/gpu:1g.10gb=1" in small_acct.split(","), small_acct
    # a type AccountingStorageTRES does not list is counted as gres/gpu only
    mid = mixed.sbatch("--gres=gpu:2g.20gb:1", "--wrap", "true", cwd=workdir)
    mixed.wait(mid, {"COMPLETED"})
    mid_acct = mixed.ok("sacct", "-X", "-n", "-P", "-j", str(mid), "-o", "AllocTRES")
    assert "gres/gpu=1" in mid_acct and "2g.20gb" not in mid_acct, mid_acct


def test_grp_tres_on_one_profile(mixed: Cluster, workdir: Path) -> None:
    sacctmgr = ["sacctmgr", "-i"]
    mixed.ok(*sacctmgr, "add", "account", "migacct", "Parent=root")
    mixed.ok(*sacctmgr, "add", "user", "root", "Account=migacct")
    mixed.ok(*sacctmgr, "modify", "account", "migacct", "set", "GrpTRES=gres/gpu:1g.10gb=1")
    first = mixed.sbatch("-A", "migacct", "--gres=gpu:1g.10gb:1", "--wrap", "sleep 600",
                         cwd=workdir)
    mixed.wait(first, {"RUNNING"})
    second = mixed.sbatch("-A", "migacct", "--gres=gpu:1g.10gb:1", "--wrap", "true",
                          cwd=workdir)
    until(lambda: mixed.job(second)["reason"] == "AssocGrpGRES", "the second 1g.10gb waits")
    other = mixed.sbatch("-A", "migacct", "--gres=gpu:3g.40gb:1", "--wrap", "true", cwd=workdir)
    mixed.wait(other, {"COMPLETED"})  # the limit is on the profile only
    assert mixed.job(second)["state"] == "PENDING"
    mixed.ok("scancel", str(first))
    mixed.wait(second, {"COMPLETED"})
