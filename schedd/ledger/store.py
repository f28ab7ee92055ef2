"""The Store: every read and write schedd makes to its ledger, each call one transaction.

schedd commits a change here *before* it acknowledges it, so these calls sit on the latency path
of every ``sbatch``. Writes therefore go through SQLAlchemy Core executemany (one INSERT or one
UPDATE statement per batch, not one ORM flush per object), and each public method is atomic: it
either commits everything it was given or raises :class:`LedgerError` having written nothing.

SQLite (the default) runs in WAL mode with ``synchronous=NORMAL``: a commit survives ``kill -9``
of schedd the next instant (it is in the WAL), though not a power cut in the last moments;
PostgreSQL is the choice where that matters. pysqlite's own transaction handling is switched off
and ``BEGIN`` is emitted by us, so SQLite DDL (migrations) is transactional too.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from operator import attrgetter
from typing import Any

from sqlalchemy import (
    JSON,
    Connection,
    Dialect,
    Table,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from kiln.model import (
    ACTIVE_STATES,
    FINISHED_STATES,
    GPU,
    JOB_FIELDS,
    Job,
    JobState,
    Node,
    NodeAllocation,
    NodeState,
    Partition,
    PreemptMark,
    StopMark,
    shards_wire,
)
from kiln.slurm.cpulist import format_cpu_list, parse_cpu_list
from schedd.ledger import tables as t
from schedd.ledger.engine import make_engine, one_line, show_url
from schedd.ledger.migrate import current_heads, judge_revision
from schedd.ledger.records import (
    AccountingChange,
    AccountRecord,
    AssociationRecord,
    AuditRecord,
    JobEvent,
    LedgerError,
    SchemaError,
    StepRecord,
    UserRecord,
)

log = logging.getLogger("schedd.ledger")

MAX_JOB_ID = 2**31 - 1  # jobs.id is an INTEGER column (PostgreSQL's int4)

META_MAX_JOB_ID = "max_job_id"  # high-water mark kept when finished jobs are purged

# Built once: SQLAlchemy keys its compiled-statement cache by the statement, and a statement
# built per call pays for that key again in every submission (~5% of an insert's CPU)
INSERT_JOBS = insert(t.jobs)
INSERT_EVENTS = insert(t.job_events)

# New jobs and events go in as plain tuples (``_insert_many``): a 1,000-task array's rows as
# dicts through the compiled INSERT cost 33 ms on schedd's loop, of which SQLite's own
# executemany was 8 (docs/benchmarks.md, "Every attack at once")
_JOB_TUPLE = attrgetter(*JOB_FIELDS)
_JOB_CONVERTED = tuple((JOB_FIELDS.index(name), name)
                       for name in ("state", "allocation", "stop", "preempt"))
EVENT_FIELDS = ("job_id", "time", "state", "reason", "actor_uid", "detail")
_EVENT_TUPLE = attrgetter(*EVENT_FIELDS)
_MARKERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}  # positional, by paramstyle
_MISSING = object()


# -- rows <-> domain objects --------------------------------------------------------------------

UPDATABLE_JOB_FIELDS = frozenset(JOB_FIELDS) - {"id"}
ACTIVE_STATE_NAMES = sorted(s.value for s in ACTIVE_STATES)
FINISHED_STATE_NAMES = sorted(s.value for s in FINISHED_STATES)


def _allocation_to_json(allocation: Iterable[NodeAllocation | Mapping[str, Any]]) -> list[Any]:
    # by hand: dataclasses.asdict deep-copies recursively and costs more than the INSERT itself
    return [
        {"node": a.node, "cpus": a.cpus, "memory_mb": a.memory_mb, "gpus": list(a.gpus),
         "cpu_ids": list(a.cpu_ids),
         **({"shards": shards_wire(a.shards), "shards_per_gpu": a.shards_per_gpu,
             **({"share_kind": a.share_kind} if a.share_kind != "shard" else {})}
            if a.shards else {})}
        if isinstance(a, NodeAllocation)
        else dict(a)
        for a in allocation
    ]


def _job_value(name: str, value: Any) -> Any:
    """A Job field's value as its column stores it."""
    if name == "state":
        return _state_name(value)
    if name == "allocation":
        return _allocation_to_json(value)
    if name in ("stop", "preempt"):
        return value.to_wire() if value is not None else None
    return value


def _state_name(state: JobState | str) -> str:
    try:
        return JobState(state).value
    except ValueError:
        raise LedgerError(f"ledger: {state!r} is not a job state") from None


def job_to_row(job: Job) -> dict[str, Any]:
    row = {name: getattr(job, name) for name in JOB_FIELDS}
    for name in ("state", "allocation", "stop", "preempt"):
        row[name] = _job_value(name, row[name])
    return row


def job_to_tuple(job: Job) -> list[Any]:
    """``job_to_row``'s values in ``JOB_FIELDS`` order (one C call for the 85 fields)."""
    row = list(_JOB_TUPLE(job))
    for i, name in _JOB_CONVERTED:
        row[i] = _job_value(name, row[i])
    return row


_INSERTS: dict[tuple[str, str, tuple[str, ...]], tuple[str, list[tuple[int, Any, bool]]]] = {}
_EMPTY = (list, dict)


