"""schedd's Prometheus endpoint: what the cluster holds, how long jobs wait, how the cycle runs.

Off unless ``metrics_listen = "HOST:PORT"`` is set in kiln.toml (``[schedd]`` or top level);
``PORT`` 0 takes a free port, which schedd logs. The HTTP server is prometheus-client's own, in a
daemon thread; it never touches the ledger.

Two kinds of series:

- **events**, recorded by the daemon's main thread through two hooks: ``job_started`` (queue
  wait, a histogram per partition: start - submit, seconds) and ``cycle_done`` (cycle duration
  histogram, seconds; starts counter);
- **state**, read at scrape time from schedd's in-memory state by ``StateCollector``: jobs by
  state and partition, GPUs total and allocated per partition, GPUs allocated per account,
  nodes by state, fair-share factors per association, each agent's heartbeat age.

The collector runs in the server thread while the main thread changes the state; it reads
copies (``list(dict.values())`` is atomic under the GIL) and retries a scrape that still saw a
dictionary change size, so a scrape never fails and never blocks scheduling.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from kiln.model import Job, JobState
from kiln.paths import ConfigError

if TYPE_CHECKING:
    from kiln.config import Config
    from schedd.state import State

log = logging.getLogger("schedd.reports.metrics")

# Queue waits run from seconds (an idle cluster) to days (a full one).
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200)
# Cycles take milliseconds; a slow one (over 0.1 s) is logged by the daemon too.
CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SCRAPE_RETRIES = 5


def parse_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:9464', ':9464' (all interfaces), '[::1]:0' -> (host, port)."""
    host, colon, port = text.strip().rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"metrics_listen must be HOST:PORT, not {text!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class StateCollector:
    """Gauges computed from schedd's memory at every scrape."""

    def __init__(self, state: State, clock: Callable[[], float]):
        self.state = state
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        for _ in range(SCRAPE_RETRIES):
            try:
                families = self._families()
            except RuntimeError:  # a dict changed size under us: read again
                continue
            yield from families
            return
        log.warning("metrics scrape gave up after %d tries", SCRAPE_RETRIES)

    def _families(self) -> list[Metric]:
        now = self.clock()
        jobs = list(self.state.jobs.values())
        nodes = list(self.state.nodes.values())
        return [
            self._jobs(jobs),
            *self._gpus(jobs, nodes),
            self._nodes(nodes, now),
            self._heartbeats(nodes, now),
            self._gpu_health(nodes),
            self._fairshare(),
        ]

    def _jobs(self, jobs: list[Job]) -> Metric:
        counts: dict[tuple[str, str], int] = {}
        for part in self.state.partitions:
            for st in (JobState.PENDING, JobState.RUNNING):
                counts[(str(st), part)] = 0  # always present, so dashboards see a zero
        for job in jobs:
            key = (str(job.state), job.partition)
            counts[key] = counts.get(key, 0) + 1
        family = GaugeMetricFamily(
            "kiln_jobs", "Jobs schedd holds in memory (active, and finished within MinJobAge)",
            labels=["state", "partition"])
        for (state, part), n in sorted(counts.items()):
            family.add_metric([state, part], n)
        return family

    def _gpus(self, jobs: list[Job], nodes: list[Any]) -> list[Metric]:
        total: dict[str, int] = {p: 0 for p in self.state.partitions}
        for node in nodes:
            for part in node.partitions:
                total[part] = total.get(part, 0) + len(node.gpus)
        used: dict[str, int] = {p: 0 for p in total}
        by_account: dict[tuple[str, str], int] = {}
        for job in jobs:
            if job.state not in (JobState.RUNNING, JobState.COMPLETING):
                continue
            gpus = sum(len(a.gpus) for a in job.allocation)
            used[job.partition] = used.get(job.partition, 0) + gpus
            key = (job.account, job.partition)
            by_account[key] = by_account.get(key, 0) + gpus
        f_total = GaugeMetricFamily("kiln_gpus_total", "GPUs on the partition's nodes",
                                    labels=["partition"])
        f_used = GaugeMetricFamily("kiln_gpus_allocated", "GPUs allocated to running jobs",
                                   labels=["partition"])
        f_acct = GaugeMetricFamily("kiln_account_gpus_allocated",
                                   "GPUs allocated to the account's running jobs",
                                   labels=["account", "partition"])
        for part in sorted(total):
            f_total.add_metric([part], total[part])
            f_used.add_metric([part], used.get(part, 0))
        for (account, part), n in sorted(by_account.items()):
            f_acct.add_metric([account, part], n)
        return [f_total, f_used, f_acct]

    def _nodes(self, nodes: list[Any], now: float) -> Metric:
        use = self.state.node_use()
        counts: dict[str, int] = {}
        for node in nodes:
            shown = self.state.node_display_state(node, use.get(node.name) or _NO_USE, now)
            counts[shown] = counts.get(shown, 0) + 1
        family = GaugeMetricFamily("kiln_nodes", "Nodes by state as sinfo shows it",
                                   labels=["state"])
        for state, n in sorted(counts.items()):
            family.add_metric([state], n)
        return family

    def _gpu_health(self, nodes: list[Any]) -> Metric:
        """1 for each GPU in its health state (ok, failed), 0 in the other: alert on
        ``kiln_gpu_health{state="failed"} == 1`` (schedd/lifecycle/gpuhealth.py)."""
        family = GaugeMetricFamily(
            "kiln_gpu_health", "Each GPU's health: 1 in its state (ok, or failed by an NVML "
            "fault until scontrol update State=RESUME)", labels=["node", "gpu", "state"])
        for node in sorted(nodes, key=lambda n: n.name):
            for gpu in node.gpus:
                for state in ("ok", "failed"):
                    family.add_metric([node.name, str(gpu.index), state],
                                      int((state == "failed") == bool(gpu.fault)))
        return family

    def _heartbeats(self, nodes: list[Any], now: float) -> Metric:
        family = GaugeMetricFamily(
            "kiln_agent_heartbeat_age_seconds",
            "Seconds since the node's agent last registered or heartbeat (large: not responding)",
            labels=["node"])
        for node in sorted(nodes, key=lambda n: n.name):
            age = now - node.last_heartbeat if node.last_heartbeat else float("inf")
            family.add_metric([node.name], age)
        return family

    def _fairshare(self) -> Metric:
        family = GaugeMetricFamily(
            "kiln_fairshare_factor", "Classic fair-share factor in [0, 1] per association "
            "(user '' = the account itself)", labels=["account", "user"])
        for (account, user), value in sorted(self.state.usage.fairshare.factors().items()):
            family.add_metric([account, user], value)
        return family


