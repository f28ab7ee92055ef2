"""``srun``: run tasks of a parallel job, inside an allocation or as a job of their own.

**Inside an allocation** (``SLURM_JOB_ID`` is set, as in every batch script): srun asks schedd
for a job step (``step_start``: the command, its environment, the task layout, the output
patterns). schedd lays the tasks over the job's nodes and every node's agent runs its share as
the job's user, each task with its own SLURM_PROCID/LOCALID/NODEID/STEP_ID and that node's
CUDA_VISIBLE_DEVICES. Each task writes its stdout/stderr to files: the ``--output``/``--error``
patterns expanded per task (``%t`` rank, ``%n`` node index, ``%N`` node, ``%s`` step, ``%j``,
``%A``, ``%a``, ``%u``, ``%x``), or, without them, the output is **forwarded** over the wire:
each node's agent sends what its tasks write to schedd, which keeps it (bounded) until srun
fetches it with ``step_wait``, giving its cursors (the next byte offset it wants of each task
stream) so schedd can release what srun has written. srun copies it to its own stdout/stderr
as lines arrive (``-l`` puts ``rank: `` in front; ``-u`` copies bytes as they come instead of
whole lines). No directory is shared with the nodes. srun polls until every node has reported
and all output was delivered, and exits with the worst task's status (its exit code; 128+N for
a task killed by signal N), printing Slurm's ``srun: error: node: task N: ...`` line for each
failed task.

**Outside an allocation**: srun does what Slurm's does, an allocation and then its step. It
submits a job whose batch script only holds the allocation (``cli/srun_hold.py``: it waits for
the job's step 0 to end and exits with its status), waits until the job runs, then starts step 0
itself, exactly as inside an allocation, so the tasks' output comes to it over the wire as it is
written: nothing is shared between srun's node and the job's. srun exits with the worst task's
status. Interrupting srun (Ctrl-C, SIGTERM) cancels its step (the job then ends) or, while the
job is pending, the job.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from cli.core import Command, CommandError, fail, run_command, submit_failure
from cli.core.client import Client, ClientError
from cli.core.options import NO_ARG, OPTIONAL, REQUIRED, Opt, OptionError, OptionTable
from cli.submit import (
    X11_REFUSED,
    Settings,
    apply_options,
    build_environment,
    check_request,
    env_options,
    ignored_warnings,
    refused_option,
)
from kiln import paths
from kiln.slurm import rlimits

PROG = "srun"
POLL_START, POLL_MAX = 0.05, 0.25  # seconds between step_wait polls (backs off)
QUEUED_AFTER = 1.0  # seconds pending before srun says the job is queued (as Slurm does)
RELEASE_WAIT = 30.0  # seconds srun waits, at most, for its job to end after its step
USAGE = """Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]

Parallel run options (the common ones):
  -n, --ntasks=ntasks         number of tasks to run
  -N, --nodes=N               number of nodes on which to run
      --ntasks-per-node=n     number of tasks to invoke on each node
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -G, --gpus=n                count of GPUs required for the step
      --gpus-per-node=n       GPUs per node;  --gpus-per-task=n  GPUs per task
  -o, --output=out            location of stdout redirection (%j %t %n %N %s %A %a %u %x)
  -e, --error=err             location of stderr redirection
  -l, --label                 prepend task number to lines of stdout/err
  -u, --unbuffered            do not line-buffer stdout/err
  -J, --job-name=jobname      name of job (step)
  -D, --chdir=path            change remote current working directory
      --export=env_vars|NONE  environment passed to the tasks
  -t, --time=minutes          time limit (outside an allocation)
  -p, --partition=partition   partition requested (outside an allocation)
