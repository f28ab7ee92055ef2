"""kiln top: the snapshot of a known cluster state (``--once``) against a golden file, and the
keys of the live view. Regenerate the golden file, after a deliberate change of layout, with
``KILN_GOLDEN_WRITE=1 pytest tests/unit/cli/test_top.py``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from cli import top

GOLDEN = Path(__file__).parent / "golden" / "top_once.txt"
NOW = 1_796_126_400.0  # 2026-12-01T12:00:00Z


def gpus(n: int) -> list[dict]:
    return [{"index": i, "uuid": f"GPU-{i}", "model": "NVIDIA H100-80GB", "memory_mb": 81920}
            for i in range(n)]


def job(job_id: int, user: str, state: str, partition: str = "gpu", reason: str = "None",
        start: float = 0.0, limit: int | None = 3600, node: str = "", ngpus: int = 0,
        name: str = "train") -> dict:
    return {"id": job_id, "name": name, "user": user, "state": state, "partition": partition,
            "reason": reason, "start_time": start, "time_limit": limit,
            "array_job_id": None, "array_task_id": None,
            "allocation": [{"node": node, "gpus": list(range(ngpus))}] if node else []}


def known_state() -> top.ClusterState:
    nodes = [
        {"name": "node1", "gpus": gpus(8), "alloc_gpus": 6, "state_display": "MIXED",
         "partitions": ["gpu"]},
        {"name": "node2", "gpus": gpus(8), "alloc_gpus": 8, "state_display": "ALLOCATED",
         "partitions": ["gpu"]},
        {"name": "node3", "gpus": gpus(8), "alloc_gpus": 0, "state_display": "DRAIN",
         "partitions": ["gpu", "short"]},
    ]
    jobs = [
        job(101, "alice", "RUNNING", start=NOW - 1800, limit=3600, node="node1", ngpus=4),
        job(102, "bob", "RUNNING", start=NOW - 600, limit=7200, node="node1", ngpus=2),
        job(103, "alice", "RUNNING", start=NOW - 3000, limit=3600, node="node2", ngpus=8,
            name="eval"),
        job(104, "alice", "PENDING", reason="Resources"),
        job(105, "bob", "PENDING", reason="Priority"),
        job(106, "carol", "PENDING", reason="Priority"),
        job(107, "alice", "PENDING", partition="short", reason="ReqNodeNotAvail", limit=600),
    ]
    usage = {101: {"gpu_util": 71.5, "gpu_mem_mb": 40960, "gpu_simulated": 1},
             103: {"gpu_util": 40.0, "gpu_mem_mb": 204800, "gpu_simulated": 1}}
    shares = [{"account": "physics", "user": "alice", "fairshare": 0.25,
               "effective_usage": 0.6}]
    return top.ClusterState(NOW, nodes, jobs, shares, usage)


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_once_matches_the_golden_file(utc: None) -> None:
    text = top.snapshot_text(known_state(), top.View("alice"), width=80)
    if os.environ.get("KILN_GOLDEN_WRITE"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert len(text.splitlines()) <= 24  # an 80x24 terminal


def test_keys_filter_the_queue(utc: None) -> None:
    state, view = known_state(), top.View("alice")
    assert top.on_key("u", view, state) and view.mine_only
    text = top.snapshot_text(state, view)
    assert "Queue (alice's)" in text and "Priority:2" not in text
    assert top.on_key("p", view, state) and view.partition == "gpu"
    assert top.on_key("p", view, state) and view.partition == "short"
    text = top.snapshot_text(state, view)
    assert "ReqNodeNotAvail:1" in text and "Resources" not in text
    assert top.on_key("p", view, state) and view.partition == ""
    assert not top.on_key("q", view, state) and not top.on_key("\x03", view, state)


def test_the_live_view_fits_its_terminal(utc: None) -> None:
    state = known_state()
    state.nodes = [dict(state.nodes[0], name=f"node{i:03d}") for i in range(1, 101)]
    text = top.snapshot_text(state, top.View("alice"), width=80)
    assert "node100" in text  # a snapshot shows every node
    import io

    from rich.console import Console

    buffer = io.StringIO()
    Console(file=buffer, width=80, height=24, color_system=None).print(
        top.render(state, top.View("alice"), height=24))
    lines = buffer.getvalue().splitlines()
    assert len(lines) <= 24 and any("more" in line for line in lines)


def test_rows_from_a_column_reply() -> None:
    reply = {"count": 2, "columns": ["id", "state"], "values": [[1, 2], ["RUNNING", "PENDING"]],
             "constant": {"user": "alice"}}
    assert top.rows(reply) == [{"user": "alice", "id": 1, "state": "RUNNING"},
                               {"user": "alice", "id": 2, "state": "PENDING"}]
    assert top.rows({"count": 0, "columns": [], "values": [], "constant": {}}) == []
