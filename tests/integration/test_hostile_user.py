"""Issue 12, played on a live cluster by a hostile second Unix user against root's jobs: what
the attacker sends is refused in one line or answered with bounded work, and the victim's jobs
and squeue are untouched. (The work counts themselves are in tests/unit/schedd/handlers/test_hostile_requests.py;
nothing here asserts a duration.)"""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import BIN, Cluster
from tests.integration.conftest import BACKENDS, _cluster

MAX_JOB_COUNT = 30


@pytest.fixture(scope="module", params=BACKENDS)
def hostile(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _cluster(request, request.param, nodes=1, fake_gpus="2xH100-80GB", kill_wait=3,
                        schedd_extra=f"max_job_count = {MAX_JOB_COUNT}")


def _refused(res: subprocess.CompletedProcess[str], message: str) -> None:
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout == ""
    assert res.stderr == f"sbatch: error: Batch job submission failed: {message}\n"


def _raw(cluster: Cluster, user: str, op: str, body: dict) -> dict:
    """One request on kiln's own client, as ``user``: the reply or the error."""
    code = ("import json, sys\nfrom cli.core.client import Client, ClientError\n"
            f"body = json.loads({json.dumps(json.dumps(body))})\n"
            "try:\n    with Client(timeout=20) as c:\n"
            f"        print(json.dumps({{'ok': c.call({op!r}, body)}}))\n"
            "except ClientError as e:\n"
            "    print(json.dumps({'code': e.code, 'message': e.message}))\n")
    res = cluster.run("python", "-c", code, user=user)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_user_cannot_raise_their_priority_with_a_negative_nice(hostile: Cluster,
                                                                  other_user: str) -> None:
    _refused(hostile.run("sbatch", "--nice=-10000", "--wrap", "true", user=other_user),
             "Invalid --nice value")
    mine = hostile.sbatch("--hold", "--nice=-10000", "--wrap", "true")  # root: an operator
    assert hostile.job(mine)["nice"] == -10000
    hostile.run("scancel", str(mine))


def test_huge_id_ranges_are_answered_and_touch_no_one_else(hostile: Cluster,
                                                           other_user: str) -> None:
    victim = hostile.sbatch("--hold", "-a", "0-3", "--wrap", "true")
    attack = [f"{victim}_[0-3000000]"] * 30 + ["1_[0-3000000]"]
    assert len(" ".join(attack)) < 700
    reply = _raw(hostile, other_user, "cancel", {"job_ids": attack})
    assert reply.get("ok", {}).get("errors") or reply.get("code"), reply  # denied, not stalled
    assert {j["state"] for j in _raw(hostile, "root", "query_jobs",
                                     {"job_ids": [str(victim)]})["ok"]["jobs"]} == {"PENDING"}
    over = [f"{n}_[0-1000]" for n in range(1, 200)]
    assert _raw(hostile, other_user, "query_jobs", {"job_ids": over}) == {
        "code": "invalid", "message": "Too many job ids in one request (at most 100000)"}
    res = hostile.run("squeue", "-h", "-r", "-j", f"{victim}_[0-3000000]", "-o", "%i %t")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 4, res.stderr
    hostile.run("scancel", str(victim))


def test_a_huge_or_unknown_nodelist_is_refused_at_submit(hostile: Cluster,
                                                         other_user: str) -> None:
    attack = ",".join(f"{chr(97 + i // 26)}{chr(97 + i % 26)}[0-99999]" for i in range(30))
    assert len(attack) < 400
    for option in ("-w", "-x"):
        _refused(hostile.run("sbatch", option, attack, "--wrap", "true", user=other_user),
                 "Invalid node name specified")
        _refused(hostile.run("sbatch", option, "node[1-3]", "--wrap", "true", user=other_user),
                 "Invalid node name specified")
    job = hostile.sbatch("--hold", "-w", "node[1-1],node1", "--wrap", "true", user=other_user)
    assert hostile.job(job)["nodelist"] == "node1"
    hostile.run("scancel", str(job))


def test_control_characters_never_reach_another_users_terminal(hostile: Cluster,
                                                               other_user: str) -> None:
    evil = "x\x1b]0;pwned\x07\x1b[2J\n  1 gpu FORGED root R 0:01 1 node1"
    for option, label in (("-J", "--job-name"), ("--comment", "--comment")):
        _refused(hostile.run("sbatch", option, evil, "--wrap", "true", user=other_user),
                 f"Invalid {label} value: control characters are not allowed")
    tab = hostile.sbatch("--hold", "-J", "a\tb", "--wrap", "true", user=other_user)
    res = hostile.run("squeue", "-h", "-o", "%i %j %k")
    assert "\x1b" not in res.stdout and "FORGED" not in res.stdout
    assert f"{tab} a\tb" in res.stdout
    hostile.run("scancel", str(tab))


def test_a_script_over_the_cap_is_refused_at_once(hostile: Cluster, other_user: str,
                                                  workdir: Path) -> None:
    script = workdir / "big.sh"
    script.write_text("#!/bin/sh\n" + "#" * (5 * 1024 * 1024))
    res = hostile.run("sbatch", str(script), user=other_user, cwd=workdir)
    assert res.returncode == 1
    assert res.stderr == (f"sbatch: error: Script {script} is too big, read "
                          f"{5 * 1024 * 1024 + 10} > 4194304 bytes.\n")
    env = {f"KILN_BIG_{i}": "x" * 100_000 for i in range(11)}
    res = hostile.run("sbatch", "--wrap", "true", user=other_user, env=env)
    assert res.returncode == 1 and "environment of" in res.stderr, res.stderr


def test_max_job_count_refuses_then_sbatch_retries_as_slurm_does(hostile: Cluster,
                                                                  other_user: str) -> None:
    for user in ("root", other_user):
        hostile.run("scancel", "-u", user)
    filler = hostile.sbatch("--hold", "-a", f"0-{MAX_JOB_COUNT - 1}", "--wrap", "true",
                            user=other_user)
    assert _raw(hostile, other_user, "submit", {"job": {
        "script": "#!/bin/sh\ntrue\n", "workdir": "/tmp"}}) == {
        "code": "again", "message": "Resource temporarily unavailable"}
    proc = subprocess.Popen(
        ["runuser", "-u", other_user, "--", "env", f"KILN_HOME={hostile.home}",
         f"PATH={hostile.env['PATH']}", str(BIN / "sbatch"), "--wrap", "true"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/tmp", env=hostile.env)
    try:
        deadline = time.time() + 30
        line = ""
        while not line and time.time() < deadline:
            if select.select([proc.stderr], [], [], 1)[0]:
                line = proc.stderr.readline()  # type: ignore[union-attr]
        assert line == ("sbatch: error: Slurm temporarily unable to accept job, sleeping and "
                        "retrying\n")
        hostile.run("scancel", f"{filler}_0", user=other_user)  # room for one
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.startswith("Submitted batch job ")
    hostile.run("scancel", "-u", other_user)
