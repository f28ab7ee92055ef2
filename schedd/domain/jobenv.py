"""What a job sees when it starts: its environment (SPEC §3) and its output file names.

Built by schedd, which knows the whole allocation; the agent runs it as given.
"""

from __future__ import annotations

import os

from kiln.model import Job, NodeAllocation
from kiln.slurm.gres import thread_percentage
from kiln.slurm.hostlist import compress
from kiln.slurm.topology import Topology


def topology_addr(topology: Topology | None, node: str) -> dict[str, str]:
    """SLURM_TOPOLOGY_ADDR and SLURM_TOPOLOGY_ADDR_PATTERN of ``node``: its switches top down
    and the node (``top.s1.n5``, ``switch.switch.node``), its block (``b2.n5``,
    ``block.node``), or the node alone (``node``) where no [topology] places it."""
    place = topology.places.get(node) if topology is not None else None
    if place is None:
        return {"SLURM_TOPOLOGY_ADDR": node, "SLURM_TOPOLOGY_ADDR_PATTERN": "node"}
    return {"SLURM_TOPOLOGY_ADDR": place.addr, "SLURM_TOPOLOGY_ADDR_PATTERN": place.pattern}


def expand_output_pattern(pattern: str, job: Job, node: str,
                          step: dict[str, str] | None = None) -> str:
    """Slurm's filename patterns: %j %J %x %u %A %a %N %n %t %s %% (absolute, from the
    workdir). ``step`` overrides the batch step's values of %n %t %s for srun's tasks."""
    array_id = job.array_job_id if job.array_job_id is not None else job.id
    task = job.array_task_id if job.array_task_id is not None else 4294967294
    subs = {
        "j": str(job.id), "J": str(job.id), "x": job.name, "u": job.user,
        "A": str(array_id), "a": str(task), "N": node, "n": "0", "t": "0", "s": "batch",
        "%": "%",
    }
    if step:
        subs.update(step)
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "%" and i + 1 < len(pattern):
            j = i + 1
            while j < len(pattern) and pattern[j].isdigit():
                j += 1  # %5j: zero-padded width
            width = pattern[i + 1 : j]
            key = pattern[j] if j < len(pattern) else ""
            if key in subs:
                value = subs[key]
                if width and value.isdigit():
                    value = value.zfill(int(width))
                out.append(value)
                i = j + 1
                continue
        out.append(ch)
        i += 1
    path = "".join(out)
    return path if os.path.isabs(path) else os.path.join(job.workdir or "/", path)


def default_stdout(job: Job) -> str:
    return "slurm-%A_%a.out" if job.array_task_id is not None else "slurm-%j.out"


def output_paths(job: Job, node: str) -> tuple[str, str]:
    stdout = expand_output_pattern(job.stdout or default_stdout(job), job, node)
    stderr = expand_output_pattern(job.stderr, job, node) if job.stderr else stdout
    return stdout, stderr


def job_ntasks(job: Job) -> int:
    """The job's task count as Slurm reads it: -n, else --ntasks-per-node times the nodes."""
    nodes = max(len(job.allocation) or job.num_nodes, 1)
    if job.ntasks_per_node and job.num_tasks <= 1:
        return job.ntasks_per_node * nodes
    return max(job.num_tasks, 1)


def tasks_per_node_text(counts: list[int]) -> str:
    """SLURM_TASKS_PER_NODE's compact form: [2, 2, 1] -> '2(x2),1'."""
    parts: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        parts.append(f"{counts[i]}(x{j - i})" if j - i > 1 else str(counts[i]))
        i = j
    return ",".join(parts)


def step_environment(base: dict[str, str], job: Job, step_id: int, node_index: int,
                     node: str, cpus: int, gpus: list[int], procids: list[int],
                     step_nodes: list[str], step_counts: list[int],
                     cpus_per_task: int, topology: Topology | None = None) -> dict[str, str]:
    """The environment common to one node's tasks of an srun step: srun's own environment
    (which is the batch script's, SLURM_* included) with the step's view laid over it."""
    env = dict(base)
    ntasks = sum(step_counts)
    visible = ",".join(str(g) for g in gpus)
    env.update({
        "SLURM_JOB_ID": str(job.id),
        "SLURM_JOBID": str(job.id),
        "SLURM_STEP_ID": str(step_id),
        "SLURM_STEPID": str(step_id),
        "SLURM_STEP_NUM_NODES": str(len(step_nodes)),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_NODELIST": compress(step_nodes),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node_text(step_counts),
        "SLURM_NNODES": str(len(step_nodes)),
        "SLURM_NODELIST": compress(step_nodes),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_TASKS_PER_NODE": tasks_per_node_text(step_counts),
        "SLURM_NODEID": str(node_index),
        "SLURM_GTIDS": ",".join(str(p) for p in procids),
        "SLURM_CPUS_ON_NODE": str(cpus),
        "SLURM_CPUS_PER_TASK": str(cpus_per_task),
        "SLURMD_NODENAME": node,
        **topology_addr(topology, node),
        "SLURM_DISTRIBUTION": "block",
        "SLURM_GPUS_ON_NODE": str(len(gpus)),
        "SLURM_STEP_GPUS": visible,
        "CUDA_VISIBLE_DEVICES": visible,
        "GPU_DEVICE_ORDINAL": visible,
    })
    if not gpus:
        for key in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "SLURM_STEP_GPUS"):
            env.pop(key)
    alloc = next((a for a in job.allocation if a.node == node), None)
    if alloc is not None and alloc.shards:  # the step runs on the job's shares of this node
        env.update(share_environment(alloc))
    return env