"""

# srun 22.05's option names: "long:mode[:short]". Those kiln acts on have handlers (sbatch's,
# shared through cli.submit, plus label/unbuffered below); the rest are accepted and ignored
# where ignoring them changes no result (binding, MPI plugin, verbosity), refused otherwise.
SRUN_OPTION_NAMES = """
account:r:A acctg-freq:r bb:r bbf:r begin:r:b bcast:o chdir:r:D cluster-constraint:r
clusters:r:M comment:r compress:o constraint:r:C container:r contiguous:n core-spec:r:S
cores-per-socket:r cpu-bind:r cpu-freq:r cpus-per-gpu:r cpus-per-task:r:c deadline:r
delay-boot:r dependency:r:d disable-status:n:X distribution:r:m epilog:r error:r:e exact:n
exclude:r:x exclusive:o export:r extra-node-info:r:B gid:r gpu-bind:r gpu-freq:r gpus:r:G
gpus-per-node:r gpus-per-socket:r gpus-per-task:r gres:r gres-flags:r help:n:h het-group:r
hint:r hold:n:H immediate:o:I input:r:i job-name:r:J jobid:r kill-on-bad-exit:o:K label:n:l
licenses:r:L mail-type:r mail-user:r mcs-label:r mem:r mem-bind:r mem-per-cpu:r mem-per-gpu:r
mincpus:r mpi:r multi-prog:n network:r nice:o no-allocate:n:Z no-kill:o:k nodefile:r:F
nodelist:r:w nodes:r:N ntasks:r:n ntasks-per-core:r ntasks-per-gpu:r ntasks-per-node:r
ntasks-per-socket:r open-mode:r output:r:o overcommit:n:O overlap:n oversubscribe:n:s
partition:r:p power:r preserve-env:n:E prefer:r priority:r profile:r prolog:r propagate:o
pty:n qos:r:q quiet:n:Q quit-on-interrupt:n reboot:n relative:r:r reservation:r
send-libs:o signal:r slurmd-debug:r sockets-per-node:r spread-job:n switches:r task-epilog:r
task-prolog:r tasks-per-node:r test-only:n thread-spec:r threads-per-core:r threads:r:T time:r:t
time-min:r tmp:r uid:r unbuffered:n:u usage:n use-min-nodes:n verbose:n:v version:n:V wait:r:W
wckey:r tres-per-task:r tres-bind:r accel-bind:r resv-ports:o x11:o oom-kill-step:o
external-launcher:n segment:r stepmgr:n
"""
_MODES = {"n": NO_ARG, "r": REQUIRED, "o": OPTIONAL}
_ALIASES = {"tasks-per-node": "ntasks-per-node"}
# Options whose meaning kiln's srun does not implement and that change what runs.
UNSUPPORTED = {"multi-prog", "no-allocate", "relative", "het-group", "bcast",
               "prolog", "epilog", "send-libs", "test-only"}
# Settings of the submitted job that are per task for the srun inside it, not the job's.
_STEP_ONLY = {"stdout", "stderr", "open_mode", "label", "unbuffered", "stdin", "task_prolog",
              "task_epilog"}
TASK_SCRIPTS = {"task-prolog": "task_prolog", "task-epilog": "task_epilog"}

# srun(1)'s INPUT ENVIRONMENT VARIABLES (22.05) that are a user's options -> option. Left
# out on purpose: the variables an allocation exports to its shell or script (SLURM_JOB_ID,
# SLURM_JOB_NAME, SLURM_NTASKS, SLURM_NNODES, SLURM_NPROCS, SLURM_DISTRIBUTION,
# SLURM_MEM_PER_NODE, SLURM_CLUSTERS, SLURM_UMASK, ...): srun inside the allocation takes the
# job and its shape from the allocation itself; and SLURM_CPUS_PER_TASK, which 22.05's srun
# no longer reads. SRUN_EXPORT_ENV comes after SLURM_EXPORT_ENV: it wins, as in Slurm.
SRUN_ENV_VARS = {
    "SLURM_ACCOUNT": "account", "SLURM_ACCTG_FREQ": "acctg-freq",
    "SLURM_CONSTRAINT": "constraint", "SRUN_CONTAINER": "container",
    "SLURM_CPU_FREQ_REQ": "cpu-freq", "SLURM_CPUS_PER_GPU": "cpus-per-gpu",
    "SLURM_DELAY_BOOT": "delay-boot", "SLURM_DEPENDENCY": "dependency",
    "SLURM_EXCLUSIVE": "exclusive", "SLURM_EXPORT_ENV": "export", "SRUN_EXPORT_ENV": "export",
    "SLURM_GPU_BIND": "gpu-bind", "SLURM_GPU_FREQ": "gpu-freq", "SLURM_GPUS": "gpus",
    "SLURM_GPUS_PER_NODE": "gpus-per-node", "SLURM_GPUS_PER_TASK": "gpus-per-task",
    "SLURM_GRES": "gres", "SLURM_GRES_FLAGS": "gres-flags", "SLURM_HINT": "hint",
    "SLURM_IMMEDIATE": "immediate", "SLURM_KILL_BAD_EXIT": "kill-on-bad-exit",
    "SLURM_LABELIO": "label", "SLURM_MEM_BIND": "mem-bind", "SLURM_MEM_PER_CPU": "mem-per-cpu",
    "SLURM_MEM_PER_GPU": "mem-per-gpu", "SLURM_NETWORK": "network", "SLURM_NO_KILL": "no-kill",
    "SLURM_OPEN_MODE": "open-mode", "SLURM_OVERCOMMIT": "overcommit", "SLURM_OVERLAP": "overlap",
    "SLURM_PARTITION": "partition", "SLURM_POWER": "power", "SLURM_PROFILE": "profile",
    "SLURM_QOS": "qos", "SLURM_REQ_SWITCH": "switches", "SLURM_RESERVATION": "reservation",
    "SLURM_SIGNAL": "signal", "SLURM_SPREAD_JOB": "spread-job",
    "SLURM_THREAD_SPEC": "thread-spec", "SLURM_THREADS_PER_CORE": "threads-per-core",
    "SLURM_TIMELIMIT": "time", "SLURM_UNBUFFEREDIO": "unbuffered",
    "SLURM_USE_MIN_NODES": "use-min-nodes", "SLURM_WAIT": "wait", "SLURM_WCKEY": "wckey",
}


def _srun_table() -> OptionTable:
    opts = []
    for entry in SRUN_OPTION_NAMES.split():
        long, mode, *short = entry.split(":")
        opts.append(Opt(long, short[0] if short else "", _MODES[mode], _ALIASES.get(long, long)))
    return OptionTable(opts)


SRUN_TABLE = _srun_table()
# srun answers --help after its refusals and its options' values are checked (parse, below)
SRUN = Command(PROG, SRUN_TABLE, help=USAGE, stop_at_positional=True)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(PROG, srun_command, argv)


def parse(argv: Sequence[str]) -> tuple[Settings, list[str]]:
    """(settings as sbatch's handlers store them, plus srun's own; the command and its args)."""
    args = SRUN.parse(argv)
    command = args.positional
    parsed = [*env_options(dict(os.environ), SRUN_ENV_VARS, SRUN_TABLE), *args.parsed]
    for opt, _ in parsed:
        if opt.dest in UNSUPPORTED:
            fail(f"--{opt.long} is not supported by kiln's srun")
        if opt.dest == "x11":
            fail(X11_REFUSED)
    refused = refused_option(parsed)
    if refused:
        fail(refused)
    if not any(opt.dest == "quiet" for opt, _ in parsed):
        for warning in ignored_warnings(parsed):  # the same words as sbatch's
            print(f"{PROG}: warning: {warning}", file=sys.stderr)
    settings: Settings = {"_max_array_size": paths.max_array_size()}
    try:
        apply_options(settings, [(o, v) for o, v in parsed
                                 if o.dest != "input" and o.dest not in TASK_SCRIPTS])
    except OptionError as exc:
        raise CommandError(exc.message, prefixed=exc.prefixed) from None
    for opt, value in parsed:
        if opt.dest == "input" and (value or "").lower() != "none":
            fail("--input other than 'none' is not supported: tasks read /dev/null")
        if opt.dest in TASK_SCRIPTS:  # run as the user on the task's node: a full path
            if not value:
                fail(f"--{opt.long} needs a program")
            settings[TASK_SCRIPTS[opt.dest]] = os.path.abspath(value)
        if opt.dest == "jobid":
            if not (value or "").isdigit():
                fail(f'Invalid numeric value "{value}" for --jobid.')
            settings["_jobid"] = int(value or 0)
    return settings, command


def srun_command(argv: Sequence[str]) -> int:
    settings, command = parse(argv)
    if SRUN.answer({flag: None for flag in ("help", "usage", "version") if settings.get(f"_{flag}")}):
        return 0
    if not command:
        raise CommandError(f"{PROG}: fatal: No command given to execute.", prefixed=False)
    job_id = settings.get("_jobid") or _env_job_id()
    if settings.get("pty"):
        if job_id:
            return run_pty_step(job_id, settings, command)
        from cli.salloc import with_allocation  # outside an allocation: allocate first

        job = {k: v for k, v in settings.items() if k not in _STEP_ONLY}
        return with_allocation(PROG, job, command,
                               lambda new_id: run_pty_step(new_id, settings, command))
    if job_id:
        return run_step(job_id, settings, command)
    check_request(settings, "Unable to allocate resources")  # a new allocation
    return run_job(settings, command, list(argv))


def _env_job_id() -> int:
    text = os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID") or ""
    return int(text) if text.isdigit() else 0


# --- output forwarding -----------------------------------------------------------------------


@dataclass
class Lines:
    """One task stream copied to ``sink``: whole lines (the last partial one held back until
    more comes or the end), or with -u bytes as they come; -l labels each line."""

    sink: BinaryIO
    label: bytes = b""
    raw: bool = False  # -u: copy bytes as they come; otherwise whole lines
    partial: bytes = b""

    def write(self, data: bytes, final: bool = False) -> bool:
        """Copy ``data`` (the next bytes of the stream); True when something was written."""
        if not data and not (final and self.partial):
            return False
        data = self.partial + data
        if self.raw:
            lines, self.partial = [data] if data else [], b""
        else:
            *lines, self.partial = data.split(b"\n")
            lines = [line + b"\n" for line in lines]
            if final and self.partial:
                lines.append(self.partial)
                self.partial = b""
        for line in lines:
            self.sink.write(self.label + line if self.label else line)
        self.sink.flush()
        return bool(lines)


@dataclass
class Interrupts:
    """SIGINT/SIGTERM while srun waits: remembered, acted on by the wait loop."""

    count: int = 0
    signum: int = 0
    previous: dict[int, Any] = field(default_factory=dict)

    def __enter__(self) -> Interrupts:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._note)
        return self

    def _note(self, signum: int, _frame: Any) -> None:
        self.count += 1
        self.signum = signum

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


@dataclass
class Forwarded:
    """The step's forwarded task streams: where srun is in each (its cursor, the next byte
    offset it wants) and where their bytes go."""

    streams: dict[tuple[int, str], Lines] = field(default_factory=dict)
    cursors: dict[tuple[int, str], int] = field(default_factory=dict)

    def cursor_list(self) -> list[list[int | str]]:
        """step_wait's ``cursors``: only the streams srun has written something of."""
        return [[procid, name, offset] for (procid, name), offset in self.cursors.items()]

    def take(self, chunks: list[Any]) -> bool:
        """Write the chunks of a step_wait reply (each [procid, stream, offset, base64]) from
        srun's cursors on; bytes already written (a resend) are skipped. True when any was."""
        moved = False
        for procid, name, offset, text in chunks:
            lines = self.streams.get((procid, name))
            cursor = self.cursors.get((procid, name), 0)
            try:
                data = base64.b64decode(text)
            except (binascii.Error, ValueError):
                continue
            if lines is None or offset > cursor or offset + len(data) <= cursor:
                continue
            lines.write(data[cursor - offset:])
            self.cursors[(procid, name)] = offset + len(data)
            moved = True
        return moved

    def finish(self) -> None:
        """The step is over: the last partial line of every stream."""
        for lines in self.streams.values():
            lines.write(b"", final=True)


