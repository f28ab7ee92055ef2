"""The ``fake_schedd`` fixture (tests/unit/conftest.py) answers from its handler, records each
request and relays a handler's error as schedd would."""

from __future__ import annotations

from typing import Any

import pytest

from cli.core.client import Client, ClientError


def test_fake_schedd_answers_and_records(fake_schedd) -> None:
    fake = fake_schedd(lambda op, body: {"echo": body})
    with Client(endpoint=fake.endpoint, timeout=5) as client:
        assert client.call("ping", {}) == {"echo": {}}
    assert fake.requests == [("ping", {})]


def test_fake_schedd_relays_errors(fake_schedd) -> None:
    def refuse(op: str, body: dict[str, Any]) -> dict[str, Any]:
        raise ClientError("invalid_job_id", "Invalid job id specified")

    fake = fake_schedd(refuse)
    with Client(endpoint=fake.endpoint, timeout=5) as client, pytest.raises(ClientError) as exc:
        client.call("ping", {})
    assert exc.value.code == "invalid_job_id"
