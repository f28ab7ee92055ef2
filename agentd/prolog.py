"""Slurm's Prolog and Epilog on this node: the site's programs, run as root (the agent's own
user) around each job, off the agent's loop.

- the **prolog** runs when the job's launch arrives, before any process of the job (Slurm's
  ``PrologFlags=Alloc``: salloc's allocations get it too, their holder is the job's launch);
  the job starts only once it has exited 0. Non-zero, unrunnable or past ``prolog_timeout``
  (its whole process group is SIGKILLed) it is a *prolog error*: the agent reports the run
  ended with ``prolog_failed`` and ``drain = "Prolog error"``, and schedd drains the node
  and requeues the job held (``launch failed requeued held``); nothing of the job ever ran.
- the **epilog** runs once the job has ended and its cgroup is empty (``Launcher.poll``
  says so only then); the end is reported to schedd after it, so the job's GPUs are not
  given to another job while the epilog cleans them. Failing, it drains the node
  (``Epilog error``); the job's own state is what it was.

Both get Slurm's environment (``script_env``), stdin from /dev/null, and their output in a
file of the spool (its last lines go to the agent's log when they fail). ``Scripts.poll``
never blocks: the agent calls it every turn of its loop.
"""

from __future__ import annotations

import contextlib
import grp
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("agentd.prolog")

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# the job's variables (from the environment schedd built for it) a prolog and epilog see
FROM_JOB = ("SLURM_JOB_NAME", "SLURM_JOB_ACCOUNT", "SLURM_JOB_PARTITION", "SLURM_JOB_QOS",
            "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_CLUSTER_NAME",
            "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
            "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_STEP",
            "SLURM_JOB_RESERVATION", "SLURM_JOB_CONSTRAINTS", "SLURM_JOB_COMMENT",
            "SLURM_SUBMIT_DIR", "SLURM_RESTART_COUNT")
TAIL_BYTES = 400  # of a failed script's output, in the agent's log


def script_env(spec: dict[str, Any], node: str, context: str) -> dict[str, str]:
    """The environment Slurm gives its Prolog and Epilog (``SLURM_SCRIPT_CONTEXT`` is
    ``prolog_slurmd`` or ``epilog_slurmd``) from a launch spec (or the spool record the
    launcher kept of it, which has no ``environment``: then the job's own variables are
    missing, the identity and GPUs are there)."""
    job_env = spec.get("environment") or {}
    gpus = ",".join(str(g) for g in spec.get("gpus") or [])
    env = {"PATH": PATH, "SLURM_SCRIPT_CONTEXT": context, "SLURMD_NODENAME": node,
           "SLURM_JOB_ID": str(spec["job_id"]), "SLURM_JOBID": str(spec["job_id"]),
           "SLURM_JOB_USER": str(spec["user"]), "SLURM_JOB_UID": str(spec["uid"]),
           "SLURM_JOB_GID": str(spec["gid"]), "SLURM_JOB_GPUS": gpus,
           "CUDA_VISIBLE_DEVICES": gpus, "GPU_DEVICE_ORDINAL": gpus}
    with contextlib.suppress(KeyError, OverflowError):
        env["SLURM_JOB_GROUP"] = grp.getgrgid(int(spec["gid"])).gr_name
    if not job_env.get("SLURM_JOB_NAME") and spec.get("name"):
        env["SLURM_JOB_NAME"] = str(spec["name"])
    for name in FROM_JOB:
        if job_env.get(name):
            env[name] = job_env[name]
    return env


def exit_env(exit_code: int, exit_signal: int) -> dict[str, str]:
    """The epilog's view of how the job ended: Slurm's ``SLURM_JOB_EXIT_CODE`` (the wait
    status) and ``SLURM_JOB_EXIT_CODE2`` (``code:signal``)."""
    return {"SLURM_JOB_EXIT_CODE": str((exit_code & 0xFF) << 8 | (exit_signal & 0x7F)),
            "SLURM_JOB_EXIT_CODE2": f"{exit_code}:{exit_signal}",
            "SLURM_JOB_DERIVED_EC": str(exit_code)}


@dataclass(slots=True)
class Outcome:
    """How one prolog or epilog ended: ``ok``, else ``why`` in a few words (``exit status
    1``, ``timed out after 5 s``, ``cannot run /etc/x: No such file or directory``)."""

    key: tuple[int, int]
    kind: str  # "prolog" or "epilog"
    payload: Any  # what the agent handed to start(): the launch spec, or the job's end
    ok: bool
    why: str = ""
    exit_code: int = 0


@dataclass(slots=True)
class _Run:
    key: tuple[int, int]
    kind: str
    payload: Any
    proc: subprocess.Popen | None
    deadline: float  # 0: no limit
    timeout: float
    output: Path
    killed: bool = False
    failed_to_start: str = ""


