"""Fixtures shared by the unit tests.

- The ledger, for the tests that need a real database: every such test runs on SQLite and on
  PostgreSQL (the server at $KILN_TEST_PG, or a throwaway one: tests/pgutil.py).
- ``fake_schedd``: a canned-reply schedd on a local socket, for testing the commands end to end
  without the daemon: schedd's own LocalServer in a thread that records each request and
  answers from a handler (its own tests: tests/unit/harness/test_fake_schedd.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from cli.core.client import ClientError
from kiln.wire import operations, protocol
from kiln.wire.localsock import LocalServer
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


Handler = Callable[[str, dict[str, Any]], dict[str, Any]]


class FakeSchedd:
    def __init__(self, tmp: Path, handler: Handler):
        self.endpoint = f"ipc://{tmp / 'schedd.sock'}"
        self.handler = handler
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._server = LocalServer(self.endpoint, self._answer)
        self._poller = zmq.Poller()
        self._server.register(self._poller)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _answer(self, frame: bytes, caller: Any) -> bytes:
        msg_id, op, body = protocol.decode_request(frame, operations.CLIENT_OPS)
        self.requests.append((op, body))
        try:
            return protocol.reply_ok(msg_id, self.handler(op, body))
        except ClientError as exc:
            return protocol.reply_error(msg_id, exc.code, exc.message)

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._server.ready(dict(self._poller.poll(50)), 0.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()

    def ops(self, op: str) -> list[dict[str, Any]]:
        return [body for o, body in self.requests if o == op]


@pytest.fixture
def fake_schedd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Handler],
                                                                               FakeSchedd]]:
    """Start a fake schedd with a handler; KILN_CONF points every command at it."""
    started: list[FakeSchedd] = []

    def start(handler: Handler) -> FakeSchedd:
        fake = FakeSchedd(tmp_path, handler)
        conf = tmp_path / "kiln.toml"
        conf.write_text(f'client_endpoint = "{fake.endpoint}"\n')
        monkeypatch.setenv("KILN_CONF", str(conf))
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.close()
