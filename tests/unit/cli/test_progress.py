"""Progress bars of kiln's own long commands: drawn on a terminal, silent elsewhere, and fed
by the work itself (kiln sim's replay reports how far it is)."""

from __future__ import annotations

import io

from rich.console import Console

from cli.progress import progress
from simulator.machine import pool
from simulator.policy import policy_config
from simulator.replay import PROGRESS_EVERY, replay
from simulator.swf import parse_swf


def test_a_bar_is_drawn_on_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    with progress("replaying 3 jobs", 3, enabled=True, console=console) as update:
        for n in range(1, 4):
            update(n)
    text = out.getvalue()
    assert "replaying 3 jobs" in text and "━" in text


def test_nothing_is_drawn_elsewhere(capsys) -> None:
    with progress("upgrading", None, enabled=False) as update:
        update(1)
    assert capsys.readouterr() == ("", "")


def test_replay_reports_its_progress() -> None:
    jobs = PROGRESS_EVERY * 3  # one processor, one job at a time: a cycle per arrival
    lines = [f"{k} {k * 10} -1 5 1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1"
             for k in range(1, jobs + 1)]
    trace = parse_swf(["; MaxProcs: 1", *lines], name="steady")
    seen: list[tuple[int, int]] = []
    result = replay(trace, pool(1), policy_config("fcfs"),
                    progress=lambda done, total: seen.append((done, total)))
    assert len(result.records) == jobs
    assert seen and all(total == jobs for _, total in seen)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)  # only forward
    assert seen[-1][0] >= jobs - PROGRESS_EVERY