class Scripts:
    """The node's running prologs and epilogs, one at most per (job, generation) and kind."""

    def __init__(self, prolog: str, epilog: str, prolog_timeout: float,
                 epilog_timeout: float, output_dir: Path):
        self.paths = {"prolog": prolog, "epilog": epilog}
        self.timeouts = {"prolog": prolog_timeout, "epilog": epilog_timeout}
        self.output_dir = output_dir
        self._runs: dict[tuple[tuple[int, int], str], _Run] = {}
        self._orphans: list[subprocess.Popen] = []  # cancelled, killed, not yet reaped
        for kind, path in self.paths.items():
            if path and not os.access(path, os.X_OK):
                log.error("%s %s is not an executable file here: every job's %s will fail",
                          kind, path, kind)

    def configured(self, kind: str) -> bool:
        return bool(self.paths[kind])

    def start(self, kind: str, key: tuple[int, int], env: dict[str, str], payload: Any,
              now: float | None = None) -> None:
        """Start the ``kind`` program for the job ``key``; its end comes from ``poll``."""
        now = time.time() if now is None else now
        timeout = self.timeouts[kind]
        output = self.output_dir / f"{kind}.{key[0]}.{key[1]}.out"
        run = _Run(key, kind, payload, None, now + timeout if timeout else 0.0, timeout,
                   output)
        try:
            self.output_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(output, "wb") as out:
                run.proc = subprocess.Popen(
                    [self.paths[kind]], env=env, cwd="/", stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    close_fds=True)
        except (OSError, subprocess.SubprocessError) as exc:
            run.failed_to_start = f"cannot run {self.paths[kind]}: " \
                                  f"{getattr(exc, 'strerror', None) or exc}"
        self._runs[(key, kind)] = run
        log.info("job %d: %s %s started", key[0], kind, self.paths[kind])

    def running(self, kind: str | None = None) -> list[tuple[int, int]]:
        """The jobs whose prolog (or epilog, or either: ``kind`` None) runs now."""
        return [key for key, k in self._runs if kind is None or k == kind]

    def has(self, key: tuple[int, int], kind: str) -> bool:
        return (key, kind) in self._runs

    def cancel(self, key: tuple[int, int], kind: str) -> Any:
        """Stop the job's ``kind`` program (its job was cancelled meanwhile); its payload, or
        None when none runs. Its process group is killed and reaped by later polls."""
        run = self._runs.pop((key, kind), None)
        if run is None:
            return None
        if run.proc is not None and run.proc.poll() is None:
            _kill(run.proc)
            self._orphans.append(run.proc)
        _unlink(run.output)
        log.info("job %d: %s cancelled", key[0], kind)
        return run.payload

    def poll(self, now: float | None = None) -> list[Outcome]:
        """The programs that ended (or were killed at their timeout) since the last poll."""
        now = time.time() if now is None else now
        self._orphans[:] = [p for p in self._orphans if p.poll() is None]
        done = []
        for id_, run in list(self._runs.items()):
            outcome = self._check(run, now)
            if outcome is not None:
                del self._runs[id_]
                done.append(outcome)
        return done

    def _check(self, run: _Run, now: float) -> Outcome | None:
        if run.failed_to_start or run.proc is None:
            return self._failed(run, run.failed_to_start or "cannot run it", 127)
        code = run.proc.poll()
        if code is None:
            if run.deadline and now >= run.deadline and not run.killed:
                run.killed = True
                _kill(run.proc)
            return None
        if run.killed:
            return self._failed(run, f"timed out after {run.timeout:g} s", 0)
        if code == 0:
            _unlink(run.output)
            log.info("job %d: %s done", run.key[0], run.kind)
            return Outcome(run.key, run.kind, run.payload, True)
        if code < 0:
            return self._failed(run, f"killed by signal {-code}", 0)
        return self._failed(run, f"exit status {code}", code)

    def _failed(self, run: _Run, why: str, code: int) -> Outcome:
        tail = _tail(run.output)
        _unlink(run.output)
        log.error("job %d: %s %s failed: %s%s", run.key[0], run.kind, self.paths[run.kind], why,
                  f"; its output ends: {tail}" if tail else "")
        return Outcome(run.key, run.kind, run.payload, False, why, code)

    def close(self) -> None:
        """The agent stops: programs still running are killed (their jobs are reported again
        by the next agent: a prolog's job was never started, and is relaunched)."""
        for run in self._runs.values():
            if run.proc is not None and run.proc.poll() is None:
                _kill(run.proc)
        self._runs.clear()


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the program's whole process group (it is a session leader)."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - TAIL_BYTES))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-3:])


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
