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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here starts real daemons: ``-m integration`` selects them, ``-m "not
    integration"`` leaves them out (pyproject.toml declares the marker)."""
    here = str(Path(__file__).parent)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.integration)


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
