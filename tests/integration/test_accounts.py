"""Accounts, QOS and limits through the real commands: sacctmgr builds the tree, sbatch is
checked against it, the cycle holds jobs back with Slurm's reasons, sshare shows the factors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, make_user
from tests.integration.conftest import BACKENDS, _cluster

INVALID_ACCOUNT = ("sbatch: error: Batch job submission failed: Invalid account or "
                   "account/partition combination specified\n")
POLICY = ("sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
          "(job submit limit, user's size and/or time limits)")
ASSOC_HEADER = ("   Cluster    Account       User  Partition     Share   Priority GrpJobs       "
                "GrpTRES GrpSubmit     GrpWall   GrpTRESMins MaxJobs       MaxTRES MaxTRESPerNode "
                "MaxSubmit     MaxWall   MaxTRESMins                  QOS   Def QOS GrpTRESRunMin ")


def acct(cluster: Cluster, *args: str, user: str | None = None):
    return cluster.run("sacctmgr", *args, user=user)


@pytest.fixture(scope="module")
def tree(cluster: Cluster, other_user: str) -> str:
    """root -> physics (Share 40), bio (Share 60); other_user in physics, root in bio."""
    acct(cluster, "-i", "add", "account", "physics", "Parent=root", "Fairshare=40",
         "Description=physics dept", "Organization=science")
    acct(cluster, "-i", "add", "account", "bio", "Fairshare=60", "Description=bio dept",
         "Organization=science")
    acct(cluster, "-i", "add", "user", other_user, "Account=physics",
         "DefaultAccount=physics")
    acct(cluster, "-i", "add", "user", "root", "Account=bio")
    return other_user


def cancel_all(cluster: Cluster, user: str, timeout: float = 30) -> None:
    """scancel the user's jobs and wait until none is active (cancelling a running job
    completes when its agent reports the end)."""
    cluster.run("scancel", "-u", user)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not cluster.run("squeue", "-h", "-u", user, "-o", "%i").stdout.split():
            return
        time.sleep(0.2)
    raise AssertionError(f"jobs of {user} still active after scancel")


def squeue_reason(cluster: Cluster, job_id: int, reason: str, timeout: float = 30) -> dict:
    deadline = time.time() + timeout
    job: dict = {}
    while time.time() < deadline:
        job = cluster.job(job_id)
        if job["reason"] == reason:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} is {job.get('state')} ({job.get('reason')}), "
                         f"not pending {reason}")


def test_tree_is_shown_as_slurm_shows_it(cluster: Cluster, tree: str) -> None:
    res = acct(cluster, "-n", "-P", "show", "assoc", "format=Account,User,Share")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "root||1", "root|root|1", "bio||60", "bio|root|1", "physics||40", f"physics|{tree}|1"]
    wide = acct(cluster, "show", "assoc").stdout.splitlines()
    assert wide[0] == ASSOC_HEADER
    assert wide[2].startswith("      kiln       root                               1 ")
    again = acct(cluster, "-i", "add", "account", "physics")
    assert (again.returncode, again.stdout) == (1, " Nothing new added.\n")
    padded = acct(cluster, "-n", "-s", "list", "user", tree, "format=account%256").stdout
    assert padded == " " * (256 - len("physics")) + "physics \n"
    bad = acct(cluster, "show", "foo")
    assert bad.returncode == 1 and bad.stderr.startswith("No valid entity in list command\n")


def test_account_membership_is_enforced(cluster: Cluster, tree: str, workdir: Path) -> None:
    res = cluster.run("sbatch", "-A", "bio", "--wrap", "true", user=tree, cwd=workdir)
    assert res.returncode == 1
    assert res.stderr == ("sbatch: error: Batch job submission failed: Invalid account or "
                          "account/partition combination specified\n")
    res = cluster.run("sbatch", "--qos", "nosuch", "--wrap", "true", user=tree, cwd=workdir)
    assert res.stderr == "sbatch: error: Batch job submission failed: Invalid qos specification\n"
    job_id = cluster.sbatch("--wrap", "true", user=tree, cwd=workdir)
    assert cluster.job(job_id)["account"] == "physics"  # the default account
    cluster.wait(job_id, {"COMPLETED"})


def test_grp_tres_holds_the_third_gpu_job(cluster: Cluster, tree: str, workdir: Path) -> None:
    assert acct(cluster, "-i", "modify", "account", "physics", "set",
                "GrpTRES=gres/gpu=2").returncode == 0
    try:
        shown = acct(cluster, "-n", "-P", "show", "assoc", "where", "account=physics",
                     "format=Account,User,GrpTRES").stdout.splitlines()
        assert shown == ["physics||gres/gpu=2", f"physics|{tree}|"]
        ids = [cluster.sbatch("--gres=gpu:1", "-A", "physics", "-t", "10", "--wrap",
                              "sleep 120", user=tree, cwd=workdir) for _ in range(3)]
        cluster.wait(ids[0], {"RUNNING"})
        cluster.wait(ids[1], {"RUNNING"})
        squeue_reason(cluster, ids[2], "AssocGrpGRES")
        assert cluster.job(ids[2])["state"] == "PENDING"
        cluster.run("scancel", str(ids[0]))
        cluster.wait(ids[2], {"RUNNING"})
    finally:
        cancel_all(cluster, tree)
        acct(cluster, "-i", "modify", "account", "physics", "set", "GrpTRES=gres/gpu=-1")


def test_kiln_why_names_the_limit_where_it_is_set_and_what_uses_it(
        cluster: Cluster, tree: str, workdir: Path) -> None:
    """Not "Slurm reason AssocMaxGRESPerJob": which limit, on which association, what holds it,
    and whether the job can ever start under it (issue 17, item 7)."""
    cancel_all(cluster, tree)
    assert acct(cluster, "-i", "modify", "account", "physics", "set", "GrpTRES=gres/gpu=2",
                "MaxTRES=gres/gpu=2").returncode == 0
    try:
        too_big = cluster.sbatch("--gres=gpu:3", "-t", "10", "--wrap", "true", user=tree,
                                 cwd=workdir)
        squeue_reason(cluster, too_big, "AssocMaxGRESPerJob")
        why = cluster.run("kiln", "why", str(too_big), user=tree)
        assert why.returncode == 0, why.stderr
        assert why.stdout.splitlines()[1:3] == [
            "  Why: a limit: it needs gres/gpu=3; the limit is MaxTRESPerJob=gres/gpu=2 on "
            f"account physics (inherited by user {tree}'s association in account physics).",
            "  It will never start unless the limit changes (sacctmgr modify ... set "
            "MaxTRESPerJob=...) or the job asks for less (scontrol update)."]
        cluster.run("scancel", str(too_big))
        ids = [cluster.sbatch("--gres=gpu:1", "-t", "10", "--wrap", "sleep 120", user=tree,
                              cwd=workdir) for _ in range(3)]
        cluster.wait(ids[0], {"RUNNING"})
        cluster.wait(ids[1], {"RUNNING"})
        squeue_reason(cluster, ids[2], "AssocGrpGRES")
        why = cluster.run("kiln", "why", str(ids[2]), user=tree)
        assert why.returncode == 0, why.stderr
        assert why.stdout.splitlines()[1:3] == [
            "  Why: a limit: it needs gres/gpu=1; the limit is GrpTRES=gres/gpu=2 on account "
            "physics.",
            "  In use there now: gres/gpu=2 held by 2 running job(s); it starts when enough of "
            "that is freed."]
    finally:
        cancel_all(cluster, tree)
        acct(cluster, "-i", "modify", "account", "physics", "set", "GrpTRES=gres/gpu=-1",
             "MaxTRES=gres/gpu=-1")


def test_max_submit_jobs_rejects_the_third(cluster: Cluster, tree: str, workdir: Path) -> None:
    cancel_all(cluster, tree)
    acct(cluster, "-i", "modify", "user", tree, "set", "MaxSubmitJobs=2")
    try:
        for _ in range(2):
            cluster.sbatch("-t", "10", "--wrap", "sleep 120", user=tree, cwd=workdir)
        res = cluster.run("sbatch", "-t", "10", "--wrap", "sleep 120", user=tree, cwd=workdir)
        assert res.returncode == 1
        assert res.stdout == ""
        assert res.stderr == f"sbatch: error: AssocMaxSubmitJobLimit\n{POLICY}\n"
        listed = cluster.run("squeue", "-h", "-u", tree, "-o", "%i").stdout.split()
        assert len(listed) == 2
    finally:
        cancel_all(cluster, tree)
        acct(cluster, "-i", "modify", "user", tree, "set", "MaxSubmitJobs=-1")


def test_max_wall_pends_and_deny_on_limit_rejects(cluster: Cluster, tree: str,
                                                  workdir: Path) -> None:
    acct(cluster, "-i", "modify", "user", tree, "set", "MaxWall=1:00:00")
    try:
        shown = acct(cluster, "-n", "-P", "show", "assoc", "where", f"user={tree}",
                     "format=Account,User,MaxWall").stdout
        assert shown == f"physics|{tree}|01:00:00\n"
        long_job = cluster.sbatch("-t", "2:00:00", "--wrap", "sleep 1", user=tree, cwd=workdir)
        short_job = cluster.sbatch("-t", "30", "--wrap", "sleep 1", user=tree, cwd=workdir)
        cluster.wait(short_job, {"RUNNING", "COMPLETED"})
        squeue_reason(cluster, long_job, "AssocMaxWallDurationPerJobLimit")
        assert acct(cluster, "-i", "add", "qos", "strict", "Flags=DenyOnLimit").returncode == 0
        acct(cluster, "-i", "modify", "user", tree, "set", "QOS=normal,strict")
        res = cluster.run("sbatch", "--qos=strict", "-t", "2:00:00", "--wrap", "true",
                          user=tree, cwd=workdir)
        assert res.returncode == 1
        assert res.stderr == f"sbatch: error: AssocMaxWallDurationPerJobLimit\n{POLICY}\n"
    finally:
        cancel_all(cluster, tree)
        acct(cluster, "-i", "modify", "user", tree, "set", "MaxWall=-1", "QOS=-1")


def test_grp_tres_mins_budget_and_its_reset(cluster: Cluster, tree: str, workdir: Path) -> None:
    acct(cluster, "-i", "modify", "account", "bio", "set", "GrpTRESMins=gres/gpu=8")
    try:
        first = cluster.sbatch("-A", "bio", "--gres=gpu:8", "-t", "1", "--wrap", "sleep 3",
                               cwd=workdir)
        assert cluster.wait(first, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
        second = cluster.sbatch("-A", "bio", "--gres=gpu:8", "-t", "1", "--wrap", "true",
                                cwd=workdir)
        squeue_reason(cluster, second, "AssocGrpGRESMinutes")  # 8 used x 3 s + 8 held > 8
        cpu_only = cluster.sbatch("-A", "bio", "-t", "1", "--wrap", "true", cwd=workdir)
        cluster.wait(cpu_only, {"COMPLETED"})
        reset = acct(cluster, "-i", "modify", "account", "bio", "set", "RawUsage=0")
        assert reset.returncode == 0, reset.stderr
        cluster.wait(second, {"RUNNING", "COMPLETED"})
    finally:
        cancel_all(cluster, "root")
        acct(cluster, "-i", "modify", "account", "bio", "set", "GrpTRESMins=gres/gpu=-1")


def test_spent_budget_times_out_running_jobs_that_hold_its_tres(cluster: Cluster, tree: str,
                                                                workdir: Path) -> None:
    """Lowering GrpTRESMins under running jobs: once the account's usage reaches it, its
    running GPU job ends TIMEOUT (Slurm's acct_policy_job_time_out); a job holding no GPU
    runs on."""
    acct(cluster, "-i", "modify", "account", "bio", "set", "GrpTRESMins=gres/gpu=1000")
    try:
        gpu = cluster.sbatch("-A", "bio", "--gres=gpu:8", "-t", "5", "--wrap", "sleep 120",
                             cwd=workdir)
        cpu_only = cluster.sbatch("-A", "bio", "-t", "5", "--wrap", "sleep 120", cwd=workdir)
        cluster.wait(gpu, {"RUNNING"})
        cluster.wait(cpu_only, {"RUNNING"})
        # 8 GPUs reach 1 GPU-minute after 7.5 s of running
        acct(cluster, "-i", "modify", "account", "bio", "set", "GrpTRESMins=gres/gpu=1")
        ended = cluster.wait(gpu, {"TIMEOUT", "COMPLETED", "FAILED", "CANCELLED"}, timeout=40)
        assert ended["state"] == "TIMEOUT", ended
        assert cluster.job(cpu_only)["state"] == "RUNNING"
        log = (cluster.home / "log" / "schedd.log").read_text()
        assert f"job {gpu} timed out: association bio reached its GrpTRESMins gres/gpu=1" in log
    finally:
        cancel_all(cluster, "root")
        acct(cluster, "-i", "modify", "account", "bio", "set", "GrpTRESMins=gres/gpu=-1")


def test_non_admin_cannot_change_anything(cluster: Cluster, tree: str) -> None:
    before = acct(cluster, "-n", "-P", "show", "assoc").stdout
    res = acct(cluster, "-i", "modify", "account", "physics", "set", "GrpTRES=gres/gpu=100",
               user=tree)
    assert res.returncode == 1
    assert res.stderr == ("sacctmgr: error: Your user doesn't have privilege to perform this "
                          "action\n Error with request: Access/permission denied\n")
    res = acct(cluster, "-i", "add", "account", "evil", user=tree)
    assert res.returncode == 1
    assert res.stderr == " Problem adding accounts: Access/permission denied\n"
    assert acct(cluster, "-n", "-P", "show", "assoc", user=tree).stdout == before


def test_sshare_factor_is_the_priority_factor(cluster: Cluster, tree: str,
                                              workdir: Path) -> None:
    acct(cluster, "-i", "modify", "user", tree, "set", "MaxWall=1:00:00")
    try:
        job_id = cluster.sbatch("-t", "2:00:00", "--wrap", "true", user=tree, cwd=workdir)
        job = squeue_reason(cluster, job_id, "AssocMaxWallDurationPerJobLimit")
        rows = cluster.run("sshare", "-P", "-a").stdout.splitlines()
        assert rows[0] == "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare"
        mine = [r.split("|") for r in rows if r.split("|")[1] == tree]
        assert len(mine) == 1 and mine[0][0].strip() == "physics"
        factor = float(mine[0][6])
        # priority = 10000 x fair share + 1000 x partition (age ~0, QOS 0): weights as configured
        assert abs(job["priority"] - (10000 * factor + 1000)) <= 2
        user_rows = cluster.run("sshare", "-U", "--format", "Account%256", "--noheader",
                                user=tree).stdout
        assert user_rows.split() == ["physics"]
    finally:
        cancel_all(cluster, tree)
        acct(cluster, "-i", "modify", "user", tree, "set", "MaxWall=-1")


# --- the automatic root association (issue 31, item 4) --------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def newcomers(request: pytest.FixtureRequest):
    """A cluster of its own that starts with no account but root."""
    yield from _cluster(request, request.param, nodes=1, fake_gpus="2xH100-80GB", kill_wait=2)


def _assocs(cluster: Cluster) -> list[str]:
    res = acct(cluster, "-n", "-P", "show", "assoc", "format=Account,User,Share")
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def test_a_real_account_replaces_the_automatic_root_association(
        newcomers: Cluster, other_user: str, workdir: Path) -> None:
    """other_user submits out of the box (account root, automatic association); the admin
    adds them to physics: the root association goes, jobs go to physics, -A root is refused;
    the job already running and the one pending under root keep account root. A second
    newcomer whose root association the admin names (Account=root) keeps it."""
    user, keeper, cluster = other_user, make_user(), newcomers
    running = cluster.sbatch("-t", "5", "--wrap", "sleep 300", user=user, cwd=workdir)
    held = cluster.sbatch("-H", "-t", "5", "--wrap", "true", user=user, cwd=workdir)
    cluster.wait(running, {"RUNNING"})
    cluster.run("scancel", str(cluster.sbatch("-H", "--wrap", "true", user=keeper,
                                              cwd=workdir)))
    assert _assocs(cluster) == ["root||1", *sorted([f"root|{user}|1", f"root|{keeper}|1",
                                                    "root|root|1"])]
    # the association exists, so Slurm's words; from now on it is the admin's
    kept = acct(cluster, "-i", "add", "user", keeper, "Account=root")
    assert (kept.returncode, kept.stdout, kept.stderr) == (1, " Nothing new added.\n", "")
    try:
        for args in (("add", "account", "physics"), ("add", "user", user, "Account=physics"),
                     ("add", "user", keeper, "Account=physics")):
            res = acct(cluster, "-i", *args)
            assert res.returncode == 0, res.stdout + res.stderr
        assert _assocs(cluster) == [
            "root||1", *sorted([f"root|{keeper}|1", "root|root|1"]), "physics||1",
            *sorted([f"physics|{user}|1", f"physics|{keeper}|1"])]
        shown = acct(cluster, "-n", "-P", "show", "user", user, keeper,
                     "format=User,DefaultAccount")
        assert shown.stdout.splitlines() == sorted([f"{user}|physics", f"{keeper}|root"])
        job_id = cluster.sbatch("-H", "--wrap", "true", user=user, cwd=workdir)
        res = cluster.run("squeue", "-h", "-j", f"{running},{held},{job_id}", "-o", "%i %a %T")
        assert sorted(res.stdout.splitlines()) == sorted([
            f"{running} root RUNNING", f"{held} root PENDING", f"{job_id} physics PENDING"])
        refused = cluster.run("sbatch", "-A", "root", "--wrap", "true", user=user, cwd=workdir)
        assert (refused.returncode, refused.stdout, refused.stderr) == (1, "", INVALID_ACCOUNT)
        assert cluster.run("scontrol", "release", str(held)).returncode == 0
        assert cluster.wait(held, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
        assert cluster.job(running)["state"] == "RUNNING"
        kept_job = cluster.sbatch("-H", "-A", "root", "--wrap", "true", user=keeper,
                                  cwd=workdir)
        assert cluster.job(kept_job)["account"] == "root"
    finally:
        cancel_all(cluster, user)
        cancel_all(cluster, keeper)


def test_a_root_association_the_admin_adds_is_kept(newcomers: Cluster, other_user: str,
                                                   workdir: Path) -> None:
    """Added by the admin (Account=root), root stays when the user joins another account."""
    user, cluster = other_user, newcomers
    for args in (("add", "user", user, "Account=root"), ("add", "account", "bio"),
                 ("add", "user", user, "Account=bio")):
        res = acct(cluster, "-i", *args)
        assert res.returncode == 0, res.stdout + res.stderr
    rows = _assocs(cluster)
    assert f"root|{user}|1" in rows and f"bio|{user}|1" in rows
    job_id = cluster.sbatch("-H", "-A", "root", "--wrap", "true", user=user, cwd=workdir)
    assert cluster.job(job_id)["account"] == "root"
    cancel_all(cluster, user)
