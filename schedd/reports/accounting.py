"""Accounting figures: what sacct prints per job and step, and what sreport sums over a window.

Pure functions of jobs as the ledger holds them (``kiln.model.Job``), the job steps stored
by srun (plain dicts of ``job_steps`` columns), the node GPU types, the TRES billing weights and
the GPU price table. No database, socket or clock: the handler passes ``now`` in.

Conventions, as Slurm's accounting has them:

- times are whole seconds (Slurm stores integers), so ``Elapsed`` summed by sreport equals the
  sum of sacct's ``ElapsedRaw``;
- TRES strings are ``name=count`` sorted by name (``billing=1,cpu=1,gres/gpu=1,node=1``), memory
  in MB with Slurm's exact unit conversion (``mem=16000M``, ``mem=16G``);
- GPU-hours = allocated GPUs x elapsed hours; billing = TRES-weighted sum (or the maximum with
  ``billing_max_tres``, Slurm's PriorityFlags=MAX_TRES) of the allocation;
- a job that ran gets ``.batch`` and ``.extern`` step rows even when no step was recorded, with
  the states and exit codes Slurm's slurmstepd would have written (see e_sacct.txt).

Sampled statistics come from the agent (``agentd/sampler.py``) in ``Job.stats``; the
key names, the contract between the two, are in ``kiln/slurm/stats.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kiln.model import Job, JobState
from kiln.slurm.gres import allocation_types, type_counts
from kiln.slurm.hostlist import HostlistError, expand
from kiln.slurm.stats import (
    STAT_CPU_SYSTEM,
    STAT_CPU_USER,
    STAT_GPU_MEM_MAX,
    STAT_GPU_SIMULATED,
    STAT_GPU_UTIL_MAX,
    STAT_GPU_UTIL_MEAN,
    STAT_RSS_MAX,
    STAT_RSS_MEAN,
)
from kiln.slurm.tres import to_string, unit_text
from schedd.scheduler.fairshare import billing

# States whose job row prints ExitCode 0:0 whatever the batch shell got (Slurm's rule)
_SIGNALLED_BY_SLURM = {JobState.CANCELLED, JobState.TIMEOUT, JobState.PREEMPTED,
                       JobState.NODE_FAIL}
SIGTERM, SIGKILL = 15, 9
UNKNOWN_GPU_TYPE = "gpu"


@dataclass(frozen=True, slots=True)
class BillingPolicy:
    """SchedulerConfig's TRES billing weights (``tres_billing_weights``, ``billing_max_tres``)."""

    weights: Mapping[str, float] = field(default_factory=lambda: {"cpu": 1.0, "gres/gpu": 1.0})
    max_tres: bool = False
    # AccountingStorageTRES's typed GPUs (``accounting_storage_tres``): the gres/gpu:<type>
    # that AllocTRES and ReqTRES name beside gres/gpu
    typed: frozenset[str] = frozenset()


# --- elementary figures ------------------------------------------------------------------------


def started(job: Job) -> bool:
    return bool(job.start_time) and job.state != JobState.PENDING


def run_over(job: Job) -> bool:
    """The run has ended: the job finished, or it is an earlier run of a requeued job (sacct
    -D's REQUEUED rows, ``handlers/sacct.earlier_runs``: a live job requeued is PENDING)."""
    return job.state.finished or job.state == JobState.REQUEUED


def job_end(job: Job, now: float) -> int:
    """The job's end as an integer instant; a job still running ends 'now'."""
    if not started(job):
        return 0
    if job.end_time and run_over(job):
        return int(job.end_time)
    return int(now)


def elapsed(job: Job, now: float) -> int:
    """Slurm's Elapsed in seconds: end - start in whole seconds, 0 before the start."""
    if not started(job):
        return 0
    return max(job_end(job, now) - int(job.start_time), 0)


def overlap(start: float, end: float, w_start: float, w_end: float) -> int:
    """Whole seconds of [start, end) inside [w_start, w_end)."""
    return max(min(int(end), int(w_end)) - max(int(start), int(w_start)), 0)


