"""Running srun's tasks on this node: one node's share of a job step.

schedd sends ``launch_step`` (``protocol.STEP_LAUNCH_FIELDS``) to every node of a step with
that node's tasks already laid out: each task's rank overlay (SLURM_PROCID, SLURM_LOCALID) and
its stdout/stderr paths. Here, per task:

- the output files are opened *as the user* (the launcher's effective-uid switch), each distinct
  path once per node and shared by the tasks that name it; truncated unless schedd says the file
  is shared with another node (then appended, srun having truncated it);
- the command is exec'd as the user with its groups, in its own session (so each task is a
  process group the agent can signal whole), stdin from /dev/null, in srun's working directory;
  a command that cannot be exec'd is Slurm's ``execve(): ...`` line in the task's stderr and
  exit code 2.

A node's share ends when every task has been reaped and no process of their groups remains
(leftovers are SIGKILLed, as slurmstepd does); the report lists every task's exit and is sent
until schedd acknowledges it. ``terminate`` (srun interrupted, the job ended) and the job's
walltime (the agent keeps time itself here too) send SIGCONT+SIGTERM to every task group and
SIGKILL after KillWait.

Not kept in the spool: an agent restart forgets its step tasks (they run on, unsupervised, until
they end); schedd closes such a step's row when its job ends.
"""

from __future__ import annotations

import logging
import os
import signal as _signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from agentd import launcher as lch
from agentd.walltime import Ending, Walltime
from schedd import protocol

log = logging.getLogger("agentd.steps")

EXEC_FAILED = 2  # exit code of a task whose command could not be exec'd (slurmstepd's)


@dataclass(slots=True)
class _Task:
    procid: int
    pid: int = 0
    proc: subprocess.Popen | None = None
    exited: bool = False
    exit_code: int = 0
    exit_signal: int = 0
    stderr_path: str = ""
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

    @property
    def key(self) -> tuple[int, int]:
        return self.job_id, self.step_id


