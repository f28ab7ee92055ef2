"""query_jobs with ``fields``: schedd's column reply, and squeue printing from it exactly what it
prints from whole jobs (the reply of a schedd without ``fields``, and of --json)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cli import squeue
from cli.core.formats import (
    JOB_ATTRS,
    JOB_FIELDS,
    Ctx,
    column_texts,
    job_sort_key,
    sort_column,
)
from kiln.model import ROW_FIELDS, Job, JobState, NodeAllocation
from kiln.wire import operations, protocol
from schedd.handlers.query import column_reply, row_columns
from schedd.lifecycle.context import RequestError

NOW = 1_800_000_000.0


def sample_jobs() -> list[Job]:
    """Jobs that differ in every attribute some field reads: states, arrays (pending tasks to
    fold, a running task, a requeued one), allocations, GPUs, limits, extras."""
    base: dict[str, Any] = dict(user="amy", uid=1001, gid=1001, account="physics",
                                partition="gpu", submit_time=NOW - 600, workdir="/w",
                                stdout="/w/o", command="/w/run.sh")
    running = dict(state=JobState.RUNNING, start_time=NOW - 75, node_list="n[1-2]",
                   batch_host="n1", allocation=[NodeAllocation("n1", 4, 100, [0, 1]),
                                                NodeAllocation("n2", 2, 100, [0])])
    jobs = [
        Job(id=1, name="alpha", priority=100, reason="Priority", time_limit=3600, **base),
        Job(id=2, name="beta-long-name", priority=900, time_limit=None, gpus_per_node=2,
            gpu_type="a100", qos="high", nice=5, exclusive=True, **{**base, "user": ""},
            **running),
        Job(id=3, name="gamma", partition="debug", priority=500, reason="Resources",
            time_limit=120, mem_per_cpu_mb=512, num_tasks=4, cpus_per_task=2, num_nodes=2,
            constraint="h100", dependency="afterok:1", reservation="maint", comment="c",
            expected_start=NOW + 900, licenses="fluent:2", wckey="w", sched_nodes="n3", **{k: v for k, v in base.items() if k != "partition"}),
        Job(id=4, name="done", state=JobState.FAILED, start_time=NOW - 300, end_time=NOW - 100,
            exit_code=2, reason="NonZeroExitCode", time_limit=600, mem_per_node_mb=2048,
            requeue=False, stderr="/w/e", eligible_time=NOW - 500, time_min=60, **base),
        Job(id=5, name="held", reason="JobHeldUser", held="user", priority=0, exclude="n4",
            nodelist="n[1-3]", **base),
    ]
    for task in range(6):  # 10_[0-5]: task 0 keeps the array's id; 3 runs; 5 was requeued
        fields: dict[str, Any] = dict(id=10 if task == 0 else 20 + task, name="arr",
                                      array_job_id=10, array_task_id=task, array_max_running=2,
                                      priority=300, reason="JobArrayTaskLimit", **base)
        if task == 3:
            fields.update(running, node_list="n1", batch_host="n1",
                          allocation=[NodeAllocation("n1", 1, 0, [])])
        if task == 5:
            fields.update(restart_count=1, reason="BeginTime")
        jobs.append(Job(**fields))
    return jobs


def wire(jobs: list[Job]) -> list[dict[str, Any]]:
    return [json.loads(json.dumps(j.to_wire())) for j in jobs]


def table_of(jobs: list[Job], names: list[str]) -> dict[str, list[Any]]:
    reply = json.loads(json.dumps(column_reply(jobs, names)))
    table, _ = squeue.reply_table(reply) or ({}, frozenset())
    return table


def test_job_attrs_cover_every_field_with_row_fields() -> None:
    assert set(JOB_ATTRS) == set(JOB_FIELDS)
    assert {a for attrs in JOB_ATTRS.values() for a in attrs} <= ROW_FIELDS


@pytest.mark.parametrize("key", sorted(JOB_FIELDS))
def test_each_field_reads_only_its_attributes(key: str) -> None:
    """A field's getter and sort key give the same from just JOB_ATTRS[key] as from the whole
    job: squeue asks schedd for nothing else."""
    ctx = Ctx(NOW, start_estimates=True)
    get = JOB_FIELDS[key][1]
    for job in wire(sample_jobs()):
        part = {a: job[a] for a in JOB_ATTRS[key]}
        assert get(part, ctx) == get(job, ctx), (key, job["id"])
        assert job_sort_key(key)(part, ctx) == job_sort_key(key)(job, ctx), (key, job["id"])


@pytest.mark.parametrize("key", sorted(JOB_FIELDS))
def test_whole_columns_match_the_getters(key: str) -> None:
    jobs = sample_jobs()
    names = sorted({a for attrs in JOB_ATTRS.values() for a in attrs} | {"id"})
    table = table_of(jobs, names)
    ctx = Ctx(NOW)
    get = JOB_FIELDS[key][1]
    assert column_texts(key, table, ctx) == [get(j, ctx) for j in wire(jobs)]
    assert sort_column(key, table, ctx) == [job_sort_key(key)(j, ctx) for j in wire(jobs)]


def test_column_reply_sends_a_shared_value_once() -> None:
    jobs = sample_jobs()
    reply = column_reply(jobs, ["id", "user", "account", "allocation"])
    assert reply["count"] == len(jobs)
    assert reply["columns"] == ["id", "user", "allocation"]
    assert reply["constant"] == {"account": "physics"}
    assert reply["values"][0] == [j.id for j in jobs]
    assert reply["values"][2][1] == [
        {"node": "n1", "cpus": 4, "memory_mb": 100, "gpus": [0, 1], "cpu_ids": [], "shards": {},
         "shards_per_gpu": 0, "share_kind": "shard"},
        {"node": "n2", "cpus": 2, "memory_mb": 100, "gpus": [0], "cpu_ids": [], "shards": {},
         "shards_per_gpu": 0, "share_kind": "shard"}]
    assert json.loads(json.dumps(reply))["values"][2][0] == []
    assert column_reply([], ["id"]) == {"count": 0, "columns": ["id"], "values": [[]],
                                        "constant": {}}


@pytest.mark.parametrize("fields, message", [
    (["id", "script"], "Invalid job field: script"),
    (["environment"], "Invalid job field: environment"),
    (["nosuch"], "Invalid job field: nosuch"),
    ([3], "Invalid job field: 3"),
    ([], "fields: at least one job field is needed"),
])
def test_bad_fields_are_refused(fields: list[Any], message: str) -> None:
    with pytest.raises(RequestError) as exc:
        row_columns(fields)
    assert exc.value.message == message


def test_fields_are_in_the_wire_contract() -> None:
    frame = protocol.request("query_jobs", {"fields": ["id", "state"], "states": ["PD"]}, 4)
    assert protocol.decode_request(frame, operations.CLIENT_OPS)[2]["fields"] == ["id", "state"]


ARGVS = [
    [], ["-h"], ["-o", "%i %j %T"], ["-u", "1001", "-t", "PD", "-o", "%i %j %T"], ["-l"],
    ["--start"], ["-r"], ["-h", "-S", "-Q,i"], ["-P", "-h"], ["-h", "-S", "+M,-j"],
    ["-O", "JobID,JobArrayID,State:10,Name:.20|,ArrayJobID,ArrayTaskID,NumCPUs,TimeLimit,"
           "SubmitTime,ReasonList,TimeUsed,TimeLeft,MinMemory,tres-per-node"],
    ["-h", "-o", "%a|%A|%b|%B|%c|%C|%D|%e|%E|%f|%F|%G|%h|%k|%K|%l|%L|%m|%M|%n|%N|%o|%O|%p"],
    ["-h", "-o", "%P|%q|%Q|%r|%R|%S|%t|%U|%u|%v|%V|%w|%W|%x|%y|%Y|%z|%Z|%i"],
    ["-h", "-R", "maint"], ["-h", "-L", "fluent"], ["-h", "-j", "10"], ["-h", "-j", "10_3"],
    ["-h", "-o", "{%i}%j{{"], ["-h", "-o", "plain"], ["-h", "-O", "JobID:5%|,Name:4,State"],
]


@pytest.mark.parametrize("argv", ARGVS, ids=[" ".join(a) or "default" for a in ARGVS])
def test_column_reply_prints_what_whole_jobs_print(fake_schedd, capsys, argv) -> None:
    jobs = sample_jobs()
    mode = {"columns": False}

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        if not mode["columns"]:
            return {"jobs": wire(jobs), "now": NOW}
        assert body["fields"]
        reply = column_reply(jobs, row_columns(body["fields"]))
        return json.loads(json.dumps({**reply, "now": NOW}))

    fake_schedd(handler)
    assert squeue.main(argv) == 0
    whole = capsys.readouterr()
    mode["columns"] = True
    assert squeue.main(argv) == 0
    columns = capsys.readouterr()
    assert columns.out == whole.out and columns.err == whole.err
    assert columns.out.count("\n") >= 1


def test_pending_tasks_fold_from_columns(fake_schedd, capsys) -> None:
    jobs = sample_jobs()

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        return json.loads(json.dumps({**column_reply(jobs, row_columns(body["fields"])),
                                      "now": NOW}))

    fake_schedd(handler)
    assert squeue.main(["-h", "-o", "%i %t %r", "-S", "i"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "1 PD Priority", "2 R None", "3 PD Resources", "4 F NonZeroExitCode",
        "5 PD JobHeldUser", "10_[0-2,4%2] PD JobArrayTaskLimit", "10_3 R JobArrayTaskLimit",
        "10_5 PD BeginTime"]
