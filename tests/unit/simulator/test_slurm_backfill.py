"""The model of Slurm 22.05's schedulers (simulator/slurm_backfill.py): the rules it cites, each
on a case small enough to work out by hand, and its schedules pinned by digest."""

from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from cli.kiln import main
from simulator.machine import gpu_cluster, pool
from simulator.policy import policy_config
from simulator.replay import replay
from simulator.slurm_backfill import SlurmParams, _FairTree, _Sim, replay_slurm
from simulator.slurm_validate import compare
from simulator.swf import Trace, TraceJob
from tests.unit.simulator.test_golden import PROCS, seeded_trace


def _trace(procs: int, *jobs: tuple[int, float, float, int, float]) -> Trace:
    return Trace("hand", procs, [TraceJob(i, s, r, p, e) for i, s, r, p, e in jobs])


def _starts(trace: Trace, params: SlurmParams | None = None) -> dict[int, float]:
    result = replay_slurm(trace, pool(trace.max_procs), params)
    return {r.job_id: r.start for r in result.replay.records}


def test_every_tested_job_gets_a_reservation():
    """11 CPUs. R1 (6 CPUs, 10 min) and R2 (4 CPUs, 20 min) run; B (8 CPUs) is planned when R2
    ends, C (6 CPUs) when R1 ends, over [600, 1200). D (1 CPU, 12 min) fits in the free CPU and
    would end before B's start, so EASY backfilling (one reservation) starts it at once; Slurm
    reserved C's span too, and D's 12 minutes overlap it on the only node: D waits."""
    trace = _trace(11, (1, 0, 600, 6, 600), (2, 0, 1200, 4, 1200),
                   (3, 1, 600, 8, 600), (4, 1, 600, 6, 600), (5, 1, 60, 1, 720))
    starts = _starts(trace)
    assert starts[1] == starts[2] == 3  # the main scheduler, batch_sched_delay after the submit
    assert starts[5] > 600  # not backfilled at the first cycle (30 s)
    easy = replay(trace, pool(11), policy_config("easy"))
    assert {r.job_id: r.start for r in easy.records}[5] == 1


def test_will_run_estimates_the_end_of_the_last_job_of_a_batch():
    """cons_tres removes running jobs in batches 30 s apart, then doubling: jobs planned to end
    at 610 and 640 go together (610 rounded up to 630, + 30), the one at 700 in the next; a job
    that needs only the first one's CPUs is given 640, not 610."""
    machine = pool(10)
    sim = _Sim(_trace(10, (1, 0, 1, 1, 60)), machine, SlurmParams())
    for job_id, (end, cpus) in enumerate(((610, 4), (640, 3), (700, 3)), start=1):
        tj = TraceJob(job_id, 0, end, cpus, end)
        sim.submit(tj, machine.shape(cpus), 0)
        sim.start(sim.pending[job_id], (0,), 0, "main")
        sim.running[job_id].limit_end = end
    sim.by_end = sorted((r.limit_end, i) for i, r in sim.running.items())
    waiting = TraceJob(9, 0, 60, 4, 60)
    sim.submit(waiting, machine.shape(4), 0)
    assert sim.will_run(sim.pending[9], 1, 0) == (640, (0,))
    wide = TraceJob(10, 0, 60, 8, 60)
    sim.submit(wide, machine.shape(8), 0)
    assert sim.will_run(sim.pending[10], 1, 0) == (700, (0,))


def test_main_scheduler_is_a_fifo_prefix():
    """With backfill too rare to matter, a job that fits waits behind the first that does not."""
    trace = _trace(4, (1, 0, 100, 3, 100), (2, 0, 100, 4, 100), (3, 0, 100, 1, 100))
    starts = _starts(trace, SlurmParams(bf_interval=10_000))
    assert starts[1] == 3
    assert starts[2] == 103  # the main pass at job 1's end
    assert starts[3] == 203  # behind job 2, though one CPU was free all along


def test_resolution_rounds_reservations_down():
    """R (3 of 4 CPUs) starts at 3 s with a 10-minute limit, so B (4 CPUs) is planned at 603,
    and its reservation starts at 600 with bf_resolution 60. The backfill cycle at 61 s tests a
    1-CPU job of 9 minutes, which would end at 601: after 600, so it waits; with
    bf_resolution 1 the reservation starts at 603 and the job goes ahead."""
    trace = _trace(4, (1, 0, 600, 3, 600), (2, 1, 60, 4, 60), (3, 1, 60, 1, 540))
    assert _starts(trace, SlurmParams(bf_interval=61))[3] > 600
    assert _starts(trace, SlurmParams(bf_interval=61, bf_resolution=1))[3] == 61