class _NoUse:
    cpus = memory_mb = gpus = jobs = 0


_NO_USE = _NoUse()


class SchedulerMetrics:
    """The registry behind the endpoint and the daemon's two event hooks."""

    def __init__(self, state: State, clock: Callable[[], float]):
        self.registry = CollectorRegistry(auto_describe=True)
        self.queue_wait = Histogram(
            "kiln_queue_wait_seconds", "Seconds from submission to start, per partition",
            ["partition"], buckets=WAIT_BUCKETS, registry=self.registry)
        self.cycle_seconds = Histogram(
            "kiln_scheduler_cycle_seconds", "Duration of one scheduling cycle (the pure core)",
            buckets=CYCLE_BUCKETS, registry=self.registry)
        self.starts = Counter("kiln_jobs_started", "Jobs started by the scheduler",
                              ["partition"], registry=self.registry)
        self.registry.register(StateCollector(state, clock))
        self.address: tuple[str, int] | None = None
        self._server: Any = None

    def job_started(self, job: Job, now: float) -> None:
        self.queue_wait.labels(job.partition).observe(max(now - job.submit_time, 0.0))
        self.starts.labels(job.partition).inc()

    def cycle_done(self, seconds: float) -> None:
        self.cycle_seconds.observe(seconds)

    def serve(self, host: str, port: int) -> tuple[str, int]:
        from prometheus_client import start_http_server

        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.address = (host, self._server.server_port)
        return self.address

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def start(cfg: Config, state: State, clock: Callable[[], float]) -> SchedulerMetrics | None:
    """The endpoint ``cfg.metrics_listen`` asks for, serving; None when it is not set."""
    listen = getattr(cfg, "metrics_listen", "")
    if not listen:
        return None
    host, port = parse_listen(listen)
    metrics = SchedulerMetrics(state, clock)
    bound = metrics.serve(host, port)
    log.info("metrics on http://%s:%d/metrics", *bound)
    return metrics
