"""``kiln top``: a live view of the cluster in the terminal, built with rich.

Four panels, sized for an 80x24 terminal: the nodes with their GPUs (allocated, free, drained;
utilisation and memory where the agents sampled them, marked ``sim`` on ``--fake-gpus`` nodes,
whose figures are simulated), the queue by partition with the reasons jobs wait, your own jobs
with their run time against their limit, and your account's fair-share standing.

Keys: ``u`` shows only your jobs in the queue (again: everyone's), ``p`` steps through the
partitions (one at a time, then all), ``q`` or Ctrl-C quits. The screen is redrawn in place
(rich's Live on the alternate screen: no flicker). When stdout is not a terminal, or with
``--once``, it prints one snapshot and exits.

What it reads is what the Slurm-named commands read (query_nodes, query_jobs, sshare and
job_stat), through the same stdlib client; ``gather`` fetches, ``render`` is pure, so a test
can render a known state and compare it with a golden file.
"""

from __future__ import annotations

import getpass
import io
import os
import select
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import click

REFRESH = 2.0  # seconds between fetches in the live view
MY_JOBS_SHOWN = 5
# the job attributes the view reads: schedd sends just these, column by column (as squeue)
JOB_FIELDS = ["id", "name", "user", "state", "partition", "reason", "start_time", "time_limit",
              "array_job_id", "array_task_id", "allocation"]


@dataclass(slots=True)
class View:
    """What the user chose with the keys."""

    user: str
    mine_only: bool = False
    partition: str = ""  # "" = all


@dataclass(slots=True)
class ClusterState:
    """One fetch: the wire replies ``render`` draws from."""

    now: float
    nodes: list[dict[str, Any]]
    jobs: list[dict[str, Any]]
    shares: list[dict[str, Any]]
    usage: dict[int, dict[str, Any]] = field(default_factory=dict)  # job id -> batch usage


def gather(user: str) -> ClusterState:
    """Fetch what the view shows (each reply as the commands get it)."""
    from cli.core.client import Client, ClientError

    with Client() as client:
        nodes = client.call("query_nodes", {})
        jobs = rows(client.call("query_jobs", {"fields": JOB_FIELDS}))
        try:
            shares = client.call("sshare", {}).get("rows", [])
        except ClientError:
            shares = []
        running = [str(j["id"]) for j in jobs if j.get("state") == "RUNNING"]
        usage: dict[int, dict[str, Any]] = {}
        if running:
            for answer in client.call("job_stat", {"job_ids": running}).get("answers", []):
                for job in answer.get("jobs", []):
                    for step in job.get("steps", []):
                        if step.get("step") == "batch" and step.get("usage"):
                            usage[int(job["job_id"])] = step["usage"]
    return ClusterState(float(nodes.get("now") or time.time()), nodes.get("nodes", []), jobs,
                        shares, usage)