# --- a step inside an allocation -------------------------------------------------------------


def step_body(job_id: int, settings: Settings, command: list[str],
              cwd: str) -> dict[str, Any]:
    """The ``step_start`` request: only what the user gave; schedd fills in the job's values."""
    body: dict[str, Any] = {
        "job_id": job_id, "argv": command, "cwd": cwd,
        "environment": {**build_environment(settings.get("export", "ALL"), dict(os.environ)),
                        **rlimits.submitted()},  # umask and soft limits, whatever --export
        "name": settings.get("name") or os.path.basename(command[0]),
    }
    for key, field_name in (("num_tasks", "ntasks"), ("num_nodes", "nodes"),
                            ("ntasks_per_node", "ntasks_per_node"),
                            ("cpus_per_task", "cpus_per_task"), ("gpus", "gpus"),
                            ("gpus_per_node", "gpus_per_node"),
                            ("gpus_per_task", "gpus_per_task")):
        if settings.get(key):
            body[field_name] = int(settings[key])
    if settings.get("stdout"):
        body["stdout"] = settings["stdout"]
    if settings.get("stderr"):
        body["stderr"] = settings["stderr"]
    if not settings.get("stdout"):
        body["forward"] = True  # stdout (and stderr without -e) comes to srun over the wire
    if settings.get("open_mode"):
        body["open_mode"] = settings["open_mode"]
    for name in ("task_prolog", "task_epilog"):
        if settings.get(name):
            body[name] = settings[name]
    return body


