"""Random streams of whole-GPU and shard jobs (gres/shard) through the core, cycle after cycle:
a GPU is never used whole and by shards at once, never holds more shards than it has, the
core is deterministic, a promised start is kept, and every job runs in the end."""

from __future__ import annotations

import copy
import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.config import SchedulerConfig
from kiln.model import GPU
from schedd.scheduler.cycle import schedule
from schedd.scheduler.fragment import StartHistory
from schedd.scheduler.snapshot import NodeView, PendingJob, RunningJob, Snapshot


@st.composite
def clusters(draw) -> list[NodeView]:
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        gpus = draw(st.integers(1, 4))
        nodes.append(NodeView(f"n{i}", draw(st.integers(4, 16)), 1000,
                              [GPU(g, f"n{i}-{g}", "A100", 1) for g in range(gpus)], "a100",
                              shards_per_gpu=draw(st.sampled_from([1, 2, 4]))))
    return nodes


configs = st.builds(SchedulerConfig, backfill=st.booleans(),
                    bf_max_reservations=st.sampled_from([1, 3, 100]),
                    bf_resolution=st.sampled_from([1, 60]),
                    fill=st.sampled_from(["priority", "area"]))


def check(nodes: list[NodeView], running: dict[int, RunningJob]) -> None:
    for node in nodes:
        whole: list[int] = []
        shards: dict[int, int] = {}
        cpus = 0
        for run in running.values():
            for a in run.allocation:
                if a.node == node.name:
                    cpus += a.cpus
                    whole.extend(a.gpus)
                    for g, n in a.shards.items():
                        shards[g] = shards.get(g, 0) + n
        assert cpus <= node.cpus
        assert len(whole) == len(set(whole)), "a GPU given whole twice"
        assert not set(whole) & set(shards), "a GPU used whole and by shards at once"
        assert all(n <= node.shards_per_gpu for n in shards.values()), "a GPU over its shards"
        assert set(whole) | set(shards) <= {g.index for g in node.gpus}


@settings(max_examples=200, deadline=None)
@given(data=st.data(), config=configs)
def test_shard_and_whole_gpu_streams(data, config: SchedulerConfig) -> None:
    nodes = data.draw(clusters())
    min_gpus = min(len(n.gpus) for n in nodes)
    min_shards = min(len(n.gpus) * n.shards_per_gpu for n in nodes)
    min_cpus = min(n.cpus for n in nodes)
    specs = {}
    t = 0.0
    for job_id in range(1, data.draw(st.integers(1, 14)) + 1):
        t += data.draw(st.sampled_from([0, 0, 30, 300]))
        shard = data.draw(st.booleans())
        specs[job_id] = (t, data.draw(st.sampled_from([60, 301, 900, 3600])), PendingJob(
            job_id, f"j{job_id}", num_nodes=data.draw(st.integers(1, len(nodes))),
            cpus_per_node=data.draw(st.integers(1, min_cpus)),
            gpus_per_node=0 if shard else data.draw(st.integers(0, min_gpus)),
            shards_per_node=data.draw(st.integers(1, min_shards)) if shard else 0,
            time_limit=3600, submit_time=t))
    events = [(s[0], 1, j) for j, s in specs.items()]
    heapq.heapify(events)
    pending: dict[int, PendingJob] = {}
    running: dict[int, RunningJob] = {}
    promised: dict[int, float] = {}
    promised_nodes: dict[int, list[str]] = {}
    first: dict[int, float] = {}
    cycles = 0
    # half the streams as the daemon schedules them: by the fragmentation measure
    history = StartHistory() if data.draw(st.booleans()) else None
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _t, kind, job_id = heapq.heappop(events)
            if kind == 0:
                del running[job_id]
            else:
                pending[job_id] = specs[job_id][2]
        snap = Snapshot(now, nodes, list(running.values()), list(pending.values()),
                        promised=promised, promised_nodes=promised_nodes,
                        gpu_history=history.snapshot(now) if history else None)
        decisions = schedule(snap, config)
        cycles += 1
        assert cycles < 5000
        assert decisions == schedule(copy.deepcopy(snap), config), "not deterministic"
        for start in decisions.starts:
            job = pending.pop(start.job_id)
            if start.job_id in first:
                assert now <= first[start.job_id], "a promised start was not kept"
            for a in start.allocation:
                assert sum(a.shards.values()) == job.shards_per_node
                assert len(a.gpus) == job.gpus_per_node
            if history is not None:
                history.record(start.allocation, now)
            # every job runs its whole limit: the plan's ends are the real ones
            running[start.job_id] = RunningJob(start.job_id, start.allocation, now, now + 3600)
            heapq.heappush(events, (now + 3600, 0, start.job_id))
        check(nodes, running)
        for job_id, at in decisions.expected_start.items():
            assert at >= now
            first.setdefault(job_id, at)
        promised, promised_nodes = decisions.expected_start, decisions.reserved_nodes
        assert "BadConstraints" not in decisions.reasons.values()
    assert not pending, "jobs left waiting on an idle cluster"
