"""Starting, signalling, timing and reaping batch jobs on this node: the agent's slurmstepd.

The daemon hands ``Launcher`` the launch instructions schedd sent (``protocol.LAUNCH_FIELDS``)
and calls ``poll()`` from its loop; ``poll`` never blocks. Per job:

- **launch**: the script goes to the spool (0700, owned by the user); stdout/stderr are opened
  *as the user* (the agent switches its effective uid for the ``open`` calls, so a path cannot
  make root clobber a file the user could not write); the script is exec'd directly when it has
  a ``#!`` line (else by ``/bin/bash``) in its own session, with stdin from /dev/null, exactly
  the environment schedd built, in the job's workdir (or /tmp, with Slurm's note in stderr), as
  the user with their supplementary groups. Python's ``subprocess`` does the uid switch in C
  between fork and exec: no shell or Python process is added per job.
- **walltime** (``agentd.walltime``): the ``--signal`` warning (to the batch shell with ``B:``,
  else, as in Slurm, to every process of the job but the batch shell, so that an untrapped
  signal does not end the script under its checkpointing steps), then SIGCONT+SIGTERM to the
  process group at the limit with Slurm's ``*** JOB ... DUE TO TIME LIMIT ***`` line in stderr, SIGKILL
  after KillWait. Measured from the agent's own launch time; schedd's clock plays no part.
- **end**: a job is finished when its batch shell has been reaped and no live process of its
  process group remains (leftovers of a normally ended script are SIGKILLed, as Slurm does).

Each job's record in the spool (``agentd.spool``) lets ``recover()`` adopt jobs still running
after an agent restart. A recovered job is not our child, so its exit status is lost: it ends
as COMPLETED (or as the state of a kill already under way) with ``exit_known=False``.

Limits of a process group: a process that calls ``setsid`` itself leaves the job's group and
escapes its signals (Slurm needs cgroups for that); CPU, memory and GPU isolation are not done
here. The effective-uid switch is process-wide, so the daemon must call the launcher from one
thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import pwd
import signal as _signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from agentd.spool import Spool
from agentd.walltime import Ending, SignalSpec, SignalSpecError, Walltime, parse_signal
from schedd import protocol

log = logging.getLogger("agentd.launcher")

OPEN_MODES = ("append", "truncate")
MAX_ENDED = 10_000  # ended jobs kept for re-reporting when the daemon never calls forget()
IDENTITY_TTL = 60.0  # seconds a user's groups are cached (NSS can be slow: LDAP, sssd)
FULL_REAP_INTERVAL = 1.0  # seconds: waitpid every job even when no child seemed to exit
GROUP_SCAN_INTERVAL = 0.5  # seconds between /proc searches for a killed group's survivors
_RECORD_DROP = ("script", "environment")  # not kept in the spool record: bulky, not needed
_BANNER_REASONS = {
    "CANCELLED": "",
    "TIMEOUT": " DUE TO TIME LIMIT",
    "PREEMPTED": " DUE TO PREEMPTION",
    "REQUEUED": " DUE TO JOB REQUEUE",
    "NODE_FAIL": " DUE TO NODE FAILURE",
}


class LaunchError(Exception):
    """The job could not be started; the message is one line (also written to its stderr file
    when that file could be opened). The daemon reports the job FAILED with ``exit_code``
    (an exec failure's errno, as slurmstepd's ``_exit(errno)``; else 1)."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(slots=True)
class Finished:
    """How a job ended, as ``job_ended`` reports it. ``exit_signal`` is the signal that killed
    the batch shell (0 if it exited); ``exit_known`` is False for a job recovered after an agent
    restart, whose exit status nobody could wait for."""

    job_id: int
    generation: int
    state: str
    exit_code: int
    exit_signal: int
    start_time: float
    end_time: float
    exit_known: bool = True
    cpu_user: float | None = None  # seconds, from wait4: the batch shell and what it reaped
    cpu_system: float | None = None
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
    job_id: int
    generation: int
    ident: Identity
    pid: int
    start_time: float
    stderr_path: str
    kill_wait: int
    walltime: Walltime
    record: dict[str, Any]
    proc: subprocess.Popen | None = None  # None for a job adopted by recover()
    adopted: psutil.Process | None = None
    ending: Ending | None = None
    exited: bool = False
    status: int | None = None  # raw wait status; None when unknown
    cpu: tuple[float, float] | None = None  # (user, system) seconds from wait4; None unknown
    peak_rss_kb: float | None = None  # wait4's ru_maxrss (KiB); None unknown
    end_time: float = 0.0
    scanned_at: float = 0.0  # when /proc was last searched for the group's live processes

    @property
    def key(self) -> tuple[int, int]:
        return self.job_id, self.generation