_PER_TASK = re.compile(r"%\d*[tnNs]")


def truncate_shared(pattern: str, job_id: int, cwd: str) -> None:
    """A pattern without %t/%n/%N/%s names one file that tasks on several nodes append to:
    truncate it first (Slurm's default --open-mode), as the user, here."""
    if not pattern or _PER_TASK.search(pattern.replace("%%", "")):
        return
    env = os.environ
    subs = {"j": str(job_id), "J": str(job_id), "u": _user(),
            "x": env.get("SLURM_JOB_NAME", ""),
            "A": env.get("SLURM_ARRAY_JOB_ID", str(job_id)),
            "a": env.get("SLURM_ARRAY_TASK_ID", "4294967294"), "%": "%"}

    def sub(m: re.Match[str]) -> str:
        value = subs.get(m.group(2), m.group(0))
        return value.zfill(int(m.group(1))) if m.group(1) and value.isdigit() else value

    path = re.sub(r"%(\d*)([jJuxAa%])", sub, pattern)
    try:
        with open(os.path.join(cwd, path), "wb"):
            pass
    except OSError as exc:
        fail(f"Could not open stdout file {path}: {exc.strerror}")


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def run_step(job_id: int, settings: Settings, command: list[str]) -> int:
    with Client() as client, Interrupts() as interrupts:
        return _step_status(start_and_wait(client, interrupts, job_id, settings, command))