class StepRunner:
    """The step tasks of one node. Uses the ``Launcher`` for identities and the uid switch, so
    the daemon must call both from its one thread."""

    def __init__(self, launcher: lch.Launcher, node_name: str):
        self.launcher = launcher
        self.node_name = node_name
        self._steps: dict[tuple[int, int], _Step] = {}
        self._unacked: dict[tuple[int, int], tuple[float, dict[str, Any]]] = {}
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    # --- launch ----------------------------------------------------------------------------

    def launch(self, spec: dict[str, Any], now: float | None = None) -> bool:
        """Start this node's tasks of a step; False for a resend of one already here. A step
        that cannot start at all is reported at once (every task FAILED)."""
        now = time.time() if now is None else now
        try:
            protocol.check(spec, protocol.STEP_LAUNCH_FIELDS, "launch_step")
        except protocol.ProtocolError as exc:
            log.error("bad launch_step: %s", exc.message)
            return False
        key = (spec["job_id"], spec["step_id"])
        if key in self._steps or key in self._unacked:
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
        self._start_tasks(step, spec)
        return True

    def _start_tasks(self, step: _Step, spec: dict[str, Any]) -> None:
        fds: dict[tuple[str, bool], int] = {}
        try:
            with self.launcher._as_user(step.ident):
                cwd, note = lch._workdir(spec["cwd"])
                for task, entry in zip(step.tasks, spec["tasks"], strict=True):
                    task.stderr_path = str(entry.get("stderr") or os.devnull)
                    for path in (entry.get("stdout") or os.devnull, task.stderr_path):
                        mode = (str(path), bool(entry.get("append")))
                        if mode not in fds:
                            fds[mode] = lch._open_output(mode[0], mode[1])
        except lch.LaunchError as exc:
            for fd in fds.values():
                os.close(fd)
            log.error("step %d.%d: %s", step.job_id, step.step_id, exc)
            for task in step.tasks:
                task.exited, task.exit_code = True, 1
            return
        try:
            for task, entry in zip(step.tasks, spec["tasks"], strict=True):
                append = bool(entry.get("append"))
                out_fd = fds[(str(entry.get("stdout") or os.devnull), append)]
                err_fd = fds[(task.stderr_path, append)]
                if note and task is step.tasks[0]:
                    lch._write_fd(err_fd, note)
                env = {**spec["environment"], **_strings(entry.get("env"))}
                self._exec(step, task, spec["argv"], env, cwd, out_fd, err_fd)
        finally:
            for fd in fds.values():
                os.close(fd)

    def _exec(self, step: _Step, task: _Task, argv: list[str], env: dict[str, str], cwd: str,
              out_fd: int, err_fd: int) -> None:
        try:
            proc = subprocess.Popen(
                argv, stdin=self._devnull, stdout=out_fd, stderr=err_fd, cwd=cwd, env=env,
                start_new_session=True, close_fds=True, umask=lch._umask(env),
                **self.launcher._credentials(step.ident),
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

    def job_ids(self) -> list[int]:
        """Jobs with step tasks here, for the heartbeat (schedd fences those it no longer runs)."""
        return sorted({s.job_id for s in self._steps.values()})

    def running(self) -> list[tuple[int, int]]:
        return sorted(self._steps)

    # --- the loop --------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[tuple[tuple[int, int], dict[str, Any]]]:
        """Reap, enforce the job's walltime and KillWait; the step_ended reports now due."""
        now = time.time() if now is None else now
        for step in list(self._steps.values()):
            self._reap(step, now)
            if step.ending is None and step.walltime.expired(now):
                self._begin_ending(step, "TIMEOUT", now)
            if step.ending is not None and step.ending.kill_due(now):
                self._signal_all(step, _signal.SIGKILL)
                step.ending.killed = True
            if all(t.exited for t in step.tasks):
                self._settle(step, now)
        return self.reports_due(now)

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
        if any(lch._group_alive(pgid) for pgid in step.groups):
            self._signal_all(step, _signal.SIGKILL)
            return
        if step.ending is not None:
            state = step.ending.state
        elif any(t.exit_code or t.exit_signal for t in step.tasks):
            state = "FAILED"
        else:
            state = "COMPLETED"
        del self._steps[step.key]
        self._queue_report(step.key, state, step.tasks, now)

    def _queue_report(self, key: tuple[int, int], state: str, tasks: list[_Task],
                      now: float) -> None:
        body = {"node": self.node_name, "job_id": key[0], "step_id": key[1], "state": state,
                "tasks": [[t.procid, t.exit_code, t.exit_signal] for t in tasks],
                "end_time": now}
        known = [t.cpu for t in tasks if t.cpu is not None]
        if known:  # the tasks' CPU time on this node, for sacct's TotalCPU
            body["cpu"] = [sum(u for u, _ in known), sum(s for _, s in known)]
        self._unacked[key] = (0.0, body)  # due at once

    def _begin_ending(self, step: _Step, state: str, now: float) -> None:
        if not all(t.exited for t in step.tasks):
            self._banner(step, state, now)
        self._signal_all(step, _signal.SIGCONT)
        self._signal_all(step, _signal.SIGTERM)
        step.ending = Ending.start(state, now, step.kill_wait)

    def _signal_all(self, step: _Step, signum: int) -> None:
        for pgid in step.groups:
            lch._killpg(pgid, signum)

    def _banner(self, step: _Step, state: str, now: float) -> None:
        """slurmstepd's '*** STEP J.S ON node CANCELLED AT ... ***', in the first task's
        stderr on this node."""
        path = step.tasks[0].stderr_path if step.tasks else ""
        if not path or path == os.devnull:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
        reason = " DUE TO TIME LIMIT" if state == "TIMEOUT" else ""
        line = (f"slurmstepd: error: *** STEP {step.job_id}.{step.step_id} ON {self.node_name} "
                f"CANCELLED AT {stamp}{reason} ***\n")
        try:
            with self.launcher._as_user(step.ident):
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOCTTY)
        except (OSError, lch.LaunchError):
            return
        try:
            lch._write_fd(fd, line)
        finally:
            os.close(fd)

    def close(self) -> None:
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


def _strings(env: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