def alloc_cpus(job: Job) -> int:
    if job.allocation:
        return sum(a.cpus for a in job.allocation)
    return 0


def alloc_gpus(job: Job) -> int:
    return sum(len(a.gpus) for a in job.allocation)


def req_cpus(job: Job) -> int:
    per_node = job.ntasks_per_node * job.num_nodes if job.ntasks_per_node else 0
    return max(job.num_tasks, per_node, 1) * max(job.cpus_per_task, 1)


def req_mem_mb(job: Job) -> int:
    if job.mem_per_node_mb:
        return job.mem_per_node_mb * job.num_nodes
    if job.mem_per_cpu_mb:
        return job.mem_per_cpu_mb * req_cpus(job)
    if job.mem_per_gpu_mb:
        return job.mem_per_gpu_mb * job.total_gpus
    return 0


def gpu_type_of(job: Job, node: str, gpu_types: Mapping[str, str]) -> str:
    """The GPU type a job used on a node: the node's model, else what the job asked for."""
    return gpu_types.get(node) or job.gpu_type or UNKNOWN_GPU_TYPE


def alloc_types(job: Job, a: Any, gpu_types: Mapping[str, str]) -> dict[str, int]:
    """{GPU type: count} of one node's allocation: by the node's GPUs (several types on a
    mixed MIG layout), else what the job asked for."""
    return allocation_types(a.node, a.gpus, gpu_types) or (
        {gpu_type_of(job, a.node, gpu_types): len(a.gpus)} if a.gpus else {})


def alloc_tres(job: Job, policy: BillingPolicy, gpu_types: Mapping[str, str],
               bill: float | None = None) -> dict[str, int]:
    """The allocation as TRES counts (none when the job never ran); ``bill``: its billing
    when already computed."""
    if not job.allocation:
        return {}
    tres = {"cpu": alloc_cpus(job), "node": len(job.allocation)}
    mem = sum(a.memory_mb for a in job.allocation)
    if mem:
        tres["mem"] = mem  # the job's string leaves out what it has none of; a step's keeps mem=0
    gpus = alloc_gpus(job)
    if gpus:
        tres["gres/gpu"] = gpus
    if gpus and policy.typed:  # gres/gpu:<type> where AccountingStorageTRES stores it
        for a in job.allocation:
            for kind, n in allocation_types(a.node, a.gpus, gpu_types).items():
                if f"gres/gpu:{kind}" in policy.typed:
                    tres[f"gres/gpu:{kind}"] = tres.get(f"gres/gpu:{kind}", 0) + n
    for a in job.allocation:  # gres/shard or gres/mps
        if a.shards:
            key = f"gres/{a.share_kind}"
            tres[key] = tres.get(key, 0) + a.shard_count
    tres["billing"] = int(billing_of(job, policy, gpu_types) if bill is None else bill)
    return tres


def req_tres(job: Job, policy: BillingPolicy) -> dict[str, int]:
    """What the job asked for, as Slurm's ReqTRES."""
    tres = {"cpu": req_cpus(job), "node": job.num_nodes}
    mem = req_mem_mb(job)
    if mem:
        tres["mem"] = mem
    gpus = job.gpus or job.gpus_per_task * job.num_tasks or job.gpus_per_node * job.num_nodes
    weighted: dict[str, float] = {"cpu": tres["cpu"], "mem": mem}
    if gpus:
        tres["gres/gpu"] = gpus
        weighted[f"gres/gpu:{job.gpu_type}" if job.gpu_type else "gres/gpu"] = gpus
        if job.gpu_type and f"gres/gpu:{job.gpu_type.lower()}" in policy.typed:
            tres[f"gres/gpu:{job.gpu_type.lower()}"] = gpus
    if job.shards_per_node:
        tres["gres/shard"] = job.shards_per_node * job.num_nodes
    if job.mps_per_node:
        tres["gres/mps"] = job.mps_per_node * job.num_nodes
    tres["billing"] = int(billing(weighted, policy.weights, policy.max_tres))
    return tres