def start_and_wait(client: Client, interrupts: Interrupts, job_id: int, settings: Settings,
                   command: list[str]) -> dict[str, Any]:
    """Start a step in the job and copy its forwarded output until it ends; its result."""
    cwd = settings.get("workdir") or os.getcwd()
    if settings.get("open_mode") != "append":
        for key in ("stdout", "stderr"):
            truncate_shared(settings.get(key, ""), job_id, cwd)
    body = step_body(job_id, settings, command, cwd)
    try:
        started = client.call("step_start", {"step": body})
    except ClientError as exc:
        fail(f"Unable to create step for job {job_id}: {exc.message}")
    forwarded = _forwarded(started["tasks"], settings)
    return _wait_step(client, job_id, started["step_id"], forwarded, interrupts)


def run_pty_step(job_id: int, settings: Settings, command: list[str]) -> int:
    """srun --pty: task 0 under a pseudo-terminal on its node (cli/srun_pty.py)."""
    from cli.srun_pty import run_terminal

    if settings.get("stdout") or settings.get("stderr"):
        fail("--pty sends the task's output to the terminal: --output/--error cannot be used")
    cwd = settings.get("workdir") or os.getcwd()
    forwarded = Forwarded()
    forwarded.streams[(0, "out")] = Lines(sys.stdout.buffer, b"", raw=True)
    result = run_terminal(job_id, step_body(job_id, settings, command, cwd), forwarded, PROG)
    return _step_status(result)


