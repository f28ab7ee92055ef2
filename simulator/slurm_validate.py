"""Check ``kiln sim --policy slurm`` (``simulator/slurm_backfill.py``) against real Slurm 22.05.

A slice of a trace, time-scaled, replayed twice: submitted with ``sbatch`` at its scaled times
to the one-host Slurm of ``shared/bench/slurm-setup.sh`` (run as root; one node of ``MaxProcs``
CPUs, ``bf_interval=1``, every other scheduler setting and priority weight Slurm's default, so
all priorities are 1), and through the model with the same settings and scale. Then the two
schedules are compared: the share of jobs started in the same order and the start-time
differences. Used by ``bin/validate-slurm-sim``::

    python -m simulator.slurm_validate plan TRACE --first N --jobs 300 --scale S > plan.json
    python -m simulator.slurm_validate model plan.json > model.csv
    python -m simulator.slurm_validate compare plan.json slurm.csv model.csv

The plan holds, per job: its trace id, scaled submit offset, CPUs, ``sleep`` seconds (the
scaled run time, at least 1 s, one decimal) and time limit in minutes (the scaled run rounded
up to a minute: Slurm's limits are whole minutes). Schedules are CSV ``job,start,end`` in
seconds from the replay's start.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import statistics
import sys
from pathlib import Path

from simulator.machine import pool
from simulator.slurm_backfill import SlurmParams, replay_slurm
from simulator.swf import Trace, TraceJob, read_swf

BENCH = SlurmParams(bf_interval=1, weight_age=0, weight_fairshare=0, weight_qos=0,
                    one_user=True)  # shared/bench/slurm-setup.sh's slurm.conf


def plan(trace_path: str, first: int, jobs: int, scale: float) -> dict:
    trace = read_swf(trace_path)
    chosen = trace.jobs[first:first + jobs]
    if not chosen:
        raise SystemExit(f"no jobs from index {first}")
    t0 = chosen[0].submit
    rows = []
    for j in chosen:
        run = max(1.0, round(j.run * scale, 1))
        rows.append({"id": j.job_id, "submit": round((j.submit - t0) * scale, 3),
                     "cpus": j.procs, "run": run, "limit_min": max(1, math.ceil(run / 60))})
    return {"trace": trace_path, "first": first, "scale": scale, "cpus": trace.max_procs,
            "jobs": rows}


def model(p: dict, params: SlurmParams = BENCH,
          overhead: float = 0.0) -> list[tuple[int, float, float]]:
    """The plan through the model: one node of ``cpus`` CPUs, estimates = the limits, each job
    running its ``sleep`` plus ``overhead`` seconds (launch and teardown on the real host)."""
    jobs = [TraceJob(r["id"], r["submit"], r["run"] + overhead, r["cpus"],
                     r["limit_min"] * 60.0) for r in p["jobs"]]
    result = replay_slurm(Trace("plan", p["cpus"], jobs), pool(p["cpus"]), params)
    return [(r.job_id, r.start, r.end) for r in result.replay.records]


def read_schedule(path: str) -> dict[int, float]:
    with open(path, newline="") as fh:
        return {int(row["job"]): float(row["start"]) for row in csv.DictReader(fh)}


def compare(p: dict, slurm: dict[int, float], sim: dict[int, float],
            interval: float = BENCH.bf_interval) -> dict:
    """Same order: for each pair of jobs, whether both schedules start them in the same order
    (a pair started within the same second in Slurm counts as ordered either way); and per job,
    whether its rank (position in start order, ties by job number) is the same. Start-time
    differences: |model - Slurm| per job."""
    ids = [r["id"] for r in p["jobs"] if r["id"] in slurm and r["id"] in sim]
    missing = len(p["jobs"]) - len(ids)
    agree = pairs = 0
    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            x, y = ids[a], ids[b]
            ds, dm = slurm[x] - slurm[y], sim[x] - sim[y]
            pairs += 1
            if abs(ds) < 1.0 or abs(dm) < 1.0 or (ds > 0) == (dm > 0):
                agree += 1
    rank_s = {j: k for k, j in enumerate(sorted(ids, key=lambda j: (slurm[j], j)))}
    rank_m = {j: k for k, j in enumerate(sorted(ids, key=lambda j: (sim[j], j)))}
    same_rank = sum(rank_s[j] == rank_m[j] for j in ids)
    # jobs none of whose predecessors in Slurm's order starts after it in the model's
    diffs = sorted(abs(sim[j] - slurm[j]) for j in ids)
    return {
        "jobs": len(ids), "missing": missing,
        "pairs_same_order": agree / pairs if pairs else 1.0,
        "jobs_same_rank": same_rank / len(ids) if ids else 1.0,
        "median_start_diff_s": statistics.median(diffs) if diffs else 0.0,
        "p90_start_diff_s": diffs[int(0.9 * (len(diffs) - 1))] if diffs else 0.0,
        "max_start_diff_s": diffs[-1] if diffs else 0.0,
        "bf_interval_s": interval,
        "slurm_makespan_s": max(slurm.values()) if slurm else 0.0,
    }


def _write_schedule(rows: list[tuple[int, float, float]]) -> None:
    w = csv.writer(sys.stdout)
    w.writerow(["job", "start", "end"])
    for job, start, end in sorted(rows):
        w.writerow([job, f"{start:.3f}", f"{end:.3f}"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulator.slurm_validate")
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("plan")
    a.add_argument("trace")
    a.add_argument("--first", type=int, default=0)
    a.add_argument("--jobs", type=int, default=300)
    a.add_argument("--scale", type=float, required=True)
    b = sub.add_parser("model")
    b.add_argument("plan")
    b.add_argument("--overhead", type=float, default=0.0,
                   help="seconds each job runs beyond its sleep (measured: end - start - sleep)")
    b.add_argument("--release-delay", type=float, default=0.0,
                   help="seconds from a job's end to its CPUs' release (measured: end to the "
                        "main scheduler's next allocation)")
    c = sub.add_parser("compare")
    c.add_argument("plan")
    c.add_argument("slurm")
    c.add_argument("model")
    args = ap.parse_args(argv)
    if args.cmd == "plan":
        json.dump(plan(args.trace, args.first, args.jobs, args.scale), sys.stdout)
    elif args.cmd == "model":
        params = dataclasses.replace(BENCH, release_delay=args.release_delay)
        _write_schedule(model(json.loads(Path(args.plan).read_text()), params, args.overhead))
    else:
        p = json.loads(Path(args.plan).read_text())
        result = compare(p, read_schedule(args.slurm), read_schedule(args.model))
        for key, value in result.items():
            print(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