def billing_of(job: Job, policy: BillingPolicy, gpu_types: Mapping[str, str]) -> float:
    """The billing TRES of a job's allocation (a rate: billing units while it runs).

    GPUs are weighed per type (``gres/gpu:h100`` weight, else ``gres/gpu``), so a cluster can
    bill an H100 above an A100.
    """
    if not job.allocation:
        return 0.0
    tres: dict[str, float] = {"cpu": float(alloc_cpus(job)),
                              "mem": float(sum(a.memory_mb for a in job.allocation))}
    for a in job.allocation:
        for kind, n in alloc_types(job, a, gpu_types).items():
            tres[f"gres/gpu:{kind}"] = tres.get(f"gres/gpu:{kind}", 0.0) + n
    parts = {k: v for k, v in tres.items() if not k.startswith("gres/gpu:")}
    typed = {k: v for k, v in tres.items() if k.startswith("gres/gpu:")}
    if policy.max_tres:
        return billing({**parts, **typed}, policy.weights, True)
    return billing(parts, policy.weights, False) + billing(typed, policy.weights, False)


def gpu_hours(job: Job, now: float) -> float:
    """Allocated GPUs x elapsed hours; a GPU's shards (or MPS units) count as their share of
    it."""
    share = sum(a.gpu_share for a in job.allocation if a.shards)
    return (alloc_gpus(job) + share) * elapsed(job, now) / 3600.0


# --- TRES strings ----------------------------------------------------------------------------


def mem_text(mb: int) -> str:
    """Memory in MB as TRES strings print it: 16000 -> '16000M', 16384 -> '16G', 0 -> '0'."""
    return unit_text(mb, "MGTP")


def tres_text(tres: Mapping[str, int | float]) -> str:
    """'billing=1,cpu=1,gres/gpu=1,mem=16000M,node=1': sorted by name, as sacct prints."""
    return to_string(tres, by_name=True)


# --- exit codes and states --------------------------------------------------------------------


def state_text(job: Job) -> str:
    """'CANCELLED by 999' when someone cancelled it, else the state's name."""
    if job.state == JobState.CANCELLED and job.cancelled_by is not None:
        return f"CANCELLED by {job.cancelled_by}"
    return str(job.state)


def job_exit_code(job: Job) -> str:
    if job.state in _SIGNALLED_BY_SLURM:
        return "0:0"
    if job.state == JobState.OUT_OF_MEMORY:
        return "0:125"
    return f"{job.exit_code}:{job.exit_signal}"


def derived_exit_code(steps: Iterable[Mapping[str, Any]]) -> str:
    """The highest exit code among the srun steps (batch and extern do not count)."""
    worst = (0, 0)
    for s in steps:
        if str(s.get("step_id")) in ("batch", "extern"):
            continue
        worst = max(worst, (int(s.get("exit_code") or 0), int(s.get("exit_signal") or 0)))
    return f"{worst[0]}:{worst[1]}"


def batch_outcome(job: Job) -> tuple[str, int, int]:
    """(state, exit code, signal) of the synthesised ``.batch`` step."""
    if not job.state.finished:
        return str(job.state), 0, 0
    if job.state in (JobState.CANCELLED, JobState.TIMEOUT, JobState.PREEMPTED,
                     JobState.NODE_FAIL):
        if job.exit_code or job.exit_signal:
            return "CANCELLED", job.exit_code, job.exit_signal
        return "CANCELLED", 0, SIGTERM
    if job.state == JobState.OUT_OF_MEMORY:
        return "OUT_OF_MEMORY", 0, 125
    if job.state == JobState.FAILED and job.exit_signal:
        return "CANCELLED", 0, job.exit_signal
    return str(job.state), job.exit_code, job.exit_signal


# --- sacct rows ------------------------------------------------------------------------------


@dataclass(slots=True)
class RowContext:
    now: float
    policy: BillingPolicy = field(default_factory=BillingPolicy)
    gpu_types: Mapping[str, str] = field(default_factory=dict)
    cluster: str = "kiln"


