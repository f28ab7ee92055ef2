"""Property tests of the job lifecycle's one door (``schedd/lifecycle/transitions.py``).

Random sequences of lifecycle events over a few jobs, in any order and interleaving, go through
the real transitions (``start_runs``, ``request_stop``, ``cancel_pending``, ``end_run``), the real
scontrol requeue handler, the real node-silence path (``health.fail_run``), on a real ``State``
over a real SQLite ledger. After every step, for every job, reading the ledger's events and the
job (in memory and as the ledger holds it):

- every run (each RUNNING event) has exactly one end event (COMPLETED, FAILED, CANCELLED, TIMEOUT,
  NODE_FAIL, OUT_OF_MEMORY, PREEMPTED or REQUEUED) after it and before the next RUNNING, followed
  by exactly one REQUEUED event (the job going back to the queue) when, and only when, the job
  was requeued; a run still going has none; no run is recorded twice (a second report for a run
  that has ended is dropped, and the number of runs is the job's generation);
- each end is the one the ordered judges promise (cancel > preemption > stop > node failure's
  requeue > what the agent saw), computed by a small model of the marks kept by this test;
- a job's ``stop``/``preempt`` mark is None or carries the job's current generation while it is
  RUNNING/COMPLETING, and is None whenever it is PENDING or finished; the preemption tracker
  holds no victim that is not running;
- a stale report (another generation, or a job not running) changes nothing: not the job, not
  the ledger, not the agents;
- a cancelled job never runs again; memory and the ledger agree.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.config import Config
from kiln.identity import Caller
from kiln.model import Job, JobState, Node, NodeAllocation, PreemptMark
from schedd.domain.steps import StepTable, placed
from schedd.handlers import jobcontrol
from schedd.ledger.migrate import upgrade
from schedd.ledger.store import Store
from schedd.lifecycle import health, transitions
from schedd.lifecycle.transitions import RunEnd
from schedd.lifecycle.victims import Tracker
from schedd.state import RUNNING_STATES, State

T0 = 3_000_000.0
N_JOBS = 3
ENDS = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                  "PREEMPTED", "REQUEUED"})
REPORTABLE = sorted(ENDS)
# the finished states an agent's report is taken at its word for (REQUEUED is schedd's to
# decide, by a stop mark: reported on its own it is taken as FAILED, like the odd ones below)
TAKEN = ENDS - {"REQUEUED"}
# what an agent might (wrongly) report too: taken as FAILED
ODD_REPORTS = ["RUNNING", "PENDING", "COMPLETING", "BOGUS", ""]
ROOT = Caller(0, 0)
USER_UID = 1000


# --- the world: a real State over a real ledger, agents faked ---------------------------------


class Agents:
    """Records what schedd tells the agents."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.confirmed: set[tuple[int, int]] = set()
        self.checkpoints: dict[int, float] = {}

    def launch(self, job: Job, array_ids: tuple[int, ...] = ()) -> None:
        self.calls.append(("launch", job.id, job.generation, job.launched_limit))
        self.confirmed.add((job.id, job.generation))
        self.checkpoints[job.id] = 0.0

    def terminate(self, job: Job, state: str) -> None:
        self.calls.append(("terminate", job.id, job.generation, state))

    def signal(self, job: Job, signum: int, batch_only: bool) -> None:
        self.calls.append(("signal", job.id, job.generation, signum, batch_only))

    def fence(self, node: str, job_id: int, generation: int) -> None:
        self.calls.append(("fence", node, job_id, generation))

    def terminate_steps(self, node: str, job_id: int, step_id: int | None, state: str) -> None:
        self.calls.append(("terminate_steps", node, job_id, step_id, state))

    def forget_run(self, job_id: int, generation: int) -> None:
        self.calls.append(("forget_run", job_id, generation))
        self.confirmed.discard((job_id, generation))
        self.checkpoints.pop(job_id, None)


@dataclass
class Ctx:
    cfg: Config
    state: State
    agents: Agents
    steps: StepTable
    preemption: Tracker
    planner: Any = None
    clock: float = T0
    wakes: int = 0

    def now(self) -> float:
        return self.clock

    def wake_scheduler(self) -> None:
        self.wakes += 1


_TEMPLATE: dict[str, Path] = {}


