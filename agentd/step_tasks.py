"""Running srun's tasks on this node: one node's share of a job step.

schedd sends ``launch_step`` (``operations.STEP_LAUNCH_FIELDS``) to every node of a step with
that node's tasks already laid out: each task's rank overlay (SLURM_PROCID, SLURM_LOCALID) and
its stdout/stderr paths. Here, per task:

- the output files are opened *as the user* (the launcher's effective-uid switch), each distinct
  path once per node and shared by the tasks that name it; truncated unless schedd says the file
  is shared with another node (then appended, srun having truncated it). Streams schedd marks
  ``forward`` go to pipes the agent drains into its own spool, up to a per-step and per-node
  cap (then the task waits in write()), and sends on to schedd for srun (agentd/forward.py);
- the command is exec'd as the user with its groups, in its own session (so each task is a
  process group the agent can signal whole), stdin from /dev/null, in srun's working directory
  (entered after the switch to the user, ``launcher.enter_workdir``);
  a command that cannot be exec'd is Slurm's ``execve(): ...`` line in the task's stderr and
  exit code 2.

A node's share ends when every task has been reaped and no process of their groups remains
(leftovers are SIGKILLed, as slurmstepd does) and schedd has taken all of its forwarded output;
the report lists every task's exit and is sent until schedd acknowledges it. ``terminate``
(srun interrupted, the job ended) and the job's walltime (the agent keeps time itself here too)
send SIGCONT+SIGTERM to every task group and SIGKILL after KillWait.

Not kept in the spool: an agent restart forgets its step tasks (they run on, unsupervised, until
they end; the forwarded files of the steps it ran are removed when it starts again); schedd
closes such a step's row when its job ends.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import shutil
import signal as _signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd import jobtmp
from agentd import launcher as lch
from agentd.cgroups import CgroupError, JobCgroup, Limits
from agentd.forward import (
    DEFAULT_STEP_CAP,
    PUMP_CAP,
    TURN_CAP,
    StepOutput,
    Stream,
    StreamKey,
    message,
)
from agentd.terminal import Terminal, controlling_terminal
from agentd.walltime import Ending, Walltime
from kiln.slurm import rlimits
from kiln.wire import operations, protocol

log = logging.getLogger("agentd.step_tasks")

EXEC_FAILED = 2  # exit code of a task whose command could not be exec'd (slurmstepd's)
TASK_WRAPPER = str(Path(__file__).with_name("task_wrapper.py"))  # TaskProlog / TaskEpilog
DEFAULT_NODE_CAP = 1024 * 1024 * 1024  # bytes of forwarded output held on a node, at most


@dataclass(slots=True)
class _Task:
    procid: int
    pid: int = 0
    proc: subprocess.Popen | None = None
    exited: bool = False
    exit_code: int = 0
    exit_signal: int = 0
    stderr_path: str = ""
    stderr_forwarded: bool = False  # stderr goes to srun (a pipe the agent reads)
    terminal: bool = False  # srun --pty: stdin, stdout and stderr are a pseudo-terminal
    cpu: tuple[float, float] | None = None  # (user, system) seconds from wait4


@dataclass(slots=True)
class _Step:
    job_id: int
    step_id: int
    ident: lch.Identity
    tasks: list[_Task]
    walltime: Walltime
    kill_wait: int
    ending: Ending | None = None
    reaped_all_at: float = 0.0
    groups: list[int] = field(default_factory=list)
    output: StepOutput | None = None  # its forwarded streams on this node
    cgroup: JobCgroup | None = None  # its job's cgroup here (agentd/cgroups.py)
    leaf: str = ""  # its leaf there, step_<id>: where its tasks are
    steps_only: bool = False  # the job's cgroup is the runner's (no batch job of it here)
    terminal: Terminal | None = None  # srun --pty: the first task's pseudo-terminal

    @property
    def key(self) -> tuple[int, int]:
        return self.job_id, self.step_id


# the generation of a job's cgroup made for its steps alone: in the node's CPU accounting
# (agentd.cgroups.Cgroups.cpus_in_use) it must not be taken for a batch run's (generation >= 0)
STEPS_ONLY = -1


@dataclass(slots=True)
class _StepsCgroup:
    """A job's cgroup on a node of it where its batch script does not run: made at its first
    step here with what the job holds here (its CPU ids, memory, GPUs), as the batch host's
    job cgroup is; its steps are leaves in it, and it goes with the last of them."""

    cgroup: JobCgroup
    steps: set[int] = field(default_factory=set)


class StepRunner:
    """The step tasks of one node. Uses the ``Launcher`` for identities and the uid switch, so
    the daemon must call both from its one thread."""

    def __init__(self, launcher: lch.Launcher, node_name: str,
                 step_cap: int = DEFAULT_STEP_CAP, node_cap: int = DEFAULT_NODE_CAP,
                 task_prolog: str = "", task_epilog: str = ""):
        if step_cap <= 0 or node_cap <= 0:
            raise ValueError("the forwarded-output caps must be positive")
        self.launcher = launcher
        # the site's TaskProlog / TaskEpilog ([agent] task_prolog, task_epilog)
        self.task_prolog, self.task_epilog = task_prolog, task_epilog
        self.node_name = node_name
        self.step_cap = step_cap  # bytes of one step's forwarded output held here, at most
        self.node_cap = node_cap  # ... of every step's together
        self._steps: dict[tuple[int, int], _Step] = {}
        self._unacked: dict[tuple[int, int], tuple[float, dict[str, Any]]] = {}
        # steps whose tasks are gone but whose forwarded output schedd has not all taken yet,
        # with the step_ended report to queue once it has
        self._draining: dict[tuple[int, int], tuple[StepOutput, dict[str, Any]]] = {}
        self._turn = 0
        self._job_cgroups: dict[int, _StepsCgroup] = {}  # job id -> its steps' cgroup here
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._forward_root = launcher.spool.root / "steps"
        shutil.rmtree(self._forward_root, ignore_errors=True)  # an earlier agent's, forgotten

    # --- launch ----------------------------------------------------------------------------

    def launch(self, spec: dict[str, Any], now: float | None = None) -> bool:
        """Start this node's tasks of a step; False for a resend of one already here. A step
        that cannot start at all is reported at once (every task FAILED)."""
        now = time.time() if now is None else now
        try:
            protocol.check(spec, operations.STEP_LAUNCH_FIELDS, "launch_step")
        except protocol.ProtocolError as exc:
            log.error("bad launch_step: %s", exc.message)
            return False
        key = (spec["job_id"], spec["step_id"])
        if key in self._steps or key in self._unacked or key in self._draining:
            return False
        tasks = [_Task(int(t.get("procid", -1))) for t in spec["tasks"] if isinstance(t, dict)]
        try:
            ident = self.launcher._identity(spec)
            _check(spec)
        except lch.LaunchError as exc:
            log.error("step %d.%d cannot start: %s", key[0], key[1], exc)
            for task in tasks:
                task.exited, task.exit_code = True, 1
            self._queue_report(key, "FAILED", tasks, now)
            return True
        step = _Step(key[0], key[1], ident, tasks, Walltime(spec["job_start"], spec["time_limit"]),
                     spec["kill_wait"] if spec["kill_wait"] >= 0 else self.launcher.kill_wait)
        self._steps[key] = step
        try:
            self._make_cgroup(step, spec.get("allocation"))
        except (CgroupError, OSError) as exc:
            log.error("step %d.%d cannot start: %s", key[0], key[1], exc)
            for task in tasks:
                task.exited, task.exit_code = True, 1
            return True
        self._start_tasks(step, spec)
        return True

    # --- cgroup hooks (agentd.cgroups) -----------------------------------------------------

    def _make_cgroup(self, step: _Step, holding: dict[str, Any] | None) -> None:
        """The step's leaf in its job's cgroup here: the batch job's where the script runs
        on this node, else one made for the job's steps (``_StepsCgroup``) with ``holding``,
        what the job holds on this node, so that its limits are the same on every node of
        the job. Nothing on a node without cgroups."""
        cgroups = self.launcher.cgroups
        if cgroups is None:
            return
        job_cgroup = self.launcher.job_cgroup(step.job_id)
        if job_cgroup is None:
            job_cgroup = self._steps_cgroup(step, holding)
            self._job_cgroups[step.job_id].steps.add(step.step_id)
            step.steps_only = True
        step.cgroup, step.leaf = job_cgroup, f"step_{step.step_id}"
        job_cgroup.add_leaf(step.leaf)

    def _steps_cgroup(self, step: _Step, holding: dict[str, Any] | None) -> JobCgroup:
        """The job's steps' cgroup here, made for ``step`` if it is the first. Named after
        that step (``job_<id>_steps_from_<step>``): steps an earlier agent forgot still run in
        that agent's, and a cgroup found populated when made is killed as stale."""
        job_id = step.job_id
        held = self._job_cgroups.get(job_id)
        if held is not None:
            return held.cgroup
        cgroups = self.launcher.cgroups
        assert cgroups is not None
        key = (job_id, STEPS_ONLY)
        limits = Limits()  # a launch from a schedd that does not say what the job holds
        if holding is not None:
            limits = cgroups.limits(key, holding["cpus"], holding["memory_mb"],
                                    holding.get("gpus") or (), holding.get("cpu_ids") or ())
        try:
            cgroup = cgroups.create(job_id, STEPS_ONLY, limits,
                                    name=f"job_{job_id}_steps_from_{step.step_id}")
        except CgroupError:
            cgroups.release(key)
            raise
        self._job_cgroups[job_id] = _StepsCgroup(cgroup)
        return cgroup

    def _drop_cgroup(self, step: _Step) -> None:
        if step.cgroup is None:
            return
        step.cgroup.remove(step.leaf)
        held = self._job_cgroups.get(step.job_id) if step.steps_only else None
        if held is not None:
            held.steps.discard(step.step_id)
            if not held.steps:
                del self._job_cgroups[step.job_id]
                held.cgroup.remove()
                if self.launcher.cgroups is not None:
                    self.launcher.cgroups.release((step.job_id, STEPS_ONLY))
        step.cgroup = None

    def _start_tasks(self, step: _Step, spec: dict[str, Any]) -> None:
        fds: dict[Any, int] = {}  # (path, append) opened as the user; (procid, stream) forwarded
        try:
            fds.update(self._open_forwarded(step, spec))  # the agent's files: before the switch
            if spec.get("pty") and step.tasks:
                fds["terminal"] = fds[(step.tasks[0].procid, "out")]
            with self.launcher._as_user(step.ident):
                cwd, note = lch._workdir(spec["cwd"])
                for task, entry in zip(step.tasks, spec["tasks"], strict=True):
                    for name in ("out", "err"):
                        target = _target(task, entry, name)
                        if task.terminal:
                            continue
                        if target not in fds:
                            fds[target] = lch._open_output(*target)  # type: ignore[misc]
                    self._note_stderr(step, task, entry)
        except lch.LaunchError as exc:
            for fd in set(fds.values()):
                os.close(fd)
            log.error("step %d.%d: %s", step.job_id, step.step_id, exc)
            for task in step.tasks:
                task.exited, task.exit_code = True, 1
            return
        join: list[int] = []
        argv = self._wrapped(spec)
        try:
            tmp = self.launcher.private_tmp(step.job_id)  # the job's /tmp: shared by its steps
        except lch.LaunchError as exc:
            log.error("step %d.%d: %s", step.job_id, step.step_id, exc)
            for fd in set(fds.values()):
                lch._write_fd(fd, f"slurmstepd: error: {exc}\n")
                os.close(fd)
            for task in step.tasks:
                task.exited, task.exit_code = True, 1
            return
        try:
            if step.cgroup is not None:
                join = step.cgroup.open_procs(step.leaf)
            for task, entry in zip(step.tasks, spec["tasks"], strict=True):
                if task.terminal:
                    out_fd = err_fd = in_fd = fds["terminal"]
                else:
                    out_fd = fds[_target(task, entry, "out")]
                    err_fd = fds[_target(task, entry, "err")]
                    in_fd = self._devnull
                if note and task is step.tasks[0]:
                    lch._write_fd(err_fd, note)
                env, limits = self.launcher.limits_of(
                    {**spec["environment"], **_strings(entry.get("env"))})
                self._exec(step, task, argv, env, cwd, (in_fd, out_fd, err_fd), join, tmp,
                           limits)
        except OSError as exc:
            log.error("step %d.%d cannot join its cgroup: %s", step.job_id, step.step_id, exc)
            for task in step.tasks:
                if not task.pid:
                    task.exited, task.exit_code = True, 1
        finally:
            for fd in {*fds.values(), *join}:
                os.close(fd)

    def _wrapped(self, spec: dict[str, Any]) -> list[str]:
        """The task's command, behind ``agentd/task_wrapper.py`` when a TaskProlog or
        TaskEpilog applies: the site's and srun's prologs (in that order) before it, srun's
        and the site's epilogs after it, all run as the task."""
        prologs = [p for p in (self.task_prolog, spec.get("task_prolog")) if p]
        epilogs = [p for p in (spec.get("task_epilog"), self.task_epilog) if p]
        if not prologs and not epilogs:
            return list(spec["argv"])
        argv = [sys.executable, "-I", TASK_WRAPPER]
        for path in prologs:
            argv += ["--prolog", path]
        for path in epilogs:
            argv += ["--epilog", path]
        return [*argv, "--", *spec["argv"]]

    def _open_forwarded(self, step: _Step, spec: dict[str, Any]) -> dict[StreamKey, int]:
        """The agent's files for the streams schedd forwards; their write descriptors."""
        wanted = [(task.procid, name) for task, entry in zip(step.tasks, spec["tasks"],
                                                             strict=True)
                  for name in ("out", "err") if name in _forwarded(entry)]
        if not wanted:
            return {}
        readers: dict[StreamKey, int] = {}
        slave = -1
        try:
            if spec.get("pty") and step.tasks:
                first = step.tasks[0]
                first.terminal = True
                step.terminal, reader, slave = Terminal.open(step.ident.uid, step.ident.gid,
                                                             spec.get("winsize"))
                readers[(first.procid, "out")] = reader
                wanted = [key for key in wanted if key[0] != first.procid]
            step.output, writers = StepOutput.create(self._forward_root, step.job_id,
                                                     step.step_id, wanted, self.step_cap,
                                                     readers)
        except OSError as exc:
            if slave >= 0:
                os.close(slave)
            if step.terminal is not None:
                step.terminal.close()
                step.terminal = None
            raise lch.LaunchError(f"cannot make the forwarded output files: "
                                  f"{exc.strerror or exc}") from None
        if slave >= 0:
            writers[(step.tasks[0].procid, "out")] = slave
        return writers

    def _note_stderr(self, step: _Step, task: _Task, entry: dict[str, Any]) -> None:
        """Where the task's stderr goes, for slurmstepd's banner when the step is stopped."""
        if task.terminal or ("err" in _forwarded(entry) and step.output is not None):
            task.stderr_forwarded = True  # the banner goes into the forwarded stream
        else:
            task.stderr_path = str(entry.get("stderr") or os.devnull)

    def _exec(self, step: _Step, task: _Task, argv: list[str], env: dict[str, str], cwd: str,
              stdio: tuple[int, int, int], join: list[int],
              tmp: dict[str, str] | None = None, limits: dict[str, int] | None = None) -> None:
        in_fd, out_fd, err_fd = stdio
        enter = lch.enter_workdir(cwd, join)  # as the user, in the step's cgroup
        credentials = self.launcher._credentials(step.ident)
        # a private /tmp is entered as root: then the switch to the user is prepare()'s own
        # (CPython calls preexec_fn after the switch its user=/group= arguments make)
        switch = lch.switch_user(credentials) if tmp else None

        def prepare() -> None:
            if task.terminal:
                controlling_terminal()  # the new session's (start_new_session ran setsid)
            if tmp:
                jobtmp.enter(tmp)
            if switch is not None:
                switch()
            for line in rlimits.apply(limits or {}):  # the submitter's (PropagateResourceLimits)
                os.write(2, line.encode())
            enter()

        try:
            proc = subprocess.Popen(
                argv, stdin=in_fd, stdout=out_fd, stderr=err_fd, env=env,
                preexec_fn=prepare,
                start_new_session=True, close_fds=True, umask=lch._umask(env),
                **({} if tmp else credentials),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            lch._write_fd(err_fd, f"slurmstepd: error: execve(): {argv[0]}: {reason}\n")
            task.exited, task.exit_code = True, EXEC_FAILED
            return
        task.pid, task.proc = proc.pid, proc
        step.groups.append(proc.pid)

    # --- control ---------------------------------------------------------------------------

    def terminate(self, job_id: int, step_id: int | None, state: str,
                  now: float | None = None) -> int:
        """Stop one step of a job, or all of them (step_id None); how many were running."""
        now = time.time() if now is None else now
        hits = [s for s in self._steps.values()
                if s.job_id == job_id and (step_id is None or s.step_id == step_id)]
        for step in hits:
            self._reap(step, now)
            if step.ending is None:
                self._begin_ending(step, state, now)
        return len(hits)

    def input(self, body: dict[str, Any]) -> None:
        """srun --pty's input (step_input, already checked against its schema) for a step's
        terminal here, and/or the terminal's new size."""
        step = self._steps.get((body["job_id"], body["step_id"]))
        if step is None or step.terminal is None:
            return
        if body.get("winsize"):
            step.terminal.resize(*body["winsize"])
        if body.get("data"):
            try:
                data = base64.b64decode(body["data"], validate=True)
            except (binascii.Error, ValueError):
                log.warning("step %d.%d: terminal input is not base64", *step.key)
                return
            step.terminal.feed(body.get("offset"), data)
    def signal(self, job_id: int, sig: str) -> int:
        """``sig`` to every task of the job's steps here (scancel --signal); how many steps."""
        try:
            signum = lch.parse_signal(sig)
        except lch.SignalSpecError:
            return 0
        hits = [s for s in self._steps.values() if s.job_id == job_id]
        for step in hits:
            self._signal_all(step, signum)
        return len(hits)

    def job_ids(self) -> list[int]:
        """Jobs with step tasks here, for the heartbeat (schedd fences those it no longer runs)."""
        return sorted({s.job_id for s in self._steps.values()})

    def running(self) -> list[tuple[int, int]]:
        return sorted(self._steps)

    def live_tasks(self) -> list[tuple[int, int, int, int]]:
        """(job id, step id, task id, pid) of every task still running here (the sampler's)."""
        return [(step.job_id, step.step_id, task.procid, task.pid)
                for step in self._steps.values() for task in step.tasks
                if task.pid and not task.exited]

    # --- the loop --------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[tuple[tuple[int, int], dict[str, Any]]]:
        """Reap, enforce the job's walltime and KillWait; the step_ended reports now due."""
        now = time.time() if now is None else now
        self.pump()
        for step in list(self._steps.values()):
            if step.terminal is not None:
                step.terminal.flush()
            self._reap(step, now)
            if step.ending is None and step.walltime.expired(now):
                self._begin_ending(step, "TIMEOUT", now)
            if step.ending is not None and step.ending.kill_due(now):
                self._signal_all(step, _signal.SIGKILL)
                step.ending.killed = True
            if all(t.exited for t in step.tasks):
                self._settle(step, now)
        for key, (output, body) in list(self._draining.items()):
            if output.complete:
                log.info("step %d.%d: %d bytes forwarded; the spool held at most %d of "
                         "them", *key, sum(s.written for s in output.streams.values()),
                         output.peak)
                output.close()
                del self._draining[key]
                self._unacked[key] = (0.0, body)
        return self.reports_due(now)

    # --- forwarded output --------------------------------------------------------------------

    def output_due(self, now: float | None = None
                   ) -> list[tuple[tuple[tuple[int, int], Stream, int], dict[str, Any]]]:
        """The ``step_output`` chunks to send now, at most TURN_CAP bytes, each with the token
        its reply is matched by. Streams are served in turn, starting one further each call."""
        now = time.time() if now is None else now
        self.pump()
        outputs = self._outputs()
        if not outputs:
            return []
        self._turn = (self._turn + 1) % len(outputs)
        due, budget = [], TURN_CAP
        for key, output in outputs[self._turn:] + outputs[:self._turn]:
            for stream, offset, data in output.due(now, budget):
                due.append(((key, stream, offset), message(self.node_name, key, stream,
                                                           offset, data)))
                budget -= len(data)
        return due

    def _outputs(self) -> list[tuple[tuple[int, int], StepOutput]]:
        outputs = [(s.key, s.output) for s in self._steps.values() if s.output is not None]
        return outputs + [(key, output) for key, (output, _) in self._draining.items()]

    def held(self) -> int:
        """Bytes of forwarded output this node's spool holds now (every step)."""
        return sum(output.held for _, output in self._outputs())

    def pump(self) -> int:
        """Move the tasks' output from their pipes into the spool, each step up to its cap
        and all of them up to the node's (and PUMP_CAP per call); the bytes moved. A task
        whose pipe is not read blocks in write(): that is the backpressure."""
        outputs = self._outputs()
        if not outputs:
            return 0
        room = min(self.node_cap - self.held(), PUMP_CAP)
        moved = 0
        start = self._turn % len(outputs)
        for _, output in outputs[start:] + outputs[:start]:
            moved += output.pump(max(room - moved, 0))
        return moved

    def pipes(self) -> list[int]:
        """The tasks' pipes the daemon should wake up for: those the agent would read now
        (none while the node is at its cap, but for streams schedd dropped)."""
        full = self.held() >= self.node_cap
        fds = []
        for _, output in self._outputs():
            fds += [s.pipe for s in output.streams.values() if s.pipe >= 0 and s.gone] \
                if full else output.pipes()
        return fds

    def output_answered(self, token: tuple[tuple[int, int], Stream, int],
                        reply: dict[str, Any], now: float | None = None) -> None:
        """schedd's reply to one ``step_output``."""
        _, stream, offset = token
        stream.answered(offset, reply, time.time() if now is None else now)

    def reports_due(self, now: float) -> list[tuple[tuple[int, int], dict[str, Any]]]:
        """Reports never sent, or unacknowledged for RESEND_AFTER seconds."""
        due = []
        for key, (sent, body) in list(self._unacked.items()):
            if now - sent >= RESEND_AFTER:
                self._unacked[key] = (now, body)
                due.append((key, body))
        return due

    def acknowledged(self, key: tuple[int, int]) -> None:
        self._unacked.pop(key, None)

    def _reap(self, step: _Step, now: float) -> None:
        for task in step.tasks:
            if task.exited or not task.pid:
                continue
            pid, status, task.cpu = lch.reap(task.pid)
            if pid == 0:
                continue
            status = 0 if status is None else status  # reaped elsewhere: say it succeeded
            task.exited = True
            task.exit_code, task.exit_signal = lch._exit_of(status)
            if task.proc is not None:
                task.proc.returncode = os.waitstatus_to_exitcode(status)

    def _settle(self, step: _Step, now: float) -> None:
        """Every task was reaped: kill what they left behind, then report once it is gone."""
        if not step.reaped_all_at:
            step.reaped_all_at = now
            self._signal_all(step, _signal.SIGKILL)
        if step.cgroup is not None and step.cgroup.populated(step.leaf):
            self._signal_all(step, _signal.SIGKILL)  # ended only when its cgroup is empty
            return
        if any(lch._group_alive(pgid) for pgid in step.groups):
            self._signal_all(step, _signal.SIGKILL)
            return
        self._drop_cgroup(step)
        if step.ending is not None:
            state = step.ending.state
        elif any(t.exit_code or t.exit_signal for t in step.tasks):
            state = "FAILED"
        else:
            state = "COMPLETED"
        del self._steps[step.key]
        if step.terminal is not None:
            step.terminal.close()
        body = self._report_body(step.key, state, step.tasks, now)
        if step.output is None:
            self._unacked[step.key] = (0.0, body)  # due at once
            return
        step.output.finish()  # the report waits until schedd has taken all of it
        self._draining[step.key] = (step.output, body)

    def _queue_report(self, key: tuple[int, int], state: str, tasks: list[_Task],
                      now: float) -> None:
        self._unacked[key] = (0.0, self._report_body(key, state, tasks, now))  # due at once

    def _report_body(self, key: tuple[int, int], state: str, tasks: list[_Task],
                     now: float) -> dict[str, Any]:
        body = {"node": self.node_name, "job_id": key[0], "step_id": key[1], "state": state,
                "tasks": [[t.procid, t.exit_code, t.exit_signal] for t in tasks],
                "end_time": now}
        known = [t.cpu for t in tasks if t.cpu is not None]
        if known:  # the tasks' CPU time on this node, for sacct's TotalCPU
            body["cpu"] = [sum(u for u, _ in known), sum(s for _, s in known)]
        return body

    def _begin_ending(self, step: _Step, state: str, now: float) -> None:
        if not all(t.exited for t in step.tasks):
            self._banner(step, state, now)
        self._signal_all(step, _signal.SIGCONT)
        self._signal_all(step, _signal.SIGTERM)
        step.ending = Ending.start(state, now, step.kill_wait)

    def _signal_all(self, step: _Step, signum: int) -> None:
        """``signum`` once to every process of the step: those of its cgroup leaf (what left
        the tasks' groups too: setsid, daemons), else of the tasks' process groups. A process
        signalled both ways would get a handled signal twice."""
        if step.cgroup is None:
            for pgid in step.groups:
                lch._killpg(pgid, signum)
        elif signum == _signal.SIGKILL:
            step.cgroup.kill(step.leaf)
        else:
            step.cgroup.signal(signum, step.leaf)

    def _banner(self, step: _Step, state: str, now: float) -> None:
        """slurmstepd's '*** STEP J.S ON node CANCELLED AT ... ***', in the first task's
        stderr on this node."""
        task = step.tasks[0] if step.tasks else None
        path = task.stderr_path if task else ""
        if not task or (not task.stderr_forwarded and (not path or path == os.devnull)):
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
        reason = " DUE TO TIME LIMIT" if state == "TIMEOUT" else ""
        line = (f"slurmstepd: error: *** STEP {step.job_id}.{step.step_id} ON {self.node_name} "
                f"CANCELLED AT {stamp}{reason} ***\n")
        if task.stderr_forwarded:
            if step.output is not None:
                name = "out" if task.terminal else "err"
                step.output.add((task.procid, name), line.replace("\n", "\r\n").encode()
                                if task.terminal else line.encode())
            return
        try:
            with self.launcher._as_user(step.ident):
                fd = lch.open_as_user(path, os.O_APPEND)
        except (OSError, lch.LaunchError):
            return
        try:
            lch._write_fd(fd, line)
        finally:
            os.close(fd)

    def close(self) -> None:
        for output in [s.output for s in self._steps.values()] + \
                [o for o, _ in self._draining.values()]:
            if output is not None:
                output.close()
        os.close(self._devnull)


RESEND_AFTER = 3.0  # seconds before an unacknowledged step_ended is sent again


def _check(spec: dict[str, Any]) -> None:
    argv = spec["argv"]
    if not argv or not all(isinstance(a, str) and "\0" not in a for a in argv) or not argv[0]:
        raise lch.LaunchError("no command to run")
    for env in [spec["environment"]] + [t.get("env") or {} for t in spec["tasks"]
                                         if isinstance(t, dict)]:
        for name, value in env.items():
            if not name or "=" in name or "\0" in name or not isinstance(value, str) \
                    or "\0" in value:
                raise lch.LaunchError(f"invalid environment variable {name[:64]!r}")
    if not all(isinstance(t, dict) for t in spec["tasks"]):
        raise lch.LaunchError("malformed task list")


def _forwarded(entry: dict[str, Any]) -> list[str]:
    """The streams ("out", "err") of a task entry that schedd forwards."""
    names = entry.get("forward")
    return [n for n in names if n in ("out", "err")] if isinstance(names, list) else []


def _target(task: _Task, entry: dict[str, Any], name: str) -> Any:
    """The key of a task stream's descriptor: (procid, name) when forwarded, else
    (path, append) for a file opened as the user."""
    if name in _forwarded(entry):
        return (task.procid, name)
    path = entry.get("stdout" if name == "out" else "stderr") or os.devnull
    return (str(path), bool(entry.get("append")))


def _strings(env: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
