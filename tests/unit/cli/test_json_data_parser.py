"""--json=v0.0.40 / v0.0.41: the whole output of squeue, sinfo and sacct, for jobs, nodes and
steps of every kind, held to the published OpenAPI schemas (cli/openapi/, bin/openapi-subset),
and the fields kiln knows checked for their real values, as Slurm 23.11 / 24.05's data_parser
dumps them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cli import sacct, sinfo, squeue
from cli.data_parser import schema
from kiln.model import Job, JobState, NodeAllocation, StopMark
from tests.builders import SCHEDBENCH
from tests.openapi_schema import schema_errors, unknown_keys
from tests.unit.cli import test_sacct, test_sinfo
from tests.unit.cli.test_squeue import NOW, serve

VERSIONS = ["v0.0.40", "v0.0.41"]


def no_val(number: Any, infinite: bool = False) -> dict[str, Any]:
    return {"set": number is not None, "infinite": infinite,
            "number": 0 if number is None else number}


def wire(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = dict(partition="gpu", submit_time=NOW - 60, eligible_time=NOW - 60,
                                workdir="/home/schedbench", **SCHEDBENCH)
    base.update(kw)
    return Job(**base).to_wire()


JOBS = [
    wire(id=10, name="train", state=JobState.RUNNING, start_time=NOW - 30, time_limit=3600,
         node_list="gpu[01-02]", batch_host="gpu01", num_nodes=2, gpus_per_node=2,
         gpu_type="h100", exclusive=True, mem_per_node_mb=4096, mail_type="END,TIME_LIMIT_80",
         mail_user="me@example.org", stdout="out-%j.txt", cpus_per_task=2,
         allocation=[NodeAllocation("gpu01", 2, 4096, [0, 1], [0, 1]),
                     NodeAllocation("gpu02", 2, 4096, [0, 1], [4, 5])]),
    wire(id=11, name="queued", state=JobState.PENDING, reason="Priority", time_limit=None,
         held="user", mem_per_cpu_mb=512, num_tasks=4, ntasks_per_node=2,
         expected_start=NOW + 600, dependency="afterok:10"),
    wire(id=12, name="arr", state=JobState.PENDING, reason="Priority", array_job_id=12,
         array_spec="0-3%2", array_max_running=2, mail_type="ALL,ARRAY_TASKS"),
    wire(id=13, name="killed", state=JobState.CANCELLED, start_time=NOW - 50,
         end_time=NOW - 40, exit_signal=9, node_list="gpu03", time_limit=600,
         allocation=[NodeAllocation("gpu03", 1, 0, [], [3])]),
    wire(id=14, name="failing", state=JobState.FAILED, start_time=NOW - 50, end_time=NOW - 45,
         exit_code=3, node_list="gpu03", time_limit=600),
    wire(id=15, name="stopping", state=JobState.COMPLETING, start_time=NOW - 20,
         time_limit=600, node_list="gpu04", stop=StopMark(1, "cancel", "CANCELLED"),
         allocation=[NodeAllocation("gpu04", 1, 0, [], [0])]),
]


def squeue_doc(fake_schedd, capsys, version: str, *args: str) -> dict[str, Any]:
    serve(fake_schedd, JOBS)
    assert squeue.main([f"--json={version}", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_whole_output_follows_the_schema(fake_schedd, capsys,
                                                version: str) -> None:
    doc = squeue_doc(fake_schedd, capsys, version)
    assert schema_errors(schema(version, "squeue"), doc) == []
    assert [j["job_id"] for j in doc["jobs"]] == [10, 11, 12, 13, 14, 15]
    assert doc["meta"]["plugin"]["data_parser"] == f"data_parser/{version}"


@pytest.mark.parametrize("version", VERSIONS)
def test_squeue_fields_carry_kilns_values(fake_schedd, capsys,
                                          version: str) -> None:
    jobs = {j["job_id"]: j for j in squeue_doc(fake_schedd, capsys, version, "-a")["jobs"]}
    run, queued, arr, killed, failing, stopping = (jobs[i] for i in range(10, 16))
    assert [j["job_state"] for j in jobs.values()] == [
        ["RUNNING"], ["PENDING"], ["PENDING"], ["CANCELLED"], ["FAILED"],
        ["CANCELLED", "COMPLETING"]]
    assert run["show_flags"] == ["ALL"]
    assert run["mail_type"] == ["END", "TIME=80%"] and run["mail_user"] == "me@example.org"
    assert arr["mail_type"] == ["BEGIN", "END", "FAIL", "REQUEUE", "STAGE_OUT", "ARRAY_TASKS"]
    assert queued["mail_user"] == "schedbench"
    assert (run["exclusive"], run["shared"], queued["exclusive"], queued["shared"]) == (
        ["true"], ["none"], [], [])
    assert run["start_time"] == no_val(int(NOW) - 30)
    assert run["end_time"] == no_val(int(NOW) - 30 + 3600)  # when its limit runs out
    assert queued["start_time"] == no_val(int(NOW) + 600)  # the expected start
    assert queued["end_time"] == no_val(0)  # a timestamp of 0 is set, as Slurm dumps it
    assert run["time_limit"] == no_val(60)
    assert queued["time_limit"] == no_val(None, infinite=True)
    assert run["memory_per_node"] == no_val(4096) and run["memory_per_cpu"]["set"] is False
    assert queued["memory_per_cpu"] == no_val(512) and queued["memory_per_node"]["set"] is False
    assert (queued["tasks"], queued["tasks_per_node"]) == (no_val(4), no_val(2))
    assert queued["hold"] is True and run["hold"] is False
    assert queued["dependency"] == "afterok:10"
    assert (arr["array_job_id"], arr["array_task_id"], arr["array_max_tasks"]) == (
        no_val(12), no_val(None), no_val(2))
    assert arr["array_task_string"] == "0-3%2"
    assert run["tres_per_node"] == "gres/gpu:h100:2" and run["tres_per_task"] == "cpu=2"
    assert run["gres_detail"] == ["gpu:h100:2(IDX:0-1)", "gpu:h100:2(IDX:0-1)"]
    assert run["standard_output"] == run["standard_error"] == "/home/schedbench/out-10.txt"
    assert queued["standard_output"] == "/home/schedbench/slurm-11.out"
    assert run["standard_input"] == "/dev/null"
    assert run["exit_code"] == {"status": ["SUCCESS"], "return_code": no_val(0),
                                "signal": {"id": no_val(None), "name": ""}}
    assert killed["exit_code"] == {"status": ["SIGNALED"], "return_code": no_val(None),
                                   "signal": {"id": no_val(9), "name": "KILL"}}
    assert failing["exit_code"]["status"] == ["ERROR"]
    assert failing["exit_code"]["return_code"] == no_val(3)
    assert run["group_id"] == 995 and run["user_name"] == "schedbench"
    assert run["profile"] == ["NOT_SET"] and run["batch_flag"] is True
    assert stopping["nodes"] == "gpu04"
    assert (run["het_job_id"], run["het_job_offset"]) == (no_val(0), no_val(0))
    res = run["job_resources"]
    if version == "v0.0.40":
        assert (res["nodes"], res["allocated_hosts"], res["allocated_cpus"]) == (
            "gpu[01-02]", 2, 4)
        assert res["allocated_nodes"][1] == {
            "sockets": {"4": {"cores": {"0": "allocated"}}, "5": {"cores": {"0": "allocated"}}},
            "nodename": "gpu02", "cpus_used": 2, "memory_used": 0, "memory_allocated": 4096}
    else:
        assert (res["nodes"]["list"], res["nodes"]["count"], res["cpus"]) == (
            "gpu[01-02]", 2, 4)
        node = res["nodes"]["allocation"][1]
        assert (node["name"], node["cpus"]["count"], node["memory"]["allocated"]) == (
            "gpu02", 2, 4096)
        assert [s["index"] for s in node["sockets"]] == [4, 5]
        assert node["sockets"][0]["cores"] == [{"index": 0, "status": ["ALLOCATED"]}]
    assert queued["job_resources"] == (
        {"nodes": "", "allocated_cores": 0, "allocated_cpus": 0, "allocated_hosts": 0,
         "allocated_nodes": []} if version == "v0.0.40" else queued["job_resources"])


def sacct_doc(fake_schedd, capsys, version: str, data: list[dict[str, Any]]
              ) -> dict[str, Any]:
    fake_schedd(lambda op, body: {"rows": data, "now": test_sacct.T0 + 100,
                                  "cluster": "anchor"})
    assert sacct.main([f"--json={version}"]) == 0
    return json.loads(capsys.readouterr().out)


def sampled_rows() -> list[dict[str, Any]]:
    """The reference jobs (batch, extern and srun steps; failed, signalled, cancelled, array
    tasks), one step with the agent's memory samples and CPU times."""
    data = test_sacct.rows()
    step = next(r for r in data if r["job_id"] == "83043.1")
    step.update(max_rss_kb=2048, ave_rss_kb=1024, total_cpu=1.25, user_cpu=1.0,
                system_cpu=0.25)
    return data


