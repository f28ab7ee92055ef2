"""``sattach JOBID.STEP``: attach to a running step's I/O.

sattach taps the step's forwarded output in schedd (``step_attach``): every byte its tasks
write from the moment it attaches, stdout to stdout and stderr to stderr, ``-l/--label``
putting ``RANK: `` in front of each line, ``--output-filter``/``--error-filter`` keeping one
task's. It does not take the output from srun (srun gets all of it too), and it never slows the
step: a reader too slow for its tap (1 MiB) loses the oldest bytes, and says so. For a step
started with ``srun --pty``, what is typed on sattach's stdin goes to the task's terminal
(``--input-filter`` may only name task 0, the one with the terminal). sattach ends when the
step does; Ctrl-C detaches (the step runs on).

Only the step's owner (and operators) may attach: schedd knows who asks from the socket.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import select
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from cli.core import Args, command, fail
from cli.core.client import Client, ClientError
from cli.core.options import NO_ARG, REQUIRED, Opt, OptionTable
from cli.srun import Lines

PROG = "sattach"
POLL_START, POLL_MAX = 0.02, 0.25  # seconds between polls (backs off while nothing comes)
USAGE = """Usage: sattach [options] <jobid.stepid>
  -h, --help                  show this help message
      --input-filter=taskid   send stdin to only the specified task
      --output-filter=taskid  only print stdout from the specified task
      --error-filter=taskid   only print stderr from the specified task
  -l, --label                 prepend task number to lines of stdout & stderr
  -Q, --quiet                 quiet mode (suppress informational messages)
  -u, --usage                 display brief usage message
  -V, --version               print version information and exit
"""
SATTACH_TABLE = OptionTable([
    Opt("help", "h", NO_ARG), Opt("usage", "u", NO_ARG), Opt("version", "V", NO_ARG),
    Opt("input-filter", "", REQUIRED), Opt("output-filter", "", REQUIRED),
    Opt("error-filter", "", REQUIRED), Opt("label", "l", NO_ARG), Opt("quiet", "Q", NO_ARG),
    Opt("verbose", "v", NO_ARG), Opt("layout", "", NO_ARG), Opt("pty", "", NO_ARG),
])
_STEP = re.compile(r"^(\d+)\.(\d+)$")


def main(argv: Sequence[str] | None = None) -> int:
    return attach.main(argv)


@command(PROG, SATTACH_TABLE, help=USAGE)
def attach(args: Args) -> int:
    given, positional = args.given, args.positional
    if "layout" in given or "pty" in given:
        fail(f"--{'layout' if 'layout' in given else 'pty'} is not supported by kiln's "
             "sattach")
    if len(positional) != 1 or not _STEP.match(positional[0]):
        fail("you must specify a job step as JOBID.STEPID", "Try \"sattach --help\"")
    match = _STEP.match(positional[0])
    assert match is not None
    job_id, step_id = int(match.group(1)), int(match.group(2))
    filters = {name: _task(given.get(f"{name}-filter")) for name in ("input", "output",
                                                                     "error")}
    return Attached(job_id, step_id, filters, "label" in given).run()


def _task(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit():
        fail(f"Invalid task id: {value}")
    return int(value)


class Attached:
    """One attachment: the tap's output to stdout/stderr, stdin to a terminal step."""

    def __init__(self, job_id: int, step_id: int, filters: dict[str, int | None],
                 label: bool):
        self.job_id, self.step_id = job_id, step_id
        self.filters, self.label = filters, label
        self.streams: dict[tuple[int, str], Lines] = {}
        self.stdin_open = filters["input"] in (None, 0)
        self.interrupted = False

    def run(self) -> int:
        previous = signal.signal(signal.SIGINT, self._detach)
        try:
            with Client() as client:
                return self._loop(client)
        finally:
            signal.signal(signal.SIGINT, previous)
            for lines in self.streams.values():
                lines.write(b"", final=True)

    def _detach(self, *_: Any) -> None:
        self.interrupted = True

    def _loop(self, client: Client) -> int:
        tap, poll, warned = 0, POLL_START, 0
        step = f"{self.job_id}.{self.step_id}"
        while not self.interrupted:
            try:
                reply = client.call("step_attach", {"job_id": self.job_id,
                                                    "step_id": self.step_id, "tap": tap})
            except ClientError as exc:
                if tap:  # schedd went away under us: the step's fate is no longer known here
                    print(f"{PROG}: error: lost step {step}: {exc.message}", file=sys.stderr)
                    return 1
                fail(f"Unable to attach to step {step}: {exc.message}")
            tap = int(reply["tap"])
            moved = self._write(reply.get("output") or [])
            if reply.get("dropped", 0) > warned:
                warned = reply["dropped"]
                print(f"{PROG}: warning: too slow: {warned} bytes of output lost",
                      file=sys.stderr, flush=True)
            if reply.get("done"):
                return 0
            if reply.get("terminal") and self.stdin_open:
                moved = self._input(client, poll) or moved
            elif not moved:
                time.sleep(poll)
            poll = POLL_START if moved else min(poll * 2, POLL_MAX)
        return 0

    def _write(self, chunks: list[Any]) -> bool:
        moved = False
        for procid, name, text in chunks:
            wanted = self.filters["output" if name == "out" else "error"]
            if wanted is not None and procid != wanted:
                continue
            try:
                data = base64.b64decode(text)
            except (binascii.Error, ValueError):
                continue
            lines = self.streams.get((procid, name))
            if lines is None:
                sink = sys.stdout.buffer if name == "out" else sys.stderr.buffer
                prefix = f"{procid}: ".encode() if self.label else b""
                lines = self.streams[(procid, name)] = Lines(sink, prefix)
            moved = lines.write(data) or moved
        return moved

    def _input(self, client: Client, wait: float) -> bool:
        """What was typed, to the step's terminal (task 0)."""
        ready, _, _ = select.select([0], [], [], wait)
        if not ready:
            return False
        data = os.read(0, 16 * 1024)
        if not data:
            self.stdin_open = False
            return False
        client.call("step_input", {"job_id": self.job_id, "step_id": self.step_id,
                                   "data": base64.b64encode(data).decode()})
        return True


if __name__ == "__main__":
    sys.exit(main())
