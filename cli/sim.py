"""``kiln sim``: replay a Standard Workload Format trace through kiln's scheduler core.

    kiln sim TRACE.swf[.gz] [--policy fcfs|easy|conservative|kiln|slurm]
             [--nodes N] [--gpus-per-node G] [--config kiln.toml] [--out schedule.csv]
             [--by-user users.csv] [--from JOB|TIME] [--to JOB|TIME] [--forecasts]

    kiln sim PODS.csv[.gz] --nodes-csv NODES.csv[.gz] [--placement P[,P...]] [--seed S]
             [--json] [--curve FILE.csv] [--plot FILE.png]

The second form (selected by ``--nodes-csv``) replays the Alibaba openb GPU-sharing trace in the
protocol of Weng et al. (ATC'23): ``simulator/sharing.py``, placements of
``schedd/scheduler/gpushare.py``.

``--policy slurm`` replays the trace through a model of Slurm 22.05's main and backfill
schedulers (``simulator/slurm_backfill.py``) instead of kiln's core, for comparison.

Prints the trace, the machine, the policy, the figures of ``simulator.metrics`` and how fast
the replay ran (jobs/s, and the share of that time spent inside the scheduler core). Every bad
input is one line on stderr and exit status 1.

``--from``/``--to`` cut the figures (not the replay: every job is still scheduled) to a slice:
plain numbers are job numbers (inclusive), numbers with a unit (``s``, ``m``, ``h``, ``d``) are
submit times on the trace's clock (``--from 30d --to 60d``: submitted in [30 d, 60 d)).

``--forecasts`` publishes, for each job that does not start at its arrival, the p50 and p90
start ``kiln why`` would show (``simulator/forecasts.py``) and reports how they turned out:
the share of jobs that started by their p90 and the median absolute errors.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NoReturn

import click

from kiln.config import ConfigError

if TYPE_CHECKING:
    from simulator.machine import Machine
    from simulator.metrics import Metrics, Slice
    from simulator.replay import Replay
    from simulator.swf import Trace

PROG = "kiln sim"
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class _OneLineErrors(click.Command):
    """Usage errors as one ``kiln sim: error: ...`` line and exit 1, like every kiln command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            _fail(ctx, exc.format_message())


def _fail(ctx: click.Context, message: str) -> NoReturn:
    click.echo(f"{PROG}: error: {message}", err=True)
    ctx.exit(1)


@click.command(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("trace", metavar="TRACE.swf[.gz]|PODS.csv[.gz]")
@click.option("--policy", default="kiln", show_default=True,
              type=click.Choice(["fcfs", "easy", "conservative", "kiln", "slurm"]),
              help="fcfs, easy/conservative backfill, kiln's own configuration, or a model of "
                   "Slurm 22.05's backfill")
@click.option("--nodes", type=int, default=None,
              help="replay on N GPU nodes instead of one pool of MaxProcs CPUs")
@click.option("--gpus-per-node", type=int, default=None,
              help="GPUs per node of the GPU model (default 8); one trace processor = one GPU")
@click.option("--config", "config_file", default=None, metavar="FILE",
              help="kiln.toml whose [scheduler] table the kiln policy uses")
@click.option("--out", default=None, metavar="FILE",
              help="write the schedule as CSV: id,submit,start,end,procs")
@click.option("--by-user", "by_user", default=None, metavar="FILE",
              help="write per-user figures as CSV: user,jobs,avg_wait,max_wait,avg_bsld")
@click.option("--from", "first", default=None, metavar="JOB|TIME",
              help="figures from this job number, or submit time with a unit (30d, 12h)")
@click.option("--to", "last", default=None, metavar="JOB|TIME",
              help="figures up to this job number (inclusive) or submit time (exclusive)")
@click.option("--forecasts", "forecasts", is_flag=True,
              help="publish each waiting job's p50/p90 start at arrival and report their "
                   "calibration (slower: two more plans per arrival)")
@click.option("--nodes-csv", "nodes_csv", default=None, metavar="FILE",
              help="GPU-sharing mode: TRACE is an openb pod list, FILE its node list")
@click.option("--placement", "placements", multiple=True, metavar="P[,P...]",
              help="GPU-sharing placement(s): random, bestfit, worstfit, dotprod, fgd, kiln "
                   "(default kiln; repeat or separate by commas)")
@click.option("--gpu-placement", "gpu_placement", type=click.Choice(["bestfit", "frag"]),
              default="bestfit", show_default=True,
              help="GPU model: place GPU jobs by best fit, or by the fragmentation measure "
                   "as the daemon does")
@click.option("--seed", type=int, default=0, show_default=True,
              help="GPU-sharing mode: the seed of the task draws")
@click.option("--json", "as_json", is_flag=True, help="GPU-sharing mode: print JSON")
@click.option("--curve", default=None, metavar="FILE",
              help="GPU-sharing mode: write the figures at each 1 % of arrived demand (CSV)")
@click.option("--plot", default=None, metavar="FILE.png",
              help="GPU-sharing mode: draw the placements' curves (needs matplotlib)")
@click.pass_context
def sim(ctx: click.Context, trace: str, policy: str, nodes: int | None,
        gpus_per_node: int | None, config_file: str | None, out: str | None,
        by_user: str | None, first: str | None, last: str | None, forecasts: bool,
        nodes_csv: str | None, placements: tuple[str, ...], gpu_placement: str, seed: int,
        as_json: bool, curve: str | None, plot: str | None) -> None:
    """Replay an SWF trace through the scheduler core on a virtual clock, or (with
    --nodes-csv) an openb GPU-sharing trace placement by placement."""
    if nodes_csv is not None:
        from cli.sim_sharing import run_sharing

        run_sharing(ctx, trace, nodes_csv, placements, seed, as_json, curve, plot)
        return
    sharing_only = [name for name, value in (("--placement", placements), ("--json", as_json),
                                             ("--curve", curve), ("--plot", plot)) if value]
    if sharing_only:
        _fail(ctx, f"{sharing_only[0]} needs --nodes-csv (the GPU-sharing mode)")
    from cli.progress import progress
    from simulator import machine as machines
    from simulator import metrics as figures
    from simulator.policy import policy_config
    from simulator.replay import SimError, replay
    from simulator.swf import SwfError, read_swf

    for name, value in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)):
        if value is not None and value < 1:
            _fail(ctx, f"{name} must be at least 1, not {value}")
    if config_file is not None and policy != "kiln":
        _fail(ctx, "--config only applies to --policy kiln")
    if forecasts and policy == "slurm":
        _fail(ctx, "--forecasts needs kiln's core, not --policy slurm")
    window = _slice(ctx, first, last)
    try:
        config = policy_config(policy, config_file) if policy != "slurm" else None
        data = read_swf(trace)
        if nodes is None and gpus_per_node is None:
            machine = machines.pool(data.max_procs)
        else:
            machine = machines.gpu_cluster(data.max_procs, nodes, gpus_per_node)
        with progress(f"replaying {len(data.jobs):,} jobs", len(data.jobs)) as update:
            if config is None:
                from simulator.slurm_backfill import replay_slurm

                result = replay_slurm(data, machine,
                                      progress=lambda done, total: update(done)).replay
            else:
                result = replay(data, machine, config, progress=lambda done, total: update(done),
                                forecasts=forecasts, gpu_placement=gpu_placement)
    except (SwfError, SimError, ConfigError) as exc:
        _fail(ctx, str(exc))
    if not result.records:
        _fail(ctx, f"no job of {trace} fits on {len(machine.nodes)} node(s) of "
                   f"{machine.gpus_per_node} GPUs")
    metrics = figures.summarize(result, machine.capacity, window)
    if window is not None and not metrics.jobs:
        _fail(ctx, f"no replayed job is in the slice ({window.describe()})")
    chosen = result.records if window is None else [r for r in result.records if r in window]
    for path, write in ((out, lambda p: figures.write_csv(result.records, p)),
                        (by_user, lambda p: figures.write_user_csv(figures.by_user(chosen), p))):
        if path:
            try:
                write(path)
            except OSError as exc:
                _fail(ctx, f"cannot write {path}: {exc.strerror or exc}")
    extra = figures.forecast_figures(result, window).rows() if forecasts else []
    _report(data, machine, policy, result, metrics, out, window, extra)


