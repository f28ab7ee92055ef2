"""High availability: two schedds on one PostgreSQL ledger, a leader lease (an advisory lock on
the leader's own session) decides which one serves; kill -9 the leader and the standby takes
over, with every job, while agents and commands follow it to its endpoints. SQLite: refused."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.core.client import listening
from tests.integration.cluster import Cluster, cleanup, world_tempdir
from tests.integration.conftest import _cluster

HELD_JOBS = 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Cluster, subprocess.Popen]]:
    """A PostgreSQL cluster of one node whose schedd (started by `kiln up`) leads, and a
    standby schedd with endpoints of its own (this fixture's process)."""
    probe = world_tempdir("kiln-ha-")
    standby_client = f"ipc://{probe}/schedd2.sock"
    standby_agent = f"tcp://127.0.0.1:{_free_port()}"
    extra = (f'ha = true\nclient_peers = ["{standby_client}"]\n'
             f'agent_peers = ["{standby_agent}"]')
    gen = _cluster(request, "postgresql", nodes=1, fake_gpus="4xA100", kill_wait=2,
                   schedd_extra=extra)
    cluster = next(gen)
    standby = _start_schedd(cluster, standby_client, standby_agent, probe / "schedd2.log")
    try:
        _wait_log(probe / "schedd2.log", "standby: another schedd holds the leader lease")
        yield cluster, standby
    finally:
        try:
            next(gen, None)  # scancel everything, `kiln down` (and its checks), drop the database
        finally:
            if standby.poll() is None:
                standby.send_signal(signal.SIGTERM)
                standby.wait(timeout=15)
            cleanup(probe)


def _start_schedd(cluster: Cluster, client: str, agent: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "schedd.daemon", "--config", str(cluster.home / "kiln.toml"),
         "--client-endpoint", client, "--agent-endpoint", agent, "--log-file", str(log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=cluster.env, start_new_session=True)


def _wait_log(path: Path, text: str, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in {path}")


def _squeue_ids(cluster: Cluster) -> set[int]:
    res = cluster.run("squeue", "-h", "-o", "%i")
    return {int(x) for x in res.stdout.split()} if res.returncode == 0 else set()


def test_standby_takes_over_with_every_job_and_the_agent_follows(
        pair: tuple[Cluster, subprocess.Popen]) -> None:
    cluster, standby = pair
    workdir = world_tempdir("kiln-ha-job-")
    first = f"ipc://{cluster.socket}"
    second = standby.args[standby.args.index("--client-endpoint") + 1]
    # no two leaders: only the lease holder serves; the standby binds nothing
    assert (listening(first), listening(second)) == (True, False)
    try:
        running = cluster.sbatch("--wrap", "echo $$ > pid; sleep 600", cwd=workdir)
        cluster.wait(running, {"RUNNING"})
        held = {cluster.sbatch("--hold", "--wrap", "true", cwd=workdir)
                for _ in range(HELD_JOBS)}
        every = held | {running}
        assert _squeue_ids(cluster) == every
        leader = int((cluster.home / "run" / "schedd.pid").read_text())
        killed_at = time.time()
        cluster.expect_exit("schedd")  # the leader, killed on purpose; the standby leads
        os.kill(leader, signal.SIGKILL)
        deadline = killed_at + 60
        while _squeue_ids(cluster) != every:
            assert time.time() < deadline, "the standby never answered with every job"
            time.sleep(0.05)
        failover = time.time() - killed_at
        print(f"\nfailover (kill -9 of the leader -> standby answers squeue with all "
              f"{len(every)} jobs): {failover:.2f} s")
        assert standby.poll() is None
        # the agent followed: the running job is still reconciled and can be cancelled
        deadline = time.time() + 30
        while "node1 mixed" not in cluster.run("sinfo", "-h", "-N", "-o", "%N %T").stdout:
            assert time.time() < deadline, "node1 never registered with the new leader"
            time.sleep(0.2)
        state = cluster.run("squeue", "-h", "-j", str(running), "-o", "%T").stdout.strip()
        assert state == "RUNNING"
        new = cluster.run("sbatch", "--parsable", "--wrap", "true", cwd=workdir)
        assert new.returncode == 0, new.stderr
        assert int(new.stdout.strip()) > max(every)
        assert cluster.run("scancel", str(running)).returncode == 0
        deadline = time.time() + 30
        while _state(cluster, running) != "CANCELLED":
            assert time.time() < deadline, "the old leader's running job never ended"
            time.sleep(0.2)
        # the old leader comes back (`kiln up`) and stands by: one leader at a time
        res = cluster.run("kiln", "up")
        assert res.returncode == 0, res.stderr
        _wait_log(cluster.home / "log" / "schedd.log", "standby: another schedd holds")
        assert (listening(first), listening(second)) == (False, True)  # still one leader
        assert cluster.run("scancel", *map(str, held)).returncode == 0
    finally:
        cleanup(workdir)


def _state(cluster: Cluster, job_id: int) -> str:
    res = cluster.run("sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State")
    return res.stdout.strip().split()[0] if res.stdout.strip() else ""


def test_ha_on_sqlite_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    home = world_tempdir("kiln-ha-sqlite-")
    try:
        conf = home / "kiln.toml"
        conf.write_text(f'[schedd]\ndb_url = "sqlite:///{home}/kiln.db"\nha = true\n')
        res = subprocess.run([sys.executable, "-m", "schedd.daemon", "--config", str(conf)],
                             capture_output=True, text=True, timeout=30)
        assert res.returncode == 1
        assert res.stderr.startswith("schedd: error: high availability needs a PostgreSQL")
        assert len(res.stderr.strip().splitlines()) == 1
    finally:
        cleanup(home)
