"""schedd's step handlers (step_start/step_wait/step_cancel/step_ended, batch rows, job end)
against a real ledger on both databases, with the agents replaced by a recorder."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from kiln.identity import Caller
from kiln.model import Job, JobState
from kiln.wire import operations, protocol
from schedd.domain.steps import StepTable
from schedd.handlers import agent
from schedd.handlers import srun as h
from schedd.lifecycle import transitions
from schedd.lifecycle.context import RequestError

OWNER, STRANGER, ROOT = Caller(1000, 1000), Caller(1001, 1001), Caller(0, 0)


def _start(ctx, caller: Caller = OWNER, **kw: Any) -> dict[str, Any]:
    step = {"job_id": 7, "argv": ["hostname"], "environment": {"PATH": "/bin"}, "cwd": "/work",
            "forward": True, **kw}
    body = {"step": step}
    protocol.check(body, operations.CLIENT_OPS["step_start"], "step_start")  # as the daemon does
    return h.step_start(ctx, caller, body)


def _end(ctx, node: str, tasks: list[list[int]], state: str = "COMPLETED", **kw: Any) -> None:
    h.step_ended(ctx, node, {"node": node, "job_id": 7, "step_id": 0, "state": state,
                             "tasks": tasks, "end_time": 1005.0, **kw})


def test_step_start_lays_tasks_over_the_nodes_and_commits_a_running_row(ctx) -> None:
    reply = _start(ctx, stdout="out_%j_%t_%N.txt")
    assert reply["step_id"] == 0 and reply["nodes"] == ["node1", "node2"]
    assert [(t["procid"], t["node"], t["stdout"]) for t in reply["tasks"]] == [
        (0, "node1", "/work/out_7_0_node1.txt"), (1, "node1", "/work/out_7_1_node1.txt"),
        (2, "node2", "/work/out_7_2_node2.txt"), (3, "node2", "/work/out_7_3_node2.txt")]
    launches = [(node, s) for op, node, s in ctx.agents.sent if op == "launch_step"]
    assert [n for n, _ in launches] == ["node1", "node2"]
    node2 = launches[1][1]
    assert node2["environment"]["SLURM_NODEID"] == "1"
    assert node2["environment"]["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert [t["env"]["SLURM_PROCID"] for t in node2["tasks"]] == ["2", "3"]
    assert [t["env"]["SLURM_LOCALID"] for t in node2["tasks"]] == ["0", "1"]
    assert node2["tasks"][0]["stderr"] == node2["tasks"][0]["stdout"]  # no --error: same file
    assert node2["time_limit"] == 600 and node2["job_start"] == 990.0
    # what the job holds there: its cgroup's limits on a node without its batch script
    assert node2["allocation"] == {"cpus": 4, "memory_mb": 100, "gpus": [2, 3],
                                   "cpu_ids": [8, 9, 10, 11]}
    rows = {r.step_id: r for r in ctx.state.store.query_steps([7])}
    assert list(rows) == ["batch", "0"]
    assert (rows["0"].state, rows["0"].num_tasks, rows["0"].node_list, rows["0"].name) == \
        ("RUNNING", 4, "node[1-2]", "hostname")
    assert _start(ctx)["step_id"] == 1


def test_forwarded_output_goes_over_the_wire_and_shared_files_append(ctx) -> None:
    reply = _start(ctx)
    assert (reply["tasks"][3]["stdout"], reply["tasks"][3]["stderr"]) == ("", "")
    first = [s for op, _, s in ctx.agents.sent if op == "launch_step" and s["step_id"] == 0]
    assert all(t["forward"] == ["out", "err"] for s in first for t in s["tasks"])
    _start(ctx, stdout="all-%j.txt")
    second = [s for op, _, s in ctx.agents.sent if op == "launch_step" and s["step_id"] == 1]
    assert all(t["append"] for s in second for t in s["tasks"])  # two nodes write it
    _start(ctx, stdout="node-%n.txt")
    third = [s for op, _, s in ctx.agents.sent if op == "launch_step" and s["step_id"] == 2]
    assert not any(t["append"] for s in third for t in s["tasks"])
    assert not any("forward" in t for s in second + third for t in s["tasks"])
    _start(ctx, stderr="err-%t.txt")
    fourth = [s for op, _, s in ctx.agents.sent if op == "launch_step" and s["step_id"] == 3]
    assert all(t["forward"] == ["out"] and t["stderr"].startswith("/work/err-")
               for s in fourth for t in s["tasks"])


def test_only_the_owner_or_root_starts_steps_in_a_running_job(ctx) -> None:
    with pytest.raises(RequestError, match="permission denied"):
        _start(ctx, STRANGER)
    assert _start(ctx, ROOT)["step_id"] == 0
    with pytest.raises(RequestError, match="Invalid job id"):
        h.step_start(ctx, OWNER, {"step": {"job_id": 99, "argv": ["x"], "environment": {},
                                           "cwd": "/"}})
    ctx.state.jobs[7].state = JobState.COMPLETING
    with pytest.raises(RequestError, match="already completing"):
        _start(ctx)


def test_bad_step_requests_are_refused_with_one_line(ctx) -> None:
    with pytest.raises(RequestError, match="no command"):
        _start(ctx, argv=[])
    with pytest.raises(RequestError, match="absolute"):
        _start(ctx, cwd="rel")
    with pytest.raises(RequestError, match="Only allocated 2 nodes"):
        _start(ctx, nodes=3)
    with pytest.raises(protocol.ProtocolError, match="unknown field"):
        _start(ctx, bogus=1)
    with pytest.raises(RequestError, match="environment"):
        _start(ctx, environment={"A=B": "x"})


def test_the_step_ends_when_every_node_reported_with_the_worst_exit(ctx) -> None:
    _start(ctx)
    assert h.step_wait(ctx, OWNER, {"job_id": 7, "step_id": 0}) == {"done": False}
    _end(ctx, "node1", [[0, 0, 0], [1, 2, 0]])
    assert h.step_wait(ctx, OWNER, {"job_id": 7, "step_id": 0}) == {"done": False}
    with pytest.raises(RequestError):
        h.step_ended(ctx, "node1", {"node": "node2", "job_id": 7, "step_id": 0,
                                    "state": "COMPLETED", "tasks": [], "end_time": 1.0})
    _end(ctx, "node2", [[2, 0, 0], [3, 0, 0]])
    done = h.step_wait(ctx, OWNER, {"job_id": 7, "step_id": 0})
    assert done["done"] and done["state"] == "FAILED" and done["exit_code"] == 2
    assert done["tasks"][1] == [1, "node1", 2, 0]
    row = next(r for r in ctx.state.store.query_steps([7]) if r.step_id == "0")
    assert (row.state, row.exit_code, row.end_time) == ("FAILED", 2, 1005.0)
    again = h.step_wait(ctx, OWNER, {"job_id": 7, "step_id": 0})  # answered from the ledger
    assert again["done"] and again["exit_code"] == 2
    with pytest.raises(RequestError):
        h.step_wait(ctx, STRANGER, {"job_id": 7, "step_id": 0})


def test_step_cancel_tells_the_nodes_still_running_it(ctx) -> None:
    _start(ctx)
    _end(ctx, "node1", [[0, 0, 0], [1, 0, 0]])
    ctx.agents.sent.clear()
    assert h.step_cancel(ctx, OWNER, {"job_id": 7, "step_id": 0}) == {"cancelled": True}
    assert ctx.agents.sent == [("terminate_steps", "node2",
                                {"job_id": 7, "step_id": 0, "state": "CANCELLED"})]
    with pytest.raises(RequestError):
        h.step_cancel(ctx, STRANGER, {"job_id": 7, "step_id": 0})


def test_job_end_closes_the_batch_row_and_stops_running_steps(ctx) -> None:
    _start(ctx)
    job = ctx.state.jobs[7]
    ctx.agents.sent.clear()
    assert transitions.end_run(ctx, job, transitions.RunEnd(1, "TIMEOUT", 1590.0))
    assert sorted(n for op, n, _ in ctx.agents.sent if op == "terminate_steps") == \
        ["node1", "node2"]
    rows = {r.step_id: r for r in ctx.state.store.query_steps([7])}
    assert rows["batch"].state == "CANCELLED"  # Slurm's batch step of a timed-out job
    assert (rows["0"].state, rows["0"].end_time) == ("TIMEOUT", 1590.0)
    assert not ctx.steps.known(7)
    # a late report from a node is still written down
    _end(ctx, "node2", [[2, 0, 15], [3, 0, 15]], state="TIMEOUT")
    row = next(r for r in ctx.state.store.query_steps([7]) if r.step_id == "0")
    assert (row.state, row.exit_signal) == ("TIMEOUT", 15)


def test_heartbeats_fence_steps_of_jobs_no_longer_running(ctx) -> None:
    ctx.state.jobs[8] = Job(id=8, state=JobState.COMPLETED)
    agent._reconcile_steps(ctx, "node2", [7, 8, 9])
    assert [(n, b["job_id"]) for _, n, b in ctx.agents.sent] == [("node2", 8), ("node2", 9)]


def test_step_ids_continue_from_the_ledger_after_a_restart(ctx) -> None:
    _start(ctx)
    _start(ctx)
    ctx.steps = StepTable()  # schedd restarted
    assert _start(ctx)["step_id"] == 2
    assert ctx.state.store.max_step_id(7) == 2
    assert ctx.state.store.max_step_id(99) == -1


def test_step_cpu_time_is_summed_over_nodes_even_after_a_restart(ctx) -> None:
    _start(ctx)
    _end(ctx, "node1", [[0, 0, 0]], cpu=[1.5, 0.25])
    _end(ctx, "node2", [[1, 0, 0]], cpu=[2.0, "x"])  # malformed: that node's time is unknown
    row = next(r for r in ctx.state.store.query_steps([7]) if r.step_id == "0")
    assert row.stats == {"cpu_user_s": 1.5, "cpu_system_s": 0.25}
    _start(ctx)
    ctx.steps = StepTable()  # schedd restarted: the one node's report closes the row
    h.step_ended(ctx, "node2", {"node": "node2", "job_id": 7, "step_id": 1, "state": "FAILED",
                                "tasks": [[0, 3, 0]], "end_time": 1009.0, "cpu": [0.5, 0.5]})
    row = next(r for r in ctx.state.store.query_steps([7]) if r.step_id == "1")
    assert (row.state, row.exit_code, row.end_time) == ("FAILED", 3, 1009.0)
    assert row.stats == {"cpu_user_s": 0.5, "cpu_system_s": 0.5}


def _output(ctx, node: str, procid: int, offset: int, data: bytes,
            stream: str = "out") -> dict[str, Any]:
    body = {"node": node, "job_id": 7, "step_id": 0, "procid": procid, "stream": stream,
            "offset": offset, "data": base64.b64encode(data).decode()}
    protocol.check(body, operations.AGENT_OPS["step_output"], "step_output")
    return h.step_output(ctx, node, body)


def test_a_peek_sees_the_steps_end_but_leaves_its_output_and_result_to_srun(ctx) -> None:
    """The holder of an srun outside an allocation peeks: it learns the step ended, never takes
    output, and is told ``done`` only once srun collected the step (then from the ledger)."""
    _start(ctx)
    peek = {"job_id": 7, "step_id": 0, "peek": True}
    protocol.check(peek, operations.CLIENT_OPS["step_wait"], "step_wait")
    assert h.step_wait(ctx, OWNER, peek) == {"done": False, "ended": False}
    assert _output(ctx, "node1", 0, 0, b"a\n") == {"expected": 2}
    _end(ctx, "node1", [[0, 0, 0], [1, 3, 0]])
    _end(ctx, "node2", [[2, 0, 0], [3, 0, 0]])
    seen = h.step_wait(ctx, OWNER, peek)
    assert seen == {"done": False, "ended": True, "state": "FAILED", "exit_code": 3,
                    "exit_signal": 0}
    wait = {"job_id": 7, "step_id": 0}
    first = h.step_wait(ctx, OWNER, wait)  # srun still gets every byte and the task lines
    assert [c[:3] for c in first["output"]] == [[0, "out", 0]]
    done = h.step_wait(ctx, OWNER, {**wait, "cursors": [[0, "out", 2]]})
    assert done["done"] and done["tasks"][1] == [1, "node1", 3, 0]
    after = h.step_wait(ctx, OWNER, peek)
    assert after["done"] and (after["state"], after["exit_code"]) == ("FAILED", 3)
    with pytest.raises(RequestError):
        h.step_wait(ctx, STRANGER, {**peek, "step_id": 1})


def test_forwarded_output_reaches_srun_and_done_waits_until_it_is_read(ctx) -> None:
    _start(ctx)
    assert _output(ctx, "node1", 0, 0, b"a\n") == {"expected": 2}
    assert _output(ctx, "node1", 0, 0, b"a\n") == {"expected": 2}  # a resend
    assert _output(ctx, "node2", 3, 0, b"e", "err") == {"expected": 1}
    _end(ctx, "node1", [[0, 0, 0], [1, 0, 0]])
    _end(ctx, "node2", [[2, 0, 0], [3, 0, 0]])
    wait = {"job_id": 7, "step_id": 0}
    first = h.step_wait(ctx, OWNER, wait)
    assert first["done"] is False
    assert sorted(first["output"]) == [[0, "out", 0, base64.b64encode(b"a\n").decode()],
                                       [3, "err", 0, base64.b64encode(b"e").decode()]]
    partly = h.step_wait(ctx, OWNER, {**wait, "cursors": [[0, "out", 2]]})
    assert partly["done"] is False and [c[:3] for c in partly["output"]] == [[3, "err", 0]]
    done = h.step_wait(ctx, OWNER, {**wait, "cursors": [[0, "out", 2], [3, "err", 1]]})
    assert done["done"] and done["state"] == "COMPLETED" and "output" not in done
    assert _output(ctx, "node1", 0, 2, b"late") == {"gone": True}  # the step is forgotten


def test_step_output_is_checked(ctx) -> None:
    _start(ctx)
    with pytest.raises(RequestError, match="cannot speak"):
        h.step_output(ctx, "node1", {"node": "node2", "job_id": 7, "step_id": 0, "procid": 0,
                                     "stream": "out", "offset": 0, "data": ""})
    with pytest.raises(RequestError, match="no such task stream"):
        _output(ctx, "node1", 9, 0, b"x")
    with pytest.raises(protocol.ProtocolError, match="'in' is not one of"):
        protocol.check({"node": "node1", "job_id": 7, "step_id": 0, "procid": 0, "stream": "in",
                        "offset": 0, "data": ""}, operations.AGENT_OPS["step_output"],
                       "step_output")
    with pytest.raises(RequestError, match="base64"):
        h.step_output(ctx, "node1", {"node": "node1", "job_id": 7, "step_id": 0, "procid": 0,
                                     "stream": "out", "offset": 0, "data": "!!"})
    with pytest.raises(protocol.ProtocolError, match="longer than"):
        protocol.check({"node": "n", "job_id": 7, "step_id": 0, "procid": 0, "stream": "out",
                        "offset": 0, "data": "A" * (protocol.MAX_OUTPUT_DATA + 4)},
                       operations.AGENT_OPS["step_output"], "step_output")
    assert _output(ctx, "node3", 0, 0, b"x") == {"gone": True}  # not a node of the step


def test_srun_leaving_at_once_discards_the_steps_output(ctx) -> None:
    _start(ctx)
    _output(ctx, "node1", 0, 0, b"unread")
    h.step_cancel(ctx, OWNER, {"job_id": 7, "step_id": 0, "detach": True})
    assert _output(ctx, "node1", 0, 6, b"more") == {"expected": 10}
    _end(ctx, "node1", [[0, 0, 0], [1, 0, 0]], state="CANCELLED")
    _end(ctx, "node2", [[2, 0, 0], [3, 0, 0]], state="CANCELLED")
    assert h.step_wait(ctx, OWNER, {"job_id": 7, "step_id": 0})["done"]


def test_a_terminal_step_is_one_task_on_the_first_node(ctx) -> None:
    reply = _start(ctx, pty=True, winsize=[24, 80])
    assert [(t["procid"], t["node"]) for t in reply["tasks"]] == [(0, "node1")]
    [(op, node, launch)] = ctx.agents.sent
    assert (op, node, launch["pty"], launch["winsize"]) == ("launch_step", "node1", True,
                                                           [24, 80])
    assert launch["tasks"][0]["forward"] == ["out"]  # stdin, stdout, stderr: the terminal
    for bad in ({"ntasks": 2}, {"nodes": 2}, {"stdout": "out.txt"}):
        with pytest.raises(RequestError, match="--pty"):
            _start(ctx, pty=True, **bad)


def test_terminal_input_goes_to_its_node_from_the_owner_only(ctx) -> None:
    _start(ctx, pty=True)
    body = {"job_id": 7, "step_id": 0, "offset": 0, "data": base64.b64encode(b"ls\r").decode(),
            "winsize": [40, 100]}
    protocol.check(body, operations.CLIENT_OPS["step_input"], "step_input")
    assert h.step_input(ctx, OWNER, body) == {"delivered": True}
    assert ctx.agents.sent[-1] == ("step_input", "node1", body)
    with pytest.raises(RequestError, match="permission denied"):
        h.step_input(ctx, STRANGER, body)
    _start(ctx)  # step 1: no terminal
    assert h.step_input(ctx, OWNER, {**body, "step_id": 1}) == {"delivered": False}


def test_sattach_taps_the_output_from_its_attaching_on(ctx) -> None:
    _start(ctx)
    _output(ctx, "node1", 0, 0, b"before\n")
    with pytest.raises(RequestError, match="permission denied"):
        h.step_attach(ctx, STRANGER, {"job_id": 7, "step_id": 0})
    with pytest.raises(RequestError, match="is not known"):
        h.step_attach(ctx, OWNER, {"job_id": 7, "step_id": 5})
    first = h.step_attach(ctx, OWNER, {"job_id": 7, "step_id": 0})
    assert first["output"] == [] and not first["done"] and not first["terminal"]
    _output(ctx, "node1", 0, 7, b"after\n")
    _output(ctx, "node2", 3, 0, b"err", "err")
    tap = {"job_id": 7, "step_id": 0, "tap": first["tap"]}
    assert h.step_attach(ctx, OWNER, tap)["output"] == [
        [0, "out", base64.b64encode(b"after\n").decode()],
        [3, "err", base64.b64encode(b"err").decode()]]
    waited = h.step_wait(ctx, OWNER, {"job_id": 7, "step_id": 0})  # srun still gets it all
    assert [c[:3] for c in waited["output"]] == [[0, "out", 0], [3, "err", 0]]
    _end(ctx, "node1", [[0, 0, 0], [1, 0, 0]])
    _end(ctx, "node2", [[2, 0, 0], [3, 0, 0]])
    assert h.step_attach(ctx, ROOT, tap)["done"] is True


def test_the_readers_attached_to_a_step_are_bounded(ctx) -> None:
    _start(ctx)
    taps = {h.step_attach(ctx, OWNER, {"job_id": 7, "step_id": 0})["tap"] for _ in range(8)}
    assert len(taps) == 8
    with pytest.raises(RequestError, match="8 readers attached already"):
        h.step_attach(ctx, OWNER, {"job_id": 7, "step_id": 0})
