"""The step and allocation handlers' tests' context (test_steps.py, test_salloc.py): a job of
two nodes running in a real ledger on both databases (the ``ledger_store`` of
tests/unit/conftest.py), with a State that keeps only what those handlers touch and the agents
replaced by a recorder. A module that builds its context another way (tests/builders.py's
``handler_context``) defines its own ``ctx`` fixture, which pytest takes over this one."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kiln.config import Config
from kiln.model import Job, JobState, NodeAllocation
from kiln.wire import operations, protocol
from schedd.domain.dependents import Dependents
from schedd.ledger.records import StepRecord
from schedd.ledger.store import Store
from schedd.state import State
from tests.builders import HandlerContext


@pytest.fixture
def store(ledger_store: Store) -> Store:
    return ledger_store


@dataclass
class Agents:
    sent: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    confirmed: set[tuple[int, int]] = field(default_factory=set)  # runs their node started

    def launch_step(self, node: str, step: dict[str, Any]) -> None:
        protocol.check(step, operations.STEP_LAUNCH_FIELDS, "launch_step")
        self.sent.append(("launch_step", node, step))

    def terminate_steps(self, node: str, job_id: int, step_id: int | None, state: str) -> None:
        self.sent.append(("terminate_steps", node, {"job_id": job_id, "step_id": step_id,
                                                    "state": state}))

    def step_input(self, node: str, body: dict[str, Any]) -> None:
        protocol.check(body, operations.SCHEDD_TO_AGENT_OPS["step_input"], "step_input")
        self.sent.append(("step_input", node, body))

    def terminate(self, job: Job, state: str) -> None:
        self.sent.append(("terminate", job.batch_host, {"job_id": job.id, "state": state}))

    def forget_run(self, job_id: int, generation: int) -> None:
        self.sent.append(("forget_run", "", {"job_id": job_id}))


class FakeState:
    def __init__(self, store: Store):
        self.store = store
        self.jobs: dict[int, Job] = {}
        # State.commit keeps the dependency index and the users' dependency edges in step
        self.dependents = Dependents()
        self._array_summaries: dict = {}
        self._edges: dict = {}
        self._edge_exprs: dict = {}
        self.user_edges: Counter[str] = Counter()
        self.state_counts: Counter[str] = Counter()  # State.commit counts state entries (sdiag)

    def time_limit(self, job: Job) -> int | None:
        return job.time_limit

    # State.commit feeds the forecasts' run-time history and lead record; not what these
    # tests are about
    def _record_run(self, job: Job) -> None:
        pass

    def _record_lead(self, job: Job) -> None:
        pass

    # the ledger-first writes of the real State (the one door)
    commit = State.commit
    _state_changed = State._state_changed
    _count_edges = State._count_edges
    _uncount_edges = State._uncount_edges
    save_steps = State.save_steps
    end_step = State.end_step


@pytest.fixture
def ctx(store: Store, tmp_path: Path) -> HandlerContext:
    c = HandlerContext(FakeState(store), Config(home=tmp_path, kill_wait=3), [1000.0],
                       agents=Agents())
    job = Job(id=7, name="train", user="alice", uid=1000, gid=1000, state=JobState.RUNNING,
              workdir="/work", num_nodes=2, ntasks_per_node=2, start_time=990.0,
              time_limit=600, batch_host="node1", launched_limit=600, generation=1,
              allocation=[NodeAllocation("node1", 4, 100, [0, 1], [0, 1, 2, 3]),
                          NodeAllocation("node2", 4, 100, [2, 3], [8, 9, 10, 11])])
    store.insert_jobs([job])
    c.state.jobs[7] = job
    store.save_steps([StepRecord(job_id=7, step_id="batch", name="batch", node_list="node1",
                                 cpus=4, state="RUNNING", start_time=990.0)])
    return c