def _template() -> Path:
    """A migrated ledger, made once; every example works on a copy of it."""
    if "db" not in _TEMPLATE:
        d = Path(tempfile.mkdtemp(prefix="kiln-lifecycle-props-"))
        upgrade(f"sqlite:///{d}/template.db")
        _TEMPLATE["db"] = d / "template.db"
    return _TEMPLATE["db"]


@pytest.fixture(scope="module", autouse=True)
def _drop_template():
    yield
    if "db" in _TEMPLATE:
        shutil.rmtree(_TEMPLATE.pop("db").parent, ignore_errors=True)


def make_world(home: Path, requeue_flags: list[bool], time_limits: list[int | None]) -> Ctx:
    db = home / "kiln.db"
    shutil.copyfile(_template(), db)
    url = f"sqlite:///{db}"
    cfg = Config(home=home, db_url=url)
    state = State(cfg, Store(url))
    state.nodes["n1"] = Node("n1", 64, 64_000, last_heartbeat=T0)
    jobs = [Job(id=i + 1, name=f"j{i + 1}", user="alice", uid=USER_UID, gid=USER_UID,
                account="root", partition="gpu", submit_time=T0, eligible_time=T0,
                time_limit=time_limits[i], requeue=requeue_flags[i], script="#!/bin/sh\n")
            for i in range(len(requeue_flags))]
    state.add_jobs(jobs, [])
    return Ctx(cfg, state, Agents(), StepTable(), Tracker())


# --- a model of what each run's end must be --------------------------------------------------


@dataclass
class Model:
    """What this test knows of one job: its marks per generation, and its history."""

    cancelled: bool = False  # a cancel was accepted (its run ends CANCELLED, for good)
    stop: tuple[int, str, str, bool, bool] | None = None  # (gen, cause, ended, requeue, hold)
    preempt: tuple[int, str] | None = None  # (gen, mode)
    ended_runs: set[int] = field(default_factory=set)  # generations whose end was recorded
    requeues: int = 0
    history: list[str] = field(default_factory=list)


def expected_verdict(job: Job, m: Model, observed: str) -> tuple[str, bool, bool]:
    """(state, requeued, held) the judges must give the end of ``job``'s current run."""
    seen = observed if observed in TAKEN else "FAILED"
    gen = job.generation
    if m.cancelled:
        return "CANCELLED", False, False
    if m.preempt is not None and m.preempt[0] == gen:
        return "PREEMPTED", m.preempt[1] == "requeue" and job.requeue, False
    if m.stop is not None and m.stop[0] == gen:
        _, cause, ended, requeue, hold = m.stop
        state = "NODE_FAIL" if seen == "NODE_FAIL" else ended
        requeued = requeue and (job.requeue or cause != "node_down")
        return state, requeued, hold and requeued
    if seen == "NODE_FAIL" and job.requeue:
        return "NODE_FAIL", True, False
    return seen, False, False


# --- what a step may be ----------------------------------------------------------------------

# how often each kind of step is drawn: starts and ends often (nothing happens to a job that
# never starts), cancels rarely (a cancelled job is done with)
KINDS = ["start"] * 6 + ["report"] * 5 + ["requeue"] * 3 + ["silence"] * 2 + ["preempt"] * 2 \
    + ["timeout"] + ["release"] * 2 + ["cancel"]


@st.composite
def step(draw) -> tuple[Any, ...]:
    kind = draw(st.sampled_from(KINDS))
    # which job: the n-th of those the step can act on (``aimed``), else job n whatever its
    # state (the step is then refused or dropped, and must change nothing)
    job = (draw(st.integers(0, N_JOBS - 1)), draw(st.sampled_from([True, True, True, False])))
    if kind == "requeue":
        return (kind, job, draw(st.booleans()))  # scontrol requeuehold
    if kind == "report":
        return (kind, job, draw(st.sampled_from([0, 0, 0, -1, -2, 1])),  # generation offset
                draw(st.sampled_from(REPORTABLE + REPORTABLE + ODD_REPORTS)),
                draw(st.integers(0, 255)))
    if kind == "cancel":
        return (kind, job, draw(st.sampled_from([0, USER_UID])))
    if kind == "preempt":
        return (kind, job, draw(st.sampled_from(["requeue", "cancel"])), draw(st.booleans()),
                draw(st.sampled_from(REPORTABLE)))
    return (kind, job)


steps = st.lists(step(), min_size=20, max_size=60)


