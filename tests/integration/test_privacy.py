"""Nothing one user does can read or steer another user's work (issue 12, items 1, 2 and 6),
each attack played as a second Unix user: the ledger, its WAL/SHM and the state directory are
root's only; a job's environment, export values and arguments go to its owner and operators
only, and PrivateData hides more; the checkpoint file preemption trusts is in a directory
only the job's user may enter, and a symlink there is not followed."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import BIN, Cluster, make_user, raw_requests, until
from tests.integration.conftest import BACKENDS, _cluster

SECRET = "SECRET=hunter2-do-not-leak"
TOKEN = "--api-token=tok-3f9a"

def as_user(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True, text=True,
                          timeout=60, cwd="/tmp")


def py_as(user: str, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return as_user(user, str(BIN / "python"), "-c", code, *args)


def users_dir(parent: Path, user: str) -> Path:
    path = parent / user
    path.mkdir(exist_ok=True)
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


@pytest.fixture(scope="module")
def intruder(other_user: str) -> Iterator[str]:
    """A third Unix user, the attacker when ``other_user`` is the victim."""
    name = make_user()
    yield name
    subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
    subprocess.run(["userdel", "--remove", name], capture_output=True)


# --- 1: the ledger and the state directory are root's ----------------------------------------

_OPEN_LEDGER = r"""
import sqlite3, sys
try:
    con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
    print(con.execute("select count(*) from jobs").fetchone())
except sqlite3.Error as exc:
    sys.exit(f"sqlite3: {exc}")
