"""``kiln stats``: how far ``squeue --start`` was off, so users know how much to trust it.

For every job that started in the window after kiln had published an expected start, the
error is ``actual start - expected start``. Printed: the median and 90th percentile of the
absolute error, for the first forecast a job got and for the last one before it started, the
signed mean (positive: jobs start later than promised) and the jobs that started more than one
bf_resolution late or early.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from cli.core.client import Client, ClientError
from cli.core.formats import fmt_duration, fmt_time
from cli.core.options import OptionError, parse_time_limit


@click.command()
@click.option("--since", "since", default="7-0",
              help="look back this far (Slurm time: 7-0 = seven days, 12:00:00, 90 = minutes)")
@click.option("--json", "as_json", is_flag=True, help="print the figures as JSON")
def stats(since: str, as_json: bool) -> None:
    """Error distribution of the expected starts kiln published (squeue --start)."""
    try:
        window = parse_time_limit(since, "--since")
    except OptionError as exc:
        raise click.BadParameter(exc.message, param_hint="--since") from None
    body = {"since": time.time() - window} if window else {"since": 0.0}
    try:
        with Client() as client:
            reply = client.call("forecast_stats", body)
    except ClientError as exc:
        raise click.ClickException(exc.message) from None
    if as_json:
        click.echo(json.dumps(reply, indent=2))
        return
    for line in stats_lines(reply):
        click.echo(line)


def stats_lines(reply: dict[str, Any]) -> list[str]:
    first, last = reply["first"], reply["last"]
    lines = [f"Expected starts (squeue --start) since {fmt_time(reply['since'], 'the beginning')}:",
             f"  jobs started: {reply['started']}{' (the most recent)' if reply.get('capped') else ''}"
             f", of which {first['count']} had a forecast",
             f"  pending jobs with a forecast now: {reply['pending_with_forecast']}"]
    if not first["count"]:
        lines.append("  no forecast has been checked against a start yet")
        return lines + quantile_lines(reply.get("quantiles"))
    tol = fmt_duration(reply["tolerance"])
    lines.append(f"  {'forecast':<8} {'jobs':>6} {'median |err|':>13} {'p90 |err|':>13} "
                 f"{'mean err':>12} {'late>' + tol:>15} {'early>' + tol:>15}")
    for name, s in (("first", first), ("last", last)):
        mean = ("-" if s["mean"] < 0 else "+") + fmt_duration(abs(s["mean"]))
        lines.append(f"  {name:<8} {s['count']:>6} {fmt_duration(s['median_abs']):>13} "
                     f"{fmt_duration(s['p90_abs']):>13} {mean:>12} {s['late']:>15} "
                     f"{s['early']:>15}")
    lines.append(f"  median lead time (first forecast to start): "
                 f"{fmt_duration(reply['lead_median'])}")
    lines.append("  err = actual start - expected start; + means later than promised")
    return lines + quantile_lines(reply.get("quantiles"))


def quantile_lines(q: dict[str, Any] | None) -> list[str]:
    """The calibration of the p50/p90 starts (kiln why, sbatch --test-only)."""
    if not q:
        return []
    if not q["count"]:
        return ["p50/p90 starts (kiln why, sbatch --test-only): none checked against a start "
                "yet"]
    return [f"p50/p90 starts (kiln why, sbatch --test-only), first published, {q['count']} jobs:",
            f"  started by their p90: {q['within_p90']:.1%} (target 90 %)",
            f"  median |err|: p50 {fmt_duration(q['p50_median_abs'])}, "
            f"p90 {fmt_duration(q['p90_median_abs'])}"]
