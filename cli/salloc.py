"""``salloc``: get an allocation, run a command (default: the user's shell) with it, give it back.

salloc submits a job marked ``interactive`` with sbatch's resource options: schedd runs no
batch script for it, only Slurm's extern step on its first node, which holds the allocation
(``schedd/handlers/admission.py``). salloc waits for it with Slurm's messages (``Pending job
allocation N``, ``job N queued and waiting for resources``, ``Granted job allocation N``,
``Nodes ... are ready for job``), then runs the command *here*, in the terminal's foreground
(``cli/foreground.py``), with the allocation's SLURM_* variables, so ``srun`` inside it starts
steps on the allocated nodes. When the command exits salloc prints ``Relinquishing job
allocation N`` and ends the job with the command's exit status (``relinquish``), and exits with
that status.

While waiting, SIGINT/SIGTERM/SIGHUP cancel the request (``Job allocation N has been
revoked.``, ``Job aborted due to signal``); ``-I/--immediate[=secs]`` gives up when the job has
not started in that time. While the command runs, a hang-up of salloc (the terminal closed) is
passed on to the command as SIGHUP and the allocation is given back when it has exited. When
the allocation ends under the command (its time limit, ``scancel``) salloc says so, sends the
command SIGHUP and exits once it has. ``--no-shell`` leaves once the allocation is granted;
the job then runs until ``scancel`` or its time limit.
"""

from __future__ import annotations

import os
import pwd
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cli.core import Command, CommandError, fail, run_command, submit_failure
from cli.core.client import Client, ClientError
from cli.core.options import NO_ARG, OPTIONAL, REQUIRED, Opt, OptionError, OptionTable
from cli.submit import (
    SBATCH_OPTION_NAMES,
    X11_REFUSED,
    Settings,
    apply_options,
    env_options,
    ignored_warnings,
    refused_option,
    resolve_cpus_per_gpu,
)

PROG = "salloc"
PENDING_AFTER = 1.0  # seconds without a start before salloc says the job is pending
POLL_START, POLL_MAX = 0.05, 0.5  # seconds between polls while pending (backs off)
TICK = 1.0  # seconds between looks at the allocation while the command runs
HANGUP_GRACE = 10.0  # seconds a revoked command has to exit after SIGHUP, then SIGKILL
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
USAGE = """Usage: salloc [OPTIONS(0)...] [ : [OPTIONS(N)...]] [command(0) [args(0)...]]

Parallel run options (the common ones; sbatch's resource options are accepted):
  -A, --account=name          charge job to specified account
  -c, --cpus-per-task=ncpus   number of cpus required per task
  -G, --gpus=n                count of GPUs required for the job
  -I, --immediate[=secs]      exit if resources not available in "secs"
  -J, --job-name=jobname      name of job
  -n, --ntasks=N              number of processors required
  -N, --nodes=N               number of nodes on which to run (N = min[-max])
      --no-shell              immediately exit after allocating resources,
                              without running a command
  -p, --partition=partition   partition requested
  -q, --qos=qos               quality of service
  -t, --time=minutes          time limit
"""

# sbatch's options that salloc does not have (a batch script's own), and salloc's own.
_NOT_SALLOC = {"array", "wrap", "output", "error", "open-mode", "parsable", "input", "requeue",
               "no-requeue", "ignore-pbs", "test-only", "batch", "export-file", "wait",
               "kill-on-invalid-dep", "restart-cost"}
SALLOC_OWN = "no-shell:n immediate:o:I kill-command:o:K bell:n no-bell:n x11:o wait:r:W"
_MODES = {"n": NO_ARG, "r": REQUIRED, "o": OPTIONAL}
# salloc's own options kiln does not act on: accepted, one warning each.
SALLOC_IGNORED = {"kill-command": "the command is sent SIGHUP when the allocation ends",
                  "bell": "no terminal bell", "no-bell": "no terminal bell",
                  "wait": "deprecated; use -I/--immediate"}

