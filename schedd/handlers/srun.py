"""Job steps: srun's ``step_start``/``step_wait``/``step_cancel`` and the agents' ``step_ended``.

The flow of one ``srun`` inside a batch job::

    srun --step_start--> schedd: owner? RUNNING? lay tasks over the allocation (schedd.steps),
                         commit the job_steps row (RUNNING), then launch_step to every node
    agentd (each node) runs its tasks as the job's user, each writing its own output files
                         or, without --output/--error, files in the agent's spool that it
                         sends on (step_output, acknowledged by offset), and reports
                         step_ended (every task's exit) once all of that output is taken
    srun --step_wait--> schedd: the forwarded output srun has not yet written (srun's cursors
                         release what it has), then, once the step ended and every byte was
                         delivered, the worst task's exit; srun exits with it

The batch step (``JOBID.batch``) gets its row from the lifecycle, when a run starts and ends
(``lifecycle/transitions.py``); when a run ends, every step of it still running is stopped
(``lifecycle/step_cleanup.py``); agents list the jobs they run steps for in their heartbeats,
so a step whose job schedd no longer runs is fenced even if that message was lost
(``handlers/agent.py``).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import os
import secrets
from typing import Any

from kiln.identity import Caller, is_operator
from kiln.model import Job, JobState
from kiln.slurm.hostlist import compress
from kiln.wire import protocol
from schedd.domain.jobenv import expand_output_pattern, step_environment, task_overlay
from schedd.domain.stepoutput import MAX_TAPS, STREAMS, parse_cursors
from schedd.domain.steps import LiveStep, NodeShare, StepError, StepShape, TaskExit, plan
from schedd.ledger.records import StepRecord
from schedd.lifecycle.context import Context, RequestError
from schedd.state import RUNNING_STATES

log = logging.getLogger("schedd.domain.steps")

NOT_RUNNING = "Job/step already completing or completed"
_SHAPE_FIELDS = ("ntasks", "nodes", "ntasks_per_node", "cpus_per_task", "gpus", "gpus_per_node",
                 "gpus_per_task")


# --- srun ------------------------------------------------------------------------------------


def step_start(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    spec = body["step"]
    job = _own_job(ctx, caller, spec["job_id"])
    if job.state != JobState.RUNNING:
        raise RequestError(NOT_RUNNING)
    argv, env, cwd = _command(spec)
    shape = StepShape(**{name: spec.get(name) or 0 for name in _SHAPE_FIELDS})
    if spec.get("pty"):
        shape = _terminal_shape(spec, shape)
    try:
        shares = plan(job, shape)
    except StepError as exc:
        raise RequestError(str(exc)) from None
    step_id = ctx.steps.next_id(job.id, -1 if ctx.steps.known(job.id)
                                else ctx.state.store.max_step_id(job.id))
    now = ctx.now()
    cpus_per_task = shape.cpus_per_task or job.cpus_per_task
    counts = [len(s.procids) for s in shares]
    nodes = [s.node for s in shares]
    tasks = _task_files(job, spec, step_id, shares, cwd)
    terminal = shares[0].node if spec.get("pty") else ""
    if terminal:
        tasks[0]["forward"] = ["out"]  # stdin, stdout and stderr are the terminal
    ctx.state.save_steps([StepRecord(
        job_id=job.id, step_id=str(step_id), name=str(spec.get("name") or os.path.basename(
            argv[0]))[:200], node_list=compress(nodes), num_nodes=len(nodes),
        num_tasks=sum(counts), cpus=sum(s.cpus for s in shares), state="RUNNING",
        start_time=now)])
    ctx.steps.add(LiveStep(job.id, step_id, nodes, sum(counts), now, waiting=set(nodes),
                           uid=job.uid, terminal=terminal))
    for share in shares:
        node_env = step_environment(env, job, step_id, share.index, share.node, share.cpus,
                                    list(share.gpus), list(share.procids), nodes, counts,
                                    cpus_per_task, ctx.cfg.topology)
        launch = {
            "job_id": job.id, "step_id": step_id, "user": job.user, "uid": job.uid,
            "gid": job.gid, "argv": argv, "cwd": cwd, "environment": node_env,
            "tasks": [tasks[p] for p in share.procids],
            "time_limit": job.launched_limit,  # the job's run, as its agent enforces it
            "job_start": job.start_time, "kill_wait": ctx.cfg.kill_wait,
            "allocation": _holding(job, share.node),
        }
        mps = next(a.mps_gpus for a in job.allocation if a.node == share.node)
        if mps:  # gres/mps: the node's agent adds the MPS pipe directory (agentd/mps.py)
            launch["mps_gpus"] = mps
        for name in ("task_prolog", "task_epilog"):  # srun --task-prolog / --task-epilog
            if spec.get(name):
                launch[name] = spec[name]
        if share.node == terminal:
            launch["pty"] = True
            if spec.get("winsize"):
                launch["winsize"] = spec["winsize"]
        ctx.agents.launch_step(share.node, launch)
    return {"step_id": step_id, "nodes": nodes, "node_list": compress(nodes),
            "tasks": [{"procid": p, "node": s.node, "stdout": tasks[p]["stdout"],
                       "stderr": tasks[p]["stderr"]} for s in shares for p in s.procids]}


def _holding(job: Job, node: str) -> dict[str, Any]:
    """What the job holds on ``node``: the limits of its cgroup there, which is the step's
    own where the batch script runs elsewhere (agentd/step_tasks.py)."""
    alloc = next(a for a in job.allocation if a.node == node)
    return {"cpus": alloc.cpus, "memory_mb": alloc.memory_mb, "gpus": alloc.devices,
            "cpu_ids": list(alloc.cpu_ids)}


TERMINAL_ONE_TASK = "srun --pty runs one task (use -n 1 -N 1)"
TERMINAL_FILES = "srun --pty sends the task's output to the terminal (no --output/--error)"


def _terminal_shape(spec: dict[str, Any], shape: StepShape) -> StepShape:
    """srun --pty: one task, on the job's first node, its output to srun's terminal."""
    if (shape.ntasks or 1) != 1 or (shape.nodes or 1) != 1 or (shape.ntasks_per_node or 1) != 1:
        raise RequestError(TERMINAL_ONE_TASK)
    if spec.get("stdout") or spec.get("stderr") or not spec.get("forward"):
        raise RequestError(TERMINAL_FILES)
    return dataclasses.replace(shape, ntasks=1, nodes=1)


def step_input(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """srun --pty's keystrokes (and the terminal's new size) for its step's terminal: passed
    to the node, which writes them to the task's pseudo-terminal at their offset."""
    job_id, step_id = body["job_id"], body["step_id"]
    _own_job(ctx, caller, job_id)
    live = ctx.steps.get(job_id, step_id)
    if live is None or not live.terminal or live.done:
        return {"delivered": False}
    message: dict[str, Any] = {"job_id": job_id, "step_id": step_id}
    for key in ("offset", "data", "winsize"):
        if body.get(key) is not None:
            message[key] = body[key]
    ctx.agents.step_input(live.terminal, message)
    return {"delivered": True}


