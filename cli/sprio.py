"""``sprio``: the priority factors of pending jobs, as Slurm 22.05's sprio prints them.

schedd computes every factor with the scheduler's own sum (``job_priority``: each factor is
the sum with every other weight set to zero, ``schedd.reports.explain``), so what sprio shows
adds up to the priority squeue shows. Held jobs have no factors and are not listed.

Formats are Slurm's: ``%.15i %9r %.10Y %.10S`` and then a column per factor whose weight is not
zero (``-l``: every factor, the user and nice); ``-n`` normalised factors (the weighted one over
its weight, ``%.7f``), ``-w`` the weights, ``-o`` a format of sprio's letters. A letter sprio
does not know is Slurm's error on stderr, and the rest is printed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from cli.core import Args, command, fail, write_lines
from cli.core.client import Client
from cli.core.formats import Column, pad, parse_percent_format
from cli.core.options import NO_ARG, Opt, OptionTable

PROG = "sprio"
UINT32_MAX = 0xFFFFFFFF

TABLE = OptionTable([
    Opt("noheader", "h", NO_ARG), Opt("help", "", NO_ARG), Opt("usage", "", NO_ARG),
    Opt("jobs", "j"), Opt("long", "l", NO_ARG), Opt("clusters", "M"),
    Opt("norm", "n", NO_ARG), Opt("format", "o"), Opt("partition", "p"),
    Opt("sort", "S"), Opt("user", "u"), Opt("verbose", "v", NO_ARG),
    Opt("version", "V", NO_ARG), Opt("weights", "w", NO_ARG),
])
USAGE = ("Usage: sprio [-j jid[s]] [-u user_name[s]] [-o format] [-p partitions]\n"
         "   [--federation] [--local] [--sibling] [--usage] [-hlnvVw]")
HELP = """Usage: sprio [OPTIONS]
  -h, --noheader                  no headers on output
  -j, --jobs                      comma separated list of jobs
                                  to view, default is all
  -l, --long                      long report
  -M, --cluster=cluster_name      cluster to issue commands to.  Default is
                                  current cluster.  cluster with no name will
                                  reset to default.
  -n, --norm                      display normalized values
  -o, --format=format             format specification
  -p, --partition=partition_name  comma separated list of partitions
  -u, --user=user_name            comma separated list of users to view
  -v, --verbose                   verbosity level
  -V, --version                   output version information and exit
  -w, --weights                   show the weights for each priority factor

Help options:
  --help                          show this help message
  --usage                         display a brief summary of sprio options"""

# factors: (weighted key from schedd, weight key, header)
_FACTORS = {"a": ("age", "AGE"), "b": ("assoc", "ASSOC"), "f": ("fairshare", "FAIRSHARE"),
            "j": ("job_size", "JOBSIZE"), "p": ("partition", "PARTITION"), "q": ("qos", "QOS")}

Job = dict[str, Any]
Get = Callable[[Job | None, dict[str, Any]], str]  # None: the weights row


def _admin(job: Job) -> float | None:
    return job["factors"].get("admin")


def priority(job: Job) -> float:
    """Slurm's get_priority_from_factors: the factors' sum minus nice, at least 1; or the
    administrator's fixed priority."""
    admin = _admin(job)
    if admin is not None:
        return admin
    total = sum(v for k, v in job["factors"].items() if k not in ("admin", "nice"))
    return max(total - job.get("nice", 0), 1.0)


def _int(value: float) -> str:
    return f"{value:.0f}"


def _weighted(factor: str) -> Get:
    def get(job: Job | None, weights: dict[str, Any]) -> str:
        if job is None:
            return _int(weights.get(factor, 0))
        if _admin(job) is not None:
            return "0"
        return _int(job["factors"].get(factor, 0.0))
    return get


def _normalised(factor: str) -> Get:
    def get(job: Job | None, weights: dict[str, Any]) -> str:
        if job is None:
            return _int(weights.get(factor, 0))
        if _admin(job) is not None:
            return "0"
        weight = weights.get(factor, 0)
        return f"{job['factors'].get(factor, 0.0) / weight if weight else 0.0:.7f}"
    return get


def _text(key: str) -> Get:
    return lambda job, w: "" if job is None else str(job.get(key, ""))


