"""schedd's Prometheus series from an in-memory state (schedd/reports/metrics.py)."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from kiln.config import Config
from kiln.model import GPU, Job, JobState, Node, NodeAllocation, Partition
from kiln.paths import ConfigError
from schedd.reports import metrics
from schedd.state import State

NOW = 10_000.0


def _state(tmp_path: Path) -> State:
    cfg = Config(home=tmp_path, partitions=[Partition("gpu", default=True), Partition("cpu")])
    state = State(cfg, store=None)  # type: ignore[arg-type] - the collector never writes
    gpus = [GPU(i, f"u{i}", "H100", 81920) for i in range(4)]
    state.nodes = {
        "n1": Node("n1", 32, 256_000, gpus, partitions=["gpu", "cpu"], last_heartbeat=NOW - 2),
        "n2": Node("n2", 32, 256_000, gpus, partitions=["gpu"], last_heartbeat=NOW - 100),
    }
    state.jobs = {
        1: Job(id=1, partition="gpu", account="ml", state=JobState.RUNNING, start_time=NOW - 60,
               allocation=[NodeAllocation("n1", 4, 0, [0, 1, 2])]),
        2: Job(id=2, partition="gpu", account="ml", state=JobState.PENDING, submit_time=NOW - 5),
        3: Job(id=3, partition="cpu", account="bio", state=JobState.COMPLETED, end_time=NOW),
    }
    state.usage.fairshare.set_association("ml", shares=1)
    state.usage.fairshare.set_association("ml", "alice", parent="ml", shares=1)
    return state


def test_state_series_at_scrape_time(tmp_path: Path) -> None:
    m = metrics.SchedulerMetrics(_state(tmp_path), lambda: NOW)
    m.job_started(Job(id=4, partition="gpu", submit_time=NOW - 90), NOW)
    m.cycle_done(0.004)
    text = generate_latest(m.registry).decode()
    for line in ('kiln_jobs{partition="gpu",state="RUNNING"} 1.0',
                 'kiln_jobs{partition="gpu",state="PENDING"} 1.0',
                 'kiln_jobs{partition="cpu",state="COMPLETED"} 1.0',
                 'kiln_jobs{partition="cpu",state="PENDING"} 0.0',
                 'kiln_gpus_total{partition="gpu"} 8.0', 'kiln_gpus_total{partition="cpu"} 4.0',
                 'kiln_gpus_allocated{partition="gpu"} 3.0',
                 'kiln_account_gpus_allocated{account="ml",partition="gpu"} 3.0',
                 'kiln_agent_heartbeat_age_seconds{node="n1"} 2.0',
                 'kiln_agent_heartbeat_age_seconds{node="n2"} 100.0',
                 'kiln_nodes{state="MIXED"} 1.0', 'kiln_nodes{state="DOWN"} 1.0',
                 'kiln_fairshare_factor{account="ml",user="alice"}',
                 'kiln_queue_wait_seconds_bucket{le="60.0",partition="gpu"} 0.0',
                 'kiln_queue_wait_seconds_bucket{le="120.0",partition="gpu"} 1.0',
                 'kiln_scheduler_cycle_seconds_bucket{le="0.005"} 1.0',
                 'kiln_jobs_started_total{partition="gpu"} 1.0'):
        assert line in text, line


def test_endpoint_serves_over_http_and_stops(tmp_path: Path) -> None:
    cfg = Config(home=tmp_path, metrics_listen="127.0.0.1:0")
    m = metrics.start(cfg, _state(tmp_path), lambda: NOW)
    assert m is not None and m.address is not None
    try:
        url = f"http://127.0.0.1:{m.address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert b'kiln_gpus_total{partition="gpu"} 8.0' in reply.read()
    finally:
        m.close()
    assert metrics.start(Config(home=tmp_path), _state(tmp_path), lambda: NOW) is None


@pytest.mark.parametrize("text", ["9464", "host:", "a:b", "h:70000"])
def test_bad_listen_address_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="metrics_listen must be HOST:PORT"):
        metrics.parse_listen(text)


def test_grafana_dashboard_queries_only_series_schedd_exports(tmp_path: Path) -> None:
    import json
    import re

    m = metrics.SchedulerMetrics(_state(tmp_path), lambda: NOW)
    m.job_started(Job(id=4, partition="gpu", submit_time=NOW - 90), NOW)
    exported = set(re.findall(r"^(kiln_\w+)", generate_latest(m.registry).decode(), re.M))
    dashboard = Path(__file__).parents[4] / "conf" / "grafana" / "kiln-dashboard.json"
    panels = json.loads(dashboard.read_text())["panels"]
    used = {name for p in panels for t in p["targets"]
            for name in re.findall(r"kiln_\w+", t["expr"])}
    assert used and used <= exported, used - exported