def _insert_many(conn: Connection, table: Table, keys: tuple[str, ...],
                 rows: list[Any]) -> None:
    """``INSERT`` of many rows given as plain tuples in ``keys``' order: SQLAlchemy's
    executemany of dicts, less its per-row work (building each row's parameters from the
    compiled statement); ``_bind_rows``, then ``_execute_bound``."""
    if rows:
        _execute_bound(conn, table, *_bind_rows(conn.dialect, table, keys, rows))


def _bind_rows(dialect: Dialect, table: Table, keys: tuple[str, ...],
               rows: list[Any]) -> tuple[str | None, list[Any]]:
    """The statement and the driver's parameters of ``rows`` (plain tuples in ``keys``'
    order), no database touched. Each column's bind processor (JSON, and Boolean and Float on
    SQLite) is applied as SQLAlchemy applies it, a column at a time; a JSON column's once per
    distinct object in it (an array's tasks share their environment, stats, ...) or empty
    list or dict of its (each task's own ``[]``). A paramstyle other than positional ones:
    no statement (None), the rows as dicts, for SQLAlchemy's own executemany."""
    marker = _MARKERS.get(dialect.paramstyle)
    if marker is None:
        return None, [dict(zip(keys, row, strict=True)) for row in rows]
    sql, procs = _insert_statement(dialect, table, keys, marker)
    if procs and rows:
        columns: list[Any] = list(zip(*rows, strict=True))
        for i, proc, shared in procs:
            if not shared:
                columns[i] = list(map(proc, columns[i]))
                continue
            memo: dict[int, Any] = {}
            out = []
            for value in columns[i]:  # every value is held by columns: no id is reused
                key = id(type(value)) if not value and type(value) in _EMPTY else id(value)
                done = memo.get(key, _MISSING)
                if done is _MISSING:
                    done = memo[key] = proc(value)
                out.append(done)
            columns[i] = out
        rows = list(zip(*columns, strict=True))
    return sql, rows


def _execute_bound(conn: Connection, table: Table, sql: str | None, rows: list[Any]) -> None:
    if not rows:
        return
    if sql is None:
        conn.execute(insert(table), rows)
    else:
        conn.exec_driver_sql(sql, rows)


@dataclasses.dataclass(slots=True)
class PreparedInsert:
    """New jobs and their events as the driver takes them (``Store.prepare_insert``): what a
    big array's submission makes a slice at a time before its one transaction."""

    job_sql: str | None
    job_rows: list[Any]
    event_sql: str | None
    event_rows: list[Any]


def _insert_statement(dialect: Dialect, table: Table, keys: tuple[str, ...],
                      marker: str) -> tuple[str, list[tuple[int, Any, bool]]]:
    key = (dialect.name, table.name, keys)
    made = _INSERTS.get(key)
    if made is None:
        quote = dialect.identifier_preparer
        sql = (f"INSERT INTO {quote.format_table(table)} "
               f"({', '.join(quote.quote(k) for k in keys)}) "
               f"VALUES ({', '.join([marker] * len(keys))})")
        procs = []
        for i, name in enumerate(keys):
            column_type = table.c[name].type
            proc = column_type._cached_bind_processor(dialect)
            if proc is not None:
                procs.append((i, proc, isinstance(column_type, JSON)))
        made = _INSERTS[key] = (sql, procs)
    return made


def row_to_job(row: Mapping[str, Any]) -> Job:
    """A ledger row as a Job, every field checked against its type; ValueError names the
    fields that are not what schedd wrote (a row edited by hand, or written by a bug)."""
    kw: dict[str, Any] = {}
    bad: list[str] = []
    for name in JOB_FIELDS:
        try:
            kw[name] = _load_field(name, row.get(name, _DEFAULTS[name]))
        except (KeyError, TypeError, ValueError):
            bad.append(name)
    if bad:
        raise ValueError(", ".join(bad))
    return Job(**kw)


def set_aside_job(row: Mapping[str, Any], bad: str) -> Job:
    """A job whose row cannot be read whole: what can be read, the rest at its default, and
    held for an administrator with the reason (``scontrol show job``, ``kiln why``), so one bad
    row never stops schedd from starting or scheduling (SPEC §6: no input crashes a daemon)."""
    kw: dict[str, Any] = {}
    for name in JOB_FIELDS:
        try:
            kw[name] = _load_field(name, row.get(name, _DEFAULTS[name]))
        except (KeyError, TypeError, ValueError):
            kw[name] = _default(name)
    job = Job(**kw)
    job.set_aside = f"unreadable ledger field(s): {bad}"
    if job.state == JobState.PENDING:
        job.held, job.reason = "admin", "JobHeldAdmin"
    return job