"""


def test_ledger_and_state_dir_are_root_only(cluster: Cluster, other_user: str,
                                            workdir: Path) -> None:
    job = cluster.sbatch(f"--export=ALL,{SECRET}", "--wrap", "sleep 600", cwd=workdir)
    try:
        cluster.wait(job, {"RUNNING"})
        home = cluster.home
        assert stat.S_IMODE(home.stat().st_mode) & 0o077 == 0o011  # traversable, not listable
        for sub in ("log", "run", "keys"):
            assert stat.S_IMODE((home / sub).stat().st_mode) == 0o700, sub
        for log in (home / "log").iterdir():
            assert stat.S_IMODE(log.stat().st_mode) & 0o077 == 0, log
        if cluster.db_url.startswith("sqlite"):
            db = home / "kiln.db"
            for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
                assert path.exists() and stat.S_IMODE(path.stat().st_mode) == 0o600, path
            stolen = py_as(other_user, _OPEN_LEDGER, str(db))
            assert stolen.returncode != 0, stolen.stdout
            assert "unable to open" in stolen.stderr or "denied" in stolen.stderr, stolen.stderr
            for suffix in ("", "-wal", "-shm"):
                res = as_user(other_user, "cat", f"{db}{suffix}")
                assert res.returncode != 0 and "Permission denied" in res.stderr
                assert "hunter2" not in res.stdout
        listing = as_user(other_user, "ls", str(home / "log"))
        assert listing.returncode != 0 and "Permission denied" in listing.stderr
        assert as_user(other_user, "cat", str(home / "log" / "schedd.log")).returncode != 0
        assert as_user(other_user, "ls", str(home)).returncode != 0
        # ... and the cluster still serves everyone
        mine = cluster.sbatch("--hold", "--wrap", "true", user=other_user,
                              cwd=users_dir(workdir, other_user))
        shown = cluster.run("squeue", "-h", "-o", "%i", user=other_user)
        assert shown.returncode == 0 and str(mine) in shown.stdout.split(), shown.stderr
        assert cluster.run("scancel", str(mine), user=other_user).returncode == 0
    finally:
        cluster.run("scancel", str(job))


def test_a_readable_kiln_toml_with_a_password_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    conf = home / "kiln.toml"
    conf.write_text('[schedd]\ndb_url = "postgresql://kiln:s3cret@127.0.0.1/kiln"\n')
    conf.chmod(0o644)
    res = subprocess.run([str(BIN / "python"), "-m", "schedd.daemon", "--config", str(conf)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "password" in lines[0] and "0644" in lines[0], res.stderr
    assert "s3cret" not in res.stderr


# --- 2: what a job carries goes to its owner and operators only -------------------------------


def test_other_users_export_and_arguments_do_not_leak(cluster: Cluster, other_user: str,
                                                      intruder: str, workdir: Path) -> None:
    theirs = users_dir(workdir, other_user)
    script = theirs / "train.sh"
    script.write_text("#!/bin/sh\nsleep 600\n")
    os.chown(script, pwd.getpwnam(other_user).pw_uid, -1)
    script.chmod(0o755)
    victim = cluster.sbatch("--hold", f"--export=ALL,{SECRET}", str(script), TOKEN,
                            user=other_user, cwd=theirs)
    try:
        replies = raw_requests(cluster, intruder, [
            ("query_jobs", {"job_ids": [str(victim)]}),
            ("query_jobs", {"job_ids": [str(victim)], "with_script": True}),
            ("query_jobs", {"job_ids": [str(victim)], "fields": ["export"]}),
            ("query_jobs", {"job_ids": [str(victim)], "fields": ["script_args"]}),
            ("query_jobs", {"job_ids": [str(victim)], "fields": ["environment"]}),
            ("acct_jobs", {"job_ids": [str(victim)]}),
            ("job_why", {"job_id": str(victim)}),
        ])
        text = json.dumps(replies)
        assert "hunter2" not in text and "tok-3f9a" not in text, text
        seen = replies[0]["body"]["jobs"][0]
        assert seen["user"] == other_user  # what Slurm shows everyone is still shown
        assert "export" not in seen and "script_args" not in seen
        for reply in replies[2:5]:
            assert reply["ok"] is False and "Invalid job field" in reply["error"]["message"]
        # the owner and root see them
        own = raw_requests(cluster, other_user, [("query_jobs", {"job_ids": [str(victim)],
                                                        "with_script": True})])
        assert own[0]["body"]["jobs"][0]["script_args"] == [TOKEN]
        assert SECRET.split("=")[1] in own[0]["body"]["jobs"][0]["export"]
        assert cluster.job(victim)["script_args"] == [TOKEN]
        shown = cluster.run("scontrol", "show", "job", str(victim), user=intruder)
        assert shown.returncode == 0 and "hunter2" not in shown.stdout
    finally:
        cluster.run("scancel", str(victim))


# --- 2: PrivateData ---------------------------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def private(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _cluster(request, request.param, nodes=1, fake_gpus="4xA100", kill_wait=2,
                        schedd_extra='private_data = ["jobs", "usage", "accounts", "users"]')


def acct(cluster: Cluster, *args: str, user: str | None = None):
    res = cluster.run("sacctmgr", "-i", *args, user=user)
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_private_data_hides_other_users_jobs_usage_accounts(private: Cluster, other_user: str,
                                                            intruder: str,
                                                            workdir: Path) -> None:
    acct(private, "add", "account", "vict")
    acct(private, "add", "account", "atk")
    acct(private, "add", "user", other_user, "Account=vict")
    acct(private, "add", "user", intruder, "Account=atk")
    theirs = users_dir(workdir, other_user)
    done = private.sbatch("-A", "vict", "--wrap", "true", user=other_user, cwd=theirs)
    held = private.sbatch("-A", "vict", "--hold", "-J", "victimjob", "--wrap", "sleep 600",
                          user=other_user, cwd=theirs)
    mine = private.sbatch("-A", "atk", "--hold", "--wrap", "sleep 600", user=intruder,
                          cwd=users_dir(workdir, intruder))
    try:
        private.wait(done, {"COMPLETED"})
        # jobs: squeue, scontrol, sacct, kiln why show the attacker only their own
        queue = private.run("squeue", "-h", "-o", "%i %u", user=intruder)
        assert queue.returncode == 0 and queue.stdout.split() == [str(mine), intruder]
        shown = private.run("scontrol", "show", "job", str(held), user=intruder)
        assert shown.returncode != 0 and "Invalid job id" in shown.stderr
        assert "victimjob" not in shown.stdout
        hist = private.run("sacct", "-X", "-n", "-P", "-o", "JobID,User", "-a", user=intruder)
        assert hist.returncode == 0 and other_user not in hist.stdout, hist.stdout
        assert private.run("kiln", "why", str(held), user=intruder).returncode != 0
        stat_ = private.run("sstat", "-n", "-j", str(held), user=intruder)  # as an unknown id
        assert stat_.stderr == f"sstat: error: couldn't get steps for job {held}\n"
        own = private.run("sstat", "-n", "-j", str(held), user=other_user)
        assert own.stderr == f"sstat: error: no steps running for job {held}\n"
        # ... while the owner and root see theirs
        theirs_q = private.run("squeue", "-h", "-o", "%i", user=other_user).stdout.split()
        assert str(held) in theirs_q and str(mine) not in theirs_q
        assert {str(held), str(mine)} <= set(private.run("squeue", "-h", "-o", "%i").stdout.split())
        assert other_user in private.run("sacct", "-X", "-n", "-P", "-o", "User", "-a").stdout
        # usage: sshare and sreport name no other user
        share = private.run("sshare", "-a", "-n", "-P", user=intruder)
        assert share.returncode == 0 and other_user not in share.stdout, share.stdout
        assert intruder in share.stdout
        assert other_user in private.run("sshare", "-a", "-n", "-P").stdout
        report = private.run("sreport", "-n", "-P", "cluster", "AccountUtilizationByUser",
                             "start=now-1hour", "end=now+1hour", user=intruder)
        assert report.returncode == 0 and other_user not in report.stdout, report.stdout
        # accounts, users: sacctmgr show lists the attacker's own only
        users = private.run("sacctmgr", "-n", "-P", "show", "user", user=intruder)
        assert users.returncode == 0 and other_user not in users.stdout
        assert intruder in users.stdout
        accounts = private.run("sacctmgr", "-n", "-P", "show", "account", user=intruder)
        assert "vict" not in accounts.stdout.split() and "atk" in accounts.stdout
        assoc = private.run("sacctmgr", "-n", "-P", "show", "assoc", user=intruder)
        assert other_user not in assoc.stdout and "vict" not in assoc.stdout
        assert "vict" in private.run("sacctmgr", "-n", "-P", "show", "account").stdout
    finally:
        private.run("scancel", str(held), str(mine))


# --- 6: the checkpoint file preemption trusts -------------------------------------------------

GRACE = 2

VICTIM = """#!/bin/bash
echo "$KILN_CHECKPOINT_FILE" > {dir}/{name}.ckpt
while true; do {touch} sleep 0.1; done
"""


@pytest.fixture(scope="module")
def preempt_qos(cluster: Cluster, other_user: str) -> None:
    acct(cluster, "add", "qos", "low", f"GraceTime={GRACE}")
    acct(cluster, "add", "qos", "high", "Priority=100", "Preempt=low", "PreemptMode=REQUEUE")
    acct(cluster, "modify", "account", "root", "set", "QOS=normal,low,high")
    acct(cluster, "add", "account", "a")
    acct(cluster, "add", "user", "root", "Account=a")
    acct(cluster, "add", "user", other_user, "Account=a")


def test_nobody_else_can_touch_a_jobs_checkpoint(cluster: Cluster, preempt_qos: None,
                                                 other_user: str, intruder: str,
                                                 workdir: Path) -> None:
    """The attack: make the victim's older job look freshly checkpointed, so that it (not the
    job that did checkpoint) is preempted."""
    theirs = users_dir(workdir, other_user)
    theirs.chmod(0o755)
    old = cluster.sbatch("-A", "a", "--qos=low", "--gres=gpu:4", "--restart-cost=1",
                         "-J", "old", "-t", "10", user=other_user, cwd=theirs,
                         input=VICTIM.format(dir=theirs, name="old", touch=""))
    cluster.wait(old, {"RUNNING"})  # never checkpoints: its loss is its whole run
    new = cluster.sbatch("-A", "a", "--qos=low", "--gres=gpu:4", "--restart-cost=1",
                         "-J", "new", "-t", "10", user=other_user, cwd=theirs,
                         input=VICTIM.format(dir=theirs, name="new",
                                             touch='touch "$KILN_CHECKPOINT_FILE";'))
    high = None
    try:
        cluster.wait(new, {"RUNNING"})
        ckpt = Path(until(lambda: (theirs / "old.ckpt").exists()
                             and (theirs / "old.ckpt").read_text().strip()))
        assert ckpt.parent.parent == cluster.home / "spool" / "node1" / "jobs-tmp", ckpt
        private_dir = ckpt.parent
        st = private_dir.stat()
        assert st.st_uid == pwd.getpwnam(other_user).pw_uid
        assert stat.S_IMODE(st.st_mode) == 0o700
        # the attacker can neither touch it nor plant one, nor a link in its place
        touched = as_user(intruder, "touch", str(ckpt))
        assert touched.returncode != 0 and "Permission denied" in touched.stderr
        linked = as_user(intruder, "ln", "-s", "/tmp", str(ckpt))
        assert linked.returncode != 0 and "Permission denied" in linked.stderr
        planted = as_user(intruder, "mkdir", "-p", str(private_dir.parent / "planted"))
        assert planted.returncode != 0
        # nor does the old predictable path count any more
        for job_id in (old, new):
            stale = Path(f"/tmp/kiln-checkpoint-kiln-{job_id}")
            as_user(intruder, "touch", str(stale))
        high = cluster.sbatch("-A", "a", "--qos=high", "--gres=gpu:4", "-t", "5",
                              "--wrap", "sleep 1", cwd=workdir)
        cluster.wait(high, {"RUNNING", "COMPLETED"}, timeout=60)
        assert cluster.job(new)["restart_count"] == 1 or cluster.job(new)["state"] != "RUNNING"
        assert cluster.job(old)["state"] == "RUNNING" and cluster.job(old)["restart_count"] == 0
    finally:
        cluster.run("scancel", str(old), str(new), *([str(high)] if high else []))
        for job_id in (old, new):
            Path(f"/tmp/kiln-checkpoint-kiln-{job_id}").unlink(missing_ok=True)


def test_private_dir_goes_with_the_job(cluster: Cluster, other_user: str,
                                       workdir: Path) -> None:
    theirs = users_dir(workdir, other_user)
    job = cluster.sbatch("--wrap", f'echo "$KILN_CHECKPOINT_FILE" > {theirs}/ckpt.path; '
                         'ln -s /etc/shadow "$KILN_CHECKPOINT_FILE"', user=other_user,
                         cwd=theirs)
    cluster.wait(job, {"COMPLETED"})
    ckpt = Path((theirs / "ckpt.path").read_text().strip())
    assert ckpt.name == "checkpoint"
    until(lambda: not ckpt.parent.exists(), timeout=30)
    assert Path("/etc/shadow").exists()  # rmtree removed the link, not what it named
