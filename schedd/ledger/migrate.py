"""Schema revisions: what this kiln expects, what a database is at, and ``kiln db upgrade``.

schedd refuses to start on a database that is unmigrated or newer than itself
(``judge_revision``); ``upgrade`` runs Alembic's ``upgrade head`` in one transaction.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from schedd.ledger.engine import make_engine, one_line, show_url, sqlite_path
from schedd.ledger.records import SchemaError


def _migrations_dir() -> Path:
    """The ``migrations`` package's directory, installed or in a checkout (via ``__path__``,
    which also covers an editable install that sees it as a namespace package)."""
    import migrations

    for entry in migrations.__path__:
        if (Path(entry) / "env.py").is_file():
            return Path(entry)
    raise SchemaError("this kiln installation lacks its migrations (migrations/env.py)")


def alembic_config(connection: Connection | None = None) -> Any:
    """An Alembic Config pointing at the ``migrations`` package; no alembic.ini needed."""
    from alembic.config import Config

    cfg = Config()
    # set_main_option interpolates like configparser: a '%' in the path must be doubled
    cfg.set_main_option("script_location", str(_migrations_dir()).replace("%", "%%"))
    cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _script_directory() -> Any:
    """The revisions shipped with this kiln (read once: they do not change while it runs)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The schema revision this kiln expects."""
    heads = _script_directory().get_heads()
    return heads[0]


def _known_revisions() -> set[str]:
    return {s.revision for s in _script_directory().walk_revisions()}


def current_heads(conn: Connection) -> tuple[str, ...]:
    from alembic.runtime.migration import MigrationContext

    return tuple(MigrationContext.configure(conn).get_current_heads())


def current_revision(url: str) -> str | None:
    """The database's revision, or None when it is not migrated (a missing SQLite file is not
    created by asking)."""
    path = sqlite_path(url)
    if path is not None and not path.exists():
        return None
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            heads = current_heads(conn)
    except SQLAlchemyError as exc:
        raise SchemaError(f"cannot open database {show_url(url)}: {one_line(exc)}") from None
    finally:
        engine.dispose()
    return heads[0] if heads else None


def judge_revision(url: str, current: tuple[str, ...], *, for_upgrade: bool) -> None:
    shown = show_url(url)
    unknown = [rev for rev in current if rev not in _known_revisions()]
    if unknown:
        raise SchemaError(
            f"database {shown} is newer than this kiln (revision {unknown[0]}); upgrade kiln"
        )
    if for_upgrade:
        return
    if not current:
        raise SchemaError(f"database {shown} is not migrated: run `kiln db upgrade`")
    head = head_revision()
    if set(current) != {head}:
        raise SchemaError(
            f"database {shown} is at revision {current[0]}, older than this kiln's {head}: "
            "run `kiln db upgrade`"
        )


def _sqlite_foreign_keys(conn: Connection, on: bool) -> None:
    """SQLite's batch migrations copy a table and drop the old one; with foreign keys on, that
    drop cascades: upgrading to 0006 (which rebuilds ``jobs``) deleted every job's events and
    steps. They are off for the upgrade. The pragma is a no-op inside a transaction, so it
    goes to the driver's connection directly, before the upgrade's BEGIN."""
    conn.connection.dbapi_connection.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


def _check_foreign_keys(url: str, conn: Connection) -> None:
    """What the keys would have refused, after an upgrade that ran without them: refuse it."""
    broken = conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise SchemaError(f"cannot upgrade database {show_url(url)}: {len(broken)} rows would "
                          f"break foreign keys (first: table {broken[0][0]})")


def upgrade(url: str) -> None:
    """Bring the database to this kiln's schema (Alembic ``upgrade head``), in one transaction.

    Creates the SQLite file and its directory; refuses a database from a newer kiln.
    """
    from alembic import command
    from alembic.util import CommandError

    path = sqlite_path(url)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SchemaError(f"cannot create {path.parent}: {exc.strerror}") from None
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            sqlite = conn.dialect.name == "sqlite"
            if sqlite:
                _sqlite_foreign_keys(conn, on=False)
            with conn.begin():
                judge_revision(url, current_heads(conn), for_upgrade=True)
                command.upgrade(alembic_config(conn), "head")
                if sqlite:
                    _check_foreign_keys(url, conn)
            if sqlite:
                _sqlite_foreign_keys(conn, on=True)
    except SQLAlchemyError as exc:
        raise SchemaError(f"cannot upgrade database {show_url(url)}: {one_line(exc)}") from None
    except CommandError as exc:
        raise SchemaError(f"cannot upgrade database {show_url(url)}: {exc}") from None
    finally:
        engine.dispose()
