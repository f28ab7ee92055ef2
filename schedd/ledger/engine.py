"""Database URLs and engines: SQLite (WAL, NORMAL sync, busy timeout) or PostgreSQL (psycopg 3).

pysqlite's own transaction handling is switched off and ``BEGIN`` is emitted by us, so SQLite
DDL (migrations) is transactional too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from schedd.ledger.records import SchemaError

SQLITE_BUSY_TIMEOUT_MS = 5000
LEDGER_MODE = 0o600  # the ledger holds every job's environment and script: its owner only
SQLITE_SIBLINGS = ("", "-wal", "-shm", "-journal")


def show_url(url: str | URL) -> str:
    """The URL as messages may print it: any password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return str(url)


def parse_url(url: str | URL) -> URL:
    """Parse a database URL; a bare ``postgresql://`` means psycopg 3, the driver kiln ships."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SchemaError(f"invalid database URL {str(url)!r}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(url: str | URL) -> Engine:
    """An engine with kiln's connection settings (SQLite: WAL, NORMAL sync, busy timeout, FKs)."""
    parsed = parse_url(url)
    try:
        if parsed.get_backend_name() == "sqlite":
            path = sqlite_path(parsed)
            if path is not None:
                secure_sqlite(path)
            engine = create_engine(parsed)
            _tune_sqlite(engine)
        else:
            engine = create_engine(parsed, pool_pre_ping=True)
    except (NoSuchModuleError, ImportError, ArgumentError) as exc:
        raise SchemaError(f"unsupported database URL {show_url(parsed)}: {one_line(exc)}") from None
    return engine


def _tune_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves (below)
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    # BEGIN is emitted by the dialect's begin hook, which SQLAlchemy calls for every transaction
    # (and whose errors it wraps as any statement's), not by a "begin" event listener: with any
    # connection event listened for, SQLAlchemy dispatches events around every statement of
    # the engine, some 15% of a submission's ledger insert (docs/benchmarks.md, issue 13).
    engine.dialect.do_begin = _emit_begin  # type: ignore[method-assign]


def _emit_begin(dbapi_connection: Any) -> None:
    dbapi_connection.execute("BEGIN")


def secure_sqlite(path: Path) -> None:
    """Make the SQLite ledger and its WAL/SHM/journal readable by their owner only (0600),
    whatever the umask: the file is created here 0600 when missing (SQLite then gives its
    -wal and -shm the database file's mode), and existing files of ours are chmod-ed."""
    old = os.umask(0o077)
    try:
        if not path.exists() and path.parent.is_dir():
            try:
                os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, LEDGER_MODE))
            except OSError:
                pass  # SQLite will say why it cannot open it
        for suffix in SQLITE_SIBLINGS:
            sibling = f"{path}{suffix}"
            try:
                st = os.lstat(sibling)
                if (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
                        and stat.S_IMODE(st.st_mode) != LEDGER_MODE):
                    os.chmod(sibling, LEDGER_MODE)
            except OSError:
                continue
    finally:
        os.umask(old)


def sqlite_path(url: str | URL) -> Path | None:
    """The file behind a SQLite URL, or None (not SQLite, or in memory)."""
    parsed = parse_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    db = parsed.database or ""
    if db in ("", ":memory:") or db.startswith("file:"):
        return None
    return Path(db)


def one_line(exc: BaseException) -> str:
    """The first line of a driver error, without SQLAlchemy's statement dump and links."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