class Launcher:
    """The jobs of one node. ``kill_wait`` (KillWait, seconds) applies where a launch spec
    gives a negative one; schedd normally sends its own with every launch."""

    def __init__(self, spool_dir: Path, node_name: str, kill_wait: int = 30,
                 allow_root: bool = False):
        self.spool = Spool(Path(spool_dir))
        self.node_name = node_name
        self.kill_wait = kill_wait
        self.allow_root = allow_root
        self._jobs: dict[tuple[int, int], _Job] = {}
        self._ended: dict[tuple[int, int], Finished] = {}
        self._identities: dict[tuple[str, int, int], tuple[float, Identity]] = {}
        self._full_reap = 0.0
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    # --- launch ----------------------------------------------------------------------------

    def launch(self, spec: dict[str, Any]) -> bool:
        """Start a job; False if this (job, generation) is already here (a resent launch)."""
        try:
            protocol.check(spec, protocol.LAUNCH_FIELDS, "launch")
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
            job = self._start(spec, ident, script, warning)
        except BaseException:
            self.spool.remove_script(*key)
            self.spool.remove_private_dir(*key)
            raise
        self._jobs[key] = job
        self._save(job)
        return True

    def _start(self, spec: dict[str, Any], ident: Identity, script: Path,
               warning: SignalSpec | None) -> _Job:
        out_fd, err_fd, cwd, err_path = self._open_files(spec, ident)
        argv = [str(script)] if spec["script"].startswith("#!") else ["/bin/bash", str(script)]
        start = time.time()
        try:
            proc = subprocess.Popen(
                argv, stdin=self._devnull, stdout=out_fd, stderr=err_fd,
                preexec_fn=enter_workdir(cwd), env=spec["environment"],
                start_new_session=True, close_fds=True,
                umask=_umask(spec["environment"]), **self._credentials(ident),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            message, code = _exec_failure(spec["script"], script, exc)
            _write_fd(err_fd, f"slurmstepd: error: {message}\n")
            raise LaunchError(message, code) from None
        finally:
            os.close(out_fd)
            if err_fd != out_fd:
                os.close(err_fd)
        kill_wait = spec["kill_wait"] if spec["kill_wait"] >= 0 else self.kill_wait
        record = {k: v for k, v in spec.items() if k not in _RECORD_DROP}
        record.update(pid=proc.pid, pgid=proc.pid, create_time=_create_time(proc.pid),
                      launch_time=start, stderr_path=err_path, kill_wait=kill_wait,
                      oom_kills=_oom_kills())
        return _Job(spec["job_id"], spec["generation"], ident, proc.pid, start, err_path,
                    kill_wait, Walltime(start, spec["time_limit"], warning), record, proc=proc)

    def _open_files(self, spec: dict[str, Any], ident: Identity) -> tuple[int, int, str, str]:
        """(stdout fd, stderr fd, working directory, stderr path), all checked as the user."""
        append = spec["open_mode"] == "append"
        with self._as_user(ident):
            cwd, note = _workdir(spec["workdir"])
            out_path = os.path.join(cwd, spec["stdout"])
            err_path = os.path.join(cwd, spec["stderr"] or spec["stdout"])
            try:
                out_fd = _open_output(out_path, append)
            except LaunchError as exc:
                if err_path != out_path:  # say why in the job's stderr file when it has one
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
        """Stop a job: SIGCONT+SIGTERM to its group now, SIGKILL after KillWait; it will be
        reported as ``state`` unless it had already ended. False for an unknown job."""
        job = self._jobs.get((job_id, generation))
        if job is None:
            return False
        now = time.time() if now is None else now
        if not job.exited:
            self._reap(job, now)  # an exit not yet polled still counts as "already ended"
        if not job.exited and job.ending is None:
            self._begin_ending(job, state, now)
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
            signum = parse_signal(sig)
        except SignalSpecError:
            return False
        if full:
            _killpg(job.pid, signum)
        elif batch_only:
            if not job.exited:
                _kill(job.pid, signum)
        else:
            _signal_steps(job.pid, signum)
        return True

    def running(self) -> list[dict[str, Any]]:
        """Jobs whose processes still live here, for heartbeats and reconciliation."""
        return [{"job_id": j.job_id, "generation": j.generation, "pid": j.pid,
                 "start_time": j.start_time} for j in self._jobs.values()]

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
        os.close(self._devnull)

    # --- the loop --------------------------------------------------------------------------

    def poll(self, now: float | None = None) -> list[Finished]:
        """Reap, enforce walltimes and KillWait, and return the jobs that finished. Never
        blocks; call it often (its granularity is the walltime's)."""
        now = time.time() if now is None else now
        reap = _child_exited() or now - self._full_reap >= FULL_REAP_INTERVAL
        if reap:
            self._full_reap = now
        finished = []
        for job in list(self._jobs.values()):
            done = self._step(job, now, reap)
            if done is not None:
                finished.append(done)
        return finished

    def _step(self, job: _Job, now: float, reap: bool = True) -> Finished | None:
        if not job.exited and (reap or job.proc is None):
            self._reap(job, now)
        if not job.exited and job.ending is None:
            self._watch_walltime(job, now)
        if job.ending is not None and job.ending.kill_due(now):
            self._kill(job)
        if not job.exited:
            return None
        if job.ending is None:
            if not _killpg(job.pid, _signal.SIGKILL):
                return self._finish(job)
            # the script ended but left processes behind: Slurm kills them with the step
            job.ending = Ending(state="", began=now, kill_at=now, killed=True)
        if not _killpg(job.pid, 0):
            return self._finish(job)
        if not job.ending.killed or now - job.scanned_at < GROUP_SCAN_INTERVAL:
            return None  # still within KillWait, or looked a moment ago
        job.scanned_at = now
        if _group_alive(job.pid):
            _killpg(job.pid, _signal.SIGKILL)  # again, for any process forked meanwhile
            return None
        return self._finish(job)  # only zombies left, whose parent has yet to reap them

    def _reap(self, job: _Job, now: float) -> None:
        if job.proc is not None:
            pid, status, job.cpu, job.peak_rss_kb = reap_usage(job.pid)
            if pid == 0:
                return
            job.proc.returncode = 0 if status is None else os.waitstatus_to_exitcode(status)
        else:
            status = None
            if _adopted_alive(job.adopted):
                return
        job.exited, job.status, job.end_time = True, status, now

    def _watch_walltime(self, job: _Job, now: float) -> None:
        warning = job.walltime.warning
        if warning is not None and job.walltime.warning_due(now):
            if warning.batch_only:
                _kill(job.pid, warning.signum)
            else:  # Slurm: "all job steps will be signaled, but not the batch shell itself"
                _signal_steps(job.pid, warning.signum)
            job.record["warned"] = True
            self._save(job)
        if job.walltime.expired(now):
            self._begin_ending(job, "TIMEOUT", now)

    def _begin_ending(self, job: _Job, state: str, now: float) -> None:
        self._banner(job, state, now)
        _killpg(job.pid, _signal.SIGCONT)
        _killpg(job.pid, _signal.SIGTERM)
        job.ending = Ending.start(state, now, job.kill_wait)
        job.record["ending"] = asdict(job.ending)
        self._save(job)

    def _kill(self, job: _Job) -> None:
        _killpg(job.pid, _signal.SIGKILL)
        job.ending.killed = True

    def _banner(self, job: _Job, state: str, now: float) -> None:
        """Slurm's '*** JOB N ON node CANCELLED AT ... ***' line, in the job's stderr file."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
        reason = _BANNER_REASONS.get(state, f" DUE TO {state}")
        self._write_stderr(job, f"slurmstepd: error: *** JOB {job.job_id} ON {self.node_name} "
                                f"CANCELLED AT {stamp}{reason} ***\n")

    def _write_stderr(self, job: _Job, line: str) -> None:
        """Append a line of the agent's own to the job's stderr file, as the user."""
        try:
            with self._as_user(job.ident):
                fd = open_as_user(job.stderr_path, os.O_APPEND)
        except (OSError, LaunchError):
            return  # the user removed the file: nowhere to say it
        try:
            _write_fd(fd, line)
        finally:
            os.close(fd)

    def _finish(self, job: _Job) -> Finished:
        code, sig = _exit_of(job.status)
        if job.ending is not None and job.ending.state:
            state = job.ending.state
        elif sig == _signal.SIGKILL and _oom_kills() > job.record.get("oom_kills", -1) >= 0:
            state = "OUT_OF_MEMORY"
            self._write_stderr(job, f"slurmstepd: error: Detected 1 oom_kill event in StepId="
                                    f"{job.job_id}.batch. Some of the step tasks have been "
                                    f"OOM Killed.\n")
        else:
            state = "COMPLETED" if code == 0 and sig == 0 else "FAILED"
        user, system = job.cpu if job.cpu is not None else (None, None)
        done = Finished(job.job_id, job.generation, state, code, sig, job.start_time,
                        job.end_time, exit_known=job.status is not None, cpu_user=user,
                        cpu_system=system, peak_rss_kb=job.peak_rss_kb)
        del self._jobs[job.key]
        self._ended[job.key] = done
        while len(self._ended) > MAX_ENDED:
            self.forget(*next(iter(self._ended)))
        self.spool.remove_script(*job.key)
        self.spool.remove_private_dir(*job.key)
        job.record["finished"] = done.to_dict()
        self._save(job)
        return done

    def _save(self, job: _Job) -> None:
        """Keep the job's record current; a full or broken spool must not stop the job."""
        try:
            self.spool.save(job.job_id, job.generation, job.record)
        except OSError as exc:
            log.warning("cannot write the spool record of job %s: %s", job.job_id, exc)

    # --- restart ---------------------------------------------------------------------------

    def recover(self, now: float | None = None) -> list[Finished]:
        """After an agent restart: adopt the spool's jobs whose process (pid and create time)
        still lives, and return those that ended meanwhile or were never forgotten."""
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
            done = Finished(**record["finished"])
            self._ended[key] = done
            return done
        ident = _lookup(record["user"], record["uid"], record["gid"])
        warning = SignalSpec.parse(record["signal"]) if record.get("signal") else None
        clock = Walltime(record["launch_time"], record["time_limit"], warning,
                         warned=bool(record.get("warned")))
        job = _Job(key[0], key[1], ident, record["pid"], record["launch_time"],
                   record["stderr_path"], record["kill_wait"], clock, record,
                   adopted=_same_process(record["pid"], record["create_time"]))
        if record.get("ending"):
            job.ending = Ending(**record["ending"])
        self._jobs[key] = job
        if job.adopted is not None:
            return None
        # it ended while no agent watched: when is the last sign of it, not now
        job.exited, job.end_time = True, _last_sign_of_life(record, now)
        return self._step(job, now)


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


def _chdir_note(path: str, problem: str) -> str:
    return f"slurmstepd: error: couldn't chdir to `{path}': {problem}: going to /tmp instead\n"


def enter_workdir(path: str) -> Callable[[], None]:
    """A ``preexec_fn`` that enters the job's directory in the child, *after* it became the
    user: CPython's _posixsubprocess changes into ``cwd=`` before setgroups/setregid/setreuid,
    that is as root, and calls ``preexec_fn`` after them. A directory the user cannot enter
    (a symlink swapped in after the agent's check) gives Slurm's note on stderr (fd 2, already
    the job's file) and /tmp, as Slurm does."""

    def enter() -> None:
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
        raise LaunchError(f"could not open output file {path}: {exc.strerror}") from None
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


def _exec_failure(text: str, script: Path, exc: BaseException) -> tuple[str, int]:
    """slurmstepd's line for an exec that failed, and the exit code it reports (errno).

    A ``#!`` script whose interpreter is missing (ENOENT) is Slurm's ``execve(): bad
    interpreter(<the #! line>): No such file or directory``; one whose interpreter the user may
    not run (EACCES) names it too, after Slurm's ``execve(): <script>: Permission denied``
    (the spooled script itself is the user's, 0700)."""
    err = getattr(exc, "errno", None)
    problem = getattr(exc, "strerror", None) or str(exc)
    shebang = text.split("\n", 1)[0][2:].rstrip() if text.startswith("#!") else ""
    if err == errno.ENOENT and shebang:
        message = f"execve(): bad interpreter({shebang}): {problem}"
    else:
        message = f"execve(): {script}: {problem}"
        if err == errno.EACCES and shebang:
            message += f" (the script's #! interpreter {shebang.split()[0]})"
    return message, err if isinstance(err, int) and 0 < err < 256 else 1


def _umask(env: dict[str, str]) -> int:
    """The submitter's umask, which sbatch passes as SLURM_UMASK (octal); -1 = leave as is."""
    text = env.get("SLURM_UMASK", "")
    try:
        value = int(text, 8)
    except ValueError:
        return -1
    return value if 0 <= value <= 0o777 else -1


def _write_fd(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode())
    except OSError:
        pass


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
    """When a job that ended while no agent watched (agentd down, nobody to reap it) last
    showed it was alive: the last write to its output files (what a job does until its end),
    never before its launch nor after ``now``. Its End in sacct is then when it ended, not
    when the agent came back."""
    launch = float(record.get("launch_time") or now)
    seen = launch
    for path in (record.get("stderr_path"),
                 os.path.join(str(record.get("workdir") or "/"), str(record.get("stdout") or ""))):
        try:
            seen = max(seen, os.lstat(path).st_mtime) if path else seen
        except OSError:
            continue
    return min(seen, now)


def _signal_steps(shell: int, signum: int) -> None:
    """Every process of the batch shell's group but the shell itself: the job's steps."""
    for pid in _group_members(shell):
        if pid != shell:
            _kill(pid, signum)


def reap(pid: int) -> tuple[int, int | None, tuple[float, float] | None]:
    """waitpid(WNOHANG) that also keeps the child's CPU time: (pid or 0 while it runs, raw
    status, (user, system) seconds). wait4's usage covers the child and every descendant it
    waited for, which is what Slurm's TotalCPU counts; a child someone else reaped gives
    (pid, None, None)."""
    return reap_usage(pid)[:3]  # type: ignore[return-value]


def reap_usage(pid: int) -> tuple[int, int | None, tuple[float, float] | None, float | None]:
    """``reap`` and also wait4's ``ru_maxrss`` (KiB on Linux): the peak resident set of the
    child or of the largest descendant it waited for."""
    try:
        got, status, usage = os.wait4(pid, os.WNOHANG)
    except ChildProcessError:
        return pid, None, None, None
    if got == 0:
        return 0, None, None, None
    return got, status, (usage.ru_utime, usage.ru_stime), float(usage.ru_maxrss)


def _exit_of(status: int | None) -> tuple[int, int]:
    """(exit code, signal) of a raw wait status; (0, 0) when unknown."""
    if status is None:
        return 0, 0
    if os.WIFSIGNALED(status):
        return 0, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), 0


def _child_exited() -> bool:
    """Is any child of ours waiting to be reaped? One syscall that spares a waitpid per job
    in the usual poll where nothing ended."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return False


def _kill(pid: int, signum: int) -> bool:
    try:
        os.kill(pid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a set-uid program, for an agent that is not root: it exists
        return True


def _killpg(pgid: int, signum: int) -> bool:
    """Signal a process group; False when it has no member left."""
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # only set-uid members, for an agent that is not root
        return True


def _group_alive(pgid: int) -> bool:
    """Does any live (non-zombie) process remain in the group? Zombies whose parent is slow to
    reap them (a container's PID 1 may never do it) do not count: they hold no resources."""
    return _killpg(pgid, 0) and bool(_group_members(pgid))


def _group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes of a process group, found in /proc: kept for rare
    moments (a --signal warning, a killed group that will not go), as it reads every process."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry.name))
    return members