def _stats_fields(stats: Mapping[str, Any] | None) -> dict[str, Any]:
    stats = stats or {}

    def num(key: str) -> float | None:
        value = stats.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    user, system = num(STAT_CPU_USER), num(STAT_CPU_SYSTEM)
    return {"gpu_util": num(STAT_GPU_UTIL_MEAN), "gpu_util_max": num(STAT_GPU_UTIL_MAX),
            "gpu_mem_max_mb": num(STAT_GPU_MEM_MAX), "max_rss_kb": num(STAT_RSS_MAX),
            "ave_rss_kb": num(STAT_RSS_MEAN), "user_cpu": user, "system_cpu": system,
            "total_cpu": None if user is None or system is None else user + system,
            "gpu_simulated": bool(stats.get(STAT_GPU_SIMULATED))}


def job_row(job: Job, steps: list[dict[str, Any]], rc: RowContext) -> dict[str, Any]:
    """The job's own sacct record: raw values, formatted by the CLI."""
    bill = billing_of(job, rc.policy, rc.gpu_types)
    alloc = alloc_tres(job, rc.policy, rc.gpu_types, bill)
    row = {
        "kind": "job", "job_id": job.display_id, "job_id_raw": str(job.id), "step": None,
        "array_job_id": job.array_job_id, "array_task_id": job.array_task_id,
        "name": job.name, "partition": job.partition, "account": job.account,
        "user": job.user, "uid": job.uid, "gid": job.gid, "state": state_text(job),
        "state_base": str(job.state), "exit_code": job_exit_code(job),
        "derived_exit_code": derived_exit_code(steps), "submit": job.submit_time,
        "eligible": job.eligible_time or job.submit_time, "start": job.start_time
        if started(job) else 0, "end": job_end(job, rc.now) if run_over(job) else 0,
        "elapsed": elapsed(job, rc.now), "time_limit": job.time_limit, "has_limit": True,
        "node_list": job.node_list, "alloc_tres": tres_text(alloc),
        "req_tres": tres_text(req_tres(job, rc.policy)), "alloc_cpus": alloc.get("cpu") or req_cpus(job),
        "req_cpus": req_cpus(job), "req_mem": mem_text(req_mem_mb(job)),
        "nnodes": len(job.allocation) or job.num_nodes, "ntasks": job.num_tasks,
        "alloc_gpus": alloc_gpus(job), "qos": job.qos, "reason": job.reason or "None",
        "priority": job.priority, "workdir": job.workdir, "comment": job.comment,
        "constraints": job.constraint, "reservation": job.reservation,
        "cluster": rc.cluster, "restarts": job.restart_count,
        "gpu_hours": gpu_hours(job, rc.now), "billing": bill,
        # GPU-hours this run's GPUs read below [scheduler.idle_gpu] below_util (idlegpu.py);
        # None: not watched
        "idle_gpu_hours": None if job.idle_gpu_s is None else job.idle_gpu_s / 3600,
        "cancelled_by": job.cancelled_by,
        # what sacct --json's records carry beside the columns (cli/sacct_json.py)
        "wckey": job.wckey, "licenses": job.licenses, "held": bool(job.held),
        "stdout": job.stdout, "stderr": job.stderr, "stdin": job.stdin,
        "batch_host": job.batch_host,
    }
    row.update(_stats_fields(job.stats or None))
    row.update(_job_cpu(row, steps))
    return row


def _job_cpu(row: Mapping[str, Any], steps: list[dict[str, Any]]) -> dict[str, float | None]:
    """The job's CPU time is its steps' together, as Slurm's TotalCPU is: the batch shell's
    tree (the job's own stats) plus each srun step's tasks, which agentd starts apart from the
    shell. Unknown (None) only when no part of the job is known."""
    parts = [(row["user_cpu"], row["system_cpu"])] + [
        (f["user_cpu"], f["system_cpu"]) for f in
        (_stats_fields(s.get("stats")) for s in steps
         if str(s.get("step_id")) not in ("batch", "extern"))]
    known = [p for p in parts if p[0] is not None and p[1] is not None]
    if not known:
        return {}
    user, system = sum(u for u, _ in known), sum(s for _, s in known)
    return {"user_cpu": user, "system_cpu": system, "total_cpu": user + system}