# salloc(1)'s INPUT ENVIRONMENT VARIABLES (22.05) -> option. There is no SALLOC_NO_SHELL.
SALLOC_ENV_VARS = {
    "SALLOC_ACCOUNT": "account", "SALLOC_ACCTG_FREQ": "acctg-freq", "SALLOC_BELL": "bell",
    "SLURM_CLUSTERS": "clusters", "SALLOC_CLUSTERS": "clusters",
    "SALLOC_CONSTRAINT": "constraint", "SALLOC_CONTAINER": "container",
    "SALLOC_CORE_SPEC": "core-spec", "SALLOC_CPUS_PER_GPU": "cpus-per-gpu",
    "SALLOC_DELAY_BOOT": "delay-boot", "SALLOC_EXCLUSIVE": "exclusive",
    "SALLOC_GPU_BIND": "gpu-bind", "SALLOC_GPU_FREQ": "gpu-freq", "SALLOC_GPUS": "gpus",
    "SALLOC_GPUS_PER_NODE": "gpus-per-node", "SALLOC_GPUS_PER_TASK": "gpus-per-task",
    "SALLOC_GRES": "gres", "SALLOC_GRES_FLAGS": "gres-flags", "SALLOC_HINT": "hint",
    "SALLOC_IMMEDIATE": "immediate", "SALLOC_KILL_CMD": "kill-command",
    "SALLOC_MEM_BIND": "mem-bind", "SALLOC_MEM_PER_CPU": "mem-per-cpu",
    "SALLOC_MEM_PER_GPU": "mem-per-gpu", "SALLOC_MEM_PER_NODE": "mem",
    "SALLOC_NETWORK": "network", "SALLOC_NO_BELL": "no-bell", "SALLOC_NO_KILL": "no-kill",
    "SALLOC_OVERCOMMIT": "overcommit", "SALLOC_PARTITION": "partition", "SALLOC_POWER": "power",
    "SALLOC_PROFILE": "profile", "SALLOC_QOS": "qos", "SALLOC_REQ_SWITCH": "switches",
    "SALLOC_RESERVATION": "reservation", "SALLOC_SIGNAL": "signal",
    "SALLOC_SPREAD_JOB": "spread-job", "SALLOC_THREAD_SPEC": "thread-spec",
    "SALLOC_THREADS_PER_CORE": "threads-per-core", "SALLOC_TIMELIMIT": "time",
    "SALLOC_USE_MIN_NODES": "use-min-nodes", "SALLOC_WAIT_ALL_NODES": "wait-all-nodes",
    "SALLOC_WCKEY": "wckey",
}


def _salloc_table() -> OptionTable:
    opts = []
    for entry in (*SBATCH_OPTION_NAMES.split(), *SALLOC_OWN.split()):
        long, mode, *short = entry.split(":")
        if long in _NOT_SALLOC and entry not in SALLOC_OWN.split():
            continue
        opts.append(Opt(long, short[0] if short else "", _MODES[mode],
                        "ntasks-per-node" if long == "tasks-per-node" else long))
    return OptionTable(opts)


SALLOC_TABLE = _salloc_table()


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(PROG, allocate_command, argv)


SALLOC = Command(PROG, SALLOC_TABLE, help=USAGE, stop_at_positional=True)


@dataclass
class Request:
    """What salloc was asked: the job to submit and what to do with the allocation."""

    job: dict[str, Any]
    command: list[str]
    no_shell: bool = False
    immediate: float = 0.0  # seconds to wait for a start; 0: as long as it takes
    quiet: bool = False
    prog: str = PROG  # srun --pty outside an allocation allocates as srun does


def with_allocation(prog: str, settings: Settings, command: list[str],
                    run: Callable[[int], int]) -> int:
    """srun --pty outside an allocation: allocate (with srun's messages), ``run`` the step in
    it, then end the allocation with the step's status, which is the exit code."""
    request = Request(_job(settings, command, False), command, prog=prog,
                      quiet=bool(settings.get("_quiet")))
    with Client() as client:
        job_id = _submit(client, request.job, prog)
        granted = Waiting(client, job_id, request).wait()
        os.environ.update(granted["environment"])
        status = 1
        try:
            status = run(job_id)
        finally:
            try:
                client.call("relinquish", {"job_id": job_id, "exit_code": min(status, 255)})
            except ClientError:
                pass
    return status


