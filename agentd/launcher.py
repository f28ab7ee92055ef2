"""Starting, signalling and reaping batch jobs on this node, through one supervisor per job.

The daemon hands ``Launcher`` the launch instructions schedd sent (``operations.LAUNCH_FIELDS``)
and calls ``poll()`` from its loop; ``poll`` never blocks. Per job:

- **launch**: the script goes to the spool (0700, owned by the user); stdout/stderr are opened
  *as the user* (the agent switches its effective uid for the ``open`` calls, so a path cannot
  make root clobber a file the user could not write); then the job's supervisor
  (``agentd.stepd``, kiln's slurmstepd) is started in a session of its own with those files as
  its stdout/stderr and stdin from /dev/null: forked by the node's fork server, or started as
  a process of its own while there is none (``agentd.supervisors``). The supervisor execs the
  script directly when it has a ``#!`` line (else by ``/bin/bash``) in its own session, with
  exactly the environment
  schedd built, in the job's workdir (or /tmp, with Slurm's note in stderr), as the user with
  their supplementary groups; it enforces the walltime (``agentd.walltime``) and writes the
  job's end durably to the spool. A script that cannot be exec'd is a job that ends FAILED
  with the errno as exit code (``Finished.error`` says why), as slurmstepd's ``_exit(errno)``.
- **control**: ``terminate`` and ``signal`` are commands written to the supervisor's FIFO; the
  supervisor sends the signals (SIGCONT+SIGTERM with Slurm's banner, SIGKILL after KillWait).
- **end**: the supervisor exits once the batch shell is reaped and its process group is
  empty; ``poll`` reaps it (or, for a supervisor re-attached after an agent restart, sees it
  gone) and reads the end it wrote.

Each job's record in the spool (``agentd.spool``) names its supervisor (pid and create time),
so ``recover()`` re-attaches to the supervisors still running after an agent restart and
reads the end of jobs that ended meanwhile: their state and exit code are the true ones. Only
a supervisor that died without writing its end (killed itself, or a reboot) leaves a job whose
exit status is lost: it ends as COMPLETED (or as the state of a kill already asked for) with
``exit_known=False``, and what remains of its process group is killed.

Containment (``agentd.cgroups``, when the launcher is given a ``Cgroups``): the launcher makes
the job's cgroup with its limits before the supervisor starts; the supervisor's child joins it
between fork and exec (the supervisor itself stays outside, so a kill of the cgroup never
takes the one process that records the end), and the supervisor's signals, kills and "has it
ended" go to the whole cgroup, which no ``setsid`` or daemon leaves. Once the supervisor is
gone the launcher empties what is left and only then reports the job ended (its GPUs free);
an OOM kill, the peak memory and the CPU time are the cgroup's own counters. Without cgroups
a process that calls ``setsid`` itself leaves the job's group and escapes its signals, and
nothing is isolated. The effective-uid switch is process-wide, so the daemon must call the
launcher from one thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import pwd
import select
import signal as _signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import psutil

from agentd import stepd
from agentd.cgroups import CgroupError, Cgroups, JobCgroup, join_fds
from agentd.jobtmp import JobTmp, JobTmpError
from agentd.spool import Spool
from agentd.supervisors import Started, SupervisorStarter
from agentd.walltime import SignalSpec, SignalSpecError, parse_signal
from kiln.slurm import rlimits
from kiln.wire import operations, protocol

log = logging.getLogger("agentd.launcher")

OPEN_MODES = ("append", "truncate")
MAX_ENDED = 10_000  # ended jobs kept for re-reporting when the daemon never calls forget()
IDENTITY_TTL = 60.0  # seconds a user's groups are cached (NSS can be slow: LDAP, sssd)
FULL_REAP_INTERVAL = 1.0  # seconds: look at every supervisor even when no child seemed to exit
_RECORD_DROP = ("script", "environment")  # not kept in the spool record: bulky, not needed

# process helpers shared with the supervisor and step_tasks (one copy, in agentd.stepd)
reap, _exit_of, _kill, _killpg = stepd.reap, stepd.exit_of, stepd.kill, stepd.killpg
_group_alive, _group_members, _write_fd = stepd.group_alive, stepd.group_members, stepd.write_fd
_chdir_note = stepd.chdir_note


class LaunchError(Exception):
    """The job could not be started; the message is one line (also written to its stderr file
    when that file could be opened). The daemon reports the job FAILED with ``exit_code``
    (an exec failure's errno, as slurmstepd's ``_exit(errno)``; else 1)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class OutputDirMissing(LaunchError):
    """The directory of the job's ``-o``/``-e`` file does not exist (yet): submit libraries
    make it, named after the job id, just after sbatch prints the id, so the agent tries
    again for ``[agent] output_dir_wait`` seconds before failing the launch."""