def frozen(ctx: Ctx, job: Job) -> tuple[Any, ...]:
    """Everything a report could change, to see that a stale one changes nothing."""
    return (copy.deepcopy(dataclasses.asdict(job)), _events(ctx, job.id),
            list(ctx.agents.calls), dict(ctx.preemption.victims), ctx.wakes)


def _events(ctx: Ctx, job_id: int) -> list[tuple[str, str]]:
    return [(e.state, e.detail) for e in ctx.state.store.job_events(job_id)]


def report(ctx: Ctx, m: Model, job: Job, gen: int, observed: str, exit_code: int) -> None:
    """An agent's end report for run ``gen`` of ``job``: recorded as the judges say, or (for
    another run, or a run already ended) dropped without a trace."""
    current = gen == job.generation and job.state in RUNNING_STATES
    before = frozen(ctx, job)
    if current:
        want = expected_verdict(job, m, observed)
    ctx.clock += 1
    took = transitions.end_run(ctx, job, RunEnd(gen, observed, ctx.clock, exit_code=exit_code,
                                                 stats={"cpu_user": 1.0}, detail="agent"))
    if not current:
        assert took is False, (job.id, gen, job.generation, job.state)
        assert frozen(ctx, job) == before, "a stale report changed something"
        return
    assert took is True
    settled(ctx, m, job, gen, want)


def settled(ctx: Ctx, m: Model, job: Job, gen: int, want: tuple[str, bool, bool]) -> None:
    """After the end of run ``gen`` was recorded: the job is as the verdict said."""
    state, requeued, held = want
    assert gen not in m.ended_runs, f"run {gen} of job {job.id} recorded twice"
    m.ended_runs.add(gen)
    events = _events(ctx, job.id)
    if requeued:
        m.requeues += 1
        assert job.state == JobState.PENDING, (job.state, want, events)
        assert events[-2][0] == state and events[-1][0] == "REQUEUED", (events, want)
        assert job.held == ("user" if held else ""), (job.held, want, events)
    else:
        assert job.state.value == state, (job.state, want, events)
        assert events[-1][0] == state, (events, want)
    m.stop = m.preempt = None
    if state == "CANCELLED" or m.cancelled:
        m.cancelled = True


# the states a step of each kind acts on
ACTS_ON = {"start": {JobState.PENDING}, "requeue": {JobState.RUNNING},
           "silence": RUNNING_STATES, "report": RUNNING_STATES, "preempt": {JobState.RUNNING},
           "timeout": {JobState.RUNNING}, "release": {JobState.PENDING},
           "cancel": {JobState.PENDING, JobState.RUNNING}}


def target(ctx: Ctx, kind: str, n: int, aimed: bool) -> int:
    if aimed:
        fit = [j.id for j in ctx.state.jobs.values() if j.state in ACTS_ON[kind]]
        if fit:
            return fit[n % len(fit)]
    return n + 1


