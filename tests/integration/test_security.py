"""No one in: agents need a listed CURVE key, identity comes from the OS and never from a message
field, users act on their own jobs only (operators and root on all), only administrators change
accounts, output files are opened with the user's rights, and root's jobs are refused unless
the cluster allows them."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiln import keys
from tests.integration.cluster import (
    Cluster,
    cleanup,
    raw_requests,
    stop_process,
    until,
    world_tempdir,
)
from tests.integration.conftest import BACKENDS, _cluster

DENIED = "Access/permission denied"
ACTIVE = {"PENDING", "RUNNING"}


@pytest.fixture(scope="module", params=BACKENDS)
def secure(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _cluster(request, request.param, nodes=1, fake_gpus="4xA100", kill_wait=2)


@pytest.fixture(scope="module", params=BACKENDS)
def rootless(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster as an administrator would set it up: allow_root_jobs = false."""
    yield from _cluster(request, request.param, nodes=1, fake_gpus="4xA100", kill_wait=2,
                        allow_root_jobs=False)


def _ids(user: str) -> tuple[int, int]:
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


def _users_dir(parent: Path, user: str) -> Path:
    path = parent / user
    path.mkdir()
    os.chown(path, *_ids(user))
    return path


def _wait_log(path: Path, text: str, timeout: float = 15) -> str:
    deadline = time.time() + timeout
    while time.time() < deadline:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared in {path}")


# --- agents: CURVE keys -----------------------------------------------------------------------


