"""Standard Workload Format (SWF) traces, as the Parallel Workloads Archive publishes them.

A trace is header comments (``; MaxProcs: 128``) and one line of 18 numbers per job, -1 meaning
unknown. The reader keeps only what a replay needs and applies the archive's usual filter, so the
figures are comparable with textbook pool simulators:

- procs = field 8 (requested processors) if > 0, else field 5 (allocated processors);
- the machine size is ``MaxProcs`` from the header, else ``MaxNodes``, else the largest job;
- jobs with run time <= 0, procs <= 0, procs > machine size, or submit time < 0 are dropped;
- estimate = field 9 (requested time) if > 0, else the run time ("perfect estimate");
- a job that ran longer than its estimate was killed at it: its run time becomes the estimate.

Gzipped files are recognised by their magic bytes, whatever their name.
"""

from __future__ import annotations

import gzip
import io
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"
MIN_FIELDS = 9  # up to "requested time"; user (12) and group (13) are optional


class SwfError(Exception):
    """A trace that cannot be read; the message names the file and, where it can, the line."""


@dataclass(slots=True)
class TraceJob:
    """One job of a trace, after the filter: what the scheduler sees plus the truth."""

    job_id: int
    submit: float  # seconds since the log start
    run: float  # actual run time, already cut at the estimate
    procs: int
    estimate: float  # the user's time limit: what the scheduler plans with
    user: int = -1
    group: int = -1


@dataclass(slots=True)
class Trace:
    name: str
    max_procs: int
    jobs: list[TraceJob]  # ordered by submit time, then job number
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> count
    max_procs_source: str = "MaxProcs"  # which header line gave the machine size

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())


def read_swf(path: str | Path) -> Trace:
    """Read a ``.swf`` or gzipped ``.swf.gz`` file; raise SwfError with a one-line message."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SwfError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SwfError(f"{path}: is a directory, not a trace") from None
    except PermissionError:
        raise SwfError(f"{path}: permission denied") from None
    except OSError as exc:
        raise SwfError(f"{path}: {exc.strerror or exc}") from None
    if raw.startswith(GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise SwfError(f"{path}: broken gzip data ({exc})") from None
    if b"\0" in raw:
        raise SwfError(f"{path}: binary data, not an SWF trace")
    text = raw.decode("utf-8", errors="replace")  # a stray byte surfaces as a bad field
    return parse_swf(io.StringIO(text), name=str(path))


def parse_swf(lines: Iterable[str], name: str = "trace") -> Trace:
    """Parse SWF text (an iterable of lines) into a filtered, submit-ordered Trace."""
    header: dict[str, str] = {}
    rows: list[tuple[int, list[float]]] = []
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        if line.startswith(";"):
            key, sep, value = line[1:].partition(":")
            if sep:
                header.setdefault(key.strip().lower(), value.strip())
            continue
        rows.append((number, _fields(line, number, name)))
    max_procs, source = _machine_size(header, rows, name)
    trace = Trace(name=name, max_procs=max_procs, jobs=[], max_procs_source=source)
    seen: set[int] = set()
    for number, f in rows:
        job_id = int(f[0])
        if job_id in seen:
            raise SwfError(f"{name}: line {number}: job number {job_id} appears twice")
        seen.add(job_id)
        job, reason = _job(f, max_procs)
        if job is None:
            trace.dropped[reason] += 1
        else:
            trace.jobs.append(job)
    if not trace.jobs:
        raise SwfError(f"{name}: no usable jobs ({trace.total_dropped} dropped by the filter)")
    trace.jobs.sort(key=lambda j: (j.submit, j.job_id))
    return trace


def _fields(line: str, number: int, name: str) -> list[float]:
    tokens = line.split()
    if len(tokens) < MIN_FIELDS:
        raise SwfError(
            f"{name}: line {number}: {len(tokens)} fields, an SWF job line has 18"
        )
    try:
        return [_number(tok) for tok in tokens[:18]]
    except ValueError:
        bad = next(tok for tok in tokens if not _is_number(tok))
        raise SwfError(f"{name}: line {number}: {bad!r} is not a number") from None


def _number(token: str) -> float:
    try:
        return int(token)
    except ValueError:
        return float(token)


def _is_number(token: str) -> bool:
    try:
        _number(token)
    except ValueError:
        return False
    return True


def _machine_size(
    header: dict[str, str], rows: list[tuple[int, list[float]]], name: str
) -> tuple[int, str]:
    for key, label in (("maxprocs", "MaxProcs"), ("maxnodes", "MaxNodes")):
        if key in header:
            try:
                value = int(header[key].split()[0])
            except (ValueError, IndexError):
                raise SwfError(f"{name}: header {label}: {header[key]!r} is not a number") from None
            if value > 0:
                return value, label
    largest = max((_procs(f) for _, f in rows), default=0)
    if largest <= 0:
        raise SwfError(f"{name}: no MaxProcs/MaxNodes header and no job with a processor count")
    return largest, "largest job"


def _procs(f: list[float]) -> int:
    requested, allocated = int(f[7]), int(f[4])
    return requested if requested > 0 else allocated


def _job(f: list[float], max_procs: int) -> tuple[TraceJob | None, str]:
    submit, run, procs = f[1], f[3], _procs(f)
    if run <= 0:
        return None, "run time <= 0"
    if procs <= 0:
        return None, "no processor count"
    if procs > max_procs:
        return None, "more processors than the machine"
    if submit < 0:
        return None, "submit time < 0"
    estimate = f[8] if f[8] > 0 else run
    return TraceJob(
        job_id=int(f[0]),
        submit=submit,
        run=min(run, estimate),
        procs=procs,
        estimate=estimate,
        user=int(f[11]) if len(f) > 11 else -1,
        group=int(f[12]) if len(f) > 12 else -1,
    ), ""
