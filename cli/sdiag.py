"""``sdiag``: schedd's scheduling figures, in Slurm 22.05's layout (and ``--json``).

The figures are kiln's own (``schedd/reports/diag.py``): jobs submitted, started, completed,
canceled and failed since schedd started; each scheduling cycle's time (microseconds), its
depth (the pending jobs the walk tested) and the queue length it saw; the jobs started behind a
job that could not start (backfilled). kiln schedules and backfills in one cycle, so the main
and backfill sections count the same cycles. slurmctld's thread, agent and RPC counters have no
kiln counterpart and are not printed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from cli.core import Args, command, fail
from cli.core.client import Client
from cli.core.options import NO_ARG, Opt, OptionTable

PROG = "sdiag"
STARS = "*" * 55

TABLE = OptionTable([
    Opt("all", "a", NO_ARG), Opt("help", "h", NO_ARG), Opt("sort-by-id", "i", NO_ARG),
    Opt("json", "", NO_ARG), Opt("cluster", "M"), Opt("reset", "r", NO_ARG),
    Opt("sort-by-time", "t", NO_ARG), Opt("sort-by-time2", "T", NO_ARG),
    Opt("usage", "", NO_ARG), Opt("version", "V", NO_ARG), Opt("yaml", "", NO_ARG),
])
USAGE = "Usage: sdiag [-M cluster] [-aritT]"
HELP = """Usage: sdiag [OPTIONS]
  -a, --all           all statistics
  -M, --cluster=NAME  cluster to issue commands to
  -r, --reset         reset statistics
  -i, --sort-by-id    sort RPCs by id
  -t, --sort-by-time  sort RPCs by total run time
  -T, --sort-by-time2 sort RPCs by average run time
  -V, --version       display current version number
      --json          print statistics as JSON

Help options:
  --help          show this help message
  --usage         display brief usage message"""


def ctime(t: float) -> str:
    """slurm_ctime2: 'Tue Dec 01 12:00:00 2026'."""
    return time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(t))


def _mean(total: int, count: int) -> int:
    return total // count if count else 0


def text_report(d: dict[str, Any]) -> list[str]:
    """The report as sdiag 22.05 prints it, kiln's figures in Slurm's words."""
    now, since = int(d["req_time"]), int(d["req_time_start"])
    jobs, cycles = d["jobs"], d["cycles"]
    lines = [STARS, f"sdiag output at {ctime(now)} ({now})",
             f"Data since      {ctime(since)} ({since})", STARS, "",
             f"Jobs submitted: {jobs['submitted']}", f"Jobs started:   {jobs['started']}",
             f"Jobs completed: {jobs['completed']}", f"Jobs canceled:  {jobs['canceled']}",
             f"Jobs failed:    {jobs['failed']}", "",
             f"Job states ts:  {ctime(now)} ({now})", f"Jobs pending:   {d['pending']}",
             f"Jobs running:   {d['running']}", "",
             "Main schedule statistics (microseconds):",
             f"\tLast cycle:   {d['last_us']}", f"\tMax cycle:    {d['max_us']}",
             f"\tTotal cycles: {cycles}"]
    if cycles:
        lines += [f"\tMean cycle:   {_mean(d['sum_us'], cycles)}",
                  f"\tMean depth cycle:  {_mean(d['depth_sum'], cycles)}"]
    if now - since > 60:
        lines.append(f"\tCycles per minute: {int(cycles // ((now - since) // 60))}")
    lines += [f"\tLast queue length: {d['queue_len']}", "", "Backfilling stats",
              f"\tTotal backfilled jobs (since last slurm start): {d['backfilled']}",
              f"\tTotal backfilled jobs (since last stats cycle start): {d['backfilled']}",
              "\tTotal backfilled heterogeneous job components: 0",
              f"\tTotal cycles: {cycles}"]
    when = int(d["last_when"])
    lines.append(f"\tLast cycle when: {ctime(when)} ({when})" if when
                 else "\tLast cycle when: N/A")
    lines += [f"\tLast cycle: {d['last_us']}", f"\tMax cycle:  {d['max_us']}"]
    if cycles:
        lines.append(f"\tMean cycle: {_mean(d['sum_us'], cycles)}")
    lines += [f"\tLast depth cycle: {d['last_depth']}",
              f"\tLast depth cycle (try sched): {d['last_depth']}"]
    if cycles:
        lines += [f"\tDepth Mean: {_mean(d['depth_sum'], cycles)}",
                  f"\tDepth Mean (try depth): {_mean(d['depth_sum'], cycles)}"]
    lines.append(f"\tLast queue length: {d['queue_len']}")
    if cycles:
        lines.append(f"\tQueue length mean: {_mean(d['queue_len_sum'], cycles)}")
    return lines


def json_report(d: dict[str, Any]) -> dict[str, Any]:
    """``sdiag --json`` (data_parser v0.0.38's statistics; kiln's figures)."""
    cycles, jobs = d["cycles"], d["jobs"]
    minutes = (int(d["req_time"]) - int(d["req_time_start"])) // 60
    stats = {
        "parts_packed": 1, "req_time": int(d["req_time"]),
        "req_time_start": int(d["req_time_start"]),
        "jobs_submitted": jobs["submitted"], "jobs_started": jobs["started"],
        "jobs_completed": jobs["completed"], "jobs_canceled": jobs["canceled"],
        "jobs_failed": jobs["failed"], "jobs_pending": d["pending"],
        "jobs_running": d["running"], "job_states_ts": int(d["req_time"]),
        "schedule_cycle_max": d["max_us"], "schedule_cycle_last": d["last_us"],
        "schedule_cycle_total": cycles, "schedule_cycle_mean": _mean(d["sum_us"], cycles),
        "schedule_cycle_mean_depth": _mean(d["depth_sum"], cycles),
        "schedule_cycle_per_minute": cycles // minutes if minutes > 0 else 0,
        "schedule_queue_length": d["queue_len"],
        "bf_backfilled_jobs": d["backfilled"], "bf_last_backfilled_jobs": d["backfilled"],
        "bf_backfilled_het_jobs": 0, "bf_cycle_counter": cycles,
        "bf_cycle_mean": _mean(d["sum_us"], cycles),
        "bf_depth_mean": _mean(d["depth_sum"], cycles),
        "bf_depth_mean_try": _mean(d["depth_sum"], cycles),
        "bf_cycle_last": d["last_us"], "bf_cycle_max": d["max_us"],
        "bf_last_depth": d["last_depth"], "bf_last_depth_try": d["last_depth"],
        "bf_queue_len": d["queue_len"], "bf_queue_len_mean": _mean(d["queue_len_sum"], cycles),
        "bf_when_last_cycle": int(d["last_when"]), "bf_active": False,
        "rpcs_by_message_type": [], "rpcs_by_user": [],
    }
    from cli.core.formats import openapi_v38_meta

    return {"meta": openapi_v38_meta(), "errors": [], "statistics": stats}


def _refused(args: Args) -> None:
    args.refuse_positional("Unknown arguments: {words}")


@command(PROG, TABLE, help=HELP + "\n", usage=USAGE + "\n", check=_refused)
def sdiag(args: Args) -> int:
    values = args.given
    if "reset" in values:
        fail("--reset is not supported by kiln: the figures start over when schedd does")
    if "yaml" in values:
        fail("--yaml is not supported by kiln: use --json")
    with Client() as client:
        reply = client.call("sched_diag", {})
    if "json" in values:
        sys.stdout.write(json.dumps(json_report(reply), indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(text_report(reply)) + "\n")
    return 0


main = sdiag.main


if __name__ == "__main__":
    sys.exit(main())
