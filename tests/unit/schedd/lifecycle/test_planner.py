"""The planner's part in the GPU placement (scheduler/fragment.py): it keeps the start history
and every snapshot carries it, decayed to the snapshot's time."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.model import Job, NodeAllocation
from schedd.lifecycle.agents import AgentRegistry
from schedd.lifecycle.planner import Planner
from schedd.lifecycle.victims import Tracker
from schedd.scheduler.fragment import HALF_LIFE
from schedd.scheduler.gpushare import WHOLE, Task
from schedd.scheduler.snapshot import Decisions, Start
from tests.builders import handler_context

NOW = 1_000_000.0


def test_the_snapshot_carries_the_decayed_starts(tmp_path: Path) -> None:
    ctx = handler_context(tmp_path, NOW, nodes=("n1",), partitions=(), accounts=False)
    state = ctx.state
    state.add_jobs([Job(id=1, submit_time=NOW, time_limit=60)], [])
    planner = Planner(ctx.cfg, state, AgentRegistry(ctx.cfg, lambda *a: None), Tracker())
    assert planner.snapshot(NOW)[0].gpu_history == ()  # the measure is on from the start
    planner.remember(Decisions(starts=[Start(5, [NodeAllocation("n1", 2, 100, [0, 1])])]), NOW)
    planner.remember(Decisions(starts=[Start(6, [NodeAllocation("n1", 1, 0, [], [], {2: 1}, 4)])]),
                     NOW + HALF_LIFE)
    history = dict(planner.snapshot(NOW + 2 * HALF_LIFE)[0].gpu_history)
    assert history == {Task(2, 100, 2, WHOLE): pytest.approx(0.25),
                       Task(1, 0, 1, WHOLE // 4): pytest.approx(0.5)}
    ctx.close()