def allocate_command(argv: Sequence[str]) -> int:
    request = parse_request(argv)
    if request is None:
        return 0
    with Client() as client:
        job_id = _submit(client, request.job, PROG)
        granted = Waiting(client, job_id, request).wait()
        if request.no_shell:
            return 0
        return Session(client, job_id, request, granted).run()


def parse_request(argv: Sequence[str]) -> Request | None:
    """The request salloc's arguments make; None when they asked for help or the version
    (answered: no SALLOC_* variable names --help, --usage or --version)."""
    args = SALLOC.parse(argv)
    if SALLOC.answer(args.given):
        return None
    positional = args.positional
    cli_opts = [*env_options(dict(os.environ), SALLOC_ENV_VARS, SALLOC_TABLE), *args.parsed]
    given = {opt.dest: value for opt, value in cli_opts}
    if "x11" in given:
        fail(X11_REFUSED)
    immediate = _immediate(given)
    resource_opts = [(o, v) for o, v in cli_opts if o.long not in SALLOC_OWN_LONGS]
    settings: Settings = {}
    try:
        apply_options(settings, resource_opts)
    except OptionError as exc:
        raise CommandError(exc.message, prefixed=exc.prefixed) from None
    resolve_cpus_per_gpu(settings)
    refused = refused_option(cli_opts)
    if refused:
        fail(refused)
    quiet = bool(settings.get("_quiet"))
    if not quiet:
        for warning in ignored_warnings(resource_opts):
            print(f"{PROG}: warning: {warning}", file=sys.stderr)
        for long in dict.fromkeys(o.long for o, _ in cli_opts if o.long in SALLOC_IGNORED):
            print(f"{PROG}: warning: --{long} is ignored: {SALLOC_IGNORED[long]}",
                  file=sys.stderr)
    no_shell = "no-shell" in given
    command = list(positional) or [_user_shell()]
    job = _job(settings, command, no_shell)
    return Request(job, command, no_shell, immediate, quiet)


SALLOC_OWN_LONGS = {entry.split(":")[0] for entry in SALLOC_OWN.split()}


def _immediate(given: dict[str, str | None]) -> float:
    """-I/--immediate[=secs]: how long to wait for a start (Slurm's default: 1 second)."""
    if "immediate" not in given:
        return 0.0
    value = given["immediate"]
    if value is None or value == "":
        return 1.0
    if not value.isdigit():
        fail(f"Invalid --immediate value: {value}")
    return float(max(int(value), 1))


def _user_shell() -> str:
    """The command when none is given: the user's login shell (Slurm 22.05's default)."""
    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = ""
    return shell or os.environ.get("SHELL") or "/bin/sh"


def _job(settings: Settings, command: list[str], no_shell: bool) -> dict[str, Any]:
    """The submit body's job: sbatch's, marked as an allocation (schedd gives it no script)."""
    from cli.sbatch import build_job

    name = "no-shell" if no_shell else os.path.basename(command[0])
    job = build_job(settings, "", name, " ".join(command)[:4000], [])
    job["interactive"] = True
    return job


def _submit(client: Client, job: dict[str, Any], prog: str) -> int:
    lead = "Job submit/allocate failed" if prog == PROG else "Unable to allocate resources"
    try:
        return int(client.call("submit", {"job": job})["job_id"])
    except ClientError as exc:
        raise CommandError(*submit_failure(exc.message, lead)) from None


def say(text: str, prog: str = PROG) -> None:
    print(f"{prog}: {text}", file=sys.stderr, flush=True)


# --- waiting for the allocation ----------------------------------------------------------------


