"""agentd.stepd: the per-job supervisor, kiln's slurmstepd.

The agent starts one per batch job (``Launcher.launch``, ``agentd.supervisors``): forked by the
node's fork server (``agentd.forkserver``), or as ``python -m agentd.stepd SPOOL JOB GENERATION
CONTROL_FD`` while there is none; either way ``supervise`` below, in a session of its own: it
is no member of the agent's process group, so neither ``kill -9`` of the agent (nor of the fork
server) nor its exit touches it. The supervisor

1. takes the job's launch file from the spool (``stepd/<job>.<gen>.launch``, written by the
   agent, claimed by a rename, read and removed here: ``claim_launch``): argv, environment,
   working directory, the user, the limit;
2. starts the job: fork, then in the child ``before_exec`` (the hooks of ``BEFORE_EXEC``, run as
   root: where the cgroup join goes), the switch to the user, umask and working directory,
   then exec. The job is a session and process group of its own, whose leader is the batch
   shell; its pid is written to ``stepd/<job>.<gen>.pid`` for the agent's sampler;
3. waits for it, and meanwhile enforces the walltime itself (``agentd.walltime``: the
   ``--signal`` warning, SIGTERM with Slurm's banner at the limit, SIGKILL after KillWait), so
   a limit keeps being enforced while the agent is down; and obeys the agent's commands
   (``terminate`` with the state to report, ``signal``), which arrive as JSON lines on the
   control FIFO (``stepd/<job>.<gen>.ctl``; the agent made it and passed it open as
   CONTROL_FD, so a command sent before this process read it waits in the pipe);
   With containment (the launch file names the job's cgroup, ``agentd.cgroupfs``), the child
   joins the cgroup before exec and every signal and kill goes to the whole cgroup, so a
   process that left the group (``setsid``, a daemon) is reached too; the supervisor itself
   stays outside it;
4. once the batch shell is reaped and no live process of its group (or cgroup) remains (leftovers of a
   normally ended script are SIGKILLed, as Slurm does), writes the job's end
   (``stepd/<job>.<gen>.exit``: state, exit code, signal, times, CPU seconds from wait4)
   atomically (temporary file, fsync, rename, fsync of the directory) and exits 0.

The agent reaps it when it is the agent's child, or, after an agent restart, finds it alive
(pid and create time in the job's spool record) and re-attaches, or finds its exit file:
every job whose supervisor lived ends with its true state and exit code.

One runs per job, and may be started as a Python process of its own, so it starts light
(docs/benchmarks.md, "Launch"; the fork server, which imports it once, makes that the rare
case): Python without ``site`` (``-S``), and only ``os``-level modules: no subprocess (its own
fork and exec), no pathlib or dataclasses (``agentd.stepfiles``, ``agentd.walltime``); the
agent parses signal names, so Slurm's signal vocabulary is not loaded here either.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal as _signal
import sys
import time

from agentd import cgroupfs, stepfiles
from agentd.walltime import Ending, Walltime
from kiln.slurm import rlimits

TYPE_CHECKING = False  # typing is not imported at run time: the supervisor starts light
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

GROUP_SCAN_INTERVAL = 0.5  # seconds between /proc searches for a killed group's survivors
# seconds after SIGKILL the supervisor waits for a cgroup to empty before it writes the end
# anyway: what is left the agent keeps killing, and drains the node (UnkillableStepTimeout)
UNKILLABLE_WAIT = 10.0
IDLE_WAKE = 1.0  # seconds: the longest the loop sleeps without a reason to wake
# what the supervisor ignores (and its job's child restores before exec)
IGNORED_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGPIPE,
                   _signal.SIGUSR1, _signal.SIGUSR2, _signal.SIGQUIT)
_BANNER_REASONS = {
    "CANCELLED": "",
    "TIMEOUT": " DUE TO TIME LIMIT",
    "PREEMPTED": " DUE TO PREEMPTION",
    "REQUEUED": " DUE TO JOB REQUEUE",
    "NODE_FAIL": " DUE TO NODE FAILURE",
}

# Called in the job's child process between fork and exec, as root, after setsid and before
# the switch to the user, with the launch file's dict: the place for per-job setup that
# must hold for every process of the job (the cgroup join). A hook that raises stops the
# launch: the job ends FAILED and the error is in its stderr file.
BEFORE_EXEC: list[Callable[[dict[str, Any]], None]] = []


def before_exec(launch: dict[str, Any]) -> None:
    """Run the ``BEFORE_EXEC`` hooks (in the job's child, before it becomes the user)."""
    for hook in BEFORE_EXEC:
        hook(launch)


def join_cgroup(launch: dict[str, Any]) -> None:
    """The job's child joins the job's cgroup (the launch's ``cgroup_procs``), still root."""
    cgroupfs.join_paths(launch.get("cgroup_procs") or [])


BEFORE_EXEC.append(join_cgroup)


def private_tmp(launch: dict[str, Any]) -> None:
    """The job's child enters a mount namespace of its own with the job's /tmp and /dev/shm
    (the launch's ``job_tmp``; agentd/jobtmp.py), still root."""
    if launch.get("job_tmp"):
        from agentd import jobtmp  # noqa: PLC0415 - only where it is on: the supervisor starts light

        jobtmp.enter(launch["job_tmp"])


BEFORE_EXEC.append(private_tmp)


# --- the job's child: fork .. exec --------------------------------------------------------


class SetupError(Exception):
    """The job's child failed before exec (a ``before_exec`` hook, the switch to the user)."""


def default_signals() -> None:
    """In a job's child (a batch script's, an srun task's), before exec: every signal a job
    may be sent back to its default. An ignored signal stays ignored across exec: the
    supervisor's own, SIGXFSZ, which Python ignores in every process it starts (a job over its
    file size limit dies, as under Slurm), and whatever the daemon itself was started ignoring
    (a shell's ``agentd &`` ignores SIGINT and SIGQUIT), which Ctrl-C and Ctrl-\\ of an
    ``srun --pty`` must reach."""
    for sig in (*IGNORED_SIGNALS, _signal.SIGXFSZ, _signal.SIGCHLD):
        _signal.signal(sig, _signal.SIG_DFL)
    _signal.set_wakeup_fd(-1)


def child_setup(launch: dict[str, Any]) -> None:
    """In the job's child, between fork and exec: its own session, ignored signals back to
    their defaults, the hooks as root, then the user's groups, gid and uid, the umask, and the
    working directory entered as the user (one the user may not enter gives Slurm's note on
    stderr and /tmp, as Slurm does)."""
    os.setsid()
    default_signals()
    before_exec(launch)
    if launch["switch_user"]:
        os.setgroups(launch["groups"])
        os.setresgid(launch["gid"], launch["gid"], launch["gid"])
        os.setresuid(launch["uid"], launch["uid"], launch["uid"])
    if launch["umask"] >= 0:
        os.umask(launch["umask"])
    for line in rlimits.apply(launch.get("rlimits") or {}):
        os.write(2, line.encode())
    try:
        os.chdir(launch["cwd"])
    except OSError as exc:
        os.write(2, chdir_note(launch["cwd"], exc.strerror or str(exc)).encode())
        os.chdir("/tmp")


def spawn(launch: dict[str, Any]) -> int:
    """Fork and exec the job; its pid. An exec that fails raises ``OSError`` (with the
    child's errno), a setup that fails ``SetupError``: the child reports either through a
    close-on-exec pipe, which an exec that succeeds closes empty."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:  # the job's child: never returns
        os.close(read_end)
        try:
            try:
                child_setup(launch)
            except BaseException as exc:  # noqa: BLE001 - any failure is the job's end
                os.write(write_end, b"S" + f"{type(exc).__name__}: {exc}".encode()[:1000])
                os._exit(1)
            try:
                env = {**launch["environment"], "SLURM_TASK_PID": str(os.getpid())}
                os.execve(launch["argv"][0], launch["argv"], env)
            except OSError as exc:
                os.write(write_end, b"E" + str(exc.errno or 0).encode())
        finally:
            os._exit(127)
    os.close(write_end)
    try:
        report = b""
        while chunk := os.read(read_end, 4096):
            report += chunk
    finally:
        os.close(read_end)
    if not report:
        return pid
    os.waitpid(pid, 0)
    if report[:1] == b"E":
        code = int(report[1:] or 0)
        raise OSError(code, os.strerror(code))
    raise SetupError(report[1:].decode(errors="replace"))


def chdir_note(path: str, problem: str) -> str:
    return f"slurmstepd: error: couldn't chdir to `{path}': {problem}: going to /tmp instead\n"


def exec_failure(text_head: str, script: str, exc: BaseException) -> tuple[str, int]:
    """slurmstepd's line for an exec that failed, and the exit code it reports (errno).

    A ``#!`` script whose interpreter is missing (ENOENT) is Slurm's ``execve(): bad
    interpreter(<the #! line>): No such file or directory``; one whose interpreter the user may
    not run (EACCES) names it too, after Slurm's ``execve(): <script>: Permission denied``
    (the spooled script itself is the user's, 0700). ``text_head``: the script's first line."""
    err = getattr(exc, "errno", None)
    problem = getattr(exc, "strerror", None) or str(exc)
    shebang = text_head[2:].rstrip() if text_head.startswith("#!") else ""
    if err == errno.ENOENT and shebang:
        message = f"execve(): bad interpreter({shebang}): {problem}"
    else:
        message = f"execve(): {script}: {problem}"
        if err == errno.EACCES and shebang:
            message += f" (the script's #! interpreter {shebang.split()[0]})"
    return message, err if isinstance(err, int) and 0 < err < 256 else 1


# --- the supervisor ---------------------------------------------------------------------------


class Supervisor:
    """One job, from exec to its exit file. ``control_fd``: the FIFO of the agent's commands;
    ``wake_fd``: the read end of the SIGCHLD wake-up pipe."""

    def __init__(self, spool_root: str, launch: dict[str, Any], control_fd: int, wake_fd: int):
        self.spool_root = spool_root
        self.launch = launch
        self.key = (int(launch["job_id"]), int(launch["generation"]))
        self.control_fd, self.wake_fd = control_fd, wake_fd
        warning = WarningSignal(**launch["warning"]) if launch.get("warning") else None
        self.walltime = Walltime(launch["launch_time"], launch["time_limit"], warning)
        self.kill_wait = int(launch["kill_wait"])
        self.fence_timeout = float(launch.get("fence_timeout") or 0.0)
        self.fence_kill_wait = int(launch.get("fence_kill_wait", self.kill_wait))
        cgroup = launch.get("cgroup")
        self.cgroup = cgroupfs.Tree.from_record(cgroup) if cgroup else None
        self.ending: Ending | None = None
        self.pid = 0
        self.status: int | None = None
        self.cpu: tuple[float, float] | None = None
        self.peak_rss_kb: float | None = None  # wait4's ru_maxrss (KiB) of the batch shell's tree
        self.end_time = 0.0
        self.scanned_at = 0.0
        self._buffer = b""
        self.error = ""

    def run(self) -> dict[str, Any]:
        """Start the job, see it to its end, and return the exit record."""
        if not self._start():
            return self._end()
        while True:
            now = time.time()
            if self._step(now):
                return self._end()
            self._wait(self._timeout(now))

    def _end(self) -> dict[str, Any]:
        """The exit record; with a cgroup that has emptied, its counters too (OOM kills,
        peak, CPU) and the cgroup removed (``cgroupfs.Tree.finish``): work the agent's serial
        loop would otherwise do per job, done here in parallel with it."""
        result = self._result()
        if self.cgroup is not None:
            try:
                result["cgroup_end"] = self.cgroup.finish()
            except OSError:
                pass  # the agent reads and removes it itself
        return result

    def _start(self) -> bool:
        launch = self.launch
        try:
            self.pid = spawn(launch)
        except OSError as exc:
            self.error, code = exec_failure(launch["script_head"], launch["argv"][-1], exc)
            write_fd(2, f"slurmstepd: error: {self.error}\n")
            self.status, self.end_time = code << 8, time.time()
            return False
        except SetupError as exc:  # a before_exec hook or the switch to the user
            self.error, code = f"job setup failed before exec: {exc}", 1
            write_fd(2, f"slurmstepd: error: {self.error}\n")
            self.status, self.end_time = code << 8, time.time()
            return False
        try:
            stepfiles.write_small(stepfiles.path(self.spool_root, *self.key, "pid"),
                                  f"{self.pid}\n")
        except OSError:
            pass  # the agent's sampler does without it
        return True

    def _step(self, now: float) -> bool:
        """One turn; True once the job is over (batch shell reaped, group empty)."""
        if self.status is None:
            self._reap(now)
        if self.status is None and self.ending is None:
            self._watch_walltime(now)
        if self.status is None and self.ending is None:
            self._watch_fence(now)
        if self.ending is not None and self.ending.kill_due(now):
            self.signal_job(_signal.SIGKILL)
            self.ending.killed = True
        if self.status is None:
            return False
        if self.ending is None:
            if not self.signal_job(_signal.SIGKILL):
                return True
            # the script ended but left processes behind: Slurm kills them with the step
            self.ending = Ending(state="", began=now, kill_at=now, killed=True)
        if not self.alive():
            return True
        if not self.ending.killed or now - self.scanned_at < GROUP_SCAN_INTERVAL:
            return False  # still within KillWait, or looked a moment ago
        self.scanned_at = now
        if self.cgroup is not None:
            # the cgroup holds what will not die yet (a process in D state): the agent keeps
            # killing it and drains the node after UnkillableStepTimeout; the end is written
            self.signal_job(_signal.SIGKILL)
            return not self.cgroup.populated() or now - self.ending.kill_at >= UNKILLABLE_WAIT
        if group_alive(self.pid):
            killpg(self.pid, _signal.SIGKILL)  # again, for any process forked meanwhile
            return False
        return True  # only zombies left, whose parent has yet to reap them

    def _reap(self, now: float) -> None:
        pid, status, cpu, self.peak_rss_kb = reap_usage(self.pid)
        if pid == 0:
            return
        self.status, self.cpu, self.end_time = (0 if status is None else status), cpu, now

    def _watch_walltime(self, now: float) -> None:
        warning = self.walltime.warning
        if warning is not None and self.walltime.warning_due(now):
            if warning.batch_only:
                kill(self.pid, warning.signum)
            else:  # Slurm: "all job steps will be signaled, but not the batch shell itself"
                self.signal_steps(warning.signum)
        if self.walltime.expired(now):
            self.terminate("TIMEOUT", now)

    def _watch_fence(self, now: float) -> None:
        """Fencing: once the agent has not heard schedd for ``fence_timeout`` (shorter than
        schedd's node_timeout), stop the job as NODE_FAIL before schedd can requeue it
        elsewhere: SIGTERM, and SIGKILL after ``fence_kill_wait`` (schedd's, which fits
        before its node_timeout, whatever KillWait is). The clock is the spool's ``schedd-heard`` file, which the agent touches:
        an agent that is cut off, stopped or dead touches nothing, and the job still stops."""
        if self.fence_timeout <= 0:
            return
        age = stepfiles.heard_age(self.spool_root, now)
        if age is not None and age >= self.fence_timeout:
            write_fd(2, f"slurmstepd: error: node {self.launch['node']} has not heard the "
                        f"controller for {age:.0f} s (fence_timeout {self.fence_timeout:g} s)\n")
            self.terminate("NODE_FAIL", now, self.fence_kill_wait)

    def terminate(self, state: str, now: float, kill_wait: int | None = None) -> None:
        """SIGCONT+SIGTERM to the group now, SIGKILL after KillWait; the first reason wins,
        and a job whose batch shell already ended keeps the state of that end."""
        if self.ending is not None or self.status is not None:
            return
        self._reap(now)
        if self.status is not None:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now))
        reason = _BANNER_REASONS.get(state, f" DUE TO {state}")
        write_fd(2, f"slurmstepd: error: *** JOB {self.key[0]} ON {self.launch['node']} "
                    f"CANCELLED AT {stamp}{reason} ***\n")
        self.signal_job(_signal.SIGCONT)
        self.signal_job(_signal.SIGTERM)
        self.ending = Ending.start(state, now, self.kill_wait if kill_wait is None else kill_wait)

    def _timeout(self, now: float) -> float:
        """Seconds until the next thing due: a warning, the limit, a SIGKILL, a scan."""
        due = [now + IDLE_WAKE]
        if self.ending is None:
            due += [t for t in (self.walltime.warn_at if not self.walltime.warned else None,
                                self.walltime.deadline) if t is not None]
        elif not self.ending.killed:
            due.append(self.ending.kill_at)
        else:
            due.append(self.scanned_at + GROUP_SCAN_INTERVAL)
        return max(min(due) - now, 0.0)

    def _wait(self, timeout: float) -> None:
        try:
            ready, _, _ = select.select([self.control_fd, self.wake_fd], [], [], timeout)
        except InterruptedError:
            return
        if self.wake_fd in ready:
            try:
                os.read(self.wake_fd, 512)
            except OSError:
                pass
        if self.control_fd in ready:
            self._read_commands()

    def _read_commands(self) -> None:
        try:
            data = os.read(self.control_fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            try:
                command = json.loads(line)
            except ValueError:
                continue
            if isinstance(command, dict):
                self.command(command, time.time())

    def command(self, command: dict[str, Any], now: float) -> None:
        """One command of the agent: terminate (with the state to report) or signal."""
        op = command.get("op")
        if op == "terminate" and isinstance(command.get("state"), str):
            self.terminate(command["state"], now)
        elif op == "signal" and isinstance(command.get("signum"), int):
            signum = command["signum"]  # a valid one: the agent parsed the name
            if command.get("full"):  # scancel -f: the batch shell and its steps
                self.signal_job(signum)
            elif command.get("batch_only"):  # scancel -b: the batch shell alone
                if self.status is None:
                    kill(self.pid, signum)
            else:  # Slurm 22.05's scancel -s: the job's steps, not the batch shell
                self.signal_steps(signum)

    def signal_job(self, signum: int) -> bool:
        """``signum`` once to every process of the job: with a cgroup to each process in it
        (SIGKILL: the whole cgroup at once), else to its process group (a process signalled
        both ways would get a handled signal twice); False when nothing of the job is left."""
        if self.cgroup is None:
            return killpg(self.pid, signum)
        if signum == _signal.SIGKILL:
            self.cgroup.kill()
        else:
            self.cgroup.signal(signum)
        return self.cgroup.populated()

    def signal_steps(self, signum: int) -> None:
        """``signum`` to every process of the job but its batch shell (its steps): those of
        its cgroup, else of its process group."""
        members = self.cgroup.pids() if self.cgroup is not None else group_members(self.pid)
        for pid in members:
            if pid != self.pid:
                kill(pid, signum)

    def alive(self) -> bool:
        """Is any process of the job left (its cgroup is not empty; else its group)?"""
        if self.cgroup is not None:
            return self.cgroup.populated()
        return killpg(self.pid, 0)

    def _result(self) -> dict[str, Any]:
        code, sig = exit_of(self.status)
        if self.ending is not None and self.ending.state:
            state = self.ending.state
        else:  # the agent tells an OOM kill (a SIGKILL nobody here sent) from a FAILED
            state = "COMPLETED" if code == 0 and sig == 0 else "FAILED"
        user, system = self.cpu if self.cpu is not None else (None, None)
        return {"job_id": self.key[0], "generation": self.key[1], "state": state,
                "exit_code": code, "exit_signal": sig,
                "start_time": self.launch["launch_time"], "end_time": self.end_time,
                "exit_known": True, "cpu_user": user, "cpu_system": system,
                "peak_rss_kb": self.peak_rss_kb,
                "error": self.error}


class WarningSignal:
    """The ``--signal`` warning, as the agent parsed it (``SignalSpec``'s fields)."""

    __slots__ = ("signum", "seconds", "batch_only")

    def __init__(self, signum: int, seconds: int, batch_only: bool):
        self.signum, self.seconds, self.batch_only = signum, seconds, batch_only


# --- processes -------------------------------------------------------------------------------


def write_fd(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode())
    except OSError:
        pass


def reap(pid: int) -> tuple[int, int | None, tuple[float, float] | None]:
    """waitpid(WNOHANG) that also keeps the child's CPU time: (pid or 0 while it runs, raw
    status, (user, system) seconds). wait4's usage covers the child and every descendant it
    waited for, which is what Slurm's TotalCPU counts; a child someone else reaped gives
    (pid, None, None)."""
    return reap_usage(pid)[:3]  # type: ignore[return-value]


def reap_usage(pid: int) -> tuple[int, int | None, tuple[float, float] | None, float | None]:
    """``reap`` and also wait4's ``ru_maxrss`` (KiB on Linux): the peak resident set of the
    child or of the largest descendant it waited for (a job shorter than the agent's sampling
    interval still reports its peak)."""
    try:
        got, status, usage = os.wait4(pid, os.WNOHANG)
    except ChildProcessError:
        return pid, None, None, None
    if got == 0:
        return 0, None, None, None
    return got, status, (usage.ru_utime, usage.ru_stime), float(usage.ru_maxrss)


def exit_of(status: int | None) -> tuple[int, int]:
    """(exit code, signal) of a raw wait status; (0, 0) when unknown."""
    if status is None:
        return 0, 0
    if os.WIFSIGNALED(status):
        return 0, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), 0


def kill(pid: int, signum: int) -> bool:
    try:
        os.kill(pid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # a set-uid program, for an agent that is not root: it exists
        return True


def killpg(pgid: int, signum: int) -> bool:
    """Signal a process group; False when it has no member left."""
    try:
        os.killpg(pgid, signum)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # only set-uid members, for an agent that is not root
        return True


def group_alive(pgid: int) -> bool:
    """Does any live (non-zombie) process remain in the group? Zombies whose parent is slow to
    reap them (a container's PID 1 may never do it) do not count: they hold no resources."""
    return killpg(pgid, 0) and bool(group_members(pgid))


def group_members(pgid: int) -> list[int]:
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


# --- entry point ---------------------------------------------------------------------------


def _ignore_signals() -> int:
    """The agent's commands come by the FIFO: stray TERM/INT/HUP do not end the supervisor.
    SIGCHLD wakes the loop through a pipe; returns that pipe's read end."""
    for sig in IGNORED_SIGNALS:
        _signal.signal(sig, _signal.SIG_IGN)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    _signal.set_wakeup_fd(wake_w)
    _signal.signal(_signal.SIGCHLD, lambda *_: None)
    return wake_r


def supervise(spool_root: str, key: tuple[int, int], control_fd: int) -> int:
    """Be the supervisor of job ``key``: claim its launch file, run the job to its end, write
    the exit file; the process's exit code (0 once the end is written).

    The one body of both ways a supervisor starts: ``main`` (a process of its own, ``python
    -m agentd.stepd``) and the fork server's child (``agentd.forkserver``), each with the job's
    files as fds 1 and 2, /dev/null as 0, in a session of its own, the signal dispositions
    Python starts with, and no other descriptor open but ``control_fd``."""
    os.set_inheritable(control_fd, False)  # the job does not get it
    launch = claim_launch(spool_root, key)
    if launch is None:
        return 1
    wake_fd = _ignore_signals()
    os.set_blocking(control_fd, False)
    result = Supervisor(spool_root, launch, control_fd, wake_fd).run()
    stepfiles.write_durable(stepfiles.path(spool_root, *key, "exit"), json.dumps(result))
    return 0


def claim_launch(spool_root: str, key: tuple[int, int]) -> dict[str, Any] | None:
    """The job's launch, taken from the spool by one rename (``launch`` to ``claimed``): of two
    supervisors started for one launch (a fork server that forked one but died before it could
    say so, and the one the agent then started directly) only one gets it, and the other
    exits without running the job. None (said on stderr) when there is none to take."""
    launch_path = stepfiles.path(spool_root, *key, "launch")
    claimed = stepfiles.path(spool_root, *key, "claimed")
    try:
        os.rename(launch_path, claimed)
    except FileNotFoundError:
        if any(os.path.exists(stepfiles.path(spool_root, *key, kind))
               for kind in ("claimed", "pid")):
            return None  # another supervisor took it: the job is its, not ours to speak of
        write_fd(2, "slurmstepd: error: cannot read the job's launch file: it is gone\n")
        return None
    except OSError as exc:
        write_fd(2, f"slurmstepd: error: cannot read the job's launch file: {exc}\n")
        return None
    try:
        with open(claimed, "rb") as fh:
            launch = json.loads(fh.read())
        os.unlink(claimed)
    except (OSError, ValueError) as exc:
        write_fd(2, f"slurmstepd: error: cannot read the job's launch file: {exc}\n")
        return None
    return launch if isinstance(launch, dict) else None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print("usage: python -m agentd.stepd SPOOL JOB_ID GENERATION CONTROL_FD",
              file=sys.stderr)
        return 2
    return supervise(args[0], (int(args[1]), int(args[2])), int(args[3]))


if __name__ == "__main__":
    sys.exit(main())
