"""``query_nodes``, ``query_partitions``, ``show_config``: sinfo and scontrol show."""

from __future__ import annotations

import dataclasses
from typing import Any

from kiln.identity import Caller
from schedd.lifecycle.context import Context
from schedd.scheduler.snapshot import job_licenses


def _user_name(uid: int | None) -> str:
    if uid is None:
        return ""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def query_nodes(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    now = ctx.now()
    names = set(body.get("names") or [])
    use = ctx.state.node_use()
    out = []
    for node in sorted(ctx.state.nodes.values(), key=lambda n: n.name):
        if names and node.name not in names:
            continue
        d = dataclasses.asdict(node)
        d["state"] = str(node.state)
        d["reason_user"] = _user_name(node.reason_uid)
        u = use[node.name]
        d.update(alloc_cpus=u.cpus, alloc_mem_mb=u.memory_mb, alloc_gpus=u.gpus,
                 alloc_gpu_ids=sorted(u.gpu_ids),
                 shards_per_gpu=ctx.state.shards_per_gpu(node), alloc_shards=u.shards,
                 mps_per_gpu=ctx.state.mps_per_gpu(node), alloc_mps=u.mps,
                 state_display=ctx.state.node_display_state(node, u, now))
        out.append(d)
    return {"nodes": out, "now": now}


def query_partitions(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    names = set(body.get("names") or [])
    out = []
    for part in ctx.state.partitions.values():
        if names and part.name not in names:
            continue
        d = dataclasses.asdict(part)
        d["nodes"] = sorted(n.name for n in ctx.state.nodes.values() if part.name in n.partitions)
        out.append(d)
    return {"partitions": out}


def query_licenses(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """scontrol show licenses: each [[license]] with what running jobs hold of it."""
    names = set(body.get("names") or [])
    used: dict[str, int] = {}
    for job in ctx.state.running():
        for name, count in job_licenses(job):
            used[name] = used.get(name, 0) + count
    return {"licenses": [{"name": lic.name, "total": lic.count, "used": used.get(lic.name, 0)}
                         for lic in ctx.cfg.licenses if not names or lic.name in names]}


def show_config(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    cfg = ctx.cfg
    sched = cfg.scheduler
    return {"config": {
        "ClusterName": cfg.cluster_name,
        "KillWait": f"{cfg.kill_wait} sec",
        "MinJobAge": f"{cfg.min_job_age} sec",
        "MaxArraySize": str(cfg.max_array_size),
        "MaxJobCount": str(cfg.max_job_count),
        "SlurmdTimeout": f"{int(cfg.node_timeout)} sec",
        "SchedulerType": "sched/backfill" if sched.backfill else "sched/builtin",
        "SchedulerParameters": f"bf_max_job_test={sched.bf_max_job_test},"
                               f"bf_resolution={sched.bf_resolution},"
                               f"bf_window={sched.bf_window // 60},"
                               f"bf_max_reservations={sched.bf_max_reservations}",
        "PriorityType": "priority/multifactor",
        "PriorityDecayHalfLife": f"{sched.decay_half_life // 86400}-00:00:00",
        "PriorityMaxAge": f"{sched.max_age // 86400}-00:00:00",
        "PriorityWeightAge": str(sched.weight_age),
        "PriorityWeightFairShare": str(sched.weight_fairshare),
        "PriorityWeightJobSize": str(sched.weight_job_size),
        "PriorityWeightPartition": str(sched.weight_partition),
        "PriorityWeightQOS": str(sched.weight_qos),
        "AccountingStorageType": "accounting_storage/kiln",
        "SLURM_VERSION": "22.05.8",
        "KilnVersion": "0.1.0",
    }}