@dataclass
class Waiting:
    """The job until it runs: Slurm's messages, -I, and a signal cancelling the request."""

    client: Client
    job_id: int
    request: Request
    signum: int = 0

    def wait(self) -> dict[str, Any]:
        """The ``allocation`` reply of the running job (its environment)."""
        previous = {sig: signal.signal(sig, self._note)
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            return self._poll()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _note(self, signum: int, _frame: Any) -> None:
        self.signum = signum

    def _poll(self) -> dict[str, Any]:
        job_id, start, poll, pending = self.job_id, time.monotonic(), POLL_START, False
        while True:
            prog = self.request.prog
            if self.signum:
                self._give_up()
                say(f"Job allocation {job_id} has been revoked.", prog)
                raise CommandError(f"{prog}: Job aborted due to signal", prefixed=False)
            reply = self.client.call("allocation", {"job_id": job_id})
            state = reply["state"]
            if state == "RUNNING" and reply.get("environment"):
                self._granted(reply, pending)
                return reply
            if state in FINISHED:
                say(f"Job allocation {job_id} has been revoked.", prog)
                raise CommandError(exit_code=1)
            waited = time.monotonic() - start
            if self.request.immediate and waited >= self.request.immediate:
                self._give_up()
                fail("Unable to allocate resources: Requested nodes are busy")
            if not pending and waited >= PENDING_AFTER:
                pending = True
                if prog == PROG:
                    say(f"Pending job allocation {job_id}")
                if not self.request.quiet:
                    say(f"job {job_id} queued and waiting for resources", prog)
            time.sleep(poll)
            poll = min(poll * 2, POLL_MAX)

    def _granted(self, reply: dict[str, Any], pending: bool) -> None:
        """Slurm's lines for a granted allocation (srun says less than salloc)."""
        job_id, prog = self.job_id, self.request.prog
        if pending and not self.request.quiet:
            say(f"job {job_id} has been allocated resources", prog)
        if prog != PROG:
            return
        say(f"Granted job allocation {job_id}")
        if not self.request.no_shell:
            say(f"Nodes {reply['node_list']} are ready for job")

    def _give_up(self) -> None:
        try:
            self.client.call("relinquish", {"job_id": self.job_id})
        except ClientError:
            pass


# --- the command, with the allocation --------------------------------------------------------


@dataclass
class Session:
    """salloc's command running with the allocation, and the allocation's end."""

    client: Client
    job_id: int
    request: Request
    granted: dict[str, Any]
    revoked: bool = False
    hangup_at: float = 0.0

    def run(self) -> int:
        from cli.foreground import Foreground, exit_status

        env = {**os.environ, **self.granted["environment"]}
        with Foreground(self.request.command, env, PROG) as fg:
            fg.start()
            status = fg.wait(TICK, lambda: self._tick(fg))
        if self.revoked:
            return exit_status(status)
        say(f"Relinquishing job allocation {self.job_id}")
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        try:
            self.client.call("relinquish", {"job_id": self.job_id, "exit_code": code,
                                            "exit_signal": sig})
        except ClientError as exc:
            say(f"error: Unable to relinquish job allocation {self.job_id}: {exc.message}")
        return exit_status(status)

    def _tick(self, fg: Any) -> None:
        """While the command runs: has the allocation ended under it?"""
        if self.revoked:
            if time.monotonic() - self.hangup_at > HANGUP_GRACE:
                fg.signal(signal.SIGKILL)
            return
        try:
            state = self.client.call("allocation", {"job_id": self.job_id})["state"]
        except ClientError as exc:
            if exc.code != "invalid_job_id":
                return  # schedd restarting: look again at the next tick
            state = "CANCELLED"  # ended and already forgotten
        if state not in FINISHED:
            return
        self.revoked, self.hangup_at = True, time.monotonic()
        if state == "TIMEOUT":
            say(f"Job {self.job_id} has exceeded its time limit and its allocation has been "
                "revoked.")
        else:
            say(f"Job allocation {self.job_id} has been revoked.")
        fg.signal(signal.SIGHUP)


if __name__ == "__main__":
    sys.exit(main())