def _forwarded(tasks: list[dict[str, Any]], settings: Settings) -> Forwarded:
    """The task streams schedd forwards (no path: no --output, or no --error)."""
    label, raw = bool(settings.get("label")), bool(settings.get("unbuffered"))
    forwarded = Forwarded()
    for task in tasks:
        prefix = f"{task['procid']}: ".encode() if label else b""
        if not task["stdout"]:
            forwarded.streams[(task["procid"], "out")] = Lines(sys.stdout.buffer, prefix, raw)
        if not task["stderr"]:
            forwarded.streams[(task["procid"], "err")] = Lines(sys.stderr.buffer, prefix, raw)
    return forwarded


def _wait_step(client: Client, job_id: int, step_id: int, forwarded: Forwarded,
               interrupts: Interrupts) -> dict[str, Any]:
    poll, cancelled = POLL_START, 0
    while True:
        if interrupts.count > cancelled:
            cancelled = interrupts.count
            print(f"{PROG}: Job step aborted: cancelling step {job_id}.{step_id}",
                  file=sys.stderr, flush=True)
            client.call("step_cancel", {"job_id": job_id, "step_id": step_id,
                                        "detach": cancelled > 1})
            if cancelled > 1:
                forwarded.finish()
                return {"done": True, "state": "CANCELLED", "exit_code": 0,
                        "exit_signal": interrupts.signum, "tasks": []}
        reply = client.call("step_wait", {"job_id": job_id, "step_id": step_id,
                                          "cursors": forwarded.cursor_list()})
        moved = forwarded.take(reply.get("output") or [])
        if reply.get("done"):
            forwarded.finish()
            return reply
        poll = POLL_START if moved else min(poll * 2, POLL_MAX)
        if not moved:
            time.sleep(poll)


def _step_status(result: dict[str, Any]) -> int:
    """Print srun's line for each failed task; the worst task's status is srun's."""
    worst = 0
    for procid, node, code, sig in result.get("tasks") or []:
        if sig:
            print(f"{PROG}: error: {node}: task {procid}: {_signal_text(sig)}",
                  file=sys.stderr)
            worst = max(worst, 128 + sig)
        elif code:
            print(f"{PROG}: error: {node}: task {procid}: Exited with exit code {code}",
                  file=sys.stderr)
            worst = max(worst, code)
    if not result.get("tasks"):
        sig = int(result.get("exit_signal") or 0)
        worst = 128 + sig if sig else int(result.get("exit_code") or 0)
    if worst == 0 and result.get("state") not in (None, "COMPLETED"):
        worst = 1
    return worst


def _signal_text(sig: int) -> str:
    try:
        return signal.strsignal(sig) or f"signal {sig}"
    except ValueError:
        return f"signal {sig}"


# --- a job of its own, outside an allocation --------------------------------------------------


# -P: the job's working directory stays off sys.path (a project with its own cli/ is not ours)
HOLD_SCRIPT = ("#!/bin/sh\n# submitted by srun outside an allocation: holds the allocation "
               "until srun's step ends\nexec {python} -P -m cli.srun_hold\n")