def test_fair_tree_ranks_users_by_level_fs():
    tree = _FairTree(7 * 86400)
    a, b, c = tree.assoc("g1", "u1"), tree.assoc("g1", "u2"), tree.assoc("g2", "u3")
    tree.usage = [100.0, 0.0, 50.0]
    tree.recompute()
    # account g2 (S 1/2, U 1/3) ranks above g1 (U 2/3); in g1, u2 (no usage) above u1
    assert tree.factor[c] == 1.0
    assert tree.factor[b] == pytest.approx(2 / 3)
    assert tree.factor[a] == pytest.approx(1 / 3)


def _digest(trace: Trace, gpu: bool) -> str:
    machine = gpu_cluster(PROCS, None, 8) if gpu else pool(PROCS)
    result = replay_slurm(trace, machine)
    text = "\n".join(f"{r.job_id} {r.start:g} {r.end:g}" for r in result.replay.records)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


GOLDEN = {  # (GPU model, exact estimates): digest of every job's start and end (remade when
    # the batch scheduler's timer stopped firing before the request that set it)
    (False, True): "6a9d39132d1da0e7",
    (False, False): "62a7d51c3f3e3ab0",
    (True, True): "446445a7a83342e3",
    (True, False): "624105a9113f3e54",
}


@pytest.mark.parametrize(("gpu", "exact"), sorted(GOLDEN))
def test_golden_digests(gpu, exact):
    assert _digest(seeded_trace(7, exact), gpu) == GOLDEN[(gpu, exact)]


def test_cli_policy_slurm(tmp_path):
    path = tmp_path / "t.swf"
    path.write_text("; MaxProcs: 4\n" + "".join(
        f"{i} {i * 10} -1 {50 + i} 2 -1 -1 2 {60 + i} -1 1 {i % 2} 1 -1 -1 -1 -1 -1\n"
        for i in range(1, 9)))
    result = CliRunner().invoke(main, ["sim", str(path), "--policy", "slurm"])
    assert result.exit_code == 0, result.output
    assert "policy                    slurm" in result.stdout
    assert "model of Slurm 22.05" in result.stdout
    refused = CliRunner().invoke(main, ["sim", str(path), "--policy", "slurm", "--forecasts"])
    assert refused.exit_code == 1
    assert "--forecasts needs kiln's core" in refused.output


def test_compare_counts_pairs_and_ranks():
    plan = {"jobs": [{"id": i} for i in (1, 2, 3)]}
    result = compare(plan, {1: 0.0, 2: 5.0, 3: 10.0}, {1: 0.0, 2: 12.0, 3: 10.5})
    assert result["pairs_same_order"] == pytest.approx(2 / 3)  # (2, 3) swapped
    assert result["jobs_same_rank"] == pytest.approx(1 / 3)
    assert result["median_start_diff_s"] == 0.5


def test_no_job_starts_before_it_is_submitted_after_an_idle_spell():
    """The batch scheduler's timer after an idle queue: last_sched_time is far behind, and a
    model that took it for the next pass started jobs before their submission."""
    trace = _trace(64, (1, 0.0, 10.0, 8, 10.0), (2, 5170.0, 60.0, 8, 60.0),
                   (3, 5171.0, 60.0, 64, 60.0), (4, 9000.0, 5.0, 1, 5.0))
    records = replay_slurm(trace, pool(64)).replay.records
    assert all(r.start >= r.submit for r in records), [(r.job_id, r.submit, r.start)
                                                       for r in records]
    assert {r.job_id for r in records} == {1, 2, 3, 4}


@pytest.mark.parametrize(("gpu", "exact"), sorted(GOLDEN))
def test_no_start_before_submission_on_the_seeded_traces(gpu, exact):
    machine = gpu_cluster(PROCS, None, 8) if gpu else pool(PROCS)
    records = replay_slurm(seeded_trace(7, exact), machine).replay.records
    assert all(r.start >= r.submit for r in records)
