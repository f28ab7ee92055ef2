"""The client gives up at once when the schedd it asked goes away mid-request."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import zmq

from cli.client import Client, ClientError


def test_request_to_a_vanished_schedd_fails_fast(tmp_path: Path) -> None:
    path = tmp_path / "schedd.sock"
    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)  # takes the request, never answers, then "crashes"
    silent.bind(f"ipc://{path}")
    client = Client(endpoint=f"ipc://{path}", timeout=30)
    replacement = ctx.socket(zmq.ROUTER)
    try:
        client._socket()
        time.sleep(0.01)  # a restarted schedd's socket file is newer than the first one
        silent.close(0)
        os.unlink(path)
        replacement.bind(f"ipc://{path}")  # a restarted schedd: a new socket file
        started = time.monotonic()
        with pytest.raises(ClientError, match="connection lost"):
            client.call("ping")
        assert time.monotonic() - started < 10  # well inside the 30 s timeout
    finally:
        client.close()
        replacement.close(0)
        ctx.term()


def test_no_socket_file_is_a_connect_failure(tmp_path: Path) -> None:
    with pytest.raises(ClientError, match="connect failure"):
        Client(endpoint=f"ipc://{tmp_path}/none.sock").call("ping")