@dataclass(slots=True)
class Finished:
    """How a job ended, as ``job_ended`` reports it. ``exit_signal`` is the signal that killed
    the batch shell (0 if it exited); ``exit_known`` is False for a job whose supervisor died
    without writing its end, so that nobody could wait for its exit status."""

    job_id: int
    generation: int
    state: str
    exit_code: int
    exit_signal: int
    start_time: float
    end_time: float
    exit_known: bool = True  # False only when the job's supervisor died without its end
    cpu_user: float | None = None  # seconds, from wait4: the batch shell and what it reaped
    cpu_system: float | None = None
    error: str = ""  # why the job could not be started (its script could not be exec'd)
    max_rss_kb: int = 0  # the job cgroup's own peak memory (0 without cgroups)
    peak_rss_kb: float | None = None  # wait4's ru_maxrss: the largest of them, at its peak

    @property
    def cpu(self) -> tuple[float, float] | None:
        """(user, system) CPU seconds when the agent reaped the batch shell itself."""
        if self.cpu_user is None or self.cpu_system is None:
            return None
        return self.cpu_user, self.cpu_system

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Identity:
    user: str
    uid: int
    gid: int
    groups: tuple[int, ...]

@dataclass(slots=True)
class _Job:
    """A job whose supervisor runs: forked by the fork server (``pidfd``), started by this
    agent directly (``proc``, its child), or re-attached after a restart (``adopted``)."""

    job_id: int
    generation: int
    ident: Identity
    stepd_pid: int
    start_time: float
    record: dict[str, Any]
    proc: subprocess.Popen | None = None  # the supervisor, when this agent started it directly
    pidfd: int = -1  # the supervisor's pidfd, when the fork server forked it (readable: ended)
    adopted: psutil.Process | None = None
    pid: int = 0  # the batch shell, once the supervisor has said (0: not yet)
    asked: str = ""  # the state the agent asked the supervisor to end the job as
    cgroup: JobCgroup | None = None  # its cgroup (agentd.cgroups), when the node has them
    emptying_since: float = 0.0  # supervisor gone, cgroup not yet empty: when we began to kill
    unkillable_said: bool = False  # UnkillableStepTimeout passed and the agent said so

    @property
    def key(self) -> tuple[int, int]:
        return self.job_id, self.generation