def apply(ctx: Ctx, models: list[Model], step: tuple[Any, ...]) -> None:
    kind = step[0]
    job_id = target(ctx, kind, *step[1])
    job, m = ctx.state.jobs[job_id], models[job_id - 1]
    ctx.clock += 1
    now = ctx.clock
    m.history.append(kind)
    if kind == "start":
        if job.state != JobState.PENDING or job.held:
            return  # the scheduler starts only pending, released jobs
        assert not m.cancelled, "a cancelled job is pending again"
        gen = job.generation
        transitions.start_runs(ctx, [(job, *placed([NodeAllocation("n1", 1, 0, [])]))], now)
        assert job.state == JobState.RUNNING and job.generation == gen + 1
        assert job.launched_limit == job.time_limit
        assert ctx.agents.calls[-1] == ("launch", job.id, gen + 1, job.time_limit)
    elif kind == "requeue":
        hold = step[2]
        body: dict[str, Any] = {"job_ids": [str(job.id)]}
        if hold:
            body["hold"] = True
        can = job.state == JobState.RUNNING and job.requeue
        reply = jobcontrol.requeue(ctx, ROOT, body)
        assert (reply["errors"] == []) == can, (reply, job.state, job.requeue)
        if can:
            assert job.state == JobState.COMPLETING
            assert job.stop is not None and job.stop.generation == job.generation
            m.stop = (job.generation, "requeue", "REQUEUED", True, hold)
    elif kind == "silence":
        if job.state not in RUNNING_STATES:
            before = frozen(ctx, job)
            health.fail_run(ctx, job, now, "node n1 not responding")
            assert frozen(ctx, job) == before, "a silent node changed a job not running"
            return
        gen = job.generation
        want = expected_verdict(job, m, "NODE_FAIL")
        health.fail_run(ctx, job, now, "node n1 not responding")
        settled(ctx, m, job, gen, want)
    elif kind == "report":
        report(ctx, m, job, job.generation + step[2], step[3], step[4])
    elif kind == "cancel":
        actor = step[2]
        if job.state == JobState.PENDING:
            transitions.cancel_pending(ctx, [job], actor, now)
            assert job.state == JobState.CANCELLED and job.cancelled_by == actor
            m.cancelled = True
        elif job.state == JobState.RUNNING:  # scancel leaves a COMPLETING job be
            transitions.request_stop(ctx, [job], "cancel", JobState.CANCELLED, now,
                                     actor=actor, detail="scancel")
            assert job.state == JobState.COMPLETING and job.cancelled_by == actor
            assert job.stop is not None and job.stop.generation == job.generation
            m.cancelled = True
            m.stop = (job.generation, "cancel", "CANCELLED", False, False)
        else:
            before = frozen(ctx, job)
            transitions.cancel_pending(ctx, [job], actor, now)
            assert frozen(ctx, job) == before
    elif kind == "preempt":
        mode, report_now, observed = step[2], step[3], step[4]
        if job.state != JobState.RUNNING:
            return  # preemption marks running jobs only
        mark = PreemptMark(job.generation, by=99, at=now, deadline=now, mode=mode)
        ctx.state.commit([(job, {"preempt": mark})])
        ctx.preemption.victims[job.id] = mark
        m.preempt = (job.generation, mode)
        if report_now:
            report(ctx, m, job, job.generation, observed, 0)
    elif kind == "timeout":
        if job.state != JobState.RUNNING:
            return
        transitions.request_stop(ctx, [job], "time_limit", JobState.TIMEOUT, now,
                                 detail="time limit")
        m.stop = (job.generation, "time_limit", "TIMEOUT", False, False)
    elif kind == "release":
        if job.state == JobState.PENDING and job.held == "user":
            ctx.state.commit([(job, {"held": "", "reason": "None"})])


def check(ctx: Ctx, models: list[Model]) -> None:
    for job_id, job in ctx.state.jobs.items():
        m = models[job_id - 1]
        events = ctx.state.store.job_events(job_id)
        states = [e.state for e in events]
        # split into runs: what follows each RUNNING up to the next
        runs: list[list[str]] = []
        for s in states:
            if s == "RUNNING":
                runs.append([])
            elif runs:
                runs[-1].append(s)
            else:  # before the first run: only a cancel of a pending job may end it
                assert s in ("CANCELLED",), states
        assert len(runs) == job.generation, ("runs recorded", states, job.generation)
        requeued = 0
        for n, run in enumerate(runs):
            ends = [s for s in run if s in ENDS]
            last = n == len(runs) - 1
            if last and job.state in RUNNING_STATES:
                assert ends == [], ("a live run with an end", states)
                continue
            assert ends, ("a run that ended without an end event", states)
            assert run[-len(ends):] == ends, ("events after a run's end", states)
            # the run's one end, then (requeued) the job back in the queue, where it may be
            # cancelled before it runs again
            tail = ends[1:]
            assert tail in ([], ["REQUEUED"], ["REQUEUED", "CANCELLED"]), (
                "a run with more than one end", states)
            requeued += bool(tail)
            if not last:
                assert tail == ["REQUEUED"], ("ran again without a requeue", states)
            elif tail == []:
                assert job.state.value == ends[0], ("ended as", job.state, states)
            elif tail == ["REQUEUED"]:
                assert job.state == JobState.PENDING, ("requeued but", job.state, states)
            else:
                assert job.state == JobState.CANCELLED, (job.state, states)
        assert requeued == job.restart_count == m.requeues, (states, job.restart_count)
        # the marks never outlive their run
        for mark in (job.stop, job.preempt):
            if job.state in RUNNING_STATES:
                assert mark is None or mark.generation == job.generation, (job, states)
            else:
                assert mark is None, (job.state, mark, states)
        if job.state not in RUNNING_STATES:
            assert job_id not in ctx.preemption.victims, (job.state, ctx.preemption.victims)
        if job.state == JobState.PENDING:
            assert job.launched_limit is None, job
        # a cancelled job never runs again
        if m.cancelled:
            assert "CANCELLED" in states or job.state in RUNNING_STATES, states
            if "CANCELLED" in states:
                assert job.state == JobState.CANCELLED, (job.state, states)
                assert "RUNNING" not in states[states.index("CANCELLED"):], states
        # memory and the ledger agree
        (stored,) = ctx.state.store.query_jobs(job_ids=[job_id])
        for name in ("state", "generation", "restart_count", "stop", "preempt",
                     "cancelled_by", "held", "launched_limit", "node_list"):
            assert getattr(stored, name) == getattr(job, name), (name, stored, job)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(seq=steps,
       requeue_flags=st.lists(st.sampled_from([True, True, False]), min_size=N_JOBS,
                              max_size=N_JOBS),
       limits=st.lists(st.sampled_from([None, 5, 600]), min_size=N_JOBS, max_size=N_JOBS))