def _step_base(job: Job, parent: dict[str, Any], step_id: str, name: str) -> dict[str, Any]:
    empty = {k: None for k in _stats_fields(None)}
    return {
        **parent, **empty, "kind": "step", "step": step_id,
        "job_id": f"{job.display_id}.{step_id}", "job_id_raw": f"{job.id}.{step_id}",
        "name": name, "partition": "", "user": "", "derived_exit_code": "",
        "time_limit": None, "has_limit": False, "req_tres": "", "qos": "", "reason": "",
        "priority": None, "req_mem": "", "gpu_hours": None, "billing": None,
        "idle_gpu_hours": None, "cancelled_by": None,
    }


def _node_tres(job: Job, nodes: list[str]) -> dict[str, int]:
    """What a step holds: the job's allocation on the step's nodes (memory kept at 0)."""
    held = [a for a in job.allocation if a.node in nodes] or job.allocation[:1]
    tres = {"cpu": sum(a.cpus for a in held), "mem": sum(a.memory_mb for a in held),
            "node": len(held)}
    gpus = sum(len(a.gpus) for a in held)
    if gpus:
        tres["gres/gpu"] = gpus
    return tres


def step_rows(job: Job, steps: list[dict[str, Any]], parent: dict[str, Any],
              rc: RowContext) -> list[dict[str, Any]]:
    """``.batch``, ``.extern`` and the srun steps of a job that ran, in Slurm's order.

    Stored rows (``job_steps``) give times, nodes and statistics; the batch step's state and
    exit code are the job's batch shell's, spelt as Slurm's slurmstepd would (a signal-killed
    job's batch step is CANCELLED 0:9). Without stored rows both ``.batch`` and ``.extern`` are
    made from the job (kiln has no extern step process), so sacct looks like Slurm's anyway.
    """
    if not started(job) or not job.allocation:
        return []
    stored = {str(s.get("step_id")): _closed(job, s) for s in steps}
    rows = []
    if not job.interactive:  # salloc's allocations run no batch script (Slurm: no .batch)
        rows.append(_batch_step(job, stored, parent, rc))
    extern = stored.get("extern") or {
        "step_id": "extern", "name": "extern", "node_list": job.node_list,
        "num_nodes": len(job.allocation), "num_tasks": len(job.allocation),
        "state": "COMPLETED" if job.state.finished else str(job.state),
        "exit_code": 0, "exit_signal": 0, "start_time": job.start_time,
        "end_time": job.end_time if job.state.finished else 0}
    rows.append(_stored_step(job, extern, parent, rc, whole=True))
    numbered = [s for k, s in stored.items() if k not in ("batch", "extern")]
    numbered.sort(key=lambda s: (0, int(s["step_id"])) if str(s["step_id"]).isdigit()
                  else (1, str(s["step_id"])))
    rows.extend(_stored_step(job, s, parent, rc) for s in numbered)
    return rows


def _batch_step(job: Job, stored: dict[str, dict[str, Any]], parent: dict[str, Any],
                rc: RowContext) -> dict[str, Any]:
    """The ``.batch`` row: the batch shell's fate is the job's (Slurm's spelling of it)."""
    state, code, sig = batch_outcome(job)
    batch = {"step_id": "batch", "name": "batch", "node_list": job.batch_host or
             job.allocation[0].node, "num_nodes": 1, "num_tasks": 1, "start_time":
             job.start_time, "end_time": job.end_time if job.state.finished else 0,
             **stored.get("batch", {}),
             # the batch shell's fate is the job's: Slurm's spelling of it wins
             "state": state, "exit_code": code, "exit_signal": sig}
    if not batch.get("stats") and job.stats:
        batch["stats"] = job.stats
    return _stored_step(job, batch, parent, rc)


