"""The benchmarks' agent swarm (bin/bench-scale) works: 20 emulated agents register with a real
schedd over CURVE, and 5 jobs submitted with the real sbatch run on them and end COMPLETED, as
squeue, sinfo and sacct say."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _bench():
    loader = importlib.machinery.SourceFileLoader("bench_scale", str(REPO / "bin" / "bench-scale"))
    spec = importlib.util.spec_from_loader("bench_scale", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _wait(predicate, limit: float, what: str) -> None:
    deadline = time.time() + limit
    while not predicate():
        assert time.time() < deadline, f"{what} not within {limit:.0f} s"
        time.sleep(0.2)


def test_twenty_emulated_agents_run_five_jobs(tmp_path: Path) -> None:
    bench = _bench()
    home = tmp_path / "home"
    home.mkdir()
    conf, env, schedd, workers, _ = bench.start_cluster(home, 20, 2, 1.0)
    bin_dir = bench.BIN
    work = home / "work"
    try:
        def idle() -> bool:
            out = _run([str(bin_dir / "sinfo"), "-h", "-N", "-o", "%N %t"], env, work)
            return out.count(" idle") == 20

        _wait(idle, 20, "20 emulated nodes idle")
        ids = [_run([str(bin_dir / "sbatch"), "--parsable", "--gres=gpu:8", "-o", "/dev/null",
                     "--wrap", "sleep 2"], env, work).strip() for _ in range(5)]
        running = _run([str(bin_dir / "squeue"), "-h", "-t", "R", "-o", "%i %N"], env, work)

        def all_running() -> bool:
            nonlocal running
            running = _run([str(bin_dir / "squeue"), "-h", "-t", "R", "-o", "%i %N"], env, work)
            return len(running.splitlines()) == 5

        _wait(all_running, 10, "5 jobs running")
        nodes = {line.split()[1] for line in running.splitlines()}
        assert len(nodes) == 5 and all(n.startswith("n000") for n in nodes)  # one per node

        def done() -> bool:
            out = _run([str(bin_dir / "sacct"), "-n", "-X", "-P", "-o", "JobID,State,ExitCode",
                        "-j", ",".join(ids)], env, work)
            return sorted(out.split()) == sorted(f"{i}|COMPLETED|0:0" for i in ids)

        _wait(done, 15, "the 5 jobs COMPLETED in sacct")
        assert _run([str(bin_dir / "squeue"), "-h"], env, work) == ""
        assert schedd.poll() is None and all(w.poll() is None for w in workers)
    finally:
        bench.stop_cluster(schedd, workers)
