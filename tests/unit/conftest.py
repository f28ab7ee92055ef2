"""Ledger fixtures shared by the unit tests that need a real database: every such test runs on
SQLite and on PostgreSQL (the server at $KILN_TEST_PG, or a throwaway one: tests/pgutil.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from schedd.ledger.migrate import upgrade
from schedd.ledger.store import Store
from tests.pgutil import PostgresUnavailable, fresh_database, fresh_schema


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """One throwaway PostgreSQL database for the session (each test gets its own schema)."""
    try:
        manager = fresh_database()
        url = manager.__enter__()
    except PostgresUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    yield url
    manager.__exit__(None, None, None)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty ledger database, not migrated, on each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/kiln.db"
        return
    with fresh_schema(request.getfixturevalue("pg_database")) as schema_url:
        yield schema_url


@pytest.fixture
def ledger_url(empty_ledger: str) -> str:
    """The same, migrated to the head revision."""
    upgrade(empty_ledger)
    return empty_ledger


@pytest.fixture
def ledger_store(ledger_url: str) -> Iterator[Store]:
    """A ``Store`` over a migrated ledger, closed after the test."""
    s = Store(ledger_url)
    yield s
    s.close()
