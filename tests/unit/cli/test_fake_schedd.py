"""A canned-reply schedd on a local socket, for testing the commands end to end without the
daemon: schedd's own LocalServer in a thread that records each request and answers from a
handler."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from cli.client import Client, ClientError
from kiln.wire import operations, protocol
from kiln.wire.localsock import LocalServer

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


def test_fake_schedd_answers_and_records(fake_schedd: Callable[[Handler], FakeSchedd]) -> None:
    fake = fake_schedd(lambda op, body: {"echo": body})
    with Client(endpoint=fake.endpoint, timeout=5) as client:
        assert client.call("ping", {}) == {"echo": {}}
    assert fake.requests == [("ping", {})]


def test_fake_schedd_relays_errors(fake_schedd: Callable[[Handler], FakeSchedd]) -> None:
    def refuse(op: str, body: dict[str, Any]) -> dict[str, Any]:
        raise ClientError("invalid_job_id", "Invalid job id specified")

    fake = fake_schedd(refuse)
    with Client(endpoint=fake.endpoint, timeout=5) as client, pytest.raises(ClientError) as exc:
        client.call("ping", {})
    assert exc.value.code == "invalid_job_id"
