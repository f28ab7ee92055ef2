"""Schedules pinned: every policy's replay of two small seeded traces, on the pool and on the
GPU model, digested (each job's start and its allocation, node by node), against the digests
main's code gave before the replay fast paths (scheduler/replan.py, the walk's tail bounds).
A change that alters any decision of any policy shows here; one meant to alter them must say
so and pin the new digests.

The traces: 400 jobs on 64 processors, arrivals bursty enough to build a queue; one with exact
estimates (every job ends when planned), one whose jobs mostly end early (estimates up to 4x
the run), so both the carried plan and its fallback are replayed."""

from __future__ import annotations

import hashlib
import random

import pytest

from schedd.scheduler.cycle import schedule as core
from simulator.machine import gpu_cluster, pool
from simulator.policy import POLICIES, policy_config
from simulator.replay import replay
from simulator.swf import Trace, TraceJob

PROCS = 64


def seeded_trace(seed: int, exact: bool, jobs: int = 400) -> Trace:
    """A reproducible trace (random.Random is stable across Python versions for these calls)."""
    rng = random.Random(seed)
    out, t = [], 0
    for job_id in range(1, jobs + 1):
        t += rng.choice((0, 0, 1, 5, 30, 120, 600))
        run = rng.choice((5, 20, 60, 300, 900, 3600))
        procs = rng.choice((1, 1, 2, 4, 8, 8, 16, 32, 48, 64))
        estimate = run if exact else run * rng.choice((1, 1, 2, 4))
        out.append(TraceJob(job_id, float(t), float(run), procs, float(estimate),
                            user=rng.randint(1, 5), group=rng.randint(1, 2)))
    return Trace(f"seeded-{seed}", PROCS, out)


def digest(trace: Trace, policy: str, gpu: bool) -> str:
    machine = gpu_cluster(PROCS, None, 8) if gpu else pool(PROCS)
    starts: list[str] = []

    def schedule(snapshot, config):
        decisions = core(snapshot, config)
        for s in decisions.starts:
            starts.append(f"{s.job_id} {snapshot.now:g} " + " ".join(
                f"{a.node}:{a.cpus}:{a.memory_mb}:{','.join(map(str, a.gpus))}"
                for a in s.allocation))
        return decisions

    replay(trace, machine, policy_config(policy), schedule)
    return hashlib.sha256("\n".join(sorted(starts)).encode()).hexdigest()[:16]


GOLDEN = {  # (policy, GPU model, exact estimates): digest, from main at 441ac6c
    ('fcfs', False, True): '40715e34bc73be4f',
    ('fcfs', False, False): '05e780f1e025b0e0',
    ('fcfs', True, True): '87aed30de1e628b9',
    ('fcfs', True, False): '18a779305b67216b',
    ('easy', False, True): 'f3c08355070f35dd',
    ('easy', False, False): '14d8d668dd273c78',
    ('easy', True, True): '3f80a01a753ba859',
    ('easy', True, False): 'bfda5c8ac188f308',
    ('conservative', False, True): '39d5a49f4073fe4c',
    ('conservative', False, False): '7f320f916fff8002',
    ('conservative', True, True): '978024eed758299e',
    ('conservative', True, False): '7221ce63d2163b8d',
    ('kiln', False, True): 'c48f50be285806cc',
    ('kiln', False, False): '42880f7a53524d48',
    ('kiln', True, True): 'c3a885291654c574',
    ('kiln', True, False): '7cb89707583faf13',
}


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "early"])
@pytest.mark.parametrize("gpu", [False, True], ids=["pool", "gpu"])
@pytest.mark.parametrize("policy", POLICIES)
def test_schedules_are_pinned(policy, gpu, exact):
    trace = seeded_trace(18, exact)
    assert digest(trace, policy, gpu) == GOLDEN[(policy, gpu, exact)]
