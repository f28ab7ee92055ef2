"""The batch script of an ``srun`` outside an allocation: hold the allocation for srun's step.

srun outside an allocation submits a job whose script is ``python -m cli.srun_hold``, waits for
it to run and starts step 0 in it from its own node (the tasks' output comes to srun over the
wire, see ``cli/srun.py``). This script, on the job's batch host, waits for that step to end and
exits with its status, so the job ends with its step and ``sacct`` shows the tasks' exit code.
It asks schedd with ``step_wait``'s ``peek`` (the step's end, never its output: that is srun's).

Two ways it stops without srun: the step never starts (srun died before starting it: after
START_WAIT) or the step's tasks ended and srun never collected it (srun was killed: after
UNCOLLECTED_WAIT); either way the job ends and its nodes are free.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from cli.core import run_command
from cli.core.client import Client, ClientError

PROG = "srun"
STEP_ID = 0  # srun's step is the job's first
POLL_START, POLL_MAX = 0.05, 0.25  # seconds between polls (backs off; srun waits for it)
START_WAIT = 300.0  # seconds the step may take to appear
UNCOLLECTED_WAIT = 60.0  # seconds an ended step may wait for its srun


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(PROG, hold, argv)


def hold(_argv: Sequence[str]) -> int:
    text = os.environ.get("SLURM_JOB_ID", "")
    if not text.isdigit():
        print(f"{PROG}: error: not inside a job (no SLURM_JOB_ID)", file=sys.stderr)
        return 1
    job_id, started = int(text), time.monotonic()
    ended_at = 0.0
    poll = POLL_START
    with Client() as client:
        while True:
            try:
                reply = client.call("step_wait", {"job_id": job_id, "step_id": STEP_ID,
                                                  "peek": True})
            except ClientError as exc:
                if exc.code != "invalid_job_id":  # anything but "no such step yet"
                    raise
                if time.monotonic() - started > START_WAIT:
                    print(f"{PROG}: error: the srun of job {job_id} never started its step",
                          file=sys.stderr)
                    return 1
                reply = {"done": False}
            if reply.get("done"):
                return status(reply)
            if reply.get("ended"):
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at > UNCOLLECTED_WAIT:
                    return status(reply)
            poll = min(poll * 2, POLL_MAX)
            time.sleep(poll)


def status(reply: dict[str, Any]) -> int:
    """The step's status as a shell's: 128+N for a signal, else its exit code (1 if it did not
    complete but says 0)."""
    sig = int(reply.get("exit_signal") or 0)
    code = 128 + sig if sig else int(reply.get("exit_code") or 0)
    return code or (0 if reply.get("state") == "COMPLETED" else 1)


if __name__ == "__main__":
    sys.exit(main())
