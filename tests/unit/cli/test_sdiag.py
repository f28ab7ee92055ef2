"""sdiag's report from known figures: Slurm 22.05's lines (labels, tabs, spacing) with kiln's
numbers, and --json's statistics."""

from __future__ import annotations

import time

import pytest

from cli import sdiag

FIGURES = {"req_time": 1_796_126_520, "req_time_start": 1_796_126_400, "cycles": 10,
           "last_us": 1500, "max_us": 9000, "sum_us": 25000, "depth_sum": 42, "last_depth": 4,
           "queue_len": 5, "queue_len_sum": 47, "last_when": 1_796_126_519, "backfilled": 2,
           "jobs": {"submitted": 9, "started": 4, "completed": 2, "canceled": 1, "failed": 0},
           "pending": 5, "running": 2}


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_report(utc) -> None:
    assert sdiag.text_report(FIGURES) == [
        "*" * 55,
        "sdiag output at Tue Dec 01 12:02:00 2026 (1796126520)",
        "Data since      Tue Dec 01 12:00:00 2026 (1796126400)",
        "*" * 55,
        "",
        "Jobs submitted: 9", "Jobs started:   4", "Jobs completed: 2", "Jobs canceled:  1",
        "Jobs failed:    0", "",
        "Job states ts:  Tue Dec 01 12:02:00 2026 (1796126520)",
        "Jobs pending:   5", "Jobs running:   2", "",
        "Main schedule statistics (microseconds):",
        "\tLast cycle:   1500", "\tMax cycle:    9000", "\tTotal cycles: 10",
        "\tMean cycle:   2500", "\tMean depth cycle:  4", "\tCycles per minute: 5",
        "\tLast queue length: 5", "",
        "Backfilling stats",
        "\tTotal backfilled jobs (since last slurm start): 2",
        "\tTotal backfilled jobs (since last stats cycle start): 2",
        "\tTotal backfilled heterogeneous job components: 0",
        "\tTotal cycles: 10",
        "\tLast cycle when: Tue Dec 01 12:01:59 2026 (1796126519)",
        "\tLast cycle: 1500", "\tMax cycle:  9000", "\tMean cycle: 2500",
        "\tLast depth cycle: 4", "\tLast depth cycle (try sched): 4",
        "\tDepth Mean: 4", "\tDepth Mean (try depth): 4",
        "\tLast queue length: 5", "\tQueue length mean: 4",
    ]


def test_before_any_cycle(utc) -> None:
    fresh = dict(FIGURES, cycles=0, last_when=0, req_time=FIGURES["req_time_start"] + 5)
    lines = sdiag.text_report(fresh)
    assert "\tLast cycle when: N/A" in lines
    assert not any(line.startswith(("\tMean", "\tCycles per minute", "\tDepth Mean"))
                   for line in lines)


def test_json() -> None:
    doc = sdiag.json_report(FIGURES)
    stats = doc["statistics"]
    assert doc["errors"] == [] and doc["meta"]["plugin"]["type"] == "openapi/v0.0.38"
    assert (stats["schedule_cycle_total"], stats["schedule_cycle_mean"],
            stats["schedule_cycle_per_minute"], stats["jobs_submitted"],
            stats["bf_backfilled_jobs"]) == (10, 2500, 5, 9, 2)
