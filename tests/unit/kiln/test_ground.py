"""Pure pieces of the ground layer: hostlists, array specs, dependencies, the wire envelope."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kiln.model import Job, JobState, NodeAllocation, StopMark
from kiln.slurm import arrayspec, dependency, hostlist
from kiln.wire import operations, protocol
from schedd.domain.jobenv import expand_output_pattern, job_environment


@pytest.mark.parametrize("expr,names", [
    ("a[1-3],b", ["a1", "a2", "a3", "b"]),
    ("gpu[01-02,05]", ["gpu01", "gpu02", "gpu05"]),
    ("n1,n1,n2", ["n1", "n2"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
])
def test_hostlist_expand(expr: str, names: list[str]) -> None:
    assert hostlist.expand(expr) == names


def test_hostlist_compress_like_slurm() -> None:
    assert hostlist.compress(["a1", "a2", "a3", "a5", "b"]) == "a[1-3,5],b"
    assert hostlist.compress(["node1"]) == "node1"
    assert hostlist.compress(["gpu01", "gpu02"]) == "gpu[01-02]"


@given(st.sets(st.integers(0, 300), min_size=1, max_size=40))
def test_hostlist_round_trip(nums: set[int]) -> None:
    names = [f"n{i}" for i in sorted(nums)]
    assert hostlist.expand(hostlist.compress(names)) == names


@pytest.mark.parametrize("bad", ["a[1-", "a[3-1]", "a[x]", "a]"])
def test_hostlist_errors(bad: str) -> None:
    with pytest.raises(hostlist.HostlistError):
        hostlist.expand(bad)


@pytest.mark.parametrize("spec,ids,limit", [
    ("1-5", (1, 2, 3, 4, 5), 0),
    ("1,3,5", (1, 3, 5), 0),
    ("0-15:4", (0, 4, 8, 12), 0),
    ("0-3,7%2", (0, 1, 2, 3, 7), 2),
])
def test_array_specs(spec: str, ids: tuple[int, ...], limit: int) -> None:
    parsed = arrayspec.parse(spec)
    assert parsed.task_ids == ids and parsed.max_running == limit


@pytest.mark.parametrize("bad", ["", "a", "5-1", "1-2000", "1-3%x", "1-4:0"])
def test_array_spec_errors(bad: str) -> None:
    with pytest.raises(arrayspec.ArraySpecError):
        arrayspec.parse(bad)


def test_dependencies() -> None:
    done, failed, pending = [JobState.COMPLETED], [JobState.FAILED], [JobState.PENDING]
    table = {1: done, 2: failed, 3: pending, 4: [JobState.RUNNING]}
    states = lambda job_id, task: table.get(job_id, [])  # noqa: E731
    def judge(expr: str) -> str:
        return dependency.evaluate(dependency.parse(expr), states, lambda: True)

    assert judge("afterok:1") == dependency.MET
    assert judge("afterok:2") == dependency.NEVER
    assert judge("afterok:3") == dependency.WAITING
    assert judge("afternotok:2") == dependency.MET
    assert judge("afternotok:1") == dependency.NEVER
    assert judge("afterany:1:2") == dependency.MET
    assert judge("after:4") == dependency.MET
    assert judge("after:3") == dependency.WAITING
    assert judge("afterok:1,afterany:3") == dependency.WAITING
    assert judge("afterok:2?afterok:1") == dependency.MET
    for bad in ("afterok", "afterok:x", "sometime:1", "afterok:1,afterok:2?afterok:3"):
        with pytest.raises(dependency.DependencyError):
            dependency.parse(bad)


def test_output_patterns() -> None:
    job = Job(id=42, name="train", user="ann", workdir="/w", array_job_id=40, array_task_id=2)
    assert expand_output_pattern("%x-%j.out", job, "n1") == "/w/train-42.out"
    assert expand_output_pattern("/o/%A_%a_%N_%u_%%.log", job, "n1") == "/o/40_2_n1_ann_%.log"
    assert expand_output_pattern("%5j", job, "n1") == "/w/00042"


def test_job_environment() -> None:
    alloc = [NodeAllocation("n1", 4, 1000, [2, 3]), NodeAllocation("n2", 4, 1000, [0, 1])]
    job = Job(id=7, name="x", user="ann", account="phys", partition="gpu", num_nodes=2,
              num_tasks=8, cpus_per_task=1, workdir="/w", allocation=alloc,
              environment={"PATH": "/bin"})
    env = job_environment(job, alloc[0], 0, "kiln")
    assert env["SLURM_JOB_NODELIST"] == "n[1-2]"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["SLURM_TASKS_PER_NODE"] == "4(x2)"
    assert env["PATH"] == "/bin"
    assert "SLURM_ARRAY_JOB_ID" not in env


def test_protocol_rejects_bad_requests() -> None:
    ops = operations.CLIENT_OPS
    good = protocol.request("hold", {"job_ids": ["1"]}, 3)
    assert protocol.decode_request(good, ops) == (3, "hold", {"job_ids": ["1"]})
    bad = [
        b"not json",
        b"[1,2]",
        json.dumps({"v": 2, "op": "ping", "id": 1, "body": {}}).encode(),
        protocol.request("nosuchop", {}, 1),
        protocol.request("hold", {}, 1),
        protocol.request("hold", {"job_ids": "1"}, 1),
        protocol.request("hold", {"job_ids": ["1"], "extra": 1}, 1),
        protocol.request("hold", {"job_ids": ["x" * 5000]}, 1),
        protocol.request("submit", {"job": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {
            "h": {"i": {}}}}}}}}}}}, 1),
        b"x" * (protocol.MAX_MESSAGE_BYTES + 1),
    ]
    for frame in bad:
        with pytest.raises(protocol.ProtocolError):
            protocol.decode_request(frame, ops)


@given(st.binary(max_size=200))
def test_protocol_never_raises_anything_else(frame: bytes) -> None:
    try:
        protocol.decode_request(frame, operations.CLIENT_OPS)
    except protocol.ProtocolError:
        pass


def test_submit_fields_are_job_fields() -> None:
    from kiln.model import JOB_FIELDS

    assert protocol.SUBMIT_FIELDS <= set(JOB_FIELDS)
    owned_by_schedd = {"id", "user", "uid", "gid", "state", "generation", "allocation",
                       "admin_priority", "launched_limit", "stop", "preempt", "stats",
                       "restart_count", "cancelled_by", "priority", "expected_start",
                       "sched_nodes", "forecast_first", "forecast_last", "forecast_band",
                       "set_aside",
                       "reason", "exit_code", "exit_signal", "start_time", "end_time"}
    assert not protocol.SUBMIT_FIELDS & owned_by_schedd


@given(st.dictionaries(st.text(), st.text()))
@example({"A": "x", "B": "\udcff", "\udc80": "y"})  # os.environ's undecodable bytes
@example({"PATH": "/bin", "LANG": "é", "X": "\udcff"})
def test_environment_bytes_is_the_utf8_size_of_name_value_pairs(env: dict[str, str]) -> None:
    """The ASCII shortcut counts what encoding each pair counts, and a string UTF-8 cannot
    hold (a lone surrogate) fails with the same error as before."""
    def each() -> object:
        try:
            return sum(len(k.encode()) + len(v.encode()) + 2 for k, v in env.items())
        except UnicodeEncodeError as exc:
            return str(exc)

    try:
        got: object = protocol.environment_bytes(env)
    except UnicodeEncodeError as exc:
        got = str(exc)
    assert got == each()


def test_submit_fields_name_the_submit_schema() -> None:
    """sbatch sends what protocol.SUBMIT_FIELDS names, schedd checks it by operations'
    SUBMIT_SCHEMA (not built in a command's start): the two lists are one."""
    assert protocol.SUBMIT_FIELDS == set(operations.SUBMIT_SCHEMA)
    assert operations.CLIENT_OPS["submit"]["job"].schema is operations.SUBMIT_SCHEMA


def test_job_wire_round_trip() -> None:
    import dataclasses

    job = Job(id=5, name="n", state=JobState.RUNNING, environment={"A": "1"}, script="#!/bin/sh",
              allocation=[NodeAllocation("n1", 2, 100, [0, 1])], script_args=["a"],
              stop=StopMark(3, "requeue", "REQUEUED", True), stats={"samples": 2.0})
    full = job.to_wire(with_script=True)
    assert full == {**dataclasses.asdict(job), "state": "RUNNING",
                    "stop": job.stop.to_wire(), "preempt": None}
    assert Job.from_wire(full) == job
    light = job.to_wire()
    assert "script" not in light and "environment" not in light
    assert json.loads(json.dumps(light))["allocation"][0]["gpus"] == [0, 1]


def test_example_config_loads_and_shows_the_defaults() -> None:
    from pathlib import Path

    from kiln import config

    example = config.load(Path(__file__).resolve().parents[3] / "conf" / "kiln.toml")
    defaults = config.SchedulerConfig()
    for name in ("bf_max_reservations", "fill", "bf_short_job", "interval", "bf_resolution"):
        assert getattr(example.scheduler, name) == getattr(defaults, name), name
