"""The policy comparison table of docs/benchmarks.md, reproducible from a checkout.

    python -m simulator.bench TRACE.swf.gz ... [--policies fcfs,easy,conservative,kiln]
                               [--budget SECONDS] [--gpus-per-node G]

Replays every trace under every policy on the pool model (one node of MaxProcs CPUs), or with
``--gpus-per-node`` on ceil(MaxProcs / G) GPU nodes (``simulator.machine``), and prints one
Markdown row per run. A run that takes longer than ``--budget`` seconds of wall time
(default 300) is stopped and its row says so; the figures of a stopped run would be partial.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from pathlib import Path

from simulator.machine import gpu_cluster, pool
from simulator.metrics import summarize
from simulator.policy import POLICIES, policy_config
from simulator.replay import replay
from simulator.swf import read_swf

HEADER = (
    "| trace | policy | jobs | avg wait (s) | p95 wait | max wait | avg bsld | utilisation "
    "| makespan (s) | violations | reserved | Jain (bsld) | worst user wait | jobs/s | in core |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def row(trace_path: str, policy: str, gpus_per_node: int = 0) -> str:
    trace = read_swf(trace_path)
    if gpus_per_node:
        machine = gpu_cluster(trace.max_procs, None, gpus_per_node)
    else:
        machine = pool(trace.max_procs)
    result = replay(trace, machine, policy_config(policy))
    m = summarize(result, machine.capacity)
    share = result.core_seconds / result.wall_seconds if result.wall_seconds else 0.0
    return (f"| {Path(trace_path).name.split('.swf')[0]} | {policy} | {m.jobs:,} "
            f"| {m.avg_wait:,.2f} | {m.wait_percentiles[95]:,.0f} | {m.max_wait:,.0f} "
            f"| {m.avg_bsld:,.2f} | {m.utilisation:.4f} | {m.makespan:,.0f} "
            f"| {m.violations:,} | {m.reserved:,} | {m.jain_bsld:.4f} | {m.worst_user_wait:,.2f} "
            f"| {result.jobs_per_second:,.0f} | {share:.0%} |")


def _worker(trace_path: str, policy: str, gpus_per_node: int, out) -> None:
    out.send(row(trace_path, policy, gpus_per_node))


def timed_row(trace_path: str, policy: str, budget: float, gpus_per_node: int = 0) -> str:
    """``row`` in a child process, stopped after ``budget`` seconds."""
    receive, send = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.Process(target=_worker,
                                    args=(trace_path, policy, gpus_per_node, send))
    child.start()
    child.join(budget)
    if child.is_alive():
        child.terminate()
        child.join()
        name = Path(trace_path).name.split(".swf")[0]
        return f"| {name} | {policy} | not finished within {budget:g} s | | | | | | | | | | | | |"
    return receive.recv() if receive.poll() else f"| {trace_path} | {policy} | failed | |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulator.bench")
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--budget", type=float, default=300.0)
    parser.add_argument("--gpus-per-node", type=int, default=0)
    args = parser.parse_args(argv)
    print(HEADER, flush=True)
    for trace in args.traces:
        for policy in args.policies.split(","):
            print(timed_row(trace, policy, args.budget, args.gpus_per_node), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
