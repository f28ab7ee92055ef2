"""Issue 12: ``sbatch --test-only`` and ``kiln why`` plan off schedd's loop (schedd/offload.py).

A second Unix user's request whose planning never ends (here: a test hook makes the planner
wait on a gate file, so "slow" needs no clock) must not hold anyone else: root's ``squeue``
is answered while the attacker's command is still waiting for its plan, and the attacker's
command gets its whole answer once the gate opens. Before the planning moved off the loop,
the hook held schedd's one thread and the squeue was not answered until the gate opened.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import BIN, Cluster, cleanup, world_tempdir
from tests.integration.conftest import _cluster

# Loaded by every Python of the cluster (PYTHONPATH); acts only where the planner's module is
# imported (schedd: the commands never import it). Each forecast waits until the gate is open.
HOOK = r'''
import importlib.abc, importlib.machinery, os, sys, time

GATE = os.environ.get("KILN_PLAN_GATE", "")


def _slowed(real):
    def forecasts(*args, **kwargs):
        open(os.path.join(GATE, "entered"), "w").close()
        deadline = time.monotonic() + 90  # never forever, whatever the test does
        while not os.path.exists(os.path.join(GATE, "open")) and time.monotonic() < deadline:
            time.sleep(0.05)
        return real(*args, **kwargs)
    return forecasts


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "schedd.scheduler.forecast":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.forecasts = _slowed(module.forecasts)
        spec.loader.exec_module = exec_module
        return spec


if GATE:
    sys.meta_path.insert(0, _Finder())
'''


@pytest.fixture(scope="module")
def gate() -> Iterator[Path]:
    path = world_tempdir("kiln-gate-")
    os.chmod(path, 0o755)
    (path / "hook").mkdir()
    (path / "hook" / "sitecustomize.py").write_text(HOOK)
    os.chmod(path / "hook", 0o755)
    os.chmod(path / "hook" / "sitecustomize.py", 0o644)
    yield path
    cleanup(path)


@pytest.fixture(scope="module")
def gated(request: pytest.FixtureRequest, gate: Path) -> Iterator[Cluster]:
    path = os.pathsep.join(p for p in (str(gate / "hook"), os.environ.get("PYTHONPATH")) if p)
    yield from _cluster(request, "sqlite", nodes=1, fake_gpus="2xH100-80GB", kill_wait=3,
                        extra_env={"PYTHONPATH": path, "KILN_PLAN_GATE": str(gate)})


def _as(cluster: Cluster, user: str, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["runuser", "-u", user, "--", "env", f"KILN_HOME={cluster.home}",
         f"PATH={cluster.env['PATH']}", str(BIN / argv[0]), *argv[1:]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/tmp", env=cluster.env)


@pytest.mark.parametrize("attack", ["test-only", "why"])
def test_a_users_planning_never_holds_another_users_squeue(gated: Cluster, gate: Path,
                                                           other_user: str,
                                                           attack: str) -> None:
    (gate / "open").touch()  # the jobs below are placed without waiting
    busy = gated.sbatch("-o", "/dev/null", "--gres=gpu:2", "--wrap", "sleep 300")
    # the other user's job only once ``busy`` holds the GPUs: submitted beside it while the
    # last test's job still ends, fair share would start it first (it ran and ended, and
    # kiln why then had nothing to plan)
    gated.wait(busy, {"RUNNING"})
    waiting = gated.sbatch("-o", "/dev/null", "--gres=gpu:2", "--wrap", "true",
                           user=other_user)
    for name in ("open", "entered"):
        (gate / name).unlink(missing_ok=True)
    argv = (["sbatch", "--test-only", "--gres=gpu:1", "--wrap", "true"] if attack == "test-only"
            else ["kiln", "why", str(waiting)])
    proc = _as(gated, other_user, *argv)
    try:
        deadline = time.monotonic() + 60
        while not (gate / "entered").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (gate / "entered").exists(), "the planner was never called"
        try:
            squeue = subprocess.run([str(BIN / "squeue"), "-h", "-o", "%i %t"],
                                    env=gated.env, capture_output=True, text=True, cwd="/tmp",
                                    timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("root's squeue was not answered while the other user's plan was made")
        assert squeue.returncode == 0, squeue.stderr
        assert f"{busy} R" in squeue.stdout.splitlines()
        assert proc.poll() is None, "the attacker's request was answered before its plan"
    finally:
        (gate / "open").touch()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    if attack == "test-only":
        assert err.startswith("sbatch: Job ") and " to start at " in err, err
    else:
        assert out.startswith(f"Job {waiting} ({other_user}"), out
    gated.run("scancel", str(busy), str(waiting))