def _rogue_agent(cluster: Cluster, tmp: Path, node: str, key_secret: Path,
                 fail_over: bool = False) -> subprocess.Popen:
    """An agentd for ``node`` that authenticates with ``key_secret`` (a kiln.toml of its own).
    With ``fail_over``, schedd's agent endpoint is also its "other" schedd: each time schedd
    stays silent for three heartbeats the agent logs it and knocks again, on a new socket."""
    conf = (cluster.home / "kiln.toml").read_text()
    conf = conf.replace("[agent]\n", f'[agent]\nkey_file = "{key_secret}"\n', 1)
    if fail_over:
        endpoint = re.search(r'^agent_endpoint = "([^"]+)"$', conf, re.M).group(1)
        conf = conf.replace("[schedd]\n", f'[schedd]\nagent_peers = ["{endpoint}"]\n', 1)
    conf = f'home = "{cluster.home}"\n' + conf
    (tmp / "kiln.toml").write_text(conf)
    return subprocess.Popen(
        [sys.executable, "-m", "agentd.daemon", "--config", str(tmp / "kiln.toml"), "--node",
         node, "--fake-gpus", "2xA100", "--spool", str(tmp / "spool"),
         "--log-file", str(tmp / "agentd.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=cluster.env)


def _sinfo_nodes(cluster: Cluster) -> list[str]:
    return sorted(set(cluster.run("sinfo", "-h", "-N", "-o", "%N").stdout.split()))


def test_agent_with_an_unknown_key_is_refused_and_logged(secure: Cluster) -> None:
    tmp = world_tempdir("kiln-rogue-")
    proc = None
    try:
        _, secret = keys.generate(tmp / "keys", "rogue")
        proc = _rogue_agent(secure, tmp, "rogue", secret, fail_over=True)
        log = _wait_log(secure.home / "log" / "schedd.log",
                        "refused an agent with an unknown CURVE key")
        assert keys.load_public(tmp / "keys" / "rogue.key").decode() in log
        # it knocks twice more, each time after three heartbeats unanswered: still refused
        until(lambda: (tmp / "agentd.log").read_text().count("schedd silent for") >= 2,
              "the rogue agent to find schedd silent twice", timeout=60)
        assert proc.poll() is None  # it keeps knocking; nobody answers
        assert _sinfo_nodes(secure) == ["node1"]
        assert "registered with schedd" not in (tmp / "agentd.log").read_text()
    finally:
        if proc is not None:
            stop_process(proc)
        cleanup(tmp)


def test_agent_with_another_nodes_key_is_refused(secure: Cluster) -> None:
    tmp = world_tempdir("kiln-rogue-")
    proc = None
    try:
        stolen = keys.agent_secret(secure.home / "keys", "node1")
        proc = _rogue_agent(secure, tmp, "node9", stolen)
        _wait_log(secure.home / "log" / "schedd.log", "agent 'node9' presented the key of 'node1'")
        _wait_log(tmp / "agentd.log", "schedd refused register: this agent's CURVE key "
                                            "is not its node's")
        assert _sinfo_nodes(secure) == ["node1"]
        assert "node1 idle" in secure.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
    finally:
        if proc is not None:
            stop_process(proc)
        cleanup(tmp)


# --- identity: the socket's, never the message's ------------------------------------------

def test_forged_uid_fields_are_never_trusted(secure: Cluster, other_user: str,
                                             workdir: Path) -> None:
    mine = secure.sbatch("--hold", "--wrap", "sleep 600", cwd=workdir)
    theirs_dir = _users_dir(workdir, other_user)
    job = {"script": "#!/bin/sh\nsleep 600\n", "workdir": str(theirs_dir), "held": "user",
           "stdout": "x.out", "name": "forged"}
    forged = [
        ("submit", {"job": {**job, "uid": 0, "gid": 0, "user": "root"}}),
        ("submit", {"job": {**job, "user": "root"}}),
        ("cancel", {"job_ids": [str(mine)], "uid": 0}),
        ("cancel", {"job_ids": [str(mine)], "user": "root"}),
        ("hold", {"job_ids": [str(mine)], "uid": 0}),
        ("submit", {"job": job}),  # honest: owned by the caller the socket names
        ("cancel", {"job_ids": [str(mine)]}),
        ("release", {"job_ids": [str(mine)]}),
    ]
    replies = raw_requests(secure, other_user, forged)
    for reply in replies[:5]:
        assert reply["ok"] is False, reply
        assert reply["error"]["code"] in ("invalid", "bad_request"), reply
    assert "'uid'" in replies[0]["error"]["message"]
    assert "'user'" in replies[1]["error"]["message"]
    assert replies[5]["ok"] is True
    honest = replies[5]["body"]["job_id"]
    assert secure.job(honest)["user"] == other_user
    assert secure.job(honest)["uid"] == _ids(other_user)[0]
    assert replies[6]["body"]["errors"] == [{"job_id": str(mine), "message": DENIED}]
    assert replies[7]["body"]["errors"][0]["message"] == DENIED
    mine_now = secure.job(mine)
    assert mine_now["state"] == "PENDING" and mine_now["user"] == "root"
    assert "forged" not in secure.run("squeue", "-h", "-u", "root", "-o", "%j").stdout
    assert secure.run("scancel", str(mine), str(honest)).returncode == 0


# --- authorisation ----------------------------------------------------------------------------


def _acct(cluster: Cluster, *args: str, user: str | None = None):
    return cluster.run("sacctmgr", "-i", *args, user=user)


def test_users_act_only_on_their_own_jobs(secure: Cluster, other_user: str,
                                          workdir: Path) -> None:
    mine = secure.sbatch("--hold", "--wrap", "sleep 600", cwd=workdir)
    theirs = secure.sbatch("--begin=now+1hour", "--wrap", "sleep 600", user=other_user,
                           cwd=_users_dir(workdir, other_user))
    try:
        for argv in (["scancel", str(mine)], ["scontrol", "release", str(mine)],
                     ["scontrol", "hold", str(mine)], ["scontrol", "requeue", str(mine)],
                     ["scontrol", "update", f"jobid={mine}", "TimeLimit=5"],
                     ["scontrol", "update", f"jobid={mine}", "Name=stolen"]):
            res = secure.run(*argv, user=other_user)
            assert res.returncode == 1, argv
            assert DENIED in res.stderr, (argv, res.stderr)
        res = secure.run("scancel", "-u", "root", user=other_user)
        assert res.returncode == 1 and DENIED in res.stderr
        job = secure.job(mine)
        assert job["state"] == "PENDING" and job["reason"] == "JobHeldUser", job
        assert job["name"] == "wrap" and job["time_limit"] != 300, job
        # their own: every action works
        assert secure.run("scontrol", "hold", str(theirs), user=other_user).returncode == 0
        assert secure.job(theirs)["reason"] == "JobHeldUser"
        assert secure.run("scontrol", "release", str(theirs), user=other_user).returncode == 0
        res = secure.run("scontrol", "update", f"jobid={theirs}", "TimeLimit=5",
                         user=other_user)
        assert res.returncode == 0, res.stderr
        assert secure.job(theirs)["time_limit"] == 300
        assert secure.run("scancel", str(theirs), user=other_user).returncode == 0
        assert secure.job(theirs)["state"] == "CANCELLED"
        running = secure.sbatch("--wrap", "sleep 600", user=other_user, cwd=workdir / other_user)
        secure.wait(running, {"RUNNING"})
        res = secure.run("scontrol", "requeue", str(running), user=other_user)
        assert res.returncode == 0, res.stderr
        deadline = time.time() + 30
        while secure.job(running)["restart_count"] == 0:
            assert time.time() < deadline, "the owner's requeue never happened"
            time.sleep(0.2)
        assert secure.run("scancel", str(running), user=other_user).returncode == 0
        # root (Administrator) acts on anyone's
        again = secure.sbatch("--hold", "--wrap", "sleep 600", user=other_user,
                              cwd=workdir / other_user)
        assert secure.run("scontrol", "release", str(again)).returncode == 0
        assert secure.run("scancel", str(again)).returncode == 0
        assert secure.job(again)["state"] in ("CANCELLED", "COMPLETING")
    finally:
        secure.run("scancel", str(mine), str(theirs))


def test_operator_acts_on_every_job_and_only_admins_change_accounts(
        secure: Cluster, other_user: str, workdir: Path) -> None:
    res = _acct(secure, "add", "account", "evil", user=other_user)
    assert res.returncode == 1 and DENIED in res.stderr
    res = _acct(secure, "modify", "user", "where", f"name={other_user}", "set",
                "AdminLevel=Operator", user=other_user)
    assert res.returncode == 1
    assert "evil" not in secure.run("sacctmgr", "-n", "-P", "show", "account").stdout
    assert _acct(secure, "add", "account", "sec").returncode == 0
    assert _acct(secure, "add", "user", "root", "Account=sec").returncode == 0
    assert _acct(secure, "add", "user", other_user, "Account=sec").returncode == 0
    res = _acct(secure, "modify", "user", "where", f"name={other_user}", "set",
                "AdminLevel=Operator")
    assert res.returncode == 0, res.stderr
    shown = secure.run("sacctmgr", "-n", "-P", "show", "user", other_user).stdout
    assert "|Operator" in shown, shown
    mine = secure.sbatch("--hold", "--wrap", "sleep 600", cwd=workdir)
    try:
        assert secure.run("scontrol", "release", str(mine), user=other_user).returncode == 0
        res = secure.run("scancel", str(mine), user=other_user)
        assert res.returncode == 0, res.stderr
        assert secure.job(mine)["state"] in ("CANCELLED", "COMPLETING")
    finally:
        res = _acct(secure, "modify", "user", "where", f"name={other_user}", "set",
                    "AdminLevel=None")
        assert res.returncode == 0, res.stderr
        secure.run("scancel", str(mine))
    again = secure.sbatch("--hold", "--wrap", "sleep 600", cwd=workdir)
    res = secure.run("scancel", str(again), user=other_user)
    assert res.returncode == 1 and DENIED in res.stderr  # back to a plain user
    assert secure.run("scancel", str(again)).returncode == 0


def test_output_files_are_opened_with_the_users_rights(secure: Cluster, other_user: str,
                                                       workdir: Path) -> None:
    precious = workdir / "precious"  # root's file in a directory everyone may write to
    precious.write_text("root's data\n")
    os.chmod(precious, 0o644)
    locked = workdir / "locked"
    locked.mkdir(mode=0o755)
    theirs_dir = _users_dir(workdir, other_user)
    clobber = secure.sbatch("-o", str(precious), "--wrap", "echo overwritten", user=other_user,
                            cwd=theirs_dir)
    assert secure.wait(clobber, {"COMPLETED", "FAILED"})["state"] == "FAILED"
    assert precious.read_text() == "root's data\n"
    sneak = secure.sbatch("-o", str(locked / "out"), "--wrap", "echo hi", user=other_user,
                          cwd=theirs_dir)
    assert secure.wait(sneak, {"COMPLETED", "FAILED"})["state"] == "FAILED"
    assert not (locked / "out").exists()
    fine = secure.sbatch("-o", "fine.out", "--wrap", "echo hi", user=other_user, cwd=theirs_dir)
    assert secure.wait(fine, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    out = theirs_dir / "fine.out"
    assert out.read_text() == "hi\n"
    assert (out.stat().st_uid, out.stat().st_gid) == _ids(other_user)


def test_root_jobs_are_refused_unless_configured(rootless: Cluster, other_user: str,
                                                  workdir: Path) -> None:
    res = rootless.run("sbatch", "--wrap", "true", cwd=workdir)
    assert res.returncode == 1
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "jobs of root are not allowed" in lines[0]
    assert rootless.run("squeue", "-h", "-o", "%i").stdout.strip() == ""
    job = rootless.sbatch("--wrap", "true", user=other_user,
                          cwd=_users_dir(workdir, other_user))
    assert rootless.wait(job, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