def test_every_run_ends_once_and_no_mark_outlives_it(seq, requeue_flags, limits) -> None:
    with tempfile.TemporaryDirectory(prefix="kiln-lc-") as tmp:
        ctx = make_world(Path(tmp), requeue_flags, limits)
        try:
            models = [Model() for _ in range(N_JOBS)]
            check(ctx, models)
            for step in seq:
                apply(ctx, models, step)
                check(ctx, models)
        finally:
            ctx.state.store.close()


def test_requeue_then_node_silence_then_a_completed_run() -> None:
    """The issue's second reproduction: requeue a job, let its node go silent, let the next
    run end COMPLETED: the events read RUNNING, COMPLETING, NODE_FAIL, REQUEUED, RUNNING,
    COMPLETED, and the job does not run a third time."""
    with tempfile.TemporaryDirectory(prefix="kiln-lc-") as tmp:
        ctx = make_world(Path(tmp), [True], [600])
        try:
            job = ctx.state.jobs[1]
            transitions.start_runs(ctx, [(job, *placed([NodeAllocation("n1", 1, 0, [])]))], ctx.clock)
            assert jobcontrol.requeue(ctx, ROOT, {"job_ids": ["1"]}) == {"errors": []}
            ctx.clock += 5
            health.fail_run(ctx, job, ctx.clock, "node n1 not responding")
            assert (job.state, job.restart_count, job.stop) == (JobState.PENDING, 1, None)
            ctx.clock += 5
            transitions.start_runs(ctx, [(job, *placed([NodeAllocation("n1", 1, 0, [])]))], ctx.clock)
            ctx.clock += 5
            assert transitions.end_run(ctx, job, RunEnd(job.generation, "COMPLETED", ctx.clock))
            assert job.state == JobState.COMPLETED and job.restart_count == 1
            assert [e.state for e in ctx.state.store.job_events(1)] == [
                "RUNNING", "COMPLETING", "NODE_FAIL", "REQUEUED", "RUNNING", "COMPLETED"]
            # the old run's agent coming back with its report changes nothing
            assert not transitions.end_run(ctx, job, RunEnd(1, "REQUEUED", ctx.clock + 1))
            assert job.state == JobState.COMPLETED
        finally:
            ctx.state.store.close()


@pytest.mark.parametrize("reported", REPORTABLE + ODD_REPORTS)
def test_whatever_an_agent_reports_the_job_is_not_left_in_limbo(reported: str) -> None:
    """An end report for a run nobody asked to stop, whatever state it names, leaves the job
    finished (or back in the queue): never in a state that is neither (REQUEUED with no
    requeue: not pending, so never run; not finished, so never purged)."""
    with tempfile.TemporaryDirectory(prefix="kiln-lc-") as tmp:
        ctx = make_world(Path(tmp), [True], [600])
        try:
            job = ctx.state.jobs[1]
            transitions.start_runs(ctx, [(job, *placed([NodeAllocation("n1", 1, 0, [])]))], ctx.clock)
            assert transitions.end_run(ctx, job, RunEnd(job.generation, reported,
                                                        ctx.clock + 5))
            assert job.state.finished or job.state == JobState.PENDING, job.state
            assert job.stop is None and job.preempt is None
        finally:
            ctx.state.store.close()
