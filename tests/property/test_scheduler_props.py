"""Property tests of the scheduler core on random clusters and job streams.

A small discrete-event loop drives ``schedule`` the way the daemon and the simulator do (a
cycle at every arrival and every end, the previous cycle's expected starts and reserved nodes
fed back as promises, jobs that run exactly their limit) and checks after every cycle:

- no node's CPUs, memory or GPUs are ever over-allocated, no GPU index is given twice;
- a gang starts whole (``num_nodes`` distinct nodes, each with its full share) or not at all;
- no job starts later than the first expected start the plan gave it;
- the decisions are a function of the snapshot (same snapshot, same decisions);
- asking for no reasons or priorities (``Snapshot.explain``), and vouching for a queue of plain
  arrivals when it is one (``Snapshot.plain_arrivals``), as the simulator does, changes no start
  and no plan;
- the queue drains (no job waits forever on a cluster that can hold it).
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.config import SchedulerConfig
from kiln.model import GPU
from schedd.scheduler.cycle import schedule
from schedd.scheduler.fragment import StartHistory
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot


@dataclass
class JobSpec:
    job_id: int
    submit: float
    run: int
    num_nodes: int
    cpus: int
    mem: int
    gpus: int
    exclusive: bool
    nice: int


@st.composite
def clusters(draw) -> list[NodeView]:
    count = draw(st.integers(1, 4))
    nodes = []
    for i in range(count):
        gpus = draw(st.sampled_from([0, 2, 4, 8]))
        islands = draw(st.integers(1, 2))
        nodes.append(NodeView(
            name=f"n{i}", cpus=draw(st.integers(2, 16)), memory_mb=draw(st.integers(1, 4)) * 1000,
            gpus=[GPU(g, f"n{i}-{g}", "H100", 1, island=g * islands // max(gpus, 1))
                  for g in range(gpus)],
            gpu_type="h100",
        ))
    return nodes


@st.composite
def streams(draw, nodes: list[NodeView]) -> list[JobSpec]:
    min_cpus = min(n.cpus for n in nodes)
    min_mem = min(n.memory_mb for n in nodes)
    min_gpus = min(len(n.gpus) for n in nodes)
    jobs = []
    t = 0.0
    for job_id in range(1, draw(st.integers(1, 18)) + 1):
        t += draw(st.sampled_from([0, 0, 7, 30, 61, 300, 1000]))
        jobs.append(JobSpec(
            job_id=job_id, submit=t, run=draw(st.sampled_from([5, 59, 60, 120, 301, 900, 3600])),
            num_nodes=draw(st.integers(1, len(nodes))), cpus=draw(st.integers(1, min_cpus)),
            mem=draw(st.integers(0, min_mem)), gpus=draw(st.integers(0, min_gpus)),
            exclusive=draw(st.booleans()) and draw(st.booleans()),
            nice=draw(st.sampled_from([0, 0, 50, -50])),
        ))
    return jobs


configs = st.builds(
    SchedulerConfig,
    backfill=st.booleans(),
    bf_max_reservations=st.sampled_from([1, 2, 3, 100]),
    bf_resolution=st.sampled_from([1, 60]),
    fill=st.sampled_from(["priority", "area", "short_area", "hole_area"]),
    bf_short_job=st.sampled_from([0, 60, 600]),
    weight_job_size=st.sampled_from([0, 1000]),
    favor_small=st.booleans(),
)


def check_allocation(nodes: list[NodeView], running: dict[int, RunningJob]) -> None:
    by_name = {n.name: n for n in nodes}
    cpus = {n.name: 0 for n in nodes}
    mem = {n.name: 0 for n in nodes}
    gpus: dict[str, list[int]] = {n.name: [] for n in nodes}
    for run in running.values():
        for a in run.allocation:
            cpus[a.node] += a.cpus
            mem[a.node] += a.memory_mb
            gpus[a.node].extend(a.gpus)
    for name, node in by_name.items():
        assert cpus[name] <= node.cpus, f"CPUs over-allocated on {name}"
        assert mem[name] <= node.memory_mb, f"memory over-allocated on {name}"
        assert len(gpus[name]) == len(set(gpus[name])), f"a GPU given twice on {name}"
        assert set(gpus[name]) <= {g.index for g in node.gpus}, f"unknown GPU on {name}"


def check_gang(spec: JobSpec, allocation, nodes: list[NodeView]) -> None:
    assert len(allocation) == spec.num_nodes
    assert len({a.node for a in allocation}) == spec.num_nodes
    by_name = {n.name: n for n in nodes}
    for a in allocation:
        node = by_name[a.node]
        if spec.exclusive:
            assert (a.cpus, a.memory_mb, len(a.gpus)) == (node.cpus, node.memory_mb,
                                                          len(node.gpus))
        else:
            assert (a.cpus, a.memory_mb, len(a.gpus)) == (spec.cpus, spec.mem, spec.gpus)


def check_quiet(snap: Snapshot, config: SchedulerConfig, decisions) -> None:
    """The simulator's snapshot of the same state: no explanations; plain arrivals when the
    queue (in arrival order here) has one nice value."""
    plain = len({j.nice for j in snap.pending}) <= 1
    quiet = schedule(dataclasses.replace(snap, explain=False, plain_arrivals=plain), config)
    assert (quiet.starts, quiet.expected_start, quiet.reserved_nodes) == (
        decisions.starts, decisions.expected_start, decisions.reserved_nodes)


def replay(nodes: list[NodeView], specs: list[JobSpec], config: SchedulerConfig,
           frag: bool = False) -> None:
    """``frag``: the snapshots carry a start history, as the daemon's do, so GPU jobs start
    where the fragmentation measure says (scheduler/fragment.py)."""
    history = StartHistory() if frag else None
    specs_by_id = {s.job_id: s for s in specs}
    events: list[tuple[float, int, int]] = [(s.submit, 1, s.job_id) for s in specs]
    heapq.heapify(events)
    pending: dict[int, PendingJob] = {}
    running: dict[int, RunningJob] = {}
    promised: dict[int, float] = {}
    promised_nodes: dict[int, list[str]] = {}
    first_promise: dict[int, float] = {}
    cycles = 0
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _t, kind, job_id = heapq.heappop(events)
            s = specs_by_id[job_id]
            if kind == 0:
                del running[job_id]
            else:
                pending[job_id] = PendingJob(
                    job_id, f"j{job_id}", num_nodes=s.num_nodes, cpus_per_node=s.cpus,
                    mem_per_node_mb=s.mem, gpus_per_node=s.gpus, exclusive=s.exclusive,
                    time_limit=s.run, submit_time=s.submit, nice=s.nice,
                )
        snap = Snapshot(now, nodes, list(running.values()), list(pending.values()),
                        promised=promised, promised_nodes=promised_nodes,
                        gpu_history=history.snapshot(now) if history else None)
        decisions = schedule(snap, config)
        cycles += 1
        assert cycles < 10_000
        assert decisions == schedule(copy.deepcopy(snap), config), "not deterministic"
        check_quiet(snap, config, decisions)
        assert set(decisions.priorities) == set(pending)
        started = {s.job_id for s in decisions.starts}
        assert set(decisions.reasons) == set(pending) - started
        for start in decisions.starts:
            spec = specs_by_id[start.job_id]
            assert start.job_id in pending
            check_gang(spec, start.allocation, nodes)
            if start.job_id in first_promise:
                assert now <= first_promise[start.job_id], (
                    f"job {start.job_id} promised {first_promise[start.job_id]} started {now}")
            del pending[start.job_id]
            if history is not None:
                history.record(start.allocation, now)
            running[start.job_id] = RunningJob(start.job_id, start.allocation, now, now + spec.run)
            heapq.heappush(events, (now + spec.run, 0, start.job_id))
        check_allocation(nodes, running)
        for job_id, t in decisions.expected_start.items():
            assert t >= now
            first_promise.setdefault(job_id, t)
        promised, promised_nodes = decisions.expected_start, decisions.reserved_nodes
        # every generated job fits the cluster (streams() sizes it to the smallest node)
        never_fits = sorted(j for j, r in decisions.reasons.items() if r == "BadConstraints")
        assert not never_fits, f"jobs {never_fits} judged never to fit"
    assert not pending, "jobs left waiting on an idle cluster"


@settings(max_examples=300, deadline=None)
@given(data=st.data(), config=configs)
def test_random_streams(data, config: SchedulerConfig) -> None:
    nodes = data.draw(clusters())
    specs = data.draw(streams(nodes))
    replay(nodes, specs, config, frag=data.draw(st.booleans()))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_single_big_node_pool(data) -> None:
    """The simulator's shape: one node of many CPUs, no GPUs, EASY and kiln's default."""
    nodes = [NodeView("pool", 64, 0)]
    specs = data.draw(st.lists(
        st.tuples(st.sampled_from([0, 1, 10, 100]), st.integers(1, 64),
                  st.sampled_from([1, 9, 10, 600, 601, 5000])),
        min_size=1, max_size=30,
    ))
    jobs, t = [], 0.0
    for k, (gap, procs, run) in enumerate(specs, start=1):
        t += gap
        jobs.append(JobSpec(k, t, run, 1, procs, 0, 0, False, 0))
    for config in (SchedulerConfig(bf_resolution=1),
                   SchedulerConfig(bf_resolution=1, bf_max_reservations=1, fill="priority"),
                   SchedulerConfig(bf_resolution=1, backfill=False)):
        replay(nodes, jobs, config)