def _default(name: str) -> Any:
    f = _JOB_DATACLASS_FIELDS[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


_JOB_DATACLASS_FIELDS = {f.name: f for f in dataclasses.fields(Job)}
_DEFAULTS = {name: (None if f.default is dataclasses.MISSING and f.default_factory is
                    dataclasses.MISSING else _default(name))
             for name, f in _JOB_DATACLASS_FIELDS.items()}
_NULLABLE_INT = frozenset({"time_limit", "time_min", "array_job_id", "array_task_id",
                           "cancelled_by", "admin_priority", "launched_limit", "restart_cost",
                           "switch_wait"})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _load_field(name: str, value: Any) -> Any:
    """One column's value as the Job field holds it; raises for a value of the wrong type."""
    if name == "state":
        return JobState(value)
    if name == "allocation":
        return [NodeAllocation(node=str(a["node"]), cpus=_checked_int(a["cpus"]),
                               memory_mb=_checked_int(a["memory_mb"]),
                               gpus=[_checked_int(g) for g in a.get("gpus") or []],
                               cpu_ids=[_checked_int(c) for c in a.get("cpu_ids") or []],
                               shards={_checked_int(g): _checked_int(n)
                                       for g, n in a.get("shards") or []},
                               shards_per_gpu=_checked_int(a.get("shards_per_gpu") or 0),
                               share_kind="mps" if a.get("share_kind") == "mps" else "shard")
                for a in value or []]
    if name == "environment":
        env = value or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in env.items()):
            raise ValueError(name)
        return env
    if name == "script_args":
        args = value or []
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(name)
        return args
    if name == "stats":
        stats = value or {}
        if not isinstance(stats, dict) or not all(_is_num(v) for v in stats.values()):
            raise ValueError(name)
        return {str(k): float(v) for k, v in stats.items()}
    if name in ("forecast_first", "forecast_last"):
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != 2 or not all(map(_is_num, value)):
            raise ValueError(name)
        return [float(v) for v in value]
    if name == "forecast_band":
        if value is None:
            return None
        if not isinstance(value, list) or len(value) != 5 or not all(map(_is_num, value)):
            raise ValueError(name)
        return [float(v) for v in value]
    if name == "idle_gpu_s":  # None: the run was not watched (lifecycle/idlegpu.py)
        if value is None:
            return None
        if not _is_num(value) or value < 0:
            raise ValueError(name)
        return float(value)
    if name == "stop":
        return None if value is None else StopMark.from_wire(value)
    if name == "preempt":
        return None if value is None else PreemptMark.from_wire(value)
    if name in _NULLABLE_INT:
        return None if value is None else _checked_int(value)
    default = _DEFAULTS[name]
    if name == "id" or isinstance(default, bool):
        if name == "id":
            return _checked_int(value)
        if not isinstance(value, bool):
            if value in (0, 1):  # SQLite hands booleans back as integers in raw reads
                return bool(value)
            raise ValueError(name)
        return value
    if isinstance(default, int):
        return _checked_int(value)
    if isinstance(default, float):
        if not _is_num(value):
            raise ValueError(name)
        return float(value)
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ValueError(name)
        return value
    raise ValueError(name)


def _checked_int(value: Any) -> int:
    if not _is_int(value):
        raise ValueError("not an integer")
    return value


def _tolerant_job(row: Mapping[str, Any]) -> Job:
    try:
        return row_to_job(row)
    except ValueError as exc:
        log.error("job %s: %s in the ledger cannot be read; the job is set aside (held for "
                  "an administrator)", row.get("id"), exc)
        return set_aside_job(row, str(exc))


def _event_row(ev: JobEvent) -> dict[str, Any]:
    return {
        "job_id": ev.job_id,
        "time": ev.time,
        "state": ev.state,
        "reason": ev.reason,
        "actor_uid": ev.actor_uid,
        "detail": ev.detail,
    }


def _node_row(node: Node) -> dict[str, Any]:
    return {
        "name": node.name,
        "cpus": node.cpus,
        "memory_mb": node.memory_mb,
        "features": list(node.features),
        "partitions": list(node.partitions),
        "state": NodeState(node.state).value,
        "reason": node.reason,
        "address": node.address,
        "last_heartbeat": node.last_heartbeat,
        "boot_time": node.boot_time,
    }


def _upsert(conn: Connection, table: Table, keys: list[str], columns: Iterable[str]) -> Any:
    """INSERT ... ON CONFLICT (keys) DO UPDATE SET columns (both SQLite and PostgreSQL)."""
    stmt = _dialect_insert(conn, table)
    cols = [c for c in columns if c not in keys]
    if not cols:
        return stmt.on_conflict_do_nothing(index_elements=keys)
    return stmt.on_conflict_do_update(index_elements=keys, set_={c: stmt.excluded[c] for c in cols})


def _dialect_insert(conn: Connection, table: Table) -> Any:
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    if conn.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)
    raise LedgerError(f"database dialect {conn.dialect.name} is not supported (SQLite, PostgreSQL)")


def _insert_ignore(conn: Connection, table: Table, keys: list[str]) -> Any:
    return _dialect_insert(conn, table).on_conflict_do_nothing(index_elements=keys)


# -- the Store ------------------------------------------------------------------------------------