class Launcher:
    """The jobs of one node. ``kill_wait`` (KillWait, seconds) applies where a launch spec
    gives a negative one; schedd normally sends its own with every launch."""

    def __init__(self, spool_dir: Path, node_name: str, kill_wait: int = 30,
                 allow_root: bool = False, cgroups: Cgroups | None = None,
                 starter: SupervisorStarter | None = None, job_tmp: JobTmp | None = None):
        self.spool = Spool(Path(spool_dir))
        self.job_tmp = job_tmp  # a private /tmp and /dev/shm per job (agentd/jobtmp.py)
        self.cgroups = cgroups if cgroups is not None and cgroups.active else None
        self.unkillable: list[str] = []  # jobs that outlived UnkillableStepTimeout (drain)
        self.node_name = node_name
        self.kill_wait = kill_wait
        self.allow_root = allow_root
        # the submitter's soft limits the jobs get (Slurm's PropagateResourceLimits)
        self.propagate: frozenset[str] = frozenset(rlimits.NAMES)
        self._jobs: dict[tuple[int, int], _Job] = {}
        self._ended: dict[tuple[int, int], Finished] = {}
        self._identities: dict[tuple[str, int, int], tuple[float, Identity]] = {}
        self._full_reap = 0.0
        # the supervisors' fork server (agentd.forkserver) starts with the first launch
        self._starter = starter if starter is not None else SupervisorStarter()
        self._exits = select.poll()  # the pidfds of the supervisors the fork server forked

    # --- launch ----------------------------------------------------------------------------

    def launch(self, spec: dict[str, Any], final: bool = True) -> bool:
        """Start a job; False if this (job, generation) is already here (a resent launch).
        ``final``: a failure now is the job's end, said in its stderr file; False while a
        missing output directory is still waited for (``OutputDirMissing``: try again)."""
        try:
            protocol.check(spec, operations.LAUNCH_FIELDS, "launch")
        except protocol.ProtocolError as exc:
            raise LaunchError(exc.message) from None
        key = (spec["job_id"], spec["generation"])
        if key in self._jobs or key in self._ended:
            return False
        for other in self._jobs.values():
            if other.job_id == key[0]:
                raise LaunchError(f"job {key[0]} generation {other.generation} still runs here")
        _validate(spec)
        ident = self._identity(spec)
        warning = _warning(spec)
        try:
            script = self.spool.write_script(key[0], key[1], spec["script"], ident.uid, ident.gid)
        except OSError as exc:
            raise LaunchError(f"cannot spool the batch script: {exc.strerror or exc}") from None
        try:
            self.spool.make_private_dir(key[0], key[1], ident.uid, ident.gid)
        except OSError as exc:
            self.spool.remove_script(*key)
            raise LaunchError(f"cannot make the job's private directory: "
                              f"{exc.strerror or exc}") from None
        spec = {**spec, "environment": {
            **spec["environment"],
            "KILN_CHECKPOINT_FILE": str(self.spool.checkpoint_path(*key))}}
        try:
            job = self._start(spec, ident, script, warning, final)
        except BaseException:
            self.spool.remove_script(*key)
            self.spool.remove_private_dir(*key)
            raise
        self._jobs[key] = job
        self._save(job)
        return True

    def limits_of(self, env: dict[str, str]) -> tuple[dict[str, str], dict[str, int]]:
        """A job's environment without the ``SLURM_RLIMIT_*`` its command sent, and those of
        the limits this node propagates (kiln/slurm/rlimits.py)."""
        environment, limits = rlimits.take(env)
        return environment, {k: v for k, v in limits.items() if k in self.propagate}

    def _start(self, spec: dict[str, Any], ident: Identity, script: Path,
               warning: SignalSpec | None, final: bool = True) -> _Job:
        """Start the job's supervisor; it execs the job (``agentd.stepd``)."""
        key = (spec["job_id"], spec["generation"])
        out_fd, err_fd, cwd, err_path = self._open_files(spec, ident, final)
        try:
            cgroup = self._make_cgroup(spec)
        except LaunchError as exc:
            _write_fd(err_fd, f"slurmstepd: error: {exc}\n")
            _close(out_fd, err_fd)
            raise
        try:
            job_tmp = self.private_tmp(key[0])
        except LaunchError as exc:
            _write_fd(err_fd, f"slurmstepd: error: {exc}\n")
            _close(out_fd, err_fd)
            self._drop_cgroup(key, cgroup)
            raise
        start = time.time()
        kill_wait = spec["kill_wait"] if spec["kill_wait"] >= 0 else self.kill_wait
        argv = [str(script)] if spec["script"].startswith("#!") else ["/bin/bash", str(script)]
        argv += spec.get("args") or []  # sbatch script.sh a b: $1 $2 of the batch shell
        environment, limits = self.limits_of(spec["environment"])
        environment.pop("SLURM_UMASK", None)  # the batch step has it applied, not in its env
        launch = {
            "job_id": key[0], "generation": key[1], "node": self.node_name, "argv": argv,
            "environment": environment, "rlimits": limits,
            "cwd": cwd, "umask": _umask(spec["environment"]),
            "switch_user": os.geteuid() == 0, "uid": ident.uid, "gid": ident.gid,
            "groups": list(ident.groups), "script_head": spec["script"].split("\n", 1)[0],
            "time_limit": spec["time_limit"], "kill_wait": kill_wait, "launch_time": start,
            "warning": None if warning is None else {
                "signum": int(warning.signum), "seconds": warning.seconds,
                "batch_only": warning.batch_only},
            # fencing: the supervisor stops the job once schedd has been silent this long
            "fence_timeout": spec.get("fence_timeout") or 0.0
            if spec.get("on_isolation", "kill") == "kill" else 0.0,
            "fence_kill_wait": min(spec.get("fence_kill_wait", kill_wait), kill_wait),
            # containment: the child joins these cgroup.procs files; signals and kills go to
            # the whole cgroup (agentd.cgroups.JobCgroup.from_record)
            "cgroup": None if cgroup is None else cgroup.to_record(key),
            "cgroup_procs": [] if cgroup is None else cgroup.procs_paths(),
            # the job's /tmp and /dev/shm, bound in a mount namespace of its own (stepd)
            "job_tmp": job_tmp}
        control = self.spool.stepd_path(*key, "ctl")
        try:
            self.spool.remove_stepd_files(*key)  # a stale run's, from an old spool
            self.spool.write_small(self.spool.stepd_path(*key, "launch"), json.dumps(launch))
            os.mkfifo(control, 0o600)
            # held open read-write by the supervisor: a command sent before it reads waits
            ctl_fd = os.open(control, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)
            self.spool.remove_stepd_files(*key)
            self._drop_cgroup(key, cgroup)
            raise LaunchError(f"cannot spool the job's supervisor files: "
                              f"{exc.strerror or exc}") from None
        try:
            started = self._starter.start(str(self.spool.root), key, out_fd, err_fd, ctl_fd)
        except OSError as exc:
            self.spool.remove_stepd_files(*key)
            self._drop_cgroup(key, cgroup)
            raise LaunchError(f"cannot start the job's supervisor: {exc.strerror or exc}") \
                from None
        finally:
            os.close(ctl_fd)
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)
        record = {k: v for k, v in spec.items() if k not in _RECORD_DROP}
        record.update(stepd_pid=started.pid, stepd_create_time=_create_time(started.pid),
                      launch_time=start, stderr_path=err_path, kill_wait=kill_wait,
                      oom_kills=_oom_kills())
        if cgroup is not None:
            record["cgroup"] = cgroup.to_record(key)
        job = _Job(key[0], key[1], ident, started.pid, start, record, cgroup=cgroup)
        self._watch(job, started)
        return job

    def _watch(self, job: _Job, started: Started) -> None:
        """Keep what tells that the job's supervisor has ended: its process (ours to reap),
        its pidfd, or, where the kernel gave none, its pid and create time."""
        job.proc = started.proc
        if started.pidfd >= 0:
            job.pidfd = started.pidfd
            self._exits.register(job.pidfd, select.POLLIN)
        elif started.proc is None:
            job.adopted = _same_process(started.pid, job.record["stepd_create_time"])

    def _unwatch(self, job: _Job) -> None:
        if job.pidfd >= 0:
            self._exits.unregister(job.pidfd)
            os.close(job.pidfd)
            job.pidfd = -1

    # --- cgroup hooks (agentd.cgroups) -----------------------------------------------------

    def _make_cgroup(self, spec: dict[str, Any]) -> JobCgroup | None:
        """The job's cgroup, made with its limits; None on a node without cgroups."""
        if self.cgroups is None:
            return None
        key = (spec["job_id"], spec["generation"])
        limits = self.cgroups.limits(key, spec["cpus"], spec["memory_mb"], spec["gpus"],
                                     spec.get("cpu_ids") or ())
        try:
            return self.cgroups.create(*key, limits)
        except CgroupError as exc:
            self.cgroups.release(key)
            raise LaunchError(str(exc)) from None

    def _drop_cgroup(self, key: tuple[int, int], cgroup: JobCgroup | None) -> None:
        if cgroup is None:
            return
        cgroup.remove()
        if self.cgroups is not None:
            self.cgroups.release(key)

    def job_cgroup(self, job_id: int) -> JobCgroup | None:
        """The cgroup of the batch job ``job_id`` running here (for its srun steps)."""
        for job in self._jobs.values():
            if job.job_id == job_id and not job.emptying_since:
                return job.cgroup
        return None

    def _open_files(self, spec: dict[str, Any], ident: Identity,
                    final: bool = True) -> tuple[int, int, str, str]:
        """(stdout fd, stderr fd, working directory, stderr path), all checked as the user."""
        append = spec["open_mode"] == "append"
        with self._as_user(ident):
            cwd, note = _workdir(spec["workdir"])
            out_path = os.path.join(cwd, spec["stdout"])
            err_path = os.path.join(cwd, spec["stderr"] or spec["stdout"])
            try:
                out_fd = _open_output(out_path, append)
            except LaunchError as exc:
                if err_path != out_path and (final or not isinstance(exc, OutputDirMissing)):
                    # say why in the job's stderr file when it has one (not yet while a
                    # missing output directory may still appear)
                    with contextlib.suppress(LaunchError):
                        fd = _open_output(err_path, append)
                        _write_fd(fd, f"slurmstepd: error: {exc}\n")
                        os.close(fd)
                raise
            try:
                err_fd = out_fd if err_path == out_path else _open_output(err_path, append)
            except LaunchError:
                os.close(out_fd)
                raise
        if note:
            _write_fd(err_fd, note)
        return out_fd, err_fd, cwd, err_path

    def private_tmp(self, job_id: int) -> dict[str, str] | None:
        """The job's private /tmp and /dev/shm on this node (made when missing), or None where
        they are off; one that cannot be made fails the launch (``LaunchError``)."""
        if self.job_tmp is None:
            return None
        try:
            paths = self.job_tmp.ensure(job_id)
        except JobTmpError as exc:
            raise LaunchError(str(exc.strerror or exc)) from None
        paths["keep"] = str(self.spool.root)  # the script's directory, under /tmp or not
        return paths

    def _credentials(self, ident: Identity) -> dict[str, Any]:
        if os.geteuid() != 0:
            return {}  # we already are the user (checked in _identity)
        return {"user": ident.uid, "group": ident.gid, "extra_groups": list(ident.groups)}

    def _identity(self, spec: dict[str, Any]) -> Identity:
        user, uid, gid = spec["user"], spec["uid"], spec["gid"]
        if os.geteuid() != 0:
            if uid != os.getuid():
                raise LaunchError(f"agent runs as uid {os.getuid()} and cannot start jobs "
                                  f"for uid {uid}")
        elif uid == 0 and not self.allow_root:
            raise LaunchError("jobs of root (uid 0) are refused on this node")
        cached = self._identities.get((user, uid, gid))
        if cached and time.monotonic() - cached[0] < IDENTITY_TTL:
            return cached[1]
        ident = _lookup(user, uid, gid)
        self._identities[(user, uid, gid)] = (time.monotonic(), ident)
        return ident

    @contextmanager
    def _as_user(self, ident: Identity) -> Iterator[None]:
        """Act with the user's effective uid, gid and groups (process-wide) inside the block."""
        if os.geteuid() != 0 or ident.uid == 0:
            yield
            return
        saved_groups, saved_gid = os.getgroups(), os.getegid()
        try:
            os.setgroups(list(ident.groups))
            os.setegid(ident.gid)
            os.seteuid(ident.uid)
        except OSError as exc:
            _restore_root(saved_gid, saved_groups)
            raise LaunchError(f"cannot act as user {ident.user}: {exc.strerror}") from None
        try:
            yield
        finally:
            _restore_root(saved_gid, saved_groups)

    # --- control ---------------------------------------------------------------------------

    def terminate(self, job_id: int, generation: int, state: str = "CANCELLED",
                  now: float | None = None) -> bool:
        """Stop a job: its supervisor sends SIGCONT+SIGTERM to its group now and SIGKILL after
        KillWait; it is reported as ``state`` unless it had already ended (the first reason
        wins). False for an unknown job."""
        job = self._jobs.get((job_id, generation))
        if job is None:
            return False
        job.asked = job.asked or state
        self._command(job, {"op": "terminate", "state": state})
        return True

    def signal(self, job_id: int, generation: int, sig: str, batch_only: bool = False,
               full: bool = False) -> bool:
        """Send ``sig`` ('USR1', 'SIGUSR1', '10') as Slurm 22.05's scancel does: by default to
        the job's steps but not its batch shell (here: every process of the job's group but
        the shell; the agent's srun steps are StepTasks.signal's), with ``batch_only`` (-b) to
        the batch shell alone, with ``full`` (-f) to all of them. False for an unknown job or
        a signal name that is none (nothing is sent then)."""
        job = self._jobs.get((job_id, generation))
        if job is None:
            return False
        try:
            signum = int(parse_signal(sig))
        except SignalSpecError:
            return False
        self._command(job, {"op": "signal", "signum": signum, "batch_only": batch_only,
                            "full": full})
        return True

    def _command(self, job: _Job, command: dict[str, Any]) -> bool:
        """Write one command line to the job's supervisor; False when it no longer listens
        (it has ended, or died: ``poll`` finds out which)."""
        line = json.dumps(command, separators=(",", ":")).encode() + b"\n"
        try:
            fd = os.open(self.spool.stepd_path(*job.key, "ctl"),
                         os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return False  # ENXIO: nobody holds it open any more; ENOENT: cleaned up
        try:
            return os.write(fd, line) == len(line)  # < PIPE_BUF: written whole or not at all
        except OSError:
            return False
        finally:
            os.close(fd)

    def running(self) -> list[dict[str, Any]]:
        """Jobs whose supervisor still lives here, for heartbeats and reconciliation; ``pid``
        is the batch shell's (0 until its supervisor has started it)."""
        return [{"job_id": j.job_id, "generation": j.generation, "pid": self._job_pid(j),
                 "start_time": j.start_time} for j in self._jobs.values()]

    def record(self, job_id: int, generation: int) -> dict[str, Any] | None:
        """The spool record of a job running here (its launch spec, less its script and
        environment), or None."""
        job = self._jobs.get((job_id, generation))
        return None if job is None else dict(job.record)

    def _job_pid(self, job: _Job) -> int:
        if not job.pid:
            with contextlib.suppress(OSError, ValueError):
                job.pid = int(self.spool.stepd_path(*job.key, "pid").read_text())
        return job.pid

    def checkpoint_age(self, job_id: int, generation: int, now: float) -> float | None:
        """Seconds since the job last touched ``$KILN_CHECKPOINT_FILE`` (in its private
        directory; a symlink or another user's file counts as never), or None."""
        job = self._jobs.get((job_id, generation))
        if job is None:
            return None
        mtime = self.spool.checkpoint_mtime(job_id, generation, job.ident.uid)
        return None if mtime is None else max(now - mtime, 0.0)

    def ended(self) -> list[Finished]:
        """Jobs that ended and were not yet ``forget``-ten (to report again after a reconnect)."""
        return list(self._ended.values())

    def forget(self, job_id: int, generation: int) -> None:
        """Schedd has the job's end: drop its record (call after job_ended was acknowledged)."""
        self._ended.pop((job_id, generation), None)
        if (job_id, generation) not in self._jobs:
            self.spool.forget(job_id, generation)

    def close(self) -> None:
        """Stop the fork server (the supervisors it forked run on) and let go of them; the
        launcher is not used after (a later agent re-attaches to the supervisors)."""
        for job in self._jobs.values():
            self._unwatch(job)
        self._starter.close()

    @property
    def fork_server_pid(self) -> int:
        """The pid of this node's supervisor fork server; 0 while none runs."""
        return self._starter.server_pid

    # --- the loop --------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[Finished]:
        """Reap the supervisors that exited and return their jobs' ends. Never blocks; one
        waitpid per job when a child exited, and at least every ``FULL_REAP_INTERVAL``."""
        now = time.time() if now is None else now
        ended = {fd for fd, _ in self._exits.poll(0)}
        child = _child_exited()
        if child:
            self._starter.reap()  # the fork server, if it was the child that exited
        if not (child or ended or now - self._full_reap >= FULL_REAP_INTERVAL):
            return []
        self._full_reap = now
        finished = []
        for job in list(self._jobs.values()):
            if (job.emptying_since or self._supervisor_gone(job, ended)) and \
                    self._emptied(job, now):
                finished.append(self._finish(job, now))
        return finished

    def _emptied(self, job: _Job, now: float) -> bool:
        """A job has ended only when its cgroup is empty: kill what its supervisor left (a
        process that escaped while it ran, or everything when the supervisor died), and look
        again at the next poll. One still there ``UnkillableStepTimeout`` after the first kill
        drains the node (Slurm's "Kill task failed"); the job stays running until it is gone,
        so its GPUs are never given to another job beside it."""
        if job.cgroup is None or not job.cgroup.populated():
            return True
        if not job.emptying_since:
            job.emptying_since = now
        job.cgroup.kill()
        if not job.cgroup.populated():
            return True
        assert self.cgroups is not None
        if not job.unkillable_said and \
                now - job.emptying_since >= self.cgroups.settings.unkillable_step_timeout:
            job.unkillable_said = True
            reason = f"Kill task failed (job {job.job_id}: processes unkillable)"
            log.error("%s: %s", reason, job.cgroup.pids())
            self.unkillable.append(reason)
        return False

    def _supervisor_gone(self, job: _Job, ended: set[int]) -> bool:
        """Has the job's supervisor exited? ``ended``: the pidfds that said so just now."""
        if job.pidfd >= 0:
            if job.pidfd not in ended:
                return False
            self._unwatch(job)
            return True
        if job.proc is not None:
            pid, status, _ = reap(job.stepd_pid)
            if pid == 0:
                return False
            job.proc.returncode = 0 if status is None else os.waitstatus_to_exitcode(status)
            return True
        return not _adopted_alive(job.adopted)

    def _finish(self, job: _Job, now: float) -> Finished:
        written = self.spool.read_exit(*job.key)
        done = _finished_from(written) if written is not None else None
        if done is None:
            done = self._lost(job, now)
        end = _cgroup_end(written) if job.cgroup is not None else None
        oom = 0 if job.cgroup is None else end["oom_kills"] if end else job.cgroup.oom_kills()
        if oom > 0 and done.state in ("COMPLETED", "FAILED"):
            done.state = "OUT_OF_MEMORY"
            self._write_stderr(job, f"slurmstepd: error: Detected {oom} oom-kill event(s) in "
                                    f"StepId={job.job_id}.batch. Some of your processes may "
                                    f"have been killed by the cgroup out-of-memory handler.\n")
        elif job.cgroup is None and done.state == "FAILED" and \
                done.exit_signal == _signal.SIGKILL and \
                _oom_kills() > job.record.get("oom_kills", -1) >= 0:
            done.state = "OUT_OF_MEMORY"
            self._write_stderr(job, f"slurmstepd: error: Detected 1 oom_kill event in StepId="
                                    f"{job.job_id}.batch. Some of the step tasks have been "
                                    f"OOM Killed.\n")
        if job.cgroup is not None:  # the cgroup's counters: every process, restarts too
            counted = end["cpu"] if end else job.cgroup.cpu_seconds()
            if counted is not None:
                done.cpu_user, done.cpu_system = counted
            done.max_rss_kb = end["max_rss_kb"] if end else job.cgroup.max_rss_kb()
            if end and self.cgroups is not None:  # removed by the supervisor: free its CPUs
                self.cgroups.release(job.key)
            else:
                self._drop_cgroup(job.key, job.cgroup)
        del self._jobs[job.key]
        self._ended[job.key] = done
        while len(self._ended) > MAX_ENDED:
            self.forget(*next(iter(self._ended)))
        self.spool.remove_script(*job.key)
        self.spool.remove_private_dir(*job.key)
        self.spool.remove_stepd_files(*job.key)
        job.record["finished"] = done.to_dict()
        self._save(job)
        return done

    def _lost(self, job: _Job, now: float) -> Finished:
        """The supervisor died without writing the job's end: nobody can know how it ended.
        What is left of the job's group (same user, started after the launch) is killed."""
        log.warning("the supervisor of job %s died without its end: exit status lost",
                    job.job_id)
        pid = self._job_pid(job)
        with contextlib.suppress(psutil.Error):
            leader = psutil.Process(pid) if pid else None
            if leader is not None and leader.uids().real == job.ident.uid and \
                    leader.create_time() >= job.start_time - 1:
                _killpg(pid, _signal.SIGKILL)
        # its End is its last sign of life, not when an agent came to look
        return Finished(job.job_id, job.generation, job.asked or "COMPLETED", 0, 0,
                        job.start_time, _last_sign_of_life(job.record, now), exit_known=False)

    def _write_stderr(self, job: _Job, line: str) -> None:
        """Append a line of the agent's own to the job's stderr file, as the user."""
        try:
            with self._as_user(job.ident):
                fd = open_as_user(job.record["stderr_path"], os.O_APPEND)
        except (OSError, LaunchError):
            return  # the user removed the file: nowhere to say it
        try:
            _write_fd(fd, line)
        finally:
            os.close(fd)

    def _save(self, job: _Job) -> None:
        """Keep the job's record current; a full or broken spool must not stop the job."""
        try:
            self.spool.save(job.job_id, job.generation, job.record)
        except OSError as exc:
            log.warning("cannot write the spool record of job %s: %s", job.job_id, exc)

    # --- restart ---------------------------------------------------------------------------

    def recover(self, now: float | None = None) -> list[Finished]:
        """After an agent restart: re-attach to the spool's jobs whose supervisor (pid and
        create time) still lives, and return those that ended meanwhile (with the end their
        supervisor wrote) or were never forgotten."""
        now = time.time() if now is None else now
        out = []
        for record in self.spool.records():
            try:
                done = self._recover_one(record, now)
            except (KeyError, TypeError, ValueError, LaunchError):
                continue  # a record from another version or a vanished user: leave it be
            if done is not None:
                out.append(done)
        return out

    def _recover_one(self, record: dict[str, Any], now: float) -> Finished | None:
        key = (record["job_id"], record["generation"])
        if key in self._jobs or key in self._ended:
            return None
        if "finished" in record:
            done = _finished_from(record["finished"])
            if done is None:
                raise ValueError("unreadable end")
            self._ended[key] = done
            return done
        ident = _lookup(record["user"], record["uid"], record["gid"])
        job = _Job(key[0], key[1], ident, record["stepd_pid"], record["launch_time"], record,
                   adopted=_same_process(record["stepd_pid"], record["stepd_create_time"]))
        if self.cgroups is not None and record.get("cgroup"):
            job.cgroup = self.cgroups.adopt(record["cgroup"])
        self._jobs[key] = job
        if job.adopted is not None:
            return None
        return self._finish(job, now)  # it ended while no agent watched


# --- helpers ---------------------------------------------------------------------------------


def _validate(spec: dict[str, Any]) -> None:
    if spec["open_mode"] not in OPEN_MODES:
        raise LaunchError(f"invalid open_mode {spec['open_mode']!r} (append or truncate)")
    if not spec["stdout"]:
        raise LaunchError("no stdout path in the launch")
    if spec["time_limit"] is not None and spec["time_limit"] < 0:
        raise LaunchError(f"invalid time_limit {spec['time_limit']}")
    for name, value in spec["environment"].items():
        if not name or "=" in name or "\0" in name or not isinstance(value, str) or "\0" in value:
            raise LaunchError(f"invalid environment variable {name[:64]!r}")
    if "\0" in spec["script"]:
        raise LaunchError("the batch script contains a NUL byte")


def _warning(spec: dict[str, Any]) -> SignalSpec | None:
    if not spec.get("signal"):
        return None
    try:
        return SignalSpec.parse(spec["signal"])
    except SignalSpecError as exc:
        raise LaunchError(str(exc)) from None


def _lookup(user: str, uid: int, gid: int) -> Identity:
    """The user as this node's NSS knows them; the name must map to the uid schedd sent."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise LaunchError(f"user {user!r} is unknown on this node") from None
    if entry.pw_uid != uid:
        raise LaunchError(f"user {user!r} has uid {entry.pw_uid} on this node, not {uid}")
    return Identity(user, uid, gid, tuple(os.getgrouplist(user, gid)))


def _restore_root(gid: int, groups: list[int]) -> None:
    os.seteuid(0)
    os.setegid(gid)
    os.setgroups(groups)


def _workdir(path: str) -> tuple[str, str]:
    """The directory to run in, and Slurm's note when it had to be /tmp instead."""
    try:
        if not os.path.isabs(path):
            problem = "not an absolute path"
        elif not stat.S_ISDIR(os.stat(path).st_mode):
            problem = "Not a directory"
        elif not os.access(path, os.X_OK, effective_ids=True):
            problem = "Permission denied"
        else:
            return path, ""
    except OSError as exc:
        problem = exc.strerror or str(exc)
    return "/tmp", _chdir_note(path, problem)


def switch_user(credentials: dict[str, Any]) -> Callable[[], None]:
    """A ``preexec_fn`` step that becomes the user ``credentials`` (``_credentials``) name,
    as Popen's ``user=``/``group=``/``extra_groups=`` would: for a child that must do
    something as root first (agentd/jobtmp.py). Nothing where the agent is the user."""

    def switch() -> None:
        if not credentials:
            return
        os.setgroups(credentials["extra_groups"])
        os.setresgid(credentials["group"], credentials["group"], credentials["group"])
        os.setresuid(credentials["user"], credentials["user"], credentials["user"])

    return switch


def enter_workdir(path: str, cgroup_fds: list[int] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` (for srun's tasks) that puts every signal back to its default
    (``stepd.default_signals``), joins the step's cgroup (``cgroup_fds``: its
    ``cgroup.procs``, opened by root; ``agentd.cgroups.join_fds``) and enters the job's
    directory in the child, *after* it became the user: CPython's _posixsubprocess changes
    into ``cwd=`` before setgroups/setregid/setreuid,
    that is as root, and calls ``preexec_fn`` after them. A directory the user cannot enter
    (a symlink swapped in after the agent's check) gives Slurm's note on stderr (fd 2, already
    the job's file) and /tmp, as Slurm does."""

    def enter() -> None:
        stepd.default_signals()  # nothing ignored that the agent was started ignoring
        if cgroup_fds:
            join_fds(cgroup_fds)
        try:
            os.chdir(path)
        except OSError as exc:
            os.write(2, _chdir_note(path, exc.strerror or str(exc)).encode())
            os.chdir("/tmp")

    return enter


def _open_output(path: str, append: bool) -> int:
    """Open a job's output file; call it as the user (inside ``_as_user``).

    The job always writes through an ``O_APPEND`` description, in truncate mode too (emptied
    by ``O_TRUNC`` first, then switched to appending): the lines the agent adds to the file
    (the time-limit banner, an OOM note) are appended through descriptions of their own, and
    with a job writing at a private offset of its own a job that prints after SIGTERM would
    write over them. Appending, every write lands at the end, whole and in order."""
    flags = os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    try:
        fd = open_as_user(path, flags)
    except OSError as exc:
        message = f"could not open output file {path}: {exc.strerror}"
        # with O_CREAT, ENOENT means a directory on the way is missing: even when it is there
        # by now (made between this open and a look at it), the next try will open the file
        if exc.errno == errno.ENOENT:
            raise OutputDirMissing(message) from None
        raise LaunchError(message) from None
    if not append:
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
        except OSError:
            pass  # a device or FIFO as the output (-o /dev/null): no end of file to keep
    return fd


def open_as_user(path: str, flags: int = 0, mode: int = 0o644) -> int:
    """``os.open(path, O_WRONLY | flags)`` for the user the caller acts as (the effective uid),
    with the kernel's ``protected_symlinks`` rule applied whatever ``fs.protected_symlinks``
    says: in a sticky world-writable directory (``/tmp``) a symlink is followed only when its
    owner is the user or the directory's owner; any other raises ``OSError(ELOOP)`` with a
    message that says why. The directory is opened once and the file opened relative to it,
    and the final open is ``O_NOFOLLOW`` unless the symlink found was trusted: a symlink
    planted between the check and the open is refused too (in a sticky directory nobody else
    can replace the user's own entry). Directory symlinks on the way are held to the same
    rule (``/tmp/planted-dir/x.out``)."""
    flags |= os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC
    parent, name = os.path.split(path)
    if not name:
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    _check_directories(parent)
    dir_fd = os.open(parent or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st_dir = os.fstat(dir_fd)
        if st_dir.st_mode & stat.S_ISVTX and st_dir.st_mode & stat.S_IWOTH:
            try:
                st = os.lstat(name, dir_fd=dir_fd)
            except FileNotFoundError:
                st = None
            trusted = st is not None and stat.S_ISLNK(st.st_mode) and \
                st.st_uid in (os.geteuid(), st_dir.st_uid)
            if st is not None and stat.S_ISLNK(st.st_mode) and not trusted:
                raise OSError(errno.ELOOP, f"refusing to follow a symlink owned by uid "
                                           f"{st.st_uid} in sticky directory {parent or '.'}",
                              path)
            if not trusted:
                try:
                    return os.open(name, flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
                except OSError:
                    # ELOOP, or EACCES (Linux, O_CREAT on another's symlink): say which
                    if _is_symlink(name, dir_fd):
                        raise OSError(errno.ELOOP, "refusing to follow a symlink planted in "
                                      f"sticky directory {parent or '.'}", path) from None
                    raise
        return os.open(name, flags, mode, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)


def _check_directories(parent: str) -> None:
    """The protected_symlinks rule for each symlink on the way to ``parent`` (an absolute
    path): one in a sticky world-writable directory is followed only when the user or the
    directory's owner owns it. Raises OSError(ELOOP) naming it."""
    if not os.path.isabs(parent):
        return
    resolved = "/"
    for part in parent.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            resolved = os.path.dirname(resolved)
            continue
        here = os.path.join(resolved, part)
        try:
            st = os.lstat(here)
        except OSError:
            return  # the open will say what is wrong
        if not stat.S_ISLNK(st.st_mode):
            resolved = here
            continue
        try:
            st_dir = os.stat(resolved)
        except OSError:
            return
        if st_dir.st_mode & stat.S_ISVTX and st_dir.st_mode & stat.S_IWOTH and \
                st.st_uid not in (os.geteuid(), st_dir.st_uid):
            raise OSError(errno.ELOOP, f"refusing to follow a symlink owned by uid "
                                       f"{st.st_uid} in sticky directory {resolved}", here)
        resolved = os.path.realpath(here)


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _umask(env: dict[str, str]) -> int:
    """The submitter's umask, which sbatch passes as SLURM_UMASK (octal); -1 = leave as is."""
    text = env.get("SLURM_UMASK", "")
    try:
        value = int(text, 8)
    except ValueError:
        return -1
    return value if 0 <= value <= 0o777 else -1

def _close(*fds: int) -> None:
    """Close each descriptor once (stdout and stderr may be the same one)."""
    for fd in set(fds):
        os.close(fd)


def _create_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return 0.0


def _same_process(pid: int, create_time: float) -> psutil.Process | None:
    """The process if ``pid`` is still the one we started (same create time), else None."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 0.05:
            return None
        return proc if _adopted_alive(proc) else None
    except psutil.Error:
        return None


def _adopted_alive(proc: psutil.Process | None) -> bool:
    try:
        return proc is not None and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _oom_kills() -> int:
    """The kernel's count of OOM kills since boot (``/proc/vmstat``); -1 where there is none.

    Without cgroups an OOM kill cannot be pinned on a job: a batch shell that died of SIGKILL
    nobody here sent, while this count rose, is taken to be the OOM killer's victim."""
    try:
        with open("/proc/vmstat", "rb") as fh:
            for line in fh:
                if line.startswith(b"oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return -1


def _last_sign_of_life(record: dict[str, Any], now: float) -> float:
    """When a job whose end nobody recorded (its supervisor died) last showed it was alive:
    the last write to its output files (what a job does until its end), never before its
    launch nor after ``now``. Its End in sacct is then when it ended, not when an agent came
    back to look."""
    launch = float(record.get("launch_time") or now)
    seen = launch
    for path in (record.get("stderr_path"),
                 os.path.join(str(record.get("workdir") or "/"), str(record.get("stdout") or ""))):
        try:
            seen = max(seen, os.lstat(path).st_mtime) if path else seen
        except OSError:
            continue
    return min(seen, now)


def _finished_from(data: dict[str, Any]) -> Finished | None:
    """A ``Finished`` from its dict (a supervisor's exit file, a spool record); None when
    the dict is not one (a torn or foreign file)."""
    known = {f.name for f in fields(Finished)}
    try:
        return Finished(**{k: v for k, v in data.items() if k in known})
    except TypeError:
        return None


def _cgroup_end(written: dict[str, Any] | None) -> dict[str, Any] | None:
    """The counters of the job's cgroup its supervisor read once the cgroup had emptied,
    where it then removed the cgroup (``cgroupfs.Tree.finish``); None where it did not (an
    older supervisor, a cgroup that stayed, no exit file): the agent reads and removes."""
    end = (written or {}).get("cgroup_end")
    if not isinstance(end, dict) or end.get("removed") is not True:
        return None
    try:
        cpu = end.get("cpu")
        return {"oom_kills": int(end["oom_kills"]), "max_rss_kb": int(end["max_rss_kb"]),
                "cpu": None if cpu is None else (float(cpu[0]), float(cpu[1]))}
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def _child_exited() -> bool:
    """Is any child of ours waiting to be reaped? One syscall that spares a waitpid per job
    in the usual poll where nothing ended."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False
