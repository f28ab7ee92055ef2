"""``kiln bench``: benchmarks that print figures (``name value`` lines), never assert them.

``kiln bench sched`` times one full scheduling cycle of the pure core over a synthetic
snapshot: a seeded mix of 1-64-GPU jobs on a cluster of identical GPU nodes, about half of it
busy, with a fair-share tree of accounts and users.
"""

from __future__ import annotations

import random
import resource
import statistics
import sys
import time
import tracemalloc

import click

from kiln.config import SchedulerConfig
from kiln.model import GPU, NodeAllocation
from schedd.scheduler.snapshot import AssociationView, NodeView, PendingJob, RunningJob, Snapshot

NOW = 1_700_000_000.0
GPU_SIZES = (1, 2, 4, 8, 16, 32, 64)
GPU_WEIGHTS = (30, 20, 20, 15, 8, 5, 2)
LIMITS = (1800, 3600, 7200, 14400, 28800, 86400)
ACCOUNTS = 10
USERS_PER_ACCOUNT = 5


def make_nodes(count: int, gpus_per_node: int) -> list[NodeView]:
    islands = max(gpus_per_node // 4, 1)
    per_island = max(gpus_per_node // islands, 1)
    return [
        NodeView(
            name=f"gpu{i:05d}", cpus=max(8 * gpus_per_node, 8), memory_mb=64_000 * max(gpus_per_node, 1),
            gpus=[GPU(g, f"GPU-{i}-{g}", "H100-80GB", 81_559, island=g // per_island)
                  for g in range(gpus_per_node)],
            gpu_type="h100", partitions=frozenset({"gpu"}),
        )
        for i in range(count)
    ]


def _shape(rng: random.Random, gpus_per_node: int, max_nodes: int) -> tuple[int, int]:
    """(num_nodes, gpus_per_node) of a job drawn from the size mix."""
    total = rng.choices(GPU_SIZES, GPU_WEIGHTS)[0]
    if gpus_per_node <= 0:
        return 1, 0
    if total <= gpus_per_node:
        return 1, total
    return min(-(-total // gpus_per_node), max_nodes), gpus_per_node


def make_running(rng: random.Random, nodes: list[NodeView], busy: float) -> list[RunningJob]:
    """Fill about ``busy`` of the GPUs (CPUs on GPU-less nodes) with running jobs."""
    running: list[RunningJob] = []
    gpn = len(nodes[0].gpus) if nodes else 0
    target = int(busy * len(nodes))
    job_id = 1
    for node in nodes[:target]:
        used = 0
        while used < max(gpn, 1):
            _n, want = _shape(rng, gpn, 1)
            want = min(max(want, 1), max(gpn, 1) - used)
            gpus = list(range(used, used + want)) if gpn else []
            cpus = 8 * want if gpn else node.cpus
            start = NOW - rng.randrange(60, 20 * 3600)
            limit = rng.choice(LIMITS)
            running.append(RunningJob(
                job_id=job_id, start_time=start, end_time=max(start + limit, NOW + 60),
                allocation=[NodeAllocation(node.name, cpus, 32_000 * want, gpus)],
                user=f"u{job_id % (ACCOUNTS * USERS_PER_ACCOUNT)}", account=f"a{job_id % ACCOUNTS}",
            ))
            used += want
            job_id += 1
    return running


def make_pending(rng: random.Random, count: int, gpn: int, max_nodes: int,
                 first_id: int) -> list[PendingJob]:
    jobs = []
    for k in range(count):
        num_nodes, per_node = _shape(rng, gpn, max_nodes)
        user = rng.randrange(ACCOUNTS * USERS_PER_ACCOUNT)
        jobs.append(PendingJob(
            job_id=first_id + k, name=f"job{k}", user=f"u{user}", account=f"a{user % ACCOUNTS}",
            partition="gpu", num_nodes=num_nodes, cpus_per_node=8 * max(per_node, 1),
            mem_per_node_mb=32_000 * max(per_node, 1), gpus_per_node=per_node,
            time_limit=rng.choice(LIMITS), submit_time=NOW - rng.randrange(0, 3 * 86400),
            nice=0,
        ))
    return jobs


def make_associations(rng: random.Random) -> list[AssociationView]:
    out = []
    for a in range(ACCOUNTS):
        out.append(AssociationView(account=f"a{a}", shares=rng.randint(1, 4)))
    for u in range(ACCOUNTS * USERS_PER_ACCOUNT):
        out.append(AssociationView(account=f"a{u % ACCOUNTS}", user=f"u{u}",
                                   usage=rng.random() * 1e7))
    return out


def synthetic_snapshot(jobs: int, nodes: int, gpus_per_node: int, seed: int = 1,
                       busy: float = 0.5, placement: str = "frag") -> Snapshot:
    """``placement`` "frag": the snapshot carries a start history, as the daemon's do (the
    running jobs' starts, decayed to now), so GPU jobs are placed by the fragmentation
    measure (scheduler/fragment.py); "bestfit": none, best fit."""
    from schedd.scheduler.fragment import StartHistory

    rng = random.Random(seed)
    node_views = make_nodes(nodes, gpus_per_node)
    running = make_running(rng, node_views, busy)
    pending = make_pending(rng, jobs, gpus_per_node, nodes, len(running) + 1)
    history = None
    if placement == "frag":
        recent = StartHistory()
        for run in sorted(running, key=lambda r: (r.start_time, r.job_id)):
            recent.record(run.allocation, run.start_time)
        history = recent.snapshot(NOW)
    return Snapshot(now=NOW, nodes=node_views, running=running, pending=pending,
                    associations=make_associations(rng), gpu_history=history)


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


@click.group()
def bench() -> None:
    """Benchmarks; each prints figures as "NAME VALUE" lines."""


@bench.command("sched")
@click.option("--jobs", default=10_000, show_default=True, help="pending jobs")
@click.option("--nodes", default=1_000, show_default=True, help="nodes")
@click.option("--gpus-per-node", default=8, show_default=True, help="GPUs per node")
@click.option("--reservations", default=100, show_default=True, help="bf_max_reservations")
@click.option("--repeat", default=5, show_default=True, help="cycles timed (median printed)")
@click.option("--seed", default=1, show_default=True, help="random seed of the snapshot")
@click.option("--fill", type=click.Choice(["priority", "area", "short_area"]),
              default="short_area", show_default=True, help="backfill fill rule")
@click.option("--placement", type=click.Choice(["frag", "bestfit"]), default="frag",
              show_default=True,
              help="GPU placement: the daemon's fragmentation-aware one, or best fit")
@click.option("--memory/--no-memory", default=True, show_default=True,
              help="also print the peak memory one cycle allocates (an untimed extra cycle)")
def sched(jobs: int, nodes: int, gpus_per_node: int, reservations: int, repeat: int,
          seed: int, fill: str, placement: str, memory: bool) -> None:
    """Time one full scheduling cycle over a synthetic snapshot (half the cluster busy)."""
    for name, value, low in (("--jobs", jobs, 0), ("--nodes", nodes, 1),
                             ("--gpus-per-node", gpus_per_node, 0), ("--repeat", repeat, 1),
                             ("--reservations", reservations, 0)):
        if value < low:
            raise click.UsageError(f"{name} must be at least {low}")
    from cli.progress import progress
    from schedd.scheduler.cycle import schedule

    snapshot = synthetic_snapshot(jobs, nodes, gpus_per_node, seed, placement=placement)
    config = SchedulerConfig(bf_max_reservations=reservations, fill=fill)
    times, cpu = [], []
    decisions = None
    with progress(f"timing {repeat} cycles", repeat) as update:
        for n in range(repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            decisions = schedule(snapshot, config)
            cpu.append(time.process_time() - c0)
            times.append(time.perf_counter() - t0)
            update(n + 1)
    assert decisions is not None
    click.echo(f"cycle_s {statistics.median(times):.4f}")
    click.echo(f"cycle_min_s {min(times):.4f}")
    # CPU time: what a loaded host disturbs least
    click.echo(f"cycle_cpu_s {statistics.median(cpu):.4f}")
    click.echo(f"rss_mb {peak_rss_mb():.1f}")
    if memory:  # one more, untimed cycle under tracemalloc: what the cycle itself allocates
        tracemalloc.start()
        schedule(snapshot, config)
        _size, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        click.echo(f"cycle_peak_mb {peak / 2**20:.1f}")
    click.echo(f"started {len(decisions.starts)}")
    click.echo(f"reserved {len(decisions.expected_start)}")
    click.echo(f"pending {len(snapshot.pending)}")
    click.echo(f"running {len(snapshot.running)}")
