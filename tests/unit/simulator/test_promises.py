"""Promises on a cluster of many nodes: the replay feeds each cycle's expected starts AND their
nodes back to the next cycle, so with exact estimates no job starts after its first reservation.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schedd.scheduler.cycle import schedule
from simulator.machine import gpu_cluster
from simulator.metrics import summarize
from simulator.policy import policy_config
from simulator.replay import replay
from simulator.swf import Trace, TraceJob

NODES, GPUS = 3, 4


def test_a_promised_gang_keeps_its_nodes():
    # 3 nodes x 4 GPUs, everything submitted at 0 with exact estimates. Job 5 (9 procs: 3 nodes
    # x 3 GPUs) is promised t=2, when job 3 frees two GPUs of one node; jobs 8 and 9 (1 GPU,
    # 2 s) are promised t=1 on the GPU each node keeps spare beside job 5. At t=1 they must go
    # to those spare GPUs: put both on job 3's node (best fit alone would) and job 5 slips to 3.
    spec = [(5, 1), (1, 1), (2, 2), (1, 1), (9, 1), (1, 1), (1, 1), (1, 2), (1, 2)]
    trace = Trace("gang", NODES * GPUS, [TraceJob(i + 1, 0, run, procs, run)
                                         for i, (procs, run) in enumerate(spec)])
    seen = []

    def core(snapshot, config):
        seen.append((snapshot.now, dict(snapshot.promised), dict(snapshot.promised_nodes)))
        return schedule(snapshot, config)

    result = replay(trace, gpu_cluster(NODES * GPUS, NODES, GPUS), policy_config("conservative"),
                    schedule=core)
    assert result.first_reservation == {5: 2, 8: 1, 9: 1}
    assert {r.job_id: r.start for r in result.records}[5] == 2
    now, promised, nodes = seen[1]
    assert (now, promised) == (1, {5: 2, 8: 1, 9: 1})
    assert len(nodes[5]) == 3 and all(len(nodes[j]) == 1 for j in (8, 9))


@st.composite
def traces(draw) -> Trace:
    jobs, submit = [], 0
    for job_id in range(1, draw(st.integers(2, 12)) + 1):
        submit += draw(st.integers(0, 4))
        run = draw(st.integers(1, 12))
        jobs.append(TraceJob(job_id, submit, run, draw(st.integers(1, NODES * GPUS)), run))
    return Trace(name="random", max_procs=NODES * GPUS, jobs=jobs)


@settings(max_examples=120, deadline=None)
@given(trace=traces(), policy=st.sampled_from(["easy", "conservative", "kiln"]))
def test_no_promise_is_broken_with_exact_estimates(trace, policy):
    machine = gpu_cluster(NODES * GPUS, NODES, GPUS)
    result = replay(trace, machine, policy_config(policy))
    metrics = summarize(result, machine.capacity)
    assert metrics.violations == metrics.late_vs_last == 0
