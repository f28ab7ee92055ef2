"""``kiln sim PODS --nodes-csv NODES``: the GPU-sharing replay, its table, JSON, curve and plot.

One replay per placement, all on the same draws (one seed). The table (or ``--json``) gives
each placement's figures when the arrived GPU demand reached the capacity; ``--curve`` writes
them at each 1 % of arrived demand; ``--plot`` draws unallocated GPU against arrived demand, one
line per placement (matplotlib is optional: without it ``--plot`` is a one-line error).
"""

from __future__ import annotations

import csv
import json
from typing import NoReturn

import click

PROG = "kiln sim"


def _fail(ctx: click.Context, message: str) -> NoReturn:
    click.echo(f"{PROG}: error: {message}", err=True)
    ctx.exit(1)


def _placements(ctx: click.Context, given: tuple[str, ...]) -> list[str]:
    from schedd.scheduler.gpushare import PLACEMENTS

    names = [n.strip() for value in given for n in value.split(",") if n.strip()] or ["kiln"]
    for name in names:
        if name not in PLACEMENTS:
            _fail(ctx, f"unknown placement {name!r} (one of {', '.join(PLACEMENTS)})")
    return list(dict.fromkeys(names))


def run_sharing(ctx: click.Context, pods_csv: str, nodes_csv: str, given: tuple[str, ...],
                seed: int, as_json: bool, curve: str | None, plot: str | None) -> None:
    from schedd.scheduler.gpushare import Workload
    from simulator.openb import OpenbError, read_nodes, read_pods
    from simulator.sharing import CURVE_COLUMNS, SharingError, replay

    placements = _placements(ctx, given)
    if plot is not None:
        try:
            import matplotlib
        except ImportError:
            _fail(ctx, "--plot needs matplotlib, which is not installed (pip install matplotlib)")
        matplotlib.use("Agg")
    try:
        tasks = read_pods(pods_csv)
        kinds = read_nodes(nodes_csv)
        workload = Workload(tasks)
        results = [replay(tasks, kinds, p, seed, workload=workload) for p in placements]
    except (OpenbError, SharingError) as exc:
        _fail(ctx, str(exc))
    if curve is not None:
        try:
            with open(curve, "w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(["placement", "seed", "percent", *CURVE_COLUMNS])
                for r in results:
                    for percent, point in enumerate(r.curve, 1):
                        row = point.fractions(r.capacity)
                        writer.writerow([r.placement, seed, percent,
                                         *(_cell(row[c]) for c in CURVE_COLUMNS)])
        except OSError as exc:
            _fail(ctx, f"cannot write {curve}: {exc.strerror or exc}")
    if plot is not None:
        _plot(ctx, results, plot)
    summaries = [r.summary() for r in results]
    if as_json:
        click.echo(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
        return
    click.echo(f"trace      {len(tasks):,} pods, {len(workload.types):,} task types")
    click.echo(f"cluster    {len(kinds):,} nodes, {results[0].capacity / 1000:,.0f} GPUs")
    click.echo(f"seed       {seed} (tasks drawn until the arrived GPU demand reaches capacity)")
    click.echo(f"{'placement':<10} {'unallocated':>11} {'failed':>8} {'fragmented':>10} "
               f"{'tasks':>6} {'failed':>6} {'seconds':>7}")
    for s in summaries:
        click.echo(f"{s['placement']:<10} {s['unallocated_gpu_fraction']:>11.4f} "
                   f"{s['failed_gpu_fraction']:>8.4f} {s['fragmented_gpu_fraction']:>10.4f} "
                   f"{s['tasks']:>6} {s['failed_tasks']:>6} {s['seconds']:>7.2f}")


def _cell(value: float | int) -> str:
    return str(value) if isinstance(value, int) else f"{value:.6f}"


def _plot(ctx: click.Context, results: list, path: str) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        xs = [p.arrived / r.capacity * 100 for p in r.curve]
        ys = [(r.capacity - p.allocated) / r.capacity * 100 for p in r.curve]
        ax.plot(xs, ys, label=r.placement)
    ax.set_xlabel("arrived GPU demand (% of capacity)")
    ax.set_ylabel("unallocated GPU (% of capacity)")
    ax.set_title(f"openb replay, seed {results[0].seed}")
    ax.legend()
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        _fail(ctx, f"cannot write {path}: {exc.strerror or exc}")
    finally:
        plt.close(fig)
