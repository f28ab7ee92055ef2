"""Throwaway PostgreSQL databases for tests, so parallel runs (engineers, CI) never collide.

``fresh_database()`` creates ``kiln_test_<random>`` through the maintenance database and drops
it afterwards; ``fresh_schema(url)`` gives one test its own schema inside such a database (much
cheaper than a database per test). The server is ``$KILN_TEST_PG`` (a libpq URL to a database
we may CREATE DATABASE from), by default the local trust-auth server. An absent server is an
error, not a skip: the ledger must be tested against PostgreSQL.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


class PostgresUnavailable(RuntimeError):
    """The test PostgreSQL server cannot be reached or will not create a database."""


def admin_url() -> str:
    return os.environ.get("KILN_TEST_PG") or DEFAULT_ADMIN_URL


def _admin_connection() -> psycopg.Connection:
    url = admin_url()
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PostgresUnavailable(
            f"PostgreSQL is needed for the ledger tests and {url} is not reachable ({first}); "
            "start it or point KILN_TEST_PG at one"
        ) from None


@contextmanager
def fresh_database() -> Iterator[str]:
    """Yield the SQLAlchemy URL of a new, empty database; drop it on exit."""
    name = f"kiln_test_{secrets.token_hex(6)}"
    with _admin_connection() as admin:
        try:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.Error as exc:
            raise PostgresUnavailable(f"cannot create test database {name}: {exc}") from None
    try:
        yield (
            make_url(admin_url())
            .set(drivername="postgresql+psycopg", database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with _admin_connection() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def fresh_schema(database_url: str) -> Iterator[str]:
    """Yield a URL whose connections live in a new schema of ``database_url`` (their
    ``search_path``); drop the schema and everything in it on exit."""
    name = f"kiln_s_{secrets.token_hex(6)}"
    url = make_url(database_url)
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