@pytest.mark.parametrize("version", VERSIONS)
def test_sacct_with_steps_follows_the_schema(fake_schedd, capsys,
                                             version: str) -> None:
    doc = sacct_doc(fake_schedd, capsys, version, sampled_rows())
    assert schema_errors(schema(version, "sacct"), doc) == []
    jobs = {j["job_id"]: j for j in doc["jobs"]}
    assert [s["step"]["id"] for s in jobs[83043]["steps"]] == [
        "83043.batch", "83043.extern", "83043.0", "83043.1"]
    assert [s["step"]["name"] for s in jobs[83043]["steps"]] == [
        "batch", "extern", "hostname", "sleep"]
    ok = jobs[83043]
    assert ok["state"]["current"] == ["COMPLETED"] and ok["time"]["elapsed"] == 4
    assert ok["time"]["limit"] == no_val(5)
    assert ok["time"]["start"] == int(test_sacct.T0)
    assert ok["required"]["memory_per_node"] == no_val(16000)
    assert {t["type"]: t["count"] for t in ok["tres"]["requested"]} == {
        "billing": 1, "cpu": 1, "gres": 1, "mem": 16000, "node": 1}
    sleep = ok["steps"][3]
    assert sleep["time"]["start"] == no_val(int(test_sacct.T0))
    assert sleep["time"]["end"] == no_val(int(test_sacct.T0) + 1)
    assert sleep["time"]["total"] == {"seconds": 1, "microseconds": 250000}
    assert sleep["nodes"] == {"count": 1, "range": "vm", "list": ["vm"]}
    assert sleep["tres"]["requested"]["max"] == [
        {"type": "mem", "name": "", "id": 2, "count": 2048 * 1024}]
    stepfail = jobs[83045]["steps"][2]
    assert stepfail["state"] == ["FAILED"]
    assert stepfail["exit_code"]["status"] == ["ERROR"]
    assert stepfail["exit_code"]["return_code"] == no_val(1)
    sig = jobs[83046]
    assert sig["exit_code"] == {"status": ["SIGNALED"], "return_code": no_val(None),
                                "signal": {"id": no_val(9), "name": "KILL"}}
    assert sig["steps"][0]["state"] == ["CANCELLED"]
    cancelled = jobs[83047]
    assert cancelled["state"]["current"] == ["CANCELLED"]
    assert jobs[83052]["kill_request_user"] == "root"
    task = jobs[83051]
    assert (task["array"]["job_id"], task["array"]["task_id"]) == (83049, no_val(1))
    assert jobs[83043]["array"]["task_id"] == no_val(None)
    if version == "v0.0.41":
        assert ok["time"]["planned"] == no_val(1)  # eligible one second before it started