def rows(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """query_jobs' column reply ({"count", "columns", "values", "constant"}) as one dict per job."""
    count, constant = int(reply.get("count") or 0), reply.get("constant") or {}
    columns = list(zip(reply.get("columns") or [], reply.get("values") or [], strict=True))
    return [{**constant, **{name: values[i] for name, values in columns}} for i in range(count)]


# --- the panels ------------------------------------------------------------------------------


def _clock(secs: float | None) -> str:
    from cli.core.formats import fmt_secs

    return fmt_secs(secs)


def _node_gpus(state: ClusterState) -> dict[str, tuple[float, float, bool]]:
    """node -> (mean GPU utilisation, GPU memory MiB, simulated) over its sampled jobs."""
    out: dict[str, list[tuple[float, float, bool]]] = {}
    for job in state.jobs:
        usage = state.usage.get(int(job["id"]))
        if not usage or "gpu_util" not in usage:
            continue
        for alloc in job.get("allocation") or []:
            if alloc.get("gpus"):
                out.setdefault(alloc["node"], []).append(
                    (float(usage["gpu_util"]), float(usage.get("gpu_mem_mb", 0)),
                     bool(usage.get("gpu_simulated"))))
    return {node: (sum(u for u, _, _ in v) / len(v), sum(m for _, m, _ in v),
                   any(s for _, _, s in v)) for node, v in out.items()}


def nodes_table(state: ClusterState, view: View, limit: int | None = None) -> Any:
    """The nodes (of the chosen partition), at most ``limit`` rows (the rest counted)."""
    from rich.table import Table

    table = Table(title="Nodes", title_justify="left", expand=True, box=None, padding=(0, 1))
    for name, justify in (("NODE", "left"), ("STATE", "left"), ("GPUS", "right"),
                          ("ALLOC", "right"), ("FREE", "right"), ("DRAIN", "right"),
                          ("UTIL", "right"), ("GPUMEM", "right")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    sampled = _node_gpus(state)
    nodes = [n for n in state.nodes
             if not view.partition or view.partition in (n.get("partitions") or [])]
    shown = nodes if limit is None or len(nodes) <= limit else nodes[:max(limit - 1, 1)]
    for node in shown:
        total, alloc = len(node.get("gpus") or []), int(node.get("alloc_gpus") or 0)
        display = str(node.get("state_display") or node.get("state") or "")
        # a failed GPU (an NVML fault, until RESUME) is drained on its own: marked "!gpu"
        failed = sum(1 for g in node.get("gpus") or [] if g.get("fault"))
        drained = total - alloc if display.startswith(("DRAIN", "DOWN")) else failed
        util, mem, sim = sampled.get(node["name"], (None, None, False))
        table.add_row(node["name"], display.lower() + (" !gpu" if failed else ""), str(total),
                      str(alloc), str(max(total - alloc - drained, 0)), str(drained),
                      "-" if util is None else f"{util:.0f}%{' sim' if sim else ''}",
                      "-" if mem is None else f"{mem / 1024:.1f}G")
    if len(shown) < len(nodes):
        table.add_row(f"+{len(nodes) - len(shown)} more", "", "", "", "", "", "", "")
    return table


def queue_table(state: ClusterState, view: View) -> Any:
    from rich.table import Table

    table = Table(title="Queue" + (f" ({view.user}'s)" if view.mine_only else ""),
                  title_justify="left", expand=True, box=None, padding=(0, 1))
    for name in ("PARTITION", "RUNNING", "PENDING", "WAITING FOR"):
        table.add_column(name, justify="left" if name in ("PARTITION", "WAITING FOR")
                         else "right", no_wrap=True)
    by_part: dict[str, Counter[str]] = {}
    for job in _jobs(state, view):
        counts = by_part.setdefault(str(job.get("partition", "")), Counter())
        if job.get("state") == "RUNNING":
            counts["running"] += 1
        elif job.get("state") == "PENDING":
            counts["pending"] += 1
            counts["reason:" + str(job.get("reason") or "None")] += 1
    for part in sorted(by_part):
        c = by_part[part]
        reasons = sorted(((k[7:], v) for k, v in c.items() if k.startswith("reason:")),
                         key=lambda kv: (-kv[1], kv[0]))
        table.add_row(part, str(c["running"]), str(c["pending"]),
                      " ".join(f"{r}:{n}" for r, n in reasons) or "-")
    return table


def my_jobs_table(state: ClusterState, view: View) -> Any:
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    table = Table(title=f"{view.user}'s jobs", title_justify="left", expand=True, box=None,
                  padding=(0, 1))
    for name in ("JOBID", "NAME", "ST", "TIME", "LIMIT", "USED", ""):
        table.add_column(name, no_wrap=True, justify="right" if name == "USED" else "left")
    mine = [j for j in state.jobs if j.get("user") == view.user
            and j.get("state") in ("RUNNING", "PENDING")]
    mine.sort(key=lambda j: (j.get("state") != "RUNNING", int(j["id"])))
    for job in mine[:MY_JOBS_SHOWN]:
        elapsed = max(state.now - float(job.get("start_time") or state.now), 0.0) \
            if job.get("state") == "RUNNING" else 0.0
        limit = job.get("time_limit")
        used, bar = "-", ""  # type: tuple[str, Any]
        if limit:  # the run time against the limit: a percentage and a bar
            used = f"{100 * min(elapsed / float(limit), 1.0):.0f}%"
            bar = ProgressBar(total=float(limit), completed=min(elapsed, float(limit)), width=24)
        table.add_row(_job_id(job), str(job.get("name", ""))[:12],
                      "R" if job.get("state") == "RUNNING" else "PD", _clock(elapsed),
                      _clock(limit), used, bar)
    if len(mine) > MY_JOBS_SHOWN:
        table.add_row("", f"+{len(mine) - MY_JOBS_SHOWN} more", "", "", "", "", "")
    return table


def fairshare_line(state: ClusterState, view: View) -> str:
    """The user's associations: FairShare and effective usage, sshare's figures."""
    rows = [r for r in state.shares if r.get("user") == view.user]
    if not rows:
        return f"Fair share: {view.user} has no association"
    parts = [f"{r['account']}: FairShare {float(r.get('fairshare') or 0):.6f}, "
             f"EffectvUsage {float(r.get('effective_usage') or 0):.6f}" for r in rows[:2]]
    return "Fair share  " + "; ".join(parts)


def _job_id(job: dict[str, Any]) -> str:
    if job.get("array_job_id") is not None and job.get("array_task_id") is not None:
        return f"{job['array_job_id']}_{job['array_task_id']}"
    return str(job["id"])


def _jobs(state: ClusterState, view: View) -> list[dict[str, Any]]:
    return [j for j in state.jobs
            if (not view.mine_only or j.get("user") == view.user)
            and (not view.partition or j.get("partition") == view.partition)]


def render(state: ClusterState, view: View, height: int | None = None) -> Any:
    """The whole view: a title line, the four panels, the keys. ``height`` (the live view's
    terminal): the node list is cut to what leaves room for the rest."""
    from rich.console import Group
    from rich.text import Text

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(state.now))
    title = Text(f"kiln top  {stamp}" + (f"  partition {view.partition}"
                                         if view.partition else ""), style="bold")
    keys = Text("u: my jobs / all  p: partition  q: quit", style="dim")
    limit = None
    if height is not None:
        mine = sum(1 for j in state.jobs if j.get("user") == view.user
                   and j.get("state") in ("RUNNING", "PENDING"))
        rest = 10 + len(_partitions(state)) + min(mine, MY_JOBS_SHOWN + 1)
        limit = max(height - rest, 3)
    return Group(title, nodes_table(state, view, limit), queue_table(state, view),
                 my_jobs_table(state, view), Text(fairshare_line(state, view)), keys)


def snapshot_text(state: ClusterState, view: View, width: int = 80) -> str:
    """The view as plain text (``--once``, and the golden-file test)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False,
                      legacy_windows=False, emoji=False, highlight=False)
    console.print(render(state, view))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"


# --- the live view ---------------------------------------------------------------------------


def _partitions(state: ClusterState) -> list[str]:
    return sorted({str(j.get("partition", "")) for j in state.jobs} |
                  {p for n in state.nodes for p in n.get("partitions") or []})


def on_key(key: str, view: View, state: ClusterState) -> bool:
    """Apply a key to the view; False to quit."""
    if key in ("q", "Q", "\x03"):
        return False
    if key == "u":
        view.mine_only = not view.mine_only
    elif key == "p":
        parts = [""] + _partitions(state)
        view.partition = parts[(parts.index(view.partition) + 1) % len(parts)] \
            if view.partition in parts else ""
    return True


def _height() -> int:
    try:
        return os.get_terminal_size(sys.stdout.fileno()).lines
    except OSError:
        return 24


def live(view: View) -> None:
    import termios
    import tty

    from rich.live import Live

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    state = gather(view.user)
    try:
        tty.setcbreak(fd)
        with Live(render(state, view, _height()), screen=True, auto_refresh=False) as screen:
            fetched = time.monotonic()
            while True:
                ready, _, _ = select.select([fd], [], [], 0.25)
                if ready:
                    if not on_key(os.read(fd, 1).decode(errors="replace"), view, state):
                        return
                    screen.update(render(state, view, _height()), refresh=True)
                if time.monotonic() - fetched >= REFRESH:
                    state, fetched = gather(view.user), time.monotonic()
                    screen.update(render(state, view, _height()), refresh=True)
    except KeyboardInterrupt:
        return
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@click.command()
@click.option("--once", is_flag=True, help="print one snapshot and exit (the default when "
              "stdout is not a terminal)")
@click.option("-u", "--user", "user", default=None, help="whose jobs and fair share to show")
@click.option("-p", "--partition", default="", help="show only this partition's queue")
def top(once: bool, user: str | None, partition: str) -> None:
    """A live view of nodes, GPUs, the queue and your jobs (q quits)."""
    from cli.core.client import ClientError

    view = View(user or getpass.getuser(), partition=partition)
    try:
        if once or not sys.stdout.isatty() or not sys.stdin.isatty():
            width = 80 if not sys.stdout.isatty() else min(os.get_terminal_size().columns, 200)
            sys.stdout.write(snapshot_text(gather(view.user), view, width))
            return
        live(view)
    except ClientError as exc:
        raise click.ClickException(exc.message) from None
