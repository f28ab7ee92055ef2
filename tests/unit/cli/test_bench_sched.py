"""``kiln bench sched`` prints the cycle's wall and CPU time and its memory."""

from __future__ import annotations

from click.testing import CliRunner

from cli.bench import bench


def figures(*args: str) -> dict[str, float]:
    result = CliRunner().invoke(bench, ["sched", "--jobs", "300", "--nodes", "30",
                                        "--repeat", "1", *args])
    assert result.exit_code == 0, result.output
    return {k: float(v) for k, v in (line.split() for line in result.output.splitlines()
                                     if line and " " in line and not line.startswith("timing"))}


def test_prints_time_cpu_and_memory() -> None:
    out = figures()
    for name in ("cycle_s", "cycle_min_s", "cycle_cpu_s", "rss_mb", "cycle_peak_mb"):
        assert name in out
    assert out["cycle_peak_mb"] > 0 and out["rss_mb"] > out["cycle_peak_mb"]
    assert out["pending"] == 300


def test_no_memory_leaves_the_traced_cycle_out() -> None:
    assert "cycle_peak_mb" not in figures("--no-memory")
