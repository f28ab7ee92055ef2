"""A link that fails one way (docs/robustness.md, "Fencing"): node2's agent reaches schedd
through a relay (tests/integration/oneway.py) that holds one direction's bytes.

- The agent hears nothing, schedd hears it: its heartbeats keep node2 up in schedd's eyes, but
  they are no proof that schedd hears the agent, so the job's supervisor fences the job after
  ``fence_timeout``, and its NODE_FAIL report reaches schedd over the way still open.
- schedd hears nothing, the agent hears schedd's commands (here: scancel --signal, once or
  twice a second): commands are no proof either, so the fence still falls ``fence_timeout``
  after the last heartbeat schedd answered, and the old run is gone when schedd requeues the
  job. (Before, any word from schedd restarted the clock and the run lived on.)

SQLite only: what is under test is the agent's clock, not the ledger.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from kiln import keys
from tests.integration.cluster import Cluster, cleanup, node_state, pid_exists, until, world_tempdir
from tests.integration.conftest import _cluster
from tests.integration.oneway import OneWay, one_way

NODE_TIMEOUT = 12.0
FENCE_TIMEOUT = 8.0


@dataclass
class Link:
    cluster: Cluster
    relay: OneWay
    agent: subprocess.Popen


@pytest.fixture(scope="module")
def link(request: pytest.FixtureRequest) -> Iterator[Link]:
    """node1's agent as kiln up starts it; node2's through the relay, with a config of its
    own that names the relay as schedd's endpoint."""
    with ExitStack() as stack:
        gen = _cluster(request, "sqlite", nodes=1, fake_gpus="4xA100", kill_wait=2,
                       node_timeout=NODE_TIMEOUT, schedd_extra=f"fence_timeout = {FENCE_TIMEOUT}")
        cluster = next(gen)
        stack.callback(next, gen, None)
        conf = (cluster.home / "kiln.toml").read_text()
        port = int(re.search(r'agent_endpoint = "tcp://127\.0\.0\.1:(\d+)"', conf)[1])
        relay = stack.enter_context(one_way(("127.0.0.1", port)))
        node2_conf = cluster.home / "node2.toml"
        node2_conf.write_text(conf.replace("[agent]\n", f'[agent]\nschedd = "{relay.endpoint}"\n'))
        keys.generate_cluster(cluster.home / "keys", ["node2"])
        agent = subprocess.Popen(
            [sys.executable, "-m", "agentd.daemon", "--config", str(node2_conf), "--node", "node2",
             "--fake-gpus", "4xA100", "--cpus", "64", "--spool", str(cluster.home / "spool" / "node2"),
             "--log-file", str(cluster.home / "log" / "agentd-node2.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=cluster.env)
        stack.callback(_stop, agent)
        until(lambda: node_state(cluster, "node2") == "idle", "node2 registered", 30)
        yield Link(cluster, relay, agent)


def _stop(agent: subprocess.Popen) -> None:
    if agent.poll() is None:
        agent.terminate()
        try:
            agent.wait(timeout=20)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait(timeout=10)


def _pid(path: Path) -> int:
    return int(until(lambda: path.exists() and path.read_text().split() and
                     path.read_text().split()[0], f"{path.name} written", 30))


def _back(link: Link) -> None:
    """Both ways open again; node2 heard and idle once its jobs are gone."""
    for direction in ("up", "down"):
        link.relay.release(direction)
    link.cluster.run("scancel", "-u", "root")
    until(lambda: node_state(link.cluster, "node2") == "idle", "node2 idle again", 60)


def test_an_agent_that_hears_nothing_fences_though_schedd_hears_it(link: Link) -> None:
    cluster = link.cluster
    workdir = world_tempdir("kiln-1way-")
    try:
        job_id = cluster.sbatch("-w", "node2", "--no-requeue", "--wrap", "echo $$ > pid; sleep 600",
                                cwd=workdir)
        cluster.wait(job_id, {"RUNNING"})
        pid = _pid(workdir / "pid")
        link.relay.hold("down")
        cut_at = time.monotonic()
        try:
            until(lambda: not pid_exists(pid), "the deaf agent's job fenced", FENCE_TIMEOUT + 20)
            # the report went the way still open: schedd ends the run as the fence says
            assert cluster.wait(job_id, {"NODE_FAIL", "COMPLETED", "FAILED", "CANCELLED"},
                                timeout=30)["state"] == "NODE_FAIL"
            text = (workdir / f"slurm-{job_id}.out").read_text()
            assert "node node2 has not heard the controller for" in text
            time.sleep(max(0.0, cut_at + NODE_TIMEOUT + 2 - time.monotonic()))
            # past node_timeout, schedd still hears node2's heartbeats: not DOWN
            assert node_state(cluster, "node2") in ("idle", "mixed", "completing")
        finally:
            _back(link)
    finally:
        cleanup(workdir)


def test_commands_that_still_arrive_do_not_keep_a_cut_off_run_alive(link: Link) -> None:
    cluster = link.cluster
    workdir = world_tempdir("kiln-1way-")
    try:
        blocker = cluster.sbatch("-w", "node1", "--gres=gpu:4", "--wrap", "sleep 600",
                                 cwd=workdir)
        cluster.wait(blocker, {"RUNNING"})
        victim = cluster.sbatch("--gres=gpu:2", "--requeue", "--wrap",
                                "echo $$ >> pids; sleep 600", cwd=workdir)
        chatter = cluster.sbatch("-w", "node2", "--gres=gpu:2", "--no-requeue", "--wrap",
                                 "trap '' USR1; while true; do sleep 1; done", cwd=workdir)
        assert cluster.wait(victim, {"RUNNING"})["node_list"] == "node2"
        cluster.wait(chatter, {"RUNNING"})
        first = _pid(workdir / "pids")
        link.relay.hold("up")
        try:
            def requeued() -> bool:  # schedd keeps talking to node2 until it calls it DOWN
                cluster.run("scancel", "--signal=USR1", str(chatter))
                return cluster.job(victim)["restart_count"] == 1

            until(requeued, "the cut-off node's job requeued", NODE_TIMEOUT + 30)
            # fenced on node2 before schedd requeued it, commands heard or not
            assert not pid_exists(first), "the old run lives on beside its requeued copy"
            assert node_state(cluster, "node2") == "down"
        finally:
            _back(link)
        assert cluster.wait(victim, {"CANCELLED"})["state"] == "CANCELLED"
    finally:
        cleanup(workdir)
