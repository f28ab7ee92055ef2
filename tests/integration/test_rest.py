"""kiln restd (Slurm's REST API) against a real cluster: each path family, the token rules,
local auth on the unix socket, bad bodies; every answer validated by openapi-core against
Slurm's published document of its version (tests/integration/restclient.py)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kiln import tokens
from tests.integration.cluster import (
    BIN,
    Cluster,
    cleanup,
    raw_requests,
    until,
    world_tempdir,
)
from tests.integration.restclient import DOCS, RestD

SCRIPT = "#!/bin/sh\nsleep 300\n"
ENV = ["PATH=/usr/bin:/bin"]
V40, V41 = "v0.0.40", "v0.0.41"


@pytest.fixture(scope="module")
def rest(other_user: str) -> Iterator[RestD]:
    home = world_tempdir("kiln-rest-")
    cluster = Cluster(home=home, db_url=f"sqlite:///{home}/kiln.db",
                      schedd_extra='rest_relays = ["root"]\nprivate_data = ["jobs"]',
                      config_extra='[[license]]\nname = "matlab"\ncount = 4\n')
    cluster.up()
    work = home / "work"  # the jobs' directory, any user's (/tmp's slurm-N.out are not)
    work.mkdir(mode=0o1777)
    work.chmod(0o1777)
    restd = RestD(cluster)
    restd.start()
    try:
        yield restd
    finally:
        restd.stop()
        cluster.down()
        cleanup(home)


def submit(rest: RestD, token: str, user: str = "", version: str = V40, **job: object) -> int:
    body = {"job": {"name": "rest", "environment": ENV, "current_working_directory": str(rest.cluster.home / "work"),
                    **job}, "script": SCRIPT}
    status, doc = rest.http("POST", f"/slurm/{version}/job/submit", token, user, body)
    assert status == 200 and not doc["errors"], doc
    return int(doc["job_id"])


def queue_ids(rest: RestD) -> set[int]:
    """Every job schedd knows (finished ones too): a refused body adds none."""
    (reply,) = raw_requests(rest.cluster, "root", [("query_jobs", {"all_states": True})])
    return {j["id"] for j in reply["body"]["jobs"]}


# --- the first families: ping, jobs, job/submit, job/{id} --------------------------------


@pytest.mark.parametrize("version", [V40, V41])
def test_ping_with_a_token_and_locally(rest: RestD, other_user: str, version: str) -> None:
    token = rest.token(other_user)
    status, doc = rest.http("GET", f"/slurm/{version}/ping", token, other_user)
    assert status == 200, doc
    assert doc["pings"][0]["pinged"] == "UP" and doc["errors"] == []
    assert doc["meta"]["client"]["user"] == other_user
    status, doc = rest.local("GET", f"/slurm/{version}/ping/", as_user=other_user)
    assert status == 200 and doc["meta"]["client"]["user"] == other_user


def test_submit_list_show_cancel(rest: RestD, other_user: str) -> None:
    token = rest.token(other_user)
    job_id = submit(rest, token, other_user, name="rest-one", time_limit={
        "set": True, "infinite": False, "number": 7})
    job = rest.cluster.wait(job_id, {"RUNNING", "PENDING"})
    assert job["user"] == other_user and job["name"] == "rest-one"
    assert job["time_limit"] == 7 * 60 and job["workdir"] == str(rest.cluster.home / "work")
    status, doc = rest.http("GET", f"/slurm/{V40}/jobs", token, other_user)
    assert status == 200 and job_id in [j["job_id"] for j in doc["jobs"]]
    for version in (V40, V41):
        status, doc = rest.http("GET", f"/slurm/{version}/job/{job_id}", token, other_user)
        assert status == 200, doc
        (shown,) = doc["jobs"]
        assert shown["user_name"] == other_user and shown["name"] == "rest-one"
        assert shown["time_limit"] == {"set": True, "infinite": False, "number": 7}
    status, doc = rest.http("DELETE", f"/slurm/{V40}/job/{job_id}", token, other_user)
    assert status == 200 and doc["errors"] == [], doc
    assert rest.cluster.wait(job_id, {"CANCELLED"})["state"] == "CANCELLED"


def test_delete_with_sigkill_cancels(rest: RestD, other_user: str) -> None:
    token = rest.token(other_user)
    job_id = submit(rest, token, other_user, name="rest-signal")
    rest.cluster.wait(job_id, {"RUNNING"})
    status, doc = rest.http("DELETE", f"/slurm/{V41}/job/{job_id}?signal=SIGKILL", token,
                            other_user)
    assert status == 200 and doc["errors"] == [], doc
    assert rest.cluster.wait(job_id, {"CANCELLED"})["state"] == "CANCELLED"
    status, doc = rest.http("DELETE", f"/slurm/{V41}/job/{job_id}", token, other_user)
    assert status == 400 and doc["errors"][0]["error_number"] == 2021, doc


def test_unknown_job_is_404_in_slurms_words(rest: RestD) -> None:
    token = rest.token()
    status, doc = rest.http("GET", f"/slurm/{V40}/job/999999", token)
    assert status == 404
    assert doc["errors"][0]["error_number"] == 2017
    assert doc["errors"][0]["error"] == "Invalid job id specified"


def test_an_unknown_path_is_404(rest: RestD) -> None:
    status, doc = rest.http("GET", f"/slurm/{V40}/nothing", rest.token(), check=False)
    assert status == 404 and doc["errors"][0]["error_number"] == 9006


# --- the token rules --------------------------------------------------------------------


def _claims(token: str) -> dict:
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def test_scontrol_token_prints_slurm_jwt(rest: RestD, other_user: str) -> None:
    token = rest.token(other_user, "lifespan=120")
    claims = _claims(token)
    assert claims["sun"] == other_user and claims["exp"] - claims["iat"] == 120
    res = rest.cluster.run("scontrol", "token", "username=root", user=other_user)
    assert res.returncode == 1 and "Access/permission denied" in res.stderr, res
    res = rest.cluster.run("scontrol", "token", "lifespan=soon")
    assert res.returncode == 1 and "Invalid token argument: lifespan=soon" in res.stderr
    assert _claims(rest.token(None, f"username={other_user}"))["sun"] == other_user


def test_key_is_root_only(rest: RestD) -> None:
    path = tokens.key_path(rest.cluster.home / "keys")
    assert path.stat().st_mode & 0o777 == 0o600


def test_no_token_on_tcp_is_401(rest: RestD) -> None:
    status, doc = rest.http("GET", f"/slurm/{V40}/jobs")
    assert status == 401 and doc["errors"][0]["error_number"] == 1007
    status, doc = rest.http("GET", f"/slurm/{V40}/jobs", user="root")
    assert status == 401


def test_expired_token_is_401(rest: RestD, other_user: str) -> None:
    token = rest.token(other_user, "lifespan=1")
    time.sleep(2.1)
    status, doc = rest.http("GET", f"/slurm/{V40}/jobs", token, other_user)
    assert status == 401 and doc["errors"][0]["description"] == "token expired", doc


def test_forged_token_is_401(rest: RestD, other_user: str) -> None:
    head, body, mac = rest.token(other_user).split(".")
    claims = _claims(f"{head}.{body}.x")
    claims["sun"] = "root"  # the same signature over other claims
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    status, doc = rest.http("GET", f"/slurm/{V40}/jobs", f"{head}.{forged}.{mac}", "root")
    assert status == 401
    assert doc["errors"][0]["description"] == "invalid token: signature verification failed"
    status, doc = rest.http("GET", f"/slurm/{V40}/jobs", "not-a-token", "root")
    assert status == 401 and "not a JWT" in doc["errors"][0]["description"]


def test_a_token_signed_with_another_key_is_401(rest: RestD) -> None:
    wrong = tokens.mint(b"k" * 32, "root", 600, time.time())
    status, doc = rest.http("POST", f"/slurm/{V40}/job/submit", wrong, "root",
                            {"job": {"environment": ENV}, "script": SCRIPT})
    assert status == 401, doc
    assert doc["errors"][0]["description"] == "invalid token: signature verification failed"


def test_a_users_token_never_acts_as_another(rest: RestD, other_user: str) -> None:
    before = queue_ids(rest)
    token = rest.token(other_user)
    status, doc = rest.http("POST", f"/slurm/{V40}/job/submit", token, "root",
                            {"job": {"environment": ENV}, "script": SCRIPT})
    assert status == 401, doc
    assert doc["errors"][0]["description"] == \
        f"token of user {other_user} may not act as user root"
    assert queue_ids(rest) == before


def test_a_users_token_sees_and_cancels_only_its_own(rest: RestD, other_user: str) -> None:
    mine = rest.cluster.sbatch("--wrap", "sleep 300", cwd=rest.cluster.home / "work")  # root's
    token = rest.token(other_user)
    status, doc = rest.http("GET", f"/slurm/{V40}/jobs", token, other_user)
    assert status == 200 and mine not in [j["job_id"] for j in doc["jobs"]]  # PrivateData
    status, doc = rest.http("GET", f"/slurm/{V40}/job/{mine}", token, other_user)
    assert status == 404
    status, doc = rest.http("DELETE", f"/slurm/{V40}/job/{mine}", token, other_user)
    assert status == 403 and doc["errors"][0]["error_number"] == 2002, doc
    assert rest.cluster.job(mine)["state"] in ("PENDING", "RUNNING")
    root = rest.token()
    status, doc = rest.http("GET", f"/slurm/{V40}/job/{mine}", root, "root")
    assert status == 200 and doc["jobs"][0]["user_name"] == "root"
    assert rest.http("DELETE", f"/slurm/{V40}/job/{mine}", root, "root")[0] == 200


def test_local_identity_comes_from_the_kernel(rest: RestD, other_user: str) -> None:
    status, doc = rest.local("POST", f"/slurm/{V40}/job/submit", as_user=other_user, body={
        "job": {"name": "rest-local", "environment": ENV, "user_id": "0"}, "script": SCRIPT})
    assert status == 200, doc  # user_id in a body names nobody: the peer's uid does
    job = rest.cluster.job(doc["job_id"])
    assert job["user"] == other_user
    rest.cluster.run("scancel", str(doc["job_id"]))


def test_schedd_takes_a_local_identity_only_from_a_listed_relay(rest: RestD,
                                                                other_user: str) -> None:
    from kiln.wire import protocol

    inner = protocol.request("query_jobs", {}, 1).decode()
    (reply,) = raw_requests(rest.cluster, other_user,
                            [("act_for", {"uid": 0, "gid": 0, "request": inner})])
    assert not reply["ok"] and reply["error"]["code"] == "permission_denied", reply
    assert "is not a REST relay" in reply["error"]["message"]
    nested = protocol.request("act_for", {"uid": 0, "gid": 0, "request": inner}, 1).decode()
    token = rest.token(other_user)
    (reply,) = raw_requests(rest.cluster, other_user, [("act_for", {
        "token": token, "user": other_user, "request": nested})])
    assert not reply["ok"] and "may not be nested" in reply["error"]["message"]


# --- a bad body: a clear 4xx, nothing submitted -------------------------------------------


@pytest.mark.parametrize("body,status,words", [
    ({"job": {"environment": ENV}}, 400, "Batch job script not specified"),
    ({"job": {"tasks": "many", "environment": ENV}, "script": SCRIPT}, 400,
     'Invalid numeric value "many" for --ntasks.'),
    ({"job": {"nonsense": 1}, "script": SCRIPT}, 400, "Unknown field 'nonsense'"),
    ({"job": {"environment": ENV}, "script": "echo no interpreter\n"}, 400,
     "This does not look like a batch script."),
    ({"job": {"partition": "nope", "environment": ENV}, "script": SCRIPT}, 400,
     "Invalid partition name specified"),
    ({"script": SCRIPT}, 422, "Specifing either \"job\" or \"jobs\""),
])
def test_bad_body_is_refused_and_nothing_is_submitted(rest: RestD, body: dict, status: int,
                                                      words: str) -> None:
    before = queue_ids(rest)
    got, doc = rest.http("POST", f"/slurm/{V40}/job/submit", rest.token(), "root", body)
    assert got == status, doc
    assert words in doc["errors"][0]["description"], doc
    assert queue_ids(rest) == before


def test_a_body_that_is_not_json_is_400(rest: RestD) -> None:
    before = queue_ids(rest)
    status, doc = rest.http("POST", f"/slurm/{V40}/job/submit", rest.token(), "root",
                            raw=b"{not json")
    assert status == 400 and doc["errors"][0]["error_number"] == 9001
    assert queue_ids(rest) == before


def test_script_directives_and_body_fields_as_sbatch(rest: RestD) -> None:
    token = rest.token()
    script = "#!/bin/sh\n#SBATCH --job-name=from-script\n#SBATCH --time=3\nsleep 300\n"
    status, doc = rest.http("POST", f"/slurm/{V41}/job/submit", token, "root", {
        "job": {"environment": ENV, "time_limit": {"set": True, "number": 9},
                "tres_per_node": "gres/gpu:2", "comment": "c1"}, "script": script})
    assert status == 200, doc
    job = rest.cluster.job(doc["job_id"])
    assert job["name"] == "from-script"  # a directive, where the body names nothing
    assert job["time_limit"] == 9 * 60  # the body wins, as a command line does
    assert job["gpus_per_node"] == 2 and job["comment"] == "c1"
    rest.cluster.run("scancel", str(doc["job_id"]))


def test_update_a_job(rest: RestD, other_user: str) -> None:
    token = rest.token(other_user)
    job_id = submit(rest, token, other_user, hold=True)
    status, doc = rest.http("POST", f"/slurm/{V40}/job/{job_id}", token, other_user,
                            {"comment": "changed", "time_limit": {"set": True, "number": 11}})
    assert status == 200, doc
    job = rest.cluster.job(job_id)
    assert job["comment"] == "changed" and job["time_limit"] == 11 * 60
    status, doc = rest.http("POST", f"/slurm/{V40}/job/{job_id}", token, other_user,
                            {"priority": {"set": True, "number": 5}})
    assert status == 403 and doc["errors"], doc  # an operator's field
    rest.cluster.run("scancel", str(job_id))


# --- the other families ------------------------------------------------------------------


@pytest.mark.parametrize("version", [V40, V41])
@pytest.mark.parametrize("path", [
    "/slurm/{v}/diag", "/slurm/{v}/nodes", "/slurm/{v}/node/node1", "/slurm/{v}/partitions",
    "/slurm/{v}/partition/gpu", "/slurm/{v}/reservations", "/slurm/{v}/licenses",
    "/slurmdb/{v}/jobs", "/slurmdb/{v}/accounts", "/slurmdb/{v}/associations",
    "/slurmdb/{v}/users", "/slurmdb/{v}/qos", "/slurmdb/{v}/tres", "/slurmdb/{v}/diag",
])
def test_every_path_answers_in_its_published_shape(rest: RestD, path: str,
                                                   version: str) -> None:
    status, doc = rest.http("GET", path.format(v=version), rest.token(), "root")
    assert status == 200 and doc["errors"] == [], doc


def test_the_families_answer_what_kiln_has(rest: RestD) -> None:
    token = rest.token()
    nodes = rest.http("GET", f"/slurm/{V40}/nodes", token)[1]["nodes"]
    assert [n["name"] for n in nodes] == ["node1"] and nodes[0]["cpus"] > 0
    assert rest.http("GET", f"/slurm/{V40}/node/nodeX", token, check=False)[0] == 404
    parts = rest.http("GET", f"/slurm/{V41}/partitions", token)[1]["partitions"]
    assert {p["name"] for p in parts} == {"gpu", "short"}
    (lic,) = rest.http("GET", f"/slurm/{V40}/licenses", token)[1]["licenses"]
    assert lic["LicenseName"] == "matlab" and lic["Total"] == 4
    qos = rest.http("GET", f"/slurmdb/{V40}/qos", token)[1]["qos"]
    assert "normal" in [q["name"] for q in qos]
    users = rest.http("GET", f"/slurmdb/{V40}/users", token)[1]["users"]
    assert "root" in [u["name"] for u in users]
    accounts = rest.http("GET", f"/slurmdb/{V40}/accounts", token)[1]["accounts"]
    assert "root" in [a["name"] for a in accounts]
    diag = rest.http("GET", f"/slurm/{V40}/diag", token)[1]["statistics"]
    assert diag["jobs_submitted"] >= 0 and diag["req_time"]["set"]


def test_slurmdb_jobs_with_sacct_filters(rest: RestD, other_user: str) -> None:
    token = rest.token(other_user)
    job_id = submit(rest, token, other_user, name="acct-me")
    rest.cluster.run("scancel", str(job_id))
    rest.cluster.wait(job_id, {"CANCELLED"})
    for version in (V40, V41):
        status, doc = rest.http("GET", f"/slurmdb/{version}/job/{job_id}", token, other_user)
        assert status == 200, doc
        assert doc["jobs"][0]["name"] == "acct-me" and doc["jobs"][0]["user"] == other_user
    status, doc = rest.http("GET", f"/slurmdb/{V40}/jobs?job_name=acct-me&state=CANCELLED",
                            token, other_user)
    assert status == 200 and [j["job_id"] for j in doc["jobs"]] == [job_id]
    status, doc = rest.http("GET", f"/slurmdb/{V40}/jobs?job_name=no-such-name", token,
                            other_user)
    assert status == 200 and doc["jobs"] == []
    status, doc = rest.http("GET", f"/slurmdb/{V40}/jobs?cpus_max=3", token, other_user)
    assert status == 400 and "cpus_max" in doc["errors"][0]["description"]


def test_node_update_is_for_operators(rest: RestD, other_user: str) -> None:
    token = rest.token(other_user)
    status, doc = rest.http("POST", f"/slurm/{V40}/node/node1", token, other_user,
                            {"state": ["DRAIN"], "reason": "mine"})
    assert status == 403 and doc["errors"], doc
    root = rest.token()
    status, doc = rest.http("POST", f"/slurm/{V40}/node/node1", root, "root",
                            {"state": ["DRAIN"], "reason": "rest test"})
    assert status == 200, doc
    node = rest.http("GET", f"/slurm/{V40}/node/node1", root)[1]["nodes"][0]
    assert "DRAIN" in node["state"] and node["reason"] == "rest test"
    assert rest.http("POST", f"/slurm/{V40}/node/node1", root, "root",
                     {"state": ["RESUME"]})[0] == 200
    until(lambda: "DRAIN" not in rest.http("GET", f"/slurm/{V40}/node/node1", root)[1]
          ["nodes"][0]["state"], "node1 resumed")


def test_kiln_restd_without_a_listener_says_so(rest: RestD) -> None:
    res = subprocess.run([str(BIN / "kiln"), "restd", "--no-socket"], env=rest.cluster.env,
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1
    assert res.stderr.strip() == "Error: nothing to listen on: give --listen or a socket"


# --- docs/rest.md's examples run as written -----------------------------------------------


def test_the_docs_examples_run_as_written(rest: RestD) -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "rest.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    assert len(blocks) == 4
    script = "set -euo pipefail\n" + "\n".join(blocks)
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=rest.cluster.home / "work",
                         env={**rest.cluster.env,
                              "SLURMRESTD": f"http://127.0.0.1:{rest.port}"})
    assert res.returncode == 0, res.stderr + res.stdout
    lines = res.stdout.splitlines()
    assert lines[0] == "UP"
    job_id = int(re.search(r"^submitted (\d+)$", res.stdout, re.M).group(1))
    assert any(f'"job_id":{job_id},"name":"hello"' in line for line in lines)
    assert "[]" in lines  # the DELETE's errors
    assert rest.cluster.wait(job_id, {"CANCELLED"})["state"] == "CANCELLED"
    assert '"name":"node1"' in res.stdout and f"[{job_id}]" in lines
    assert lines[-2:] == ["401", 'Invalid numeric value "many" for --ntasks.']


# --- a client generated from Slurm's published document -----------------------------------


def test_a_client_generated_from_slurms_document(rest: RestD, other_user: str,
                                                tmp_path: Path) -> None:
    """openapi-python-client (PyPI, the test extra) generates a client from the vendored
    v0.0.41 document as published, with no warning; it submits, lists and cancels a job,
    parsing each answer into the document's models (docs/rest.md says why not v0.0.40)."""
    conf = tmp_path / "gen.yaml"
    conf.write_text("post_hooks: []\n")  # no formatter run on the generated code
    res = subprocess.run([str(BIN / "openapi-python-client"), "generate", "--path",
                          str(DOCS / f"{V41}.json"), "--output-path",
                          str(tmp_path / "slurm_client"), "--meta", "none", "--config",
                          str(conf)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "Warning" not in res.stdout + res.stderr, res
    sys.path.insert(0, str(tmp_path))
    try:
        from slurm_client import AuthenticatedClient  # type: ignore[import-not-found]
        from slurm_client.api.slurm import (  # type: ignore[import-not-found]
            slurm_v0041_delete_job,
            slurm_v0041_get_jobs,
            slurm_v0041_post_job_submit,
        )
        from slurm_client.models import (  # type: ignore[import-not-found]
            V0041JobDescMsg,
            V0041JobSubmitReq,
        )
    finally:
        sys.path.remove(str(tmp_path))
    client = AuthenticatedClient(base_url=f"http://127.0.0.1:{rest.port}",
                                 token=rest.token(other_user), prefix="",
                                 auth_header_name="X-SLURM-USER-TOKEN",
                                 headers={"X-SLURM-USER-NAME": other_user})
    body = V0041JobSubmitReq(script=SCRIPT, job=V0041JobDescMsg(
        name="generated", environment=ENV,
        current_working_directory=str(rest.cluster.home / "work")))
    submitted = slurm_v0041_post_job_submit.sync_detailed(client=client, body=body)
    assert submitted.status_code == 200 and not submitted.parsed.errors, submitted.content
    job_id = submitted.parsed.job_id
    assert rest.cluster.wait(job_id, {"RUNNING", "PENDING"})["name"] == "generated"
    listed = slurm_v0041_get_jobs.sync_detailed(client=client)
    assert listed.status_code == 200, listed.content
    (job,) = [j for j in listed.parsed.jobs if j.job_id == job_id]
    assert job.name == "generated" and job.user_name == other_user
    assert [s.value for s in job.job_state] in (["RUNNING"], ["PENDING"])
    cancelled = slurm_v0041_delete_job.sync_detailed(str(job_id), client=client)
    assert cancelled.status_code == 200 and not cancelled.parsed.errors, cancelled.content
    assert rest.cluster.wait(job_id, {"CANCELLED"})["state"] == "CANCELLED"