def share_environment(alloc: NodeAllocation) -> dict[str, str]:
    """What a job holding GPU shares on a node sees of them: gres/shard's
    SLURM_SHARDS_ON_NODE; gres/mps's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (Slurm's formula) and
    SLURM_JOB_GPUS. The MPS pipe and log directories are the node's: its agent adds them
    (agentd/mps.py)."""
    if alloc.share_kind == "mps":
        return {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE":
                str(thread_percentage(alloc.shard_count, alloc.shards_per_gpu)),
                "SLURM_JOB_GPUS": ",".join(str(g) for g in sorted(alloc.shards))}
    return {"SLURM_SHARDS_ON_NODE": str(alloc.shard_count)}


def task_overlay(procid: int, localid: int) -> dict[str, str]:
    """What differs between the tasks of one node: their ranks."""
    return {"SLURM_PROCID": str(procid), "SLURM_LOCALID": str(localid)}


def job_environment(job: Job, alloc: NodeAllocation, node_index: int, cluster: str,
                    array_ids: tuple[int, ...] = (), topology: Topology | None = None
                    ) -> dict[str, str]:
    """The environment of the batch script on ``alloc.node`` (node_index 0 = batch host)."""
    env = dict(job.environment)
    nodes = [a.node for a in job.allocation]
    gpus = ",".join(str(g) for g in alloc.gpus)
    visible = ",".join(str(g) for g in alloc.devices)  # with the GPUs of its shards
    ntasks = job_ntasks(job)
    cpus_per_node = ",".join(str(a.cpus) for a in job.allocation)
    tasks_per_node = -(-ntasks // max(len(nodes), 1))
    env.update({
        "SLURM_JOB_ID": str(job.id),
        "SLURM_JOBID": str(job.id),
        "SLURM_JOB_NAME": job.name,
        "SLURM_JOB_USER": job.user,
        "SLURM_JOB_UID": str(job.uid),
        "SLURM_JOB_GID": str(job.gid),
        "SLURM_JOB_ACCOUNT": job.account,
        "SLURM_JOB_PARTITION": job.partition,
        "SLURM_JOB_QOS": job.qos,
        "SLURM_JOB_NODELIST": compress(nodes),
        "SLURM_NODELIST": compress(nodes),
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NTASKS": str(ntasks),
        "SLURM_NPROCS": str(ntasks),
        "SLURM_CPUS_PER_TASK": str(job.cpus_per_task),
        "SLURM_CPUS_ON_NODE": str(alloc.cpus),
        "SLURM_JOB_CPUS_PER_NODE": cpus_per_node,
        "SLURM_TASKS_PER_NODE": f"{tasks_per_node}(x{len(nodes)})" if len(nodes) > 1 else str(tasks_per_node),
        "SLURM_MEM_PER_NODE": str(alloc.memory_mb),
        "SLURM_SUBMIT_DIR": job.workdir,
        "SLURM_SUBMIT_HOST": job.submit_host,
        "SLURM_NODEID": str(node_index),
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_GTIDS": "0",
        **topology_addr(topology, alloc.node),
        "SLURMD_NODENAME": alloc.node,
        "SLURM_GPUS_ON_NODE": str(len(alloc.gpus)),
        "SLURM_JOB_GPUS": gpus,
        "CUDA_VISIBLE_DEVICES": visible,
        "GPU_DEVICE_ORDINAL": visible,
        "SLURM_RESTART_COUNT": str(job.restart_count),
        "SLURM_CLUSTER_NAME": cluster,
    })
    if not alloc.gpus:
        env.pop("SLURM_JOB_GPUS")
        if not alloc.shards:
            env.pop("CUDA_VISIBLE_DEVICES")
            env.pop("GPU_DEVICE_ORDINAL")
    if alloc.shards:  # gres/shard or gres/mps: what the job holds of the node's GPUs
        env.update(share_environment(alloc))
    if job.array_job_id is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
        env["SLURM_ARRAY_TASK_ID"] = str(job.array_task_id)
        if array_ids:
            env["SLURM_ARRAY_TASK_MIN"] = str(min(array_ids))
            env["SLURM_ARRAY_TASK_MAX"] = str(max(array_ids))
            env["SLURM_ARRAY_TASK_COUNT"] = str(len(array_ids))
            steps = {b - a for a, b in zip(array_ids, array_ids[1:], strict=False)}
            env["SLURM_ARRAY_TASK_STEP"] = str(steps.pop() if len(steps) == 1 else 1)
    return env


# What salloc's command sees of its allocation (it runs where salloc runs, not on a node: no
# node's own values such as SLURMD_NODENAME, SLURM_NODEID or CUDA_VISIBLE_DEVICES).
ALLOCATION_VARIABLES = (
    "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NAME", "SLURM_JOB_USER", "SLURM_JOB_UID",
    "SLURM_JOB_GID", "SLURM_JOB_ACCOUNT", "SLURM_JOB_PARTITION", "SLURM_JOB_QOS",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NUM_NODES", "SLURM_NNODES",
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_CPUS_PER_TASK", "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_MEM_PER_NODE", "SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST",
    "SLURM_CLUSTER_NAME",
)


def allocation_environment(job: Job, cluster: str) -> dict[str, str]:
    """The SLURM_* variables salloc sets for its command (Slurm's salloc sets these)."""
    env = job_environment(job, job.allocation[0], 0, cluster)
    return {name: env[name] for name in ALLOCATION_VARIABLES if name in env}