def step_attach(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """sattach: the output of a running step from now on, through a tap of its own (``tap``
    0: attach). Its owner's and operators' only. ``done`` once the step has ended and the
    tap is empty (or schedd no longer holds the step)."""
    job_id, step_id = body["job_id"], body["step_id"]
    job = ctx.state.jobs.get(job_id)
    if job is None:
        raise RequestError(_invalid_step(job_id, step_id), protocol.E_INVALID_JOB)
    if caller.uid not in (0, job.uid) and not is_operator(caller):
        raise RequestError("Access/permission denied", protocol.E_PERMISSION)
    live = ctx.steps.get(job_id, step_id)
    if live is None:
        if body.get("tap"):
            return {"tap": body["tap"], "done": True}
        raise RequestError(_invalid_step(job_id, step_id), protocol.E_INVALID_JOB)
    now = ctx.now()
    tap_id = int(body.get("tap") or 0)
    tap = live.output.taps.get(tap_id) if tap_id else None
    if tap is None:
        tap_id = secrets.randbelow(2**31 - 1) + 1
        tap = live.output.attach(tap_id, now)
        if tap is None:
            raise RequestError(f"step {job_id}.{step_id} has {MAX_TAPS} readers attached "
                               "already", protocol.E_AGAIN)
    output = tap.take(now)
    return {"tap": tap_id, "output": output, "terminal": bool(live.terminal),
            "done": live.done and not tap.chunks, "dropped": tap.dropped}


def step_wait(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """srun polls this: the forwarded output it has not written yet (its cursors say what it
    has), and, once the step has ended and all of it was delivered, every task's exit."""
    job_id, step_id = body["job_id"], body["step_id"]
    live = ctx.steps.get(job_id, step_id)
    if live is not None and body.get("peek"):
        _own_job(ctx, caller, job_id)
        return _peeked(live)
    if live is not None:
        _own_job(ctx, caller, job_id)
        live.output.trim(parse_cursors(body.get("cursors") or []))
        if not (live.done and live.output.drained):
            chunks = live.output.chunks()
            return {"done": False, "output": chunks} if chunks else {"done": False}
        ctx.steps.forget(job_id, step_id)
        return {"done": True, "state": live.state, "exit_code": live.exit_code,
                "exit_signal": live.exit_signal,
                "tasks": [[e.procid, e.node, e.exit_code, e.exit_signal]
                          for e in sorted(live.exits.values(), key=lambda e: e.procid)]}
    return _stored_step(ctx, caller, job_id, step_id)


def _peeked(live: LiveStep) -> dict[str, Any]:
    """A step still held for its srun, seen by someone who does not take its output (the batch
    script of an srun outside an allocation): whether its tasks have all ended, and how. It is
    ``done`` only once srun has collected it (then it is answered from the ledger)."""
    if not live.done:
        return {"done": False, "ended": False}
    return {"done": False, "ended": True, "state": live.state, "exit_code": live.exit_code,
            "exit_signal": live.exit_signal}


def _stored_step(ctx: Context, caller: Caller, job_id: int, step_id: int) -> dict[str, Any]:
    """A step schedd no longer holds in memory (answered once already, or schedd restarted)."""
    job = ctx.state.jobs.get(job_id)
    if job is None:
        found = ctx.state.store.query_jobs(job_ids=[job_id])
        job = next((j for j in found if j.id == job_id), None)
    if job is None or (caller.uid not in (0, job.uid)):
        raise RequestError(_invalid_step(job_id, step_id), protocol.E_INVALID_JOB)
    row = next((r for r in ctx.state.store.query_steps([job_id]) if r.step_id == str(step_id)),
               None)
    if row is None:
        raise RequestError(_invalid_step(job_id, step_id), protocol.E_INVALID_JOB)
    if row.state == "RUNNING" and job.state in RUNNING_STATES:
        return {"done": False}
    state = row.state if row.state != "RUNNING" else JobState.CANCELLED.value
    return {"done": True, "state": state, "exit_code": row.exit_code,
            "exit_signal": row.exit_signal, "tasks": []}


def _invalid_step(job_id: int, step_id: int) -> str:
    return f"Invalid job id specified: step {job_id}.{step_id} is not known"


def step_cancel(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """srun was interrupted: stop the step's tasks on every node (SIGTERM, KillWait, SIGKILL)."""
    job_id, step_id = body["job_id"], body["step_id"]
    _own_job(ctx, caller, job_id)
    live = ctx.steps.get(job_id, step_id)
    if live is not None and body.get("detach"):
        live.output.abandon()
    if live is None or live.done:
        return {"cancelled": False}
    for node in sorted(live.waiting):
        ctx.agents.terminate_steps(node, job_id, step_id, JobState.CANCELLED.value)
    return {"cancelled": True}


def _own_job(ctx: Context, caller: Caller, job_id: int) -> Job:
    job = ctx.state.jobs.get(job_id)
    if job is None:
        raise RequestError("Invalid job id specified", protocol.E_INVALID_JOB)
    if caller.uid not in (0, job.uid):
        raise RequestError("Access/permission denied", protocol.E_PERMISSION)
    return job


def _command(spec: dict[str, Any]) -> tuple[list[str], dict[str, str], str]:
    argv = spec["argv"]
    if not argv or not argv[0] or not all(isinstance(a, str) and "\0" not in a for a in argv):
        raise RequestError("no command to run (srun needs an executable)")
    env = spec["environment"]
    for name, value in env.items():
        if not name or "=" in name or "\0" in name or not isinstance(value, str) or "\0" in value:
            raise RequestError(f"invalid environment variable {str(name)[:64]!r}")
    cwd = spec["cwd"]
    if not os.path.isabs(cwd):
        raise RequestError("working directory must be an absolute path")
    if spec.get("open_mode", "truncate") not in ("truncate", "append"):
        raise RequestError("Invalid --open-mode specification")
    return list(argv), dict(env), cwd


def _task_files(job: Job, spec: dict[str, Any], step_id: int, shares: list[NodeShare],
                cwd: str) -> dict[int, dict[str, Any]]:
    """Each task's launch entry: its rank overlay and its stdout/stderr paths.

    ``--output``/``--error`` patterns are expanded per task (%t rank, %n node index, %N node,
    %s step); without them, when srun asks to ``forward``, the stream is sent over the wire
    (the path is then ""), else it goes to /dev/null. A file shared by tasks of several nodes
    is opened for appending (srun truncated it before asking), so no node clobbers another's
    lines."""
    out_pattern, err_pattern = spec.get("stdout") or "", spec.get("stderr") or ""
    forward = bool(spec.get("forward"))
    unnamed = "" if forward else os.devnull
    base = cwd.replace("%", "%%")
    tasks: dict[int, dict[str, Any]] = {}
    writers: dict[str, set[str]] = {}
    for share in shares:
        for local, procid in enumerate(share.procids):
            subs = {"t": str(procid), "n": str(share.index), "s": str(step_id)}

            def path(pattern: str, subs: dict[str, str] = subs, node: str = share.node) -> str:
                full = pattern if os.path.isabs(pattern) else os.path.join(base, pattern)
                return expand_output_pattern(full, job, node, subs)

            stdout = path(out_pattern) if out_pattern else unnamed
            if err_pattern:
                stderr = path(err_pattern)
            else:
                stderr = stdout if out_pattern else unnamed
            tasks[procid] = {"procid": procid, "env": task_overlay(procid, local),
                             "stdout": stdout, "stderr": stderr, "append": False}
            streams = [name for name, p in zip(STREAMS, (stdout, stderr), strict=True) if not p]
            if streams:
                tasks[procid]["forward"] = streams
            for p in {stdout, stderr} - {""}:
                writers.setdefault(p, set()).add(share.node)
    appending = spec.get("open_mode") == "append"
    for entry in tasks.values():
        entry["append"] = appending or any(
            len(writers.get(p, ())) > 1 for p in (entry["stdout"], entry["stderr"]))
    return tasks


# --- agents ----------------------------------------------------------------------------------


def step_ended(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    """Every task of a step on one node has ended; the step ends when its last node says so."""
    if body["node"] != caller:
        raise RequestError(f"agent {caller!r} cannot speak for node {body['node']!r}")
    exits = []
    for item in body["tasks"]:
        if (isinstance(item, list) and len(item) == 3
                and all(isinstance(v, int) and not isinstance(v, bool) for v in item)):
            exits.append(TaskExit(item[0], caller, item[1], item[2]))
    job_id, step_id = body["job_id"], body["step_id"]
    end = float(body["end_time"])
    cpu = _cpu(body.get("cpu"))
    live = ctx.steps.get(job_id, step_id)
    if live is None:
        _close_unknown(ctx, job_id, step_id, caller, str(body["state"]), exits, end, cpu)
        return {}
    if live.node_ended(caller, str(body["state"]), exits, end, cpu):
        ctx.state.end_step(live)
    return {}


def step_output(ctx: Context, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    """A chunk of a task's forwarded output: kept for srun if it is the next one and fits.
    The reply is the offset expected next (cumulative acknowledgement), or ``gone`` when no
    srun can read it any more (the step was forgotten: its job ended, or schedd restarted)."""
    if body["node"] != caller:
        raise RequestError(f"agent {caller!r} cannot speak for node {body['node']!r}")
    live = ctx.steps.get(body["job_id"], body["step_id"])
    if live is None or caller not in live.nodes:
        return {"gone": True}
    procid, stream, offset = body["procid"], body["stream"], body["offset"]
    if stream not in STREAMS or not 0 <= procid < live.num_tasks or offset < 0:
        raise RequestError("step_output: no such task stream")
    try:
        data = base64.b64decode(body["data"], validate=True)
    except binascii.Error:
        raise RequestError("step_output: data is not base64") from None
    return {"expected": live.output.accept((procid, stream), offset, data)}


def _cpu(value: Any) -> tuple[float, float] | None:
    """step_ended's ``cpu`` ([user, system] seconds), or None when absent or malformed."""
    if (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
                    for v in value)):
        return float(value[0]), float(value[1])
    return None


def _close_unknown(ctx: Context, job_id: int, step_id: int, node: str, state: str,
                   exits: list[TaskExit], end: float, cpu: tuple[float, float] | None) -> None:
    """A report for a step schedd forgot (it restarted): close the row with what this one
    node says, as if the step had run there alone."""
    live = LiveStep(job_id, step_id, [node], len(exits), end, waiting={node})
    live.node_ended(node, state, exits, end, cpu)
    ctx.state.end_step(live)