def sinfo_doc(fake_schedd, capsys, version: str, *args: str) -> dict[str, Any]:
    nodes = [dict(n) for n in test_sinfo.NODES]
    nodes[0].update(alloc_mem_mb=1000, reason_time=0)
    nodes[3].update(reason_time=NOW - 5, reason_user="root")
    nodes.append(test_sinfo.node("gpu05", "DOWN") | {"state": "IDLE"})  # gone silent

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        if op == "query_nodes":
            return {"nodes": nodes, "now": NOW}
        return {"partitions": test_sinfo.PARTITIONS}
    fake_schedd(handler)
    assert sinfo.main([f"--json={version}", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("version", VERSIONS)
def test_sinfo_is_23_11s_node_groups(fake_schedd, capsys, version: str) -> None:
    """23.11's sinfo --json is "sinfo": one sinfo_data per line sinfo prints (by default a
    partition's nodes of one state), not 22.05's "nodes" and "partitions"."""
    doc = sinfo_doc(fake_schedd, capsys, version)
    assert schema_errors(schema(version, "sinfo"), doc) == []
    assert set(doc) == {"sinfo", "meta", "errors", "warnings"}
    lines = [(g["partition"]["name"], g["node"]["state"], g["nodes"]["nodes"])
             for g in doc["sinfo"]]
    assert lines == [
        ("gpu", ["MIXED"], ["gpu01"]), ("gpu", ["IDLE"], ["gpu02", "gpu03"]),
        ("gpu", ["IDLE", "DRAIN"], ["gpu04"]), ("gpu", ["DOWN", "NOT_RESPONDING"], ["gpu05"]),
        ("cpu", ["IDLE"], ["cpu1"])]
    mixed, idle, drained, down, cpu = doc["sinfo"]
    assert mixed["nodes"] | {"hostnames": [], "addresses": []} == {
        "allocated": 1, "idle": 0, "other": 0, "total": 1, "hostnames": [], "addresses": [],
        "nodes": ["gpu01"]}
    assert mixed["cpus"]["allocated"] == 3 and mixed["cpus"]["idle"] == 61
    assert (mixed["cpus"]["minimum"], mixed["cpus"]["maximum"]) == (64, 64)
    assert (idle["cpus"]["total"], idle["nodes"]["idle"]) == (128, 2)
    assert mixed["memory"]["allocated"] == 1000
    assert mixed["memory"]["free"]["minimum"] == no_val(512000 - 1000)
    assert mixed["gres"] == {"total": "gpu:h100:8", "used": "gpu:h100:3"}
    assert cpu["gres"] == {"total": "", "used": ""}
    assert drained["reason"] == {"description": "bad fan", "time": int(NOW) - 5,
                                 "user": "root"}
    assert (drained["nodes"]["other"], drained["cpus"]["other"]) == (1, 64)
    part = mixed["partition"]
    assert (part["name"], part["partition"]["state"], part["nodes"]["total"]) == (
        "gpu", ["UP"], 5)
    assert part["maximums"]["time"] == no_val(None, infinite=True)
    assert cpu["partition"]["maximums"]["time"] == no_val(1440)
    assert cpu["partition"]["defaults"]["time"] == no_val(60)
    per_node = sinfo_doc(fake_schedd, capsys, version, "-N")["sinfo"]
    assert [g["nodes"]["nodes"] for g in per_node][:3] == [["gpu01"], ["gpu02"], ["gpu03"]]


def test_sacct_records_carry_the_jobs_own_fields(fake_schedd, capsys) -> None:
    """wckey, licenses, hold, and (v0.0.41) the output paths as given and expanded."""
    from schedd.reports import accounting

    job = test_sacct.ran(91, "paths", "COMPLETED", 2, wckey="proj", licenses="matlab:1",
                         stdout="logs/%x-%j.out", workdir="/home/schedbench")
    rc = accounting.RowContext(test_sacct.T0 + 100, test_sacct.SLURM_BILLING, {}, "anchor")
    data = accounting.sacct_rows(job, [], rc)
    doc = sacct_doc(fake_schedd, capsys, "v0.0.41", data)
    assert schema_errors(schema("v0.0.41", "sacct"), doc) == []
    (record,) = doc["jobs"]
    assert record["wckey"] == {"wckey": "proj", "flags": []}
    assert (record["licenses"], record["hold"]) == ("matlab:1", False)
    assert (record["stdout"], record["stdout_expanded"]) == (
        "logs/%x-%j.out", "/home/schedbench/logs/paths-91.out")
    assert record["stderr_expanded"] == "/home/schedbench/logs/paths-91.out"
    assert record["stdin_expanded"] == "/dev/null"


# the fields v0.0.41 added to sacct's job record: built for both, dropped for v0.0.40
ONLY_V41 = {".stdout", ".stderr", ".stdin", ".stdout_expanded", ".stderr_expanded",
            ".stdin_expanded", ".time.planned"}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_key_kiln_fills_is_in_the_schema(version: str) -> None:
    """document() keeps only the schema's keys: a key kiln builds that the schema lacks (a
    typo) would vanish without a failure anywhere else."""
    from cli import sacct_json, sinfo_json, squeue_json
    from cli.core.formats import Ctx

    job = schema(version, "squeue")["properties"]["jobs"]["items"]
    assert [k for j in JOBS for k in unknown_keys(job, squeue_json.job_info(
        j, Ctx(NOW), "kiln", version, []))] == []
    record = schema(version, "sacct")["properties"]["jobs"]["items"]
    for row in sampled_rows():
        if row["kind"] == "step":
            assert unknown_keys(record["properties"]["steps"]["items"],
                                sacct_json.step_record(row)) == []
        else:
            extra = set(unknown_keys(record, sacct_json.job_record(row)))
            assert extra == (ONLY_V41 if version == "v0.0.40" else set())
    group = {"partition": test_sinfo.PARTITIONS[0], "nodes": test_sinfo.NODES[:2]}
    assert unknown_keys(schema(version, "sinfo")["properties"]["sinfo"]["items"],
                        sinfo_json.sinfo_data(group, test_sinfo.NODES, "kiln")) == []
