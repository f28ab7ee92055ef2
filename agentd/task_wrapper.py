"""Slurm's TaskProlog and TaskEpilog around one srun task: run as the task itself (the user,
in the task's session, cgroup and environment) by ``python -I`` before the task's command.

    task_wrapper.py [--prolog PATH]... [--epilog PATH]... -- COMMAND [ARG]...

Each prolog runs in turn (the site's ``[agent] task_prolog`` first, then srun's
``--task-prolog``) with the task's environment; its standard output is read line by line as
slurmstepd reads it: ``export NAME=value`` sets NAME for the task (and the prologs after),
``unset NAME`` removes it, ``print TEXT`` writes TEXT to the task's standard output; other
lines are ignored. A prolog that cannot run or exits non-zero stops the task before its
command (``slurmstepd: error: TaskProlog failed ...`` on its stderr, exit status 1 or the
prolog's).

Without an epilog the wrapper then execs the command: the task is the command, same pid.
With one (srun's ``--task-epilog`` first, then the site's ``[agent] task_epilog``), it runs the
command as its child in the same process group (the agent's signals reach both; the wrapper
lets them pass), waits for it, runs the epilogs with the task's environment, and exits as
the command did (the same status, or killed by the same signal).

Standard library only, imports nothing of kiln: it runs as the user under ``-I``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

PASSED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
          signal.SIGUSR2, signal.SIGALRM)
EXEC_FAILED = 2  # slurmstepd's exit status for a command that cannot be exec'd


def parse(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    prologs: list[str] = []
    epilogs: list[str] = []
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] in ("--prolog", "--epilog") and i + 1 < len(argv):
            (prologs if argv[i] == "--prolog" else epilogs).append(argv[i + 1])
            i += 2
            continue
        raise SystemExit(f"task_wrapper: bad argument {argv[i]!r}")
    return prologs, epilogs, argv[i + 1:]


def apply_output(text: str, env: dict[str, str]) -> None:
    """A task prolog's stdout: export / unset / print, as slurmstepd reads it."""
    for line in text.splitlines():
        line = line.rstrip("\r")
        if line.startswith("export "):
            name, eq, value = line[len("export "):].strip().partition("=")
            if eq and name and "\0" not in value:
                env[name] = value
        elif line.startswith("unset "):
            env.pop(line[len("unset "):].strip(), None)
        elif line.startswith("print "):
            sys.stdout.write(line[len("print "):] + "\n")
    sys.stdout.flush()


def run_prolog(path: str, env: dict[str, str]) -> int:
    try:
        done = subprocess.run([path], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, check=False)
    except OSError as exc:
        sys.stderr.write(f"slurmstepd: error: TaskProlog failed: {path}: {exc.strerror}\n")
        return 1
    if done.returncode != 0:
        sys.stderr.write(f"slurmstepd: error: TaskProlog failed status={done.returncode}\n")
        return done.returncode if done.returncode > 0 else 1
    apply_output(done.stdout.decode(errors="replace"), env)
    return 0


def run_epilog(path: str, env: dict[str, str]) -> None:
    try:
        done = subprocess.run([path], env=env, stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        sys.stderr.write(f"slurmstepd: error: TaskEpilog failed: {path}: {exc.strerror}\n")
        return
    if done.returncode != 0:
        sys.stderr.write(f"slurmstepd: error: TaskEpilog failed status={done.returncode}\n")


def main(argv: list[str]) -> int:
    prologs, epilogs, command = parse(argv)
    if not command:
        sys.stderr.write("task_wrapper: no command\n")
        return EXEC_FAILED
    env = dict(os.environ)
    for path in prologs:
        status = run_prolog(path, env)
        if status:
            return status
    sys.stdout.flush()
    if not epilogs:
        try:
            os.execvpe(command[0], command, env)
        except OSError as exc:
            sys.stderr.write(f"slurmstepd: error: execve(): {command[0]}: {exc.strerror}\n")
            return EXEC_FAILED
    for sig in PASSED:  # a Python handler, not SIG_IGN: the command gets the defaults back
        signal.signal(sig, lambda *_: None)
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as exc:
        sys.stderr.write(f"slurmstepd: error: execve(): {command[0]}: {exc.strerror}\n")
        return EXEC_FAILED
    while True:
        try:
            status = child.wait()
            break
        except InterruptedError:
            continue
    for path in epilogs:
        run_epilog(path, env)
    if status < 0:  # killed by a signal: end the same way
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