FIELDS: dict[str, tuple[str, Get]] = {
    "i": ("JOBID", lambda job, w: "Weights" if job is None else str(job["job_id"])),
    "r": ("PARTITION", _text("partition")),
    "u": ("USER", _text("user")),
    "Y": ("PRIORITY", lambda job, w: "" if job is None else str(int(priority(job)))),
    "y": ("PRIORITY", lambda job, w: "" if job is None else
          f"{priority(job) / (1 if _admin(job) is not None else UINT32_MAX):16.14f}"),
    "S": ("SITE", lambda job, w: "1" if job is None else "0"),
    "N": ("NICE", lambda job, w: "" if job is None else
          ("0" if _admin(job) is not None else str(job.get("nice", 0)))),
    "T": ("TRES", lambda job, w: ""),  # kiln has no PriorityWeightTRES
    "t": ("TRES", lambda job, w: ""),
    **{letter.upper(): (header, _weighted(key)) for letter, (key, header) in _FACTORS.items()},
    **{letter: (header, _normalised(key)) for letter, (key, header) in _FACTORS.items()},
}
_LETTERS = {letter: letter for letter in FIELDS}


def default_format(weights: dict[str, Any], normalised: bool, long: bool, users: bool) -> str:
    """sprio's own format: the factors that weigh, or (``-l``) all of them."""
    if long:
        return ("%.15i %9r %.8u %10y %10a %10b %10f %10j %10p %10q %20t" if normalised else
                "%.15i %9r %.8u %.10Y %.10S %.10A %.10B %.10F %.10J %.10P %.10Q %.11N %.20T")
    parts = ["%.15i", "%9r"] + (["%.8u"] if users else [])
    parts.append("%10y" if normalised else "%.10Y %.10S")
    for letter, (key, _) in _FACTORS.items():
        if weights.get(key):
            parts.append(f"%10{letter}" if normalised else f"%.10{letter.upper()}")
    return " ".join(parts)


def render_line(prefix: str, columns: list[Column], job: Job | None, weights: dict[str, Any],
                header: bool = False) -> str:
    out = [prefix]
    for c in columns:
        name, get = FIELDS[c.key]
        out.append(pad(name if header else get(job, weights), c.width, c.right) + c.suffix)
    return "".join(out)


def _names(values: list[str | None]) -> list[str]:
    return [n for v in values for n in (v or "").split(",") if n]


def _refused(args: Args) -> None:
    args.refuse_positional("Unknown arguments: {words}")
    if "sort" in args.given:
        fail("--sort is not supported by kiln: jobs are listed by id")


@command(PROG, TABLE, help=HELP + "\n", usage=USAGE + "\n", check=_refused)
def sprio(args: Args) -> int:
    values = args.every()
    job_ids = _names(values.get("jobs", []))
    for job_id in job_ids:
        if not job_id.isdigit():
            fail(f"Invalid job id: {job_id}")
    users = _names(values.get("user", []))
    body: dict[str, Any] = {"job_ids": job_ids} if job_ids else {}
    if users:
        body["users"] = users
    with Client() as client:
        reply = client.call("job_priority", body)
    weights, jobs = reply.get("weights") or {}, reply.get("jobs") or []
    partitions = set(_names(values.get("partition", [])))
    if partitions:
        jobs = [j for j in jobs if j.get("partition") in partitions]
    fmt = (values["format"][-1] or "") if "format" in values else default_format(
        weights, "norm" in values, "long" in values, bool(users))
    prefix, columns, unknown = parse_percent_format(fmt, _LETTERS)
    for letter in unknown:
        print(f"{PROG}: error: Invalid job format specification: {letter}", file=sys.stderr)
    if job_ids and not jobs:
        print("Unable to find jobs matching user/id(s) specified")
        return 0
    lines = [] if "noheader" in values else [render_line(prefix, columns, None, weights, True)]
    if "weights" in values:
        lines.append(render_line(prefix, columns, None, weights))
    else:
        lines.extend(render_line(prefix, columns, job, weights) for job in jobs)
    write_lines(lines)
    return 0


main = sprio.main


if __name__ == "__main__":
    sys.exit(main())