def run_job(settings: Settings, command: list[str], argv: list[str]) -> int:
    """Submit the allocation, wait until it runs, run step 0 in it from here."""
    from cli.sbatch import build_job

    job_settings = {k: v for k, v in settings.items() if k not in _STEP_ONLY}
    job_settings.setdefault("name", os.path.basename(command[0]))
    script = HOLD_SCRIPT.format(python=shlex.quote(sys.executable))
    job = build_job(job_settings, script, os.path.basename(command[0]),
                    " ".join(command)[:4000], [])
    job["stdout"] = job["stderr"] = os.devnull  # the holder writes nothing; the step forwards
    with Client() as client, Interrupts() as interrupts:
        try:
            body: dict[str, Any] = {"job": job}
            if settings.get("_priority") is not None:  # an operator's --priority
                body["priority"] = settings["_priority"]
            job_id = client.call("submit", body)["job_id"]
        except ClientError as exc:
            fail(*submit_failure(exc.message, "Unable to allocate resources"))
        job = _wait_running(client, job_id, interrupts, bool(settings.get("_quiet")))
        if job["state"] != "RUNNING":  # ended (cancelled, failed) before it ran
            return _job_status(job)
        try:
            result = start_and_wait(client, interrupts, job_id, settings, command)
        except CommandError:
            client.call("cancel", {"job_ids": [str(job_id)]})  # no step: free the nodes
            raise
        if interrupts.count < 2:  # a second interrupt leaves at once
            _wait_released(client, job_id)
    return _step_status(result)


def _wait_released(client: Client, job_id: int) -> None:
    """The job ends with its step (its holder exits): wait for that, as Slurm's srun returns
    once its allocation is released, so a command right after (sacct, squeue) sees it ended."""
    deadline, poll = time.monotonic() + RELEASE_WAIT, POLL_START
    while time.monotonic() < deadline:
        try:
            jobs = client.call("query_jobs", {"job_ids": [str(job_id)],
                                              "all_states": True})["jobs"]
        except ClientError as exc:
            if exc.code != "invalid_job_id":
                raise
            return
        if not jobs or jobs[0]["state"] in _FINISHED:
            return
        if jobs[0]["state"] == "PENDING":  # requeued (its prolog failed, its node died)
            print(f"{PROG}: error: Job allocation {job_id} has been revoked.",
                  file=sys.stderr, flush=True)
            return
        time.sleep(poll)
        poll = min(poll * 2, POLL_MAX)


def _job_status(job: dict[str, Any]) -> int:
    if job.get("exit_signal"):
        return 128 + int(job["exit_signal"])
    if job.get("exit_code"):
        return int(job["exit_code"])
    return 0 if job.get("state") == "COMPLETED" else 1


_FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
             "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


def _wait_running(client: Client, job_id: int, interrupts: Interrupts,
                  quiet: bool) -> dict[str, Any]:
    """Poll the job until it runs or has ended; Slurm's queued/allocated lines on the way."""
    poll, cancelled, queued = POLL_START, 0, False
    submitted = time.monotonic()
    while True:
        if interrupts.count > cancelled:
            cancelled = interrupts.count
            print(f"{PROG}: forcing job termination", file=sys.stderr, flush=True)
            client.call("cancel", {"job_ids": [str(job_id)]})
        try:
            jobs = client.call("query_jobs", {"job_ids": [str(job_id)],
                                              "all_states": True})["jobs"]
        except ClientError as exc:
            if exc.code != "invalid_job_id":
                raise
            jobs = []
        job = jobs[0] if jobs else {"state": "COMPLETED"}
        state = job["state"]
        if state == "PENDING" and not queued and not quiet \
                and time.monotonic() - submitted > QUEUED_AFTER:
            queued = True
            print(f"{PROG}: job {job_id} queued and waiting for resources", file=sys.stderr,
                  flush=True)
        if (state == "RUNNING" and not cancelled) or state in _FINISHED:
            if queued and state == "RUNNING":
                print(f"{PROG}: job {job_id} has been allocated resources", file=sys.stderr,
                      flush=True)
            return job
        poll = min(poll * 2, POLL_MAX)
        time.sleep(poll)


if __name__ == "__main__":
    sys.exit(main())