class Store:
    """schedd's ledger: jobs and their history, nodes, accounts, fair-share usage, audit."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)

    @property
    def shown_url(self) -> str:
        return show_url(self.url)

    # schema

    def check_schema(self) -> None:
        """Raise SchemaError unless the database is at exactly this kiln's revision."""
        try:
            with self.engine.connect() as conn:
                current = current_heads(conn)
        except SQLAlchemyError as exc:
            raise SchemaError(f"cannot open database {self.shown_url}: {one_line(exc)}") from None
        judge_revision(self.url, current, for_upgrade=False)

    # transactions

    @contextmanager
    def _write(self, what: str) -> Iterator[Connection]:
        """One transaction, committed on exit; any failure rolls it back and says what failed."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except (SQLAlchemyError, TypeError, ValueError) as exc:
            # TypeError/ValueError: a value the driver cannot encode (psycopg dumps JSON itself)
            raise LedgerError(f"ledger: {what} failed: {one_line(exc)}") from exc

    @contextmanager
    def _read(self, what: str) -> Iterator[Connection]:
        try:
            with self.engine.connect() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"ledger: {what} failed: {one_line(exc)}") from exc

    # jobs

    def max_job_id(self) -> int:
        """The highest job id ever stored (purged jobs included); 0 for a new ledger."""
        with self._read("reading the highest job id") as conn:
            stored = conn.execute(select(func.max(t.jobs.c.id))).scalar() or 0
            mark = conn.execute(
                select(t.kiln_meta.c.value).where(t.kiln_meta.c.key == META_MAX_JOB_ID)
            ).scalar()
        return max(stored, int(mark or 0))

    def insert_jobs(self, jobs: list[Job], events: list[JobEvent] | None = None) -> None:
        """Store new jobs (a whole array in one call) and their first events, atomically."""
        self.insert_prepared([self.prepare_insert(jobs, events)])

    def prepare_insert(self, jobs: list[Job],
                       events: list[JobEvent] | None = None) -> PreparedInsert:
        """``insert_jobs``' rows, bound but not written: the Python half of its work, so that
        a big array's can be made a slice at a time (``insert_prepared`` writes them)."""
        dialect = self.engine.dialect
        try:
            job_sql, job_rows = _bind_rows(dialect, t.jobs, JOB_FIELDS,
                                           [job_to_tuple(j) for j in jobs])
            event_sql, event_rows = _bind_rows(dialect, t.job_events, EVENT_FIELDS,
                                               list(map(_EVENT_TUPLE, events or ())))
        except (SQLAlchemyError, TypeError, ValueError) as exc:  # as ``_write`` says it
            raise LedgerError(f"ledger: inserting {len(jobs)} job(s) failed: "
                              f"{one_line(exc)}") from exc
        return PreparedInsert(job_sql, job_rows, event_sql, event_rows)

    def insert_prepared(self, parts: list[PreparedInsert]) -> None:
        """Store the jobs and events of ``parts`` (``prepare_insert``) in one transaction."""
        count = sum(len(p.job_rows) for p in parts)
        with self._write(f"inserting {count} job(s)") as conn:
            for sql, rows, table in (
                    ("job_sql", "job_rows", t.jobs), ("event_sql", "event_rows", t.job_events)):
                bound = [row for p in parts for row in getattr(p, rows)]
                if bound:
                    _execute_bound(conn, table, getattr(parts[0], sql), bound)

    def update_jobs(
        self, changes: list[tuple[int, dict[str, Any]]], events: list[JobEvent] | None = None,
        steps: list[StepRecord] | None = None,
    ) -> None:
        """Apply field changes (keys are Job field names) to existing jobs, atomically, with
        their events and step rows (a start and its ``JOBID.batch`` row are one transaction).

        Changes with the same set of fields share one executemany UPDATE. A job id that is not
        in the ledger fails the whole call.
        """
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job_id, fields in changes:
            unknown = set(fields) - UPDATABLE_JOB_FIELDS
            if unknown:
                raise LedgerError(
                    f"ledger: cannot update job field(s) {', '.join(sorted(unknown))}"
                )
            params = {f"v_{k}": _job_value(k, v) for k, v in fields.items()}
            params["b_id"] = job_id
            groups.setdefault(tuple(sorted(fields)), []).append(params)
        with self._write(f"updating {len(changes)} job(s)") as conn:
            for names, params in groups.items():
                if names:
                    self._update_group(conn, names, params)
            if events:
                _insert_many(conn, t.job_events, EVENT_FIELDS, list(map(_EVENT_TUPLE, events)))
            if steps:
                rows = [dataclasses.asdict(step) for step in steps]
                conn.execute(_upsert(conn, t.job_steps, ["job_id", "step_id"], rows[0]), rows)

    @staticmethod
    def _update_group(conn: Connection, names: tuple[str, ...], params: list[dict]) -> None:
        stmt = (
            update(t.jobs)
            .where(t.jobs.c.id == bindparam("b_id"))
            .values({name: bindparam(f"v_{name}") for name in names})
        )
        result = conn.execute(stmt, params)
        ids = {p["b_id"] for p in params}
        if conn.dialect.supports_sane_multi_rowcount and result.rowcount == len(params):
            return
        found = set(conn.execute(select(t.jobs.c.id).where(t.jobs.c.id.in_(ids))).scalars())
        missing = sorted(ids - found)
        if missing:
            raise LedgerError(f"ledger: job {missing[0]} is not in the ledger; nothing was updated")

    def load_jobs(self, active_only: bool = True, finished_since: float | None = None) -> list[Job]:
        """Jobs for schedd's in-memory state, by id.

        ``active_only``: PENDING/RUNNING/COMPLETING/SUSPENDED jobs, plus finished ones whose
        end_time >= ``finished_since`` when given (what squeue still shows, MinJobAge).
        ``active_only=False``: every job in the ledger.
        """
        stmt = select(t.jobs).order_by(t.jobs.c.id)
        if active_only:
            cond = t.jobs.c.state.in_(ACTIVE_STATE_NAMES)
            if finished_since is not None:
                cond = or_(cond, t.jobs.c.end_time >= finished_since)
            stmt = stmt.where(cond)
        with self._read("loading jobs") as conn:
            return [_tolerant_job(r) for r in conn.execute(stmt).mappings()]

    def query_jobs(
        self,
        job_ids: Iterable[int] | None = None,
        users: Iterable[str] | None = None,
        accounts: Iterable[str] | None = None,
        states: Iterable[str] | None = None,
        names: Iterable[str] | None = None,
        start: float | None = None,
        end: float | None = None,
        limit: int | None = None,
        after_id: int | None = None,
    ) -> list[Job]:
        """sacct's query, by id. Every filter given must match (None = any).

        ``job_ids`` matches a job's id or its array's id (``sacct -j 7`` lists 7's tasks);
        ``start``/``end`` keep jobs that overlap the window: not ended before ``start``
        (unfinished jobs have end_time 0 and always overlap) and submitted by ``end``;
        ``after_id`` with ``limit`` reads the next page (keyset paging, for long queries that
        go in slices: ``iter_jobs``).
        """
        c = t.jobs.c
        conds: list[Any] = []
        if job_ids is not None:  # an id no INTEGER column can hold names no job
            ids = [i for i in job_ids if 0 <= i <= MAX_JOB_ID]
            conds.append(or_(c.id.in_(ids), c.array_job_id.in_(ids)))
        if users is not None:
            conds.append(c.user.in_(list(users)))
        if accounts is not None:
            conds.append(c.account.in_(list(accounts)))
        if states is not None:
            conds.append(c.state.in_([_state_name(s) for s in states]))
        if names is not None:
            conds.append(c.name.in_(list(names)))
        if start is not None:
            conds.append(or_(c.end_time >= start, c.end_time == 0))
        if end is not None:
            conds.append(c.submit_time <= end)
        if after_id is not None:
            conds.append(c.id > after_id)
        stmt = select(t.jobs).where(*conds).order_by(c.id)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._read("querying jobs") as conn:
            return [_tolerant_job(r) for r in conn.execute(stmt).mappings()]

    def iter_jobs(self, page: int = 2000, **filters: Any) -> Iterator[list[Job]]:
        """``query_jobs`` a page at a time (each page its own short read), so a caller can
        do other work between pages."""
        after: int | None = None
        while True:
            jobs = self.query_jobs(limit=page, after_id=after, **filters)
            if jobs:
                yield jobs
            if len(jobs) < page:
                return
            after = jobs[-1].id

    def iter_started_since(self, since: float, limit: int,
                           page: int = 200) -> Iterator[list[Job]]:
        """The last ``limit`` jobs started at or after ``since``, newest first, a page at a time
        (each page its own short read, walking ``ix_jobs_start_time`` down from the newest), with
        only what forecasts need (id, start, the published forecasts). ``kiln stats`` and every
        ``kiln why`` of a pending job read this, so it is a long request: one page a slice, where
        5,000 rows in one read held schedd's loop 60-95 ms (issue 12's bystander)."""
        c = t.jobs.c
        after: tuple[float, int] | None = None
        while limit > 0:
            stmt = (select(c.id, c.start_time, c.forecast_first, c.forecast_last,
                           c.forecast_band)
                    .where(c.start_time >= since, c.start_time > 0))
            if after is not None:
                stmt = stmt.where(tuple_(c.start_time, c.id) < after)
            size = min(page, limit)
            stmt = stmt.order_by(c.start_time.desc(), c.id.desc()).limit(size)
            with self._read("reading started jobs") as conn:
                rows = conn.execute(stmt).all()
            if rows:
                yield [_started_job(row) for row in rows]
            if len(rows) < size:
                return
            limit -= len(rows)
            after = (rows[-1].start_time, rows[-1].id)

    def recent_runs(self, states: Iterable[str], limit: int) -> list[Job]:
        """The last ``limit`` runs that ended in one of ``states``, with only what a run-time
        prediction needs (user, request, limit, start and end): schedd's history of how long
        jobs really ran (``schedd/scheduler/runtimes.py``), read once at start-up."""
        c = t.jobs.c
        cols = (c.id, c.user, c.partition, c.num_nodes, c.num_tasks, c.ntasks_per_node,
                c.cpus_per_task, c.gpus, c.gpus_per_node, c.gpus_per_task, c.time_limit,
                c.start_time, c.end_time)
        stmt = (select(*cols).where(c.state.in_(list(states)), c.start_time > 0,
                                    c.end_time >= c.start_time)
                .order_by(c.end_time.desc()).limit(limit))
        with self._read("reading recent runs") as conn:
            rows = list(conn.execute(stmt))
        return [Job(id=r.id, user=r.user, partition=r.partition, num_nodes=r.num_nodes,
                    num_tasks=r.num_tasks, ntasks_per_node=r.ntasks_per_node,
                    cpus_per_task=r.cpus_per_task, gpus=r.gpus, gpus_per_node=r.gpus_per_node,
                    gpus_per_task=r.gpus_per_task, time_limit=r.time_limit,
                    start_time=r.start_time, end_time=r.end_time) for r in reversed(rows)]

    def job_events(self, job_id: int) -> list[JobEvent]:
        """A job's history, oldest first."""
        e = t.job_events.c
        stmt = (
            select(e.job_id, e.time, e.state, e.reason, e.actor_uid, e.detail)
            .where(e.job_id == job_id)
            .order_by(e.time, e.id)
        )
        with self._read("reading job events") as conn:
            return [JobEvent(**r) for r in conn.execute(stmt).mappings()]

    def purge_jobs(self, finished_before: float) -> int:
        """Delete finished jobs that ended before ``finished_before`` (and their events); the
        highest job id is remembered so ids are never reused. Returns how many went."""
        c = t.jobs.c
        doomed = select(c.id).where(c.state.in_(FINISHED_STATE_NAMES), c.end_time < finished_before)
        with self._write("purging finished jobs") as conn:
            high = conn.execute(select(func.max(c.id))).scalar() or 0
            mark = conn.execute(
                select(t.kiln_meta.c.value).where(t.kiln_meta.c.key == META_MAX_JOB_ID)
            ).scalar()
            self._set_meta(conn, META_MAX_JOB_ID, str(max(high, int(mark or 0))))
            conn.execute(delete(t.job_events).where(t.job_events.c.job_id.in_(doomed)))
            conn.execute(delete(t.job_steps).where(t.job_steps.c.job_id.in_(doomed)))
            return conn.execute(delete(t.jobs).where(c.id.in_(doomed))).rowcount

    # job steps

    def save_steps(self, steps: list[StepRecord]) -> None:
        """Store steps as given, replacing a row with the same (job, step) (a requeued job's
        new batch step replaces the old one), atomically."""
        rows = [dataclasses.asdict(s) for s in steps]
        if not rows:
            return
        with self._write(f"storing {len(rows)} job step(s)") as conn:
            conn.execute(_upsert(conn, t.job_steps, ["job_id", "step_id"], rows[0]), rows)

    def end_step(self, job_id: int, step_id: str, state: str, exit_code: int, exit_signal: int,
                 end_time: float, stats: dict[str, Any] | None = None) -> None:
        """Record a step's end (its state, worst exit and, when known, its ``stats``); a step
        with no row is ignored."""
        s = t.job_steps.c
        values: dict[str, Any] = {"state": state, "exit_code": exit_code,
                                  "exit_signal": exit_signal, "end_time": end_time}
        if stats:
            values["stats"] = stats
        stmt = update(t.job_steps).where(s.job_id == job_id, s.step_id == step_id).values(**values)
        with self._write(f"ending step {job_id}.{step_id}") as conn:
            conn.execute(stmt)

    def query_steps(self, job_ids: Iterable[int]) -> list[StepRecord]:
        """The steps of these jobs, by job id, then batch first, then step number."""
        s = t.job_steps.c
        stmt = select(t.job_steps).where(s.job_id.in_(list(job_ids)))
        with self._read("querying job steps") as conn:
            rows = [StepRecord(**r) for r in conn.execute(stmt).mappings()]
        rows.sort(key=lambda r: (r.job_id, -1 if not r.step_id.isdigit() else int(r.step_id)))
        return rows

    def max_step_id(self, job_id: int) -> int:
        """The highest numbered (srun) step of a job; -1 when it has none."""
        s = t.job_steps.c
        with self._read("reading step ids") as conn:
            ids = conn.execute(select(s.step_id).where(s.job_id == job_id)).scalars().all()
        return max((int(i) for i in ids if i.isdigit()), default=-1)

    # nodes and partitions

    def upsert_node(self, node: Node) -> None:
        """Store a node as registered, replacing its GPU list."""
        row = _node_row(node)
        gpu_rows = [{"node": node.name, **dataclasses.asdict(g), "cpus": format_cpu_list(g.cpus)}
                    for g in node.gpus]
        with self._write(f"storing node {node.name}") as conn:
            conn.execute(_upsert(conn, t.nodes, ["name"], row), row)
            conn.execute(delete(t.gpus).where(t.gpus.c.node == node.name))
            if gpu_rows:
                conn.execute(insert(t.gpus), gpu_rows)

    def delete_node(self, name: str) -> None:
        with self._write(f"deleting node {name}") as conn:
            conn.execute(delete(t.gpus).where(t.gpus.c.node == name))
            conn.execute(delete(t.nodes).where(t.nodes.c.name == name))

    def load_nodes(self) -> list[Node]:
        """Every node with its GPUs (by index), by name."""
        g = t.gpus.c
        with self._read("loading nodes") as conn:
            node_rows = conn.execute(select(t.nodes).order_by(t.nodes.c.name)).mappings().all()
            gpu_rows = conn.execute(select(t.gpus).order_by(g.node, g.index)).mappings().all()
        by_node: dict[str, list[GPU]] = {}
        for r in gpu_rows:
            by_node.setdefault(r["node"], []).append(
                GPU(r["index"], r["uuid"], r["model"], r["memory_mb"], r["island"],
                    list(parse_cpu_list(r["cpus"] or "")), r["fault"] or "")
            )
        nodes = []
        for r in node_rows:
            kw = dict(r)
            kw["state"] = NodeState(kw["state"])
            kw["features"] = list(kw["features"] or [])
            kw["partitions"] = list(kw["partitions"] or [])
            nodes.append(Node(gpus=by_node.get(r["name"], []), **kw))
        return nodes

    def save_partitions(self, partitions: list[Partition]) -> None:
        """Record the configured partitions (sacct names partitions that left the config)."""
        # the columns the ledger keeps: runtime settings of a partition (on_isolation) are
        # the config's, not history's
        kept = set(t.partitions.c.keys())
        rows = [{k: v for k, v in dataclasses.asdict(p).items() if k in kept} for p in partitions]
        if not rows:
            return
        with self._write("storing partitions") as conn:
            conn.execute(_upsert(conn, t.partitions, ["name"], rows[0]), rows)

    def load_partitions(self) -> list[Partition]:
        with self._read("loading partitions") as conn:
            rows = conn.execute(select(t.partitions).order_by(t.partitions.c.name)).mappings()
            return [Partition(**{**r, "nodes": list(r["nodes"] or [])}) for r in rows]

    # accounts, users, associations

    def ensure_account(self, name: str, parent: str = "root", shares: int = 1) -> None:
        """Create the account if it is missing (an existing one is left as it is); ``root``
        is created on demand, any other parent must exist."""
        with self._write(f"creating account {name}") as conn:
            self._ensure_account(conn, name, parent, shares)

    def _ensure_account(self, conn: Connection, name: str, parent: str, shares: int) -> None:
        a = t.accounts.c
        if conn.execute(select(a.name).where(a.name == name)).first():
            return
        if name == "root":
            row = {"name": "root", "parent": None, "shares": shares}
        else:
            if parent == "root":
                self._ensure_account(conn, "root", "", 1)
            elif not conn.execute(select(a.name).where(a.name == parent)).first():
                raise LedgerError(f"parent account {parent} does not exist")
            row = {"name": name, "parent": parent, "shares": shares}
        conn.execute(_insert_ignore(conn, t.accounts, ["name"]), row)

    def ensure_user(self, name: str, uid: int, account: str) -> None:
        """Create the user (default account ``account``) and its association with ``account``
        if missing; the account is created under root if it does not exist."""
        with self._write(f"creating user {name}") as conn:
            self._ensure_account(conn, account, "root", 1)
            conn.execute(
                _insert_ignore(conn, t.users, ["name"]),
                {"name": name, "uid": uid, "default_account": account, "admin_level": "None"},
            )
            conn.execute(
                _insert_ignore(conn, t.associations, ["account", "user"]),
                {"account": account, "user": name, "shares": 1},
            )

    def load_accounts(self) -> list[AccountRecord]:
        a = t.accounts.c
        stmt = select(a.name, a.parent, a.shares, a.description, a.organization).order_by(a.name)
        with self._read("loading accounts") as conn:
            rows = conn.execute(stmt).mappings()
            return [AccountRecord(**r) for r in rows]

    def load_users(self) -> list[UserRecord]:
        with self._read("loading users") as conn:
            rows = conn.execute(select(t.users).order_by(t.users.c.name)).mappings()
            return [UserRecord(**r) for r in rows]

    def load_associations(self) -> list[AssociationRecord]:
        s = t.associations.c
        stmt = select(s.account, s.user, s.shares).order_by(s.account, s.user)
        with self._read("loading associations") as conn:
            return [AssociationRecord(**r) for r in conn.execute(stmt).mappings()]

    # accounting: the whole account tree with limits, and sacctmgr's changes

    def load_accounting(self) -> dict[str, list[dict[str, Any]]]:
        """Every row of accounts, users, associations and qos (all columns), for schedd's
        in-memory association tree (``schedd/domain/accounts.py``)."""
        out: dict[str, list[dict[str, Any]]] = {}
        with self._read("loading accounts, users, associations and QOS") as conn:
            for name, table in (("accounts", t.accounts), ("users", t.users),
                                ("associations", t.associations), ("qos", t.qos)):
                key = [c for c in table.primary_key.columns]
                rows = conn.execute(select(table).order_by(*key)).mappings()
                out[name] = [dict(r) for r in rows]
        for row in out["associations"]:
            row.pop("id", None)
        return out

    def write_accounting(self, change: AccountingChange) -> None:
        """Apply one sacctmgr command's rows and deletions (and its audit lines) atomically.
        Upserted rows carry every column; deletions go children first."""
        with self._write("changing accounts") as conn:
            for table, keys, rows in ((t.accounts, ["name"], change.accounts),
                                      (t.users, ["name"], change.users),
                                      (t.associations, ["account", "user"], change.associations),
                                      (t.qos, ["name"], change.qos)):
                for row in rows:
                    conn.execute(_upsert(conn, table, keys, row), row)
            s = t.associations.c
            for account, user in change.delete_associations:
                conn.execute(delete(t.associations).where(s.account == account, s.user == user))
            if change.delete_users:
                conn.execute(delete(t.users).where(t.users.c.name.in_(change.delete_users)))
            for name in change.delete_accounts:  # children first, as the caller orders them
                conn.execute(delete(t.accounts).where(t.accounts.c.name == name))
            if change.delete_qos:
                conn.execute(delete(t.qos).where(t.qos.c.name.in_(change.delete_qos)))
            if change.audit:
                conn.execute(insert(t.audit), [dataclasses.asdict(a) for a in change.audit])

    def load_tres_usage(self) -> dict[tuple[str, str], tuple[dict[str, float], float]]:
        """GrpTRESMins usage by (account, user): (TRES-minutes by name, period start)."""
        u = t.tres_usage.c
        with self._read("loading TRES usage") as conn:
            rows = conn.execute(select(u.account, u.user, u.minutes, u.period_start)).all()
        return {(a, user): (dict(m or {}), float(p)) for a, user, m, p in rows}

    def save_tres_usage(self, usage: dict[tuple[str, str], dict[str, float]],
                        period_start: float, now: float) -> None:
        """Store GrpTRESMins usage for the given associations (others keep theirs)."""
        rows = [{"account": a, "user": user, "minutes": {k: float(v) for k, v in m.items()},
                 "period_start": period_start, "updated": now}
                for (a, user), m in usage.items()]
        if not rows:
            return
        with self._write("saving TRES usage") as conn:
            conn.execute(_upsert(conn, t.tres_usage, ["account", "user"], rows[0]), rows)

    # fair share

    def load_fairshare(self) -> dict[tuple[str, str], float]:
        """Decayed usage by (account, user); user '' is the account's own row."""
        f = t.fairshare_usage.c
        with self._read("loading fair-share usage") as conn:
            rows = conn.execute(select(f.account, f.user, f.usage)).all()
        return {(account, user): usage for account, user, usage in rows}

    def save_fairshare(self, usage: dict[tuple[str, str], float], now: float) -> None:
        """Store usage for the given associations (others keep their rows), atomically."""
        rows = [
            {"account": a, "user": u, "usage": float(v), "updated": now}
            for (a, u), v in usage.items()
        ]
        if not rows:
            return
        with self._write("saving fair-share usage") as conn:
            conn.execute(_upsert(conn, t.fairshare_usage, ["account", "user"], rows[0]), rows)

    # audit

    def audit(
        self, actor_uid: int, action: str, target: str, detail: str = "", now: float | None = None
    ) -> None:
        """Record that ``actor_uid`` did ``action`` to ``target`` (e.g. 'cancel', 'job 12')."""
        row = {
            "time": time.time() if now is None else now,
            "actor_uid": actor_uid,
            "action": action,
            "target": target,
            "detail": detail,
        }
        with self._write(f"recording {action}") as conn:
            conn.execute(insert(t.audit), row)

    def load_audit(self, since: float = 0.0, limit: int | None = None) -> list[AuditRecord]:
        """Audit records at or after ``since``, oldest first."""
        a = t.audit.c
        stmt = (
            select(a.time, a.actor_uid, a.action, a.target, a.detail)
            .where(a.time >= since)
            .order_by(a.time, a.id)
        )
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._read("reading the audit trail") as conn:
            return [AuditRecord(**r) for r in conn.execute(stmt).mappings()]

    def node_reason_marks(self) -> dict[str, AuditRecord]:
        """The last ``scontrol update NodeName=`` of each node (who set its reason, when)."""
        a = t.audit.c
        stmt = (select(a.time, a.actor_uid, a.action, a.target, a.detail)
                .where(a.action == "update_node").order_by(a.time, a.id))
        with self._read("reading the nodes' reasons") as conn:
            rows = [AuditRecord(**r) for r in conn.execute(stmt).mappings()]
        return {r.target.removeprefix("node "): r for r in rows}

    def node_audit(self, names: list[str], limit: int) -> list[AuditRecord]:
        """The nodes' audit history (scontrol update, GPU faults, kiln fake-gpu), newest
        ``limit`` lines in time order; ``names`` empty: every node's."""
        a = t.audit.c
        where = (a.target.in_([f"node {n}" for n in names]) if names
                 else a.target.like("node %"))
        stmt = (select(a.time, a.actor_uid, a.action, a.target, a.detail).where(where)
                .order_by(a.time.desc(), a.id.desc()).limit(limit))
        with self._read("reading the nodes' history") as conn:
            rows = [AuditRecord(**r) for r in conn.execute(stmt).mappings()]
        return rows[::-1]

    # advance reservations (schedd/domain/reservation.py builds and reads these rows)

    def save_reservation(self, row: dict[str, Any], actor_uid: int, action: str,
                         now: float) -> None:
        """Insert or replace one reservation, with its audit line, atomically."""
        audit = {"time": now, "actor_uid": actor_uid, "action": action,
                 "target": f"reservation {row['name']}", "detail": ""}
        with self._write(f"storing reservation {row['name']}") as conn:
            conn.execute(_upsert(conn, t.reservations, ["name"], row), row)
            conn.execute(insert(t.audit), audit)

    def delete_reservation(self, name: str, actor_uid: int | None, now: float) -> None:
        """Forget a reservation (deleted, or ended: ``actor_uid`` None, no audit line)."""
        with self._write(f"deleting reservation {name}") as conn:
            conn.execute(delete(t.reservations).where(t.reservations.c.name == name))
            if actor_uid is not None:
                conn.execute(insert(t.audit), {"time": now, "actor_uid": actor_uid,
                                               "action": "delete_reservation",
                                               "target": f"reservation {name}", "detail": ""})

    def load_reservations(self) -> list[dict[str, Any]]:
        with self._read("loading reservations") as conn:
            rows = conn.execute(select(t.reservations).order_by(t.reservations.c.name))
            return [dict(r) for r in rows.mappings()]

    # meta

    def get_meta(self, key: str) -> str | None:
        with self._read(f"reading {key}") as conn:
            return conn.execute(
                select(t.kiln_meta.c.value).where(t.kiln_meta.c.key == key)
            ).scalar()

    def set_meta(self, key: str, value: str) -> None:
        with self._write(f"storing {key}") as conn:
            self._set_meta(conn, key, value)

    @staticmethod
    def _set_meta(conn: Connection, key: str, value: str) -> None:
        row = {"key": key, "value": value}
        conn.execute(_upsert(conn, t.kiln_meta, ["key"], row), row)

    def close(self) -> None:
        self.engine.dispose()


def _started_job(row: Any) -> Job:
    """A started job's forecasts as ``iter_started_since`` reads them; one that does not parse
    counts as none published."""
    try:
        first = _load_field("forecast_first", row.forecast_first)
        last = _load_field("forecast_last", row.forecast_last)
    except ValueError:
        first = last = None
    try:
        band = _load_field("forecast_band", row.forecast_band)
    except ValueError:
        band = None
    return Job(id=row.id, start_time=row.start_time, forecast_first=first, forecast_last=last,
               forecast_band=band)
