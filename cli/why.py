"""``kiln why JOBID``: why a job waits, in plain words (schedd's ``job_why``).

Prints the pending reason as a sentence, the job's place in its partition's queue, the
weighted priority factors of the jobs just ahead of it next to its own (what ``sprio`` would
show), the running jobs whose end frees resources first, and the expected start of the last
backfill plan, with how far such forecasts were off lately (``kiln stats``).
"""

from __future__ import annotations

from typing import Any

import click

from cli.core.client import Client, ClientError
from cli.core.formats import fmt_duration, fmt_time
from cli.outlook import outlook_lines
from kiln.slurm.priority import FACTORS

FACTOR_HEADERS = {"age": "AGE", "fairshare": "FAIRSHARE", "job_size": "JOBSIZE",
                  "partition": "PARTITION", "qos": "QOS", "assoc": "ASSOC", "nice": "NICE",
                  "admin": "ADMIN"}


@click.command()
@click.argument("job_id")
def why(job_id: str) -> None:
    """Explain why JOB_ID is pending (or what it is doing if it is not)."""
    try:
        with Client() as client:
            reply = client.call("job_why", {"job_id": job_id})
            stats = client.call("forecast_stats", {}) if reply["job"]["state"] == "PENDING" \
                else None
    except ClientError as exc:
        raise click.ClickException(exc.message) from None
    for line in explain_lines(reply, stats):
        click.echo(line)


def explain_lines(reply: dict[str, Any], stats: dict[str, Any] | None) -> list[str]:
    job, now = reply["job"], reply["now"]
    head = (f"Job {job['job_id']} ({job['user']}, account {job['account']}, partition "
            f"{job['partition']}) is {job['state']}")
    requeued = _requeued(reply)
    if job["state"] != "PENDING":
        lines = [head + _not_pending(job, now) + "."]
        reason = job.get("reason") or ""
        if job["state"] != "RUNNING" and reason not in ("", "None"):
            lines.append(f"  Reason: {reason}")  # a launch failure, a failed GPU: what went wrong
        idle = reply.get("idle_gpu")
        if idle:  # lifecycle/idlegpu.py
            lines.append(f"  Idle GPUs: {idle['gpus']} GPUs below {idle['below_util']:g}% since "
                         f"{fmt_time(idle['since'])} ({fmt_duration(now - idle['since'])}), "
                         f"{idle['gpu_seconds'] / 3600:.2f} idle GPU-hours this run"
                         + (" (flagged IdleGPU)." if reason == "IdleGPU" else "."))
        return lines + requeued
    lines = [f"{head}: {job['reason']}.", *requeued]
    limit = reply.get("limit")
    lines += _limit_lines(limit) if limit else [f"  Why: {reply['reason_text']}."]
    if reply.get("topology"):  # what it waits for in the network ([topology])
        lines.append(f"  Topology: it needs {reply['topology']}.")
    if reply.get("position"):
        lines.append(f"  Position: {reply['position']} of {reply['queue_length']} jobs the "
                     f"scheduler considers in partition {job['partition']} (priority "
                     f"{job['priority']}).")
    else:
        lines.append("  Position: not in the queue yet; the scheduler does not consider it "
                     "until the reason above is cleared.")
    lines += _expected(job, now, stats)
    lines += ["  " + line[0].upper() + line[1:] + "." for line in outlook_lines(reply)]
    factors = reply.get("factors") or {}
    if reply.get("ahead"):
        lines.append("  Jobs just ahead of it, then itself, with their weighted priority factors:")
        lines += ["    " + row for row in _factor_table(reply["ahead"] + [job], factors)]
    elif factors:
        lines.append("  Its priority factors (nothing eligible is ahead of it):")
        lines += ["    " + row for row in _factor_table([job], factors)]
    if reply.get("ending") and job["reason"] in ("Resources", "Priority") and not limit:
        lines.append("  Running jobs in its partition that end first (at their time limits):")
        for r in reply["ending"]:
            ends = fmt_time(r["ends_by"], "never (no time limit)")
            lines.append(f"    {r['job_id']:>10} {r['user']:<10} {r['gpus']} GPUs on "
                         f"{r['node_list']}, ends by {ends}")
    return lines


def _requeued(reply: dict[str, Any]) -> list[str]:
    """Its last requeue: when and why (``GPU 1 of node1 failed: Xid 79 (...)``)."""
    r = reply.get("requeued")
    if not r:
        return []
    times = "once" if r["count"] == 1 else f"{r['count']} times"
    return [f"  Requeued {times}, last at {fmt_time(r['time'])}: {r['why'] or 'no reason kept'}."]


def _limit_lines(limit: dict[str, Any]) -> list[str]:
    """A limit that holds the job: which, where, what uses it, and whether it can ever start."""
    where = f" on {limit['where']}" if limit["where"] else ""
    lines = [f"  Why: a limit: it needs {limit['need']}; the limit is {limit['limit']}{where}."]
    if limit["never"]:
        lines.append("  It will never start unless the limit changes (sacctmgr modify ... set "
                     f"{limit['limit'].split('=')[0]}=...) or the job asks for less "
                     "(scontrol update).")
    elif limit["in_use"]:
        lines.append(f"  In use there now: {limit['in_use']}; it starts when enough of that "
                     "is freed.")
    return lines


def _not_pending(job: dict[str, Any], now: float) -> str:
    if job["state"] in ("RUNNING", "COMPLETING"):
        return (f" on {job.get('node_list')} since {fmt_time(job.get('start_time'))}"
                f" ({fmt_duration(now - (job.get('start_time') or now))})")
    if job.get("end_time"):
        return f"; it ended at {fmt_time(job['end_time'])}"
    return ""


def _expected(job: dict[str, Any], now: float, stats: dict[str, Any] | None) -> list[str]:
    when = job.get("expected_start")
    if not when:
        return ["  Expected start: none planned yet (the backfill plan reserves for the first "
                "jobs in line only; see squeue --start)."]
    lines = [f"  Expected start: {fmt_time(when)} (in {fmt_duration(max(when - now, 0))}), "
             "if running jobs use their whole time limits."]
    first = (stats or {}).get("first") or {}
    if first.get("count"):
        lines.append(f"  Such forecasts were off by {fmt_duration(first['median_abs'])} (median) "
                     f"and {fmt_duration(first['p90_abs'])} (90th percentile) over the last "
                     f"{first['count']} jobs (kiln stats).")
    return lines


def _factor_table(jobs: list[dict[str, Any]], factors: dict[str, dict[str, float]]) -> list[str]:
    used = [f for f in (*FACTORS, "nice", "admin")
            if any(f in factors.get(j["job_id"], {}) for j in jobs)]
    header = f"{'JOBID':>12} {'USER':<10} {'PRIORITY':>9}" + "".join(
        f" {FACTOR_HEADERS[f]:>10}" for f in used)
    rows = [header]
    for j in jobs:
        values = factors.get(j["job_id"], {})
        rows.append(f"{j['job_id']:>12} {j['user']:<10} {j['priority']:>9}" + "".join(
            f" {values[f]:>10.0f}" if f in values else f" {'':>10}" for f in used))
    return rows