def _closed(job: Job, step: dict[str, Any]) -> dict[str, Any]:
    """A step the ledger still calls running in a job that has ended ended with the job."""
    if not job.state.finished or str(step.get("state")) not in ("RUNNING", "PENDING",
                                                                 "COMPLETING"):
        return step
    return {**step, "state": "CANCELLED", "end_time": job.end_time}


def _stored_step(job: Job, step: Mapping[str, Any], parent: dict[str, Any], rc: RowContext,
                 whole: bool = False) -> dict[str, Any]:
    step_id = str(step.get("step_id"))
    row = _step_base(job, parent, step_id, str(step.get("name") or step_id))
    node_list = str(step.get("node_list") or job.batch_host or "")
    try:
        nodes = expand(node_list) if node_list else []
    except HostlistError:
        nodes = []
    if whole:  # the extern step holds the whole allocation: the job's own string
        alloc_text, cpus, gpus = parent["alloc_tres"], parent["alloc_cpus"], parent["alloc_gpus"]
    else:
        tres = _node_tres(job, nodes)
        if step.get("cpus"):
            tres["cpu"] = int(step["cpus"])
        alloc_text, cpus, gpus = tres_text(tres), tres["cpu"], tres.get("gres/gpu", 0)
    start = float(step.get("start_time") or 0)
    end = float(step.get("end_time") or 0)
    state = str(step.get("state") or "RUNNING")
    running = state in ("RUNNING", "PENDING", "COMPLETING") or not end
    stop = int(rc.now) if running else int(end)
    row.update({
        "state": state, "state_base": state,
        "exit_code": f"{int(step.get('exit_code') or 0)}:{int(step.get('exit_signal') or 0)}",
        "submit": start, "eligible": start, "start": start, "end": 0 if running else end,
        "elapsed": max(stop - int(start), 0) if start else 0, "node_list": node_list,
        "alloc_tres": alloc_text, "alloc_cpus": cpus,
        "nnodes": int(step.get("num_nodes") or len(nodes) or 1),
        "ntasks": int(step.get("num_tasks") or 1), "alloc_gpus": gpus,
    })
    stats = step.get("stats")
    if isinstance(stats, Mapping) and stats:
        row.update(_stats_fields(stats))
    return row


def sacct_rows(job: Job, steps: list[dict[str, Any]], rc: RowContext,
               with_steps: bool = True) -> list[dict[str, Any]]:
    """The job's row, then (unless ``with_steps`` is False, sacct -X) its steps' rows."""
    row = job_row(job, steps, rc)
    if not with_steps:
        return [row]
    return [row, *step_rows(job, steps, row, rc)]


# --- sreport: usage over a window ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    start: float
    end: float

    @property
    def seconds(self) -> int:
        return max(int(self.end) - int(self.start), 0)


def usage_tres(job: Job, policy: BillingPolicy, gpu_types: Mapping[str, str]) -> dict[str, float]:
    """TRES counts a running job consumes per second, typed GPUs included (gres/gpu:h100)."""
    tres: dict[str, float] = {k: float(v) for k, v in alloc_tres(job, policy, gpu_types).items()}
    if "billing" in tres:
        tres["billing"] = billing_of(job, policy, gpu_types)
    for a in job.allocation:
        for kind, n in alloc_types(job, a, gpu_types).items():
            if f"gres/gpu:{kind}" not in policy.typed:  # alloc_tres counted those already
                tres[f"gres/gpu:{kind}"] = tres.get(f"gres/gpu:{kind}", 0.0) + n
    return tres


def job_seconds_in(job: Job, window: Window, now: float) -> int:
    if not started(job):
        return 0
    return overlap(job.start_time, job_end(job, now), window.start, window.end)


