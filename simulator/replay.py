"""Replay a trace through the real scheduler core on a virtual clock.

The loop, event by event:

1. take the next instant ``now``: the earliest pending arrival or job end;
2. apply every event at ``now`` at once: ends free their resources, arrivals join the queue;
3. run ONE scheduling cycle, ``schedule(Snapshot(now, ...), config)``, over the whole state,
   feeding back the previous cycle's expected starts and their nodes as ``Snapshot.promised``
   and ``Snapshot.promised_nodes`` (as the daemon does), the plan itself (``Decisions.memo``
   as ``Snapshot.memo``: conservative backfill then plans only what changed,
   ``schedd.scheduler.replan``), the count of overtaking (``Decisions.passed_over``, for
   ``bf_overtake``: ``schedd.scheduler.overtake``) and, when fair share weighs, the
   associations' decayed usage (``simulator.usage``);
4. start the decided jobs at ``now`` (each ends at ``now + run``; the core was told
   ``now + estimate``), and note every reservation the plan made (``Decisions.expected_start``).

The queue and the running set are dictionaries updated per event, and their PendingJob and
RunningJob objects are made once per job, so building a snapshot is two list copies. The loop
reads only the starts and the plan, so its snapshots ask for no reasons or priorities
(``Snapshot.explain``) and, when the trace is in (submit time, job id) order (``read_swf``
sorts it so), vouch that the queue is one of plain arrivals (``Snapshot.plain_arrivals``): a
subsequence of the trace, in its order, of jobs ``Machine.pending`` made alike. The core then
does no work per waiting job that the replay would not use.

The loop also checks the core: a start for a job not pending, or one that overcommits a node,
is a SimError, and so is a queue the core leaves waiting on an idle machine.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

from kiln.config import SchedulerConfig
from schedd.scheduler.forecast import Forecast
from schedd.scheduler.fragment import StartHistory
from schedd.scheduler.snapshot import Decisions, PendingJob, RunningJob, Snapshot, Start
from simulator.forecasts import SimForecaster
from simulator.machine import Machine, Shape
from simulator.swf import Trace, TraceJob
from simulator.usage import UsageLedger

GPU_PLACEMENTS = ("bestfit", "frag")  # replay's gpu_placement (kiln sim --gpu-placement)

Scheduler = Callable[[Snapshot, SchedulerConfig], Decisions]


class SimError(Exception):
    """The replay cannot go on: the core decided something impossible or stopped making progress."""


@dataclass(slots=True)
class JobRecord:
    """One replayed job: the CSV row plus what the metrics need."""

    job_id: int
    submit: float
    start: float
    end: float
    procs: int  # processors in the trace
    units: int  # CPUs or GPUs it held on the simulated machine
    run: float
    user: int = -1  # the trace's user number (-1: unknown)


@dataclass(slots=True)
class Replay:
    records: list[JobRecord]
    first_reservation: dict[int, float]  # job -> the first expected start the plan gave it
    last_reservation: dict[int, float]  # job -> the expected start in force when it started
    cycles: int
    core_seconds: float  # inside schedule()
    wall_seconds: float  # the whole loop, core included
    not_fitting: int = 0  # trace jobs larger than the simulated cluster, dropped
    # job -> its p50 and p90 start, published when it arrived (``forecasts=True`` only)
    forecasts: dict[int, Forecast] = field(default_factory=dict)
    model: str = ""  # not kiln's core: the scheduler model that made it (simulator/slurm_backfill.py)

    @property
    def jobs_per_second(self) -> float:
        return len(self.records) / self.wall_seconds if self.wall_seconds > 0 else 0.0


@dataclass(slots=True)
class _State:
    """The simulated cluster between events; what a snapshot is cut from."""

    machine: Machine
    pending: dict[int, PendingJob] = field(default_factory=dict)
    running: dict[int, RunningJob] = field(default_factory=dict)
    jobs: dict[int, tuple[TraceJob, Shape]] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)
    free_cpus: dict[str, int] = field(default_factory=dict)
    free_gpus: dict[str, int] = field(default_factory=dict)
    ends: list[tuple[float, int]] = field(default_factory=list)  # heap of (end, job id)
    records: list[JobRecord] = field(default_factory=list)
    usage: UsageLedger | None = None  # only when the policy weighs fair share
    predictor: SimForecaster | None = None  # predictions or forecasts (sim/forecasts.py)

    def __post_init__(self) -> None:
        for node in self.machine.nodes:
            self.free_cpus[node.name] = node.cpus
            self.free_gpus[node.name] = len(node.gpus)


class _Promises:
    """The expected starts the core gave: fed back to the next cycle, and kept per job (the
    first one, and the latest) to count the promises that were broken."""

    def __init__(self) -> None:
        self.times: dict[int, float] = {}  # the last cycle's, for jobs still pending
        self.nodes: dict[int, list[str]] = {}
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}

    def update(self, decisions: Decisions) -> None:
        """Take the plan of a cycle whose starts were applied. The plan names only jobs of that
        cycle's queue, so those still pending are the plan less the jobs it started; this runs
        every cycle and the plan can be as long as the queue, so only C-level passes over it
        (the first promise is noted for the jobs new to the plan: a set difference with the
        last plan, not a pass over every job ever promised)."""
        before = self.times
        self.times = dict(decisions.expected_start)
        self.nodes = dict(decisions.reserved_nodes)
        for start in decisions.starts:
            self.times.pop(start.job_id, None)
            self.nodes.pop(start.job_id, None)
        for job_id in self.nodes.keys() - self.times.keys():  # nodes held without a start
            del self.nodes[job_id]
        for job_id in self.times.keys() - before.keys():
            self.first.setdefault(job_id, self.times[job_id])
        self.last.update(self.times)


PROGRESS_EVERY = 256  # cycles between two calls of replay's ``progress``


def replay(
    trace: Trace, machine: Machine, config: SchedulerConfig, schedule: Scheduler | None = None,
    progress: Callable[[int, int], None] | None = None, forecasts: bool = False,
    gpu_placement: str = "bestfit",
) -> Replay:
    """Replay ``trace`` on ``machine`` under ``config``; ``schedule`` defaults to kiln's core.
    ``progress`` (kiln sim's bar) is told (jobs arrived, jobs in all) every few cycles.
    ``forecasts``: publish each waiting job's p50 and p90 start at its arrival
    (``sim/forecasts.py``); with the policy's ``predict_runtime`` the plan uses predictions.
    ``gpu_placement`` "frag": the snapshots carry the replay's start history (decayed on the
    virtual clock), so GPU jobs are placed as the daemon places them, by the fragmentation
    measure (``scheduler/fragment.py``); "bestfit" (the default): best fit."""
    if gpu_placement not in GPU_PLACEMENTS:
        raise SimError(f"GPU placement {gpu_placement!r} is not one of "
                       f"{', '.join(GPU_PLACEMENTS)}")
    history = StartHistory() if gpu_placement == "frag" else None
    if schedule is None:
        from schedd.scheduler.cycle import schedule
    state = _State(machine, usage=UsageLedger(config) if config.weight_fairshare else None)
    if forecasts or config.predict_runtime:
        state.predictor = SimForecaster(config, publish=forecasts)
    arrivals = [(job, shape) for job in trace.jobs if (shape := machine.shape(job.procs))]
    promises = _Promises()
    plain = _in_order(arrivals)
    cycles, core = 0, 0.0
    memo = None
    passed: dict[int, float] = {}
    began = time.perf_counter()
    i, n = 0, len(arrivals)
    inf = float("inf")
    while i < n or state.ends:
        now = min(arrivals[i][0].submit if i < n else inf, state.ends[0][0] if state.ends else inf)
        while state.ends and state.ends[0][0] == now:
            _finish(state, heapq.heappop(state.ends)[1], now)
        arrived = i
        while i < n and arrivals[i][0].submit == now:
            _arrive(state, *arrivals[i])
            i += 1
        if not state.pending:
            continue
        if state.predictor is not None:
            state.predictor.refresh(now, state.running)
        snapshot = Snapshot(now, machine.nodes, list(state.running.values()),
                            list(state.pending.values()),
                            state.usage.views(now) if state.usage else [],
                            promises.times, promises.nodes, explain=False,
                            plain_arrivals=plain, memo=memo, passed_over=passed,
                            gpu_history=history.snapshot(now) if history is not None else None)
        t0 = time.perf_counter()
        decisions = schedule(snapshot, config)
        core += time.perf_counter() - t0
        cycles += 1
        if progress is not None and cycles % PROGRESS_EVERY == 0:
            progress(i, n)
        for start in decisions.starts:
            _start(state, start, now)
            if history is not None:
                history.record(start.allocation, now)
        if state.predictor is not None and i > arrived:
            state.predictor.forecast(snapshot, [a.job_id for a, _ in arrivals[arrived:i]],
                                     {s.job_id for s in decisions.starts})
        promises.update(decisions)
        memo = decisions.memo  # the plan, for a policy that carries it (scheduler/replan.py)
        passed = decisions.passed_over  # overtaking counted per job (scheduler/overtake.py)
    if state.pending:
        raise SimError(
            f"the scheduler left {len(state.pending)} job(s) pending on an idle machine "
            f"(job {min(state.pending)} among them)"
        )
    wall = time.perf_counter() - began
    state.records.sort(key=lambda r: (r.submit, r.job_id))
    return Replay(state.records, promises.first, promises.last, cycles, core, wall,
                  len(trace.jobs) - n,
                  state.predictor.published if state.predictor is not None else {})


def _in_order(arrivals: list[tuple[TraceJob, Shape]]) -> bool:
    """Whether the arrivals rise in (submit time, job id): then every queue cut from them in
    arrival order does too (``Snapshot.plain_arrivals``)."""
    keys = [(job.submit, job.job_id) for job, _ in arrivals]
    return all(a < b for a, b in pairwise(keys))


def _arrive(state: _State, job: TraceJob, shape: Shape) -> None:
    state.jobs[job.job_id] = (job, shape)
    state.pending[job.job_id] = state.machine.pending(job, shape)
    if state.predictor is not None:
        state.predictor.arrive(state.pending[job.job_id])


def _start(state: _State, start: Start, now: float) -> None:
    pending = state.pending.pop(start.job_id, None)
    if pending is None:
        raise SimError(f"t={now:g}: the scheduler started job {start.job_id}, which is not pending")
    for alloc in start.allocation:
        if alloc.node not in state.free_cpus:
            raise SimError(f"t={now:g}: job {start.job_id} placed on unknown node {alloc.node!r}")
        state.free_cpus[alloc.node] -= alloc.cpus
        state.free_gpus[alloc.node] -= len(alloc.gpus)
        if state.free_cpus[alloc.node] < 0 or state.free_gpus[alloc.node] < 0:
            raise SimError(f"t={now:g}: starting job {start.job_id} overcommits node {alloc.node}")
    job, _ = state.jobs[start.job_id]
    state.running[start.job_id] = RunningJob(
        job_id=start.job_id,
        allocation=start.allocation,
        start_time=now,
        end_time=now + pending.time_limit,
        user=pending.user,
        account=pending.account,
    )
    state.started[start.job_id] = now
    if state.predictor is not None:
        state.predictor.started(pending, state.running[start.job_id])
    if state.usage:
        state.usage.start(pending, now)
    heapq.heappush(state.ends, (now + job.run, start.job_id))


def _finish(state: _State, job_id: int, now: float) -> None:
    running = state.running.pop(job_id)
    if state.usage:
        state.usage.end(job_id, now)
    for alloc in running.allocation:
        state.free_cpus[alloc.node] += alloc.cpus
        state.free_gpus[alloc.node] += len(alloc.gpus)
    job, shape = state.jobs.pop(job_id)
    start = state.started.pop(job_id)
    if state.predictor is not None:
        state.predictor.finished(job_id, now - start)
    state.records.append(
        JobRecord(job.job_id, job.submit, start, now, job.procs, shape.units, job.run, job.user)
    )
