"""``scancel``: cancel or signal jobs by id (``123``, ``123_4``, ``123_[1-5]``) or by filter.

schedd does the matching and the permission checks; this side validates the spelling and
prints Slurm's per-job error lines (``Kill job error on job id 99: Invalid job id specified``).
"""

from __future__ import annotations

import re
import sys

from cli.core import Args, CommandError, command, fail, warn_ignored
from cli.core.client import Client, ClientError
from cli.core.options import (
    NO_ARG,
    Opt,
    OptionError,
    OptionTable,
    list_filters,
    parse_states,
    signal_name,
)

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

PROG = "scancel"

TABLE = OptionTable([
    Opt("account", "A"), Opt("batch", "b", NO_ARG), Opt("ctld", "", NO_ARG),
    Opt("full", "f", NO_ARG), Opt("hurry", "H", NO_ARG), Opt("interactive", "i", NO_ARG),
    Opt("cluster", "", dest="clusters"), Opt("clusters", "M"), Opt("name", "n"),
    Opt("jobname", "", dest="name"), Opt("partition", "p"), Opt("qos", "q"),
    Opt("quiet", "Q", NO_ARG), Opt("reservation", "R"), Opt("sibling", ""),
    Opt("signal", "s"), Opt("state", "t"), Opt("user", "u"), Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG), Opt("nodelist", "w"), Opt("wckey", ""), Opt("me", "", NO_ARG),
    Opt("help", "", NO_ARG), Opt("usage", "", NO_ARG), Opt("cron", "c", NO_ARG),
])
# Accepted options that mean nothing on kiln: one warning line each (not with -Q).
IGNORED = {"clusters": "kiln schedules one cluster", "sibling": "kiln has no federation",
           "cron": "kiln has no scrontab"}
# Filters schedd's cancel request has no field for: scancel selects those jobs itself (a
# query first), then cancels them by id, so a filter is never silently dropped.
LOCAL_FILTERS = ("reservation", "wckey", "interactive")

_JOB_ID = re.compile(r"^\d+(?:_(?:\d+|\[[\d,\-%]+\]))?(?:\.(?:\d+|batch|extern))?$")
# Errors that -Q silences: the job is gone already, which is what the caller wanted.
QUIET_CODES = ("invalid_job_id",)
QUIET_WORDS = ("Invalid job id", "already completing or completed", "already done")


def main(argv: Sequence[str] | None = None) -> int:
    return scancel.main(argv)


def split_ids(positional: list[str]) -> list[str]:
    """Ids may be blank- or comma-separated; '123.batch' cancels job 123 like Slurm's step
    spelling does here (kiln has no separate steps to cancel)."""
    ids: list[str] = []
    for arg in positional:
        for job_id in re.split(r",(?![^\[]*\])", arg):
            job_id = job_id.strip()
            if not job_id:
                continue
            if not _JOB_ID.match(job_id):
                fail(f"Invalid job id {job_id}")
            ids.append(job_id.split(".")[0])
    return ids


def build_request(values: dict[str, str | None], positional: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    ids = split_ids(positional)
    if ids:
        body["job_ids"] = ids
    try:
        body.update(list_filters(values, {"user": "users", "account": "accounts",
                                          "partition": "partitions", "qos": "qos",
                                          "name": "names"}))
    except OptionError as exc:
        fail(exc.message)
    if values.get("state"):
        try:
            states, _ = parse_states(values["state"])
        except OptionError as exc:
            fail(exc.message)
        body["states"] = states
    if values.get("signal"):
        name = signal_name(values["signal"])
        if name is None:
            fail(f"Invalid job signal: {values['signal']}")
        body["signal"] = name
    if "batch" in values:
        body["batch_only"] = True
    if "full" in values:
        body["full"] = True
    local = any(values.get(k) for k in ("reservation", "wckey"))
    if len(body) == sum(k in body for k in ("signal", "batch_only", "full")) and not local:
        fail("No job identification provided")
    return body


USAGE = """Usage: scancel [-A account] [--batch] [--full] [--interactive] [-n job_name]
               [-p partition] [-Q] [-q qos] [--reservation=reservation]
               [-s signal | integer] [-t PENDING | RUNNING | SUSPENDED]
               [--usage] [-u user_name] [--hurry] [-V] [-v] [-w hosts...]
               [--wckey=wckey] [job_id[_array_id][.step_id]]
"""


@command(PROG, TABLE, help=USAGE)
def scancel(args: Args) -> int:
    values, positional = args.given, args.positional
    if "quiet" not in values:
        warn_ignored(PROG, values, IGNORED)
    body = build_request(values, positional)
    try:
        with Client() as client:
            if any(key in values for key in LOCAL_FILTERS):
                body = select_locally(client, body, values)
                if not body.get("job_ids"):
                    return 0
            reply = client.call("cancel", body)
    except ClientError as exc:
        if "quiet" in values and exc.code in QUIET_CODES:
            return 0
        ids = ",".join(body.get("job_ids", []))
        raise CommandError(_kill_error(ids, exc.message) if ids else exc.message) from None
    return report_errors(reply.get("errors", []), quiet="quiet" in values)


def select_locally(client: Client, body: dict[str, Any],
                   values: dict[str, str | None]) -> dict[str, Any]:
    """-R/--reservation, --wckey and -i/--interactive: the jobs the other filters select, kept
    when they match (and, with -i, when the user confirms each), as an id list."""
    query = {k: v for k, v in body.items() if k not in ("signal", "batch_only", "full")}
    jobs = client.call("query_jobs", query).get("jobs", [])
    reservation, wckey = values.get("reservation"), values.get("wckey")
    chosen = []
    for job in jobs:
        if job.get("state") not in ("PENDING", "RUNNING", "SUSPENDED", "REQUEUED"):
            continue
        if reservation and job.get("reservation") != reservation:
            continue
        if wckey and job.get("wckey") != wckey:
            continue
        if "interactive" in values and not confirm(job):
            continue
        chosen.append(_display(job))
    rest = {k: v for k, v in body.items() if k in ("signal", "batch_only", "full")}
    return {**rest, "job_ids": chosen} if chosen else {}


def _display(job: dict[str, Any]) -> str:
    if job.get("array_job_id") is not None and job.get("array_task_id") is not None:
        return f"{job['array_job_id']}_{job['array_task_id']}"
    return str(job["id"])


def confirm(job: dict[str, Any]) -> bool:
    """Slurm's -i question; anything but y/yes keeps the job."""
    prompt = (f"Cancel job_id={_display(job)} name={job.get('name', '')} "
              f"partition={job.get('partition', '')} [y/n]? ")
    print(prompt, end="", flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _kill_error(job_id: str, message: str) -> str:
    return f"Kill job error on job id {job_id}: {message}"


def report_errors(errors: list[dict[str, Any]], quiet: bool) -> int:
    """Print one line per refused job; with -Q, jobs that are already gone do not count."""
    rc = 0
    for err in errors:
        message = str(err.get("message", ""))
        if quiet and any(w in message for w in QUIET_WORDS):
            continue
        print(f"{PROG}: error: {_kill_error(str(err.get('job_id', '')), message)}",
              file=sys.stderr)
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