def _slice(ctx: click.Context, first: str | None, last: str | None) -> Slice | None:
    """``--from``/``--to`` as a Slice: job numbers, or submit times when they carry a unit."""
    from simulator.metrics import Slice

    if first is None and last is None:
        return None
    parsed = [_bound(ctx, name, value) for name, value in (("--from", first), ("--to", last))]
    kinds = {kind for kind, _ in parsed if kind}
    if len(kinds) > 1:
        _fail(ctx, "--from and --to must both be job numbers or both be times")
    (_, low), (_, high) = parsed
    if low is not None and high is not None and high < low:
        _fail(ctx, f"--to ({last}) is before --from ({first})")
    return Slice(kinds.pop(), low, high)


def _bound(ctx: click.Context, name: str, value: str | None) -> tuple[str, float | None]:
    if value is None:
        return "", None
    text = value.strip().lower()
    scale = UNITS.get(text[-1:]) if text else None
    digits = text[:-1] if scale else text
    try:
        number = float(digits) if scale else int(digits)
    except ValueError:
        _fail(ctx, f"{name} {value!r} is neither a job number nor a time such as 30d or 12h")
    if number < 0 or not math.isfinite(number):
        _fail(ctx, f"{name} {value!r} must not be negative")
    return ("time", number * scale) if scale else ("job", number)


def _report(data: Trace, machine: Machine, policy: str, result: Replay, metrics: Metrics,
            out: str | None, window: Slice | None = None,
            extra: list[tuple[str, str]] | None = None) -> None:
    dropped = ", ".join(f"{n:,} {why}" for why, n in sorted(data.dropped.items()))
    lines = [
        ("trace", f"{data.name} ({len(data.jobs):,} jobs kept"
                  + (f"; dropped {dropped})" if dropped else ")")),
        ("machine", _machine_line(data, machine, result.not_fitting)),
        ("policy", policy),
        *([("slice", window.describe())] if window is not None else []),
        *metrics.rows(),
        *(extra or []),
        ("replay", _speed_line(result)),
    ]
    if out:
        lines.append(("schedule", out))
    width = max(len(label) for label, _ in lines)
    for label, value in lines:
        click.echo(f"{label:<{width}}  {value}")


def _machine_line(data: Trace, machine: Machine, not_fitting: int) -> str:
    if not machine.gpus_per_node:
        return f"1 node x {data.max_procs:,} CPUs ({data.max_procs_source})"
    text = f"{len(machine.nodes):,} nodes x {machine.gpus_per_node} GPUs"
    if not_fitting:
        text += f" ({not_fitting:,} jobs larger than the cluster dropped)"
    return text


def _speed_line(result: Replay) -> str:
    if result.model:  # not kiln's core: no core time to tell apart
        return (f"{result.jobs_per_second:,.0f} jobs/s ({result.wall_seconds:.2f} s, "
                f"{result.cycles:,} scheduling passes, {result.model})")
    share = result.core_seconds / result.wall_seconds if result.wall_seconds > 0 else 0.0
    return (f"{result.jobs_per_second:,.0f} jobs/s ({result.wall_seconds:.2f} s, "
            f"{result.cycles:,} cycles, {share:.0%} in the scheduler core)")
