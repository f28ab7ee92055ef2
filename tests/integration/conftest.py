"""Fixtures that start real clusters, on SQLite and on PostgreSQL alike."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.cluster import (
    BIN,
    Cluster,
    cleanup,
    make_user,
    remove_users,
    world_tempdir,
)
from tests.integration.sysbox import box  # noqa: F401  (the fixture, for every test here)
from tests.pgutil import fresh_database

BACKENDS = ["sqlite", "postgresql"]
# The modules whose clusters (the ``cluster`` and ``two_nodes`` fixtures) run on PostgreSQL as
# well as SQLite: those whose tests go through the ledger's SQL in ways the two backends could
# answer differently (jobs, accounts and accounting, requeue and holds, claims, reservations,
# restarts and crashes, what users may see, the fuzzer's odd strings). The others test
# terminals, signals, srun, the relay, GPUs and the commands' output, where the backend plays
# no part: they run on SQLite only (their PostgreSQL twins cost ~5 minutes of the suite, and
# ledger's own tests in tests/unit cover both backends).
LEDGER_MODULES = frozenset({
    "test_jobs", "test_accounts", "test_accounting", "test_jobcontrol", "test_claims",
    "test_reservations", "test_agent_restart", "test_crash", "test_privacy", "test_fuzz",
    "test_hostile_user", "test_trust_boundary", "test_preemption", "test_forecasts",
    "test_backfill", "test_node_failure", "test_reply_memory", "test_readme",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here starts real daemons: ``-m integration`` selects them, ``-m "not
    integration"`` leaves them out (pyproject.toml declares the marker). PostgreSQL twins
    outside ``LEDGER_MODULES`` are deselected (``KILN_TEST_ALL_BACKENDS=1`` keeps them)."""
    here = str(Path(__file__).parent)
    keep_all = os.environ.get("KILN_TEST_ALL_BACKENDS") == "1"
    selected, twins = [], []
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.integration)
            if not keep_all and "[postgresql" in item.nodeid and \
                    item.path.stem not in LEDGER_MODULES:
                twins.append(item)
                continue
        selected.append(item)
    if twins:
        config.hook.pytest_deselected(items=twins)
        items[:] = selected


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A test fails when a daemon of a cluster it used logged a traceback or an ``internal``
    error during it that the test did not expect (``Cluster.expect_log``); what the daemons
    log after the last test, and how they stop, ``Cluster.down`` checks."""
    result = yield
    for cluster in list(Cluster.live):
        cluster.check_logs()
    return result


@pytest.fixture(scope="session")
def other_user() -> Iterator[str]:
    """A second Unix user, for "someone else's job" (tests run as root, in CI too)."""
    if os.getuid() != 0:
        pytest.fail("the integration tests create Unix users and must run as root")
    name = make_user()
    probe = subprocess.run(["runuser", "-u", name, "--", str(BIN / "python"), "-c", "import zmq"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.fail(f"user {name} cannot run {BIN}/python ({probe.stderr.strip()[-200:]}); "
                    "the venv and checkout must be readable by other users")
    yield name
    remove_users()


def _cluster(request: pytest.FixtureRequest, backend: str, **kw) -> Iterator[Cluster]:
    with ExitStack() as stack:
        home = world_tempdir("kiln-it-")
        stack.callback(cleanup, home)
        if backend == "postgresql":
            url = stack.enter_context(fresh_database())
        else:
            url = f"sqlite:///{home}/kiln.db"
        cluster = Cluster(home=home, db_url=url, **kw)
        cluster.up()
        stack.callback(cluster.down)
        yield cluster


@pytest.fixture(scope="module", params=BACKENDS)
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """One node with 8 fake H100s, KillWait 3 s."""
    yield from _cluster(request, request.param, nodes=1, fake_gpus="8xH100-80GB", kill_wait=3)


@pytest.fixture(scope="module", params=BACKENDS)
def two_nodes(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Two nodes with 4 fake A100s each."""
    yield from _cluster(request, request.param, nodes=2, fake_gpus="4xA100", kill_wait=3)


@pytest.fixture
def workdir() -> Iterator:
    path = world_tempdir("kiln-job-")
    os.chmod(path, 0o777)
    yield path
    cleanup(path)