def planned_seconds_in(job: Job, window: Window, now: float) -> int:
    """How long the job waited eligible inside the window (Slurm's Planned, once Reserved)."""
    if job.held:
        return 0
    since = job.eligible_time or job.submit_time
    if started(job):
        until = job.start_time
    elif job.state.finished:
        until = job.end_time
    else:
        until = now
    return overlap(since, until, window.start, window.end) if since else 0


@dataclass(slots=True)
class UsageReport:
    """Everything sreport's reports and kiln's cost report read, in TRES-seconds."""

    window: Window
    capacity: dict[str, float] = field(default_factory=dict)  # TRES x window seconds
    allocated: dict[str, float] = field(default_factory=dict)
    planned: dict[str, float] = field(default_factory=dict)
    assoc: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    gpu_seconds: dict[tuple[str, str], float] = field(default_factory=dict)  # (acct, type)

    def to_wire(self, prices: Mapping[str, float], default_price: float) -> dict[str, Any]:
        cost = []
        for (account, gtype), secs in sorted(self.gpu_seconds.items()):
            price = float(prices.get(gtype, default_price))
            hours = secs / 3600.0
            cost.append({"account": account, "gpu_type": gtype, "gpu_seconds": secs,
                         "gpu_hours": hours, "price": price, "cost": hours * price})
        return {
            "start": self.window.start, "end": self.window.end,
            "capacity": self.capacity, "allocated": self.allocated, "planned": self.planned,
            "assoc": [{"account": a, "user": u, "tres": t}
                      for (a, u), t in sorted(self.assoc.items())],
            "cost": cost,
        }


def capacity_tres(nodes: Iterable[Any], gpu_types: Mapping[str, str]) -> dict[str, float]:
    """The cluster's TRES: CPUs, memory, nodes and GPUs (by type too) of the nodes given."""
    cap: dict[str, float] = {"cpu": 0.0, "mem": 0.0, "node": 0.0, "gres/gpu": 0.0,
                             "billing": 0.0, "energy": 0.0}
    for n in nodes:
        cap["cpu"] += n.cpus
        cap["mem"] += n.memory_mb
        cap["node"] += 1
        if n.gpus:
            cap["gres/gpu"] += len(n.gpus)
            counts = type_counts(n.gpus) if getattr(gpu_types, "kinds", {}).get(n.name) else {
                gpu_types.get(n.name) or UNKNOWN_GPU_TYPE: len(n.gpus)}
            for kind, count in counts.items():
                cap[f"gres/gpu:{kind}"] = cap.get(f"gres/gpu:{kind}", 0.0) + count
    cap["billing"] = cap["cpu"]
    return cap


def usage_report(jobs: Iterable[Job], nodes: Iterable[Any], window: Window, now: float,
                 policy: BillingPolicy, gpu_types: Mapping[str, str]) -> UsageReport:
    """Sum the jobs' usage inside the window: per association, per GPU type and account,
    the cluster's allocated and planned time, against its capacity."""
    report = UsageReport(window)
    per_sec = capacity_tres(nodes, gpu_types)
    report.capacity = {k: v * window.seconds for k, v in per_sec.items()}
    planned: dict[str, float] = {}
    for job in jobs:
        wait = planned_seconds_in(job, window, now)
        if wait:
            for name, count in req_tres(job, policy).items():
                planned[name] = planned.get(name, 0.0) + count * wait
        secs = job_seconds_in(job, window, now)
        if not secs:
            continue
        tres = usage_tres(job, policy, gpu_types)
        assoc = report.assoc.setdefault((job.account, job.user), {})
        for name, count in tres.items():
            assoc[name] = assoc.get(name, 0.0) + count * secs
            report.allocated[name] = report.allocated.get(name, 0.0) + count * secs
        for a in job.allocation:
            for kind, n in alloc_types(job, a, gpu_types).items():
                key = (job.account, kind)
                report.gpu_seconds[key] = report.gpu_seconds.get(key, 0.0) + n * secs
    for name, value in planned.items():  # never more than the idle time left
        room = report.capacity.get(name, 0.0) - report.allocated.get(name, 0.0)
        report.planned[name] = max(min(value, room), 0.0)
    return report
