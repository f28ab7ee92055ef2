"""The agents schedd talks to: who is connected, and what to tell them (launch, signal, kill).

Messages to an agent are one-way; their delivery is checked by reconciliation instead of by
replies: every heartbeat lists what the agent runs, and schedd resends a launch the agent never
confirmed and fences (kills) anything it runs that schedd no longer knows as running there.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any

from schedd import protocol
from schedd.config import Config
from schedd.domain.jobenv import job_environment, output_paths
from schedd.model import Job, Partition

log = logging.getLogger("schedd.lifecycle.agents")

Sender = Callable[[bytes, bytes], None]  # (agent identity, frame)


class AgentRegistry:
    def __init__(self, cfg: Config, send: Sender):
        self.cfg = cfg
        self._send = send
        self._ids = itertools.count(1)
        self.confirmed: set[tuple[int, int]] = set()  # (job id, generation) the agent started
        # job id -> when (schedd's clock) its $KILN_CHECKPOINT_FILE was last touched, as the
        # batch host's heartbeats report it (schedd/lifecycle/preemption.py scores victims with it)
        self.checkpoints: dict[int, float] = {}
        # node -> {(job id, step: "batch" or "0", "1", ...): its live usage there}, as the node's
        # last heartbeat reported it (schedd.slurm.stats; sstat reads it, nothing stores it)
        self.usage: dict[str, dict[tuple[int, str], dict[str, float]]] = {}
        # node -> the Reason its health check drained it with ([agent] health_check_resume
        # resumes only these, and only while the reason and its (lack of an) admin uid stand)
        self.health_drained: dict[str, str] = {}

    def _tell(self, node: str, op: str, body: dict[str, Any]) -> None:
        self._send(node.encode(), protocol.request(op, body, next(self._ids)))

    def launch(self, job: Job, array_ids: tuple[int, ...] = ()) -> None:
        """Send the batch script to the job's first node (the batch host)."""
        alloc = job.allocation[0]
        stdout, stderr = output_paths(job, alloc.node)
        spec = {
            "job_id": job.id, "generation": job.generation, "name": job.name,
            "user": job.user, "uid": job.uid, "gid": job.gid, "script": job.script,
            "workdir": job.workdir, "stdout": stdout, "stderr": stderr,
            "open_mode": job.open_mode,
            "environment": job_environment(job, alloc, 0, self.cfg.cluster_name, array_ids),
            "gpus": list(alloc.gpus), "cpus": alloc.cpus, "cpu_ids": list(alloc.cpu_ids),
            "memory_mb": alloc.memory_mb, "time_limit": job.launched_limit,
            "kill_wait": self.cfg.kill_wait, "signal": job.signal, "start_time": job.start_time,
            "on_isolation": self._partition(job).on_isolation,
            "fence_timeout": self.cfg.fence_timeout,
            "fence_kill_wait": self.cfg.fence_kill_wait,
        }
        if job.script_args:  # only then: an agent older than the field still takes the rest
            spec["args"] = list(job.script_args)
        self._tell(alloc.node, "launch", {"launch": spec})

    def _partition(self, job: Job) -> Partition:
        return next((p for p in self.cfg.partitions if p.name == job.partition),
                    self.cfg.default_partition)

    def forget_run(self, job_id: int, generation: int) -> None:
        """A run has ended: its confirmation and checkpoint reports are of no more use."""
        self.confirmed.discard((job_id, generation))
        self.checkpoints.pop(job_id, None)
        for steps in self.usage.values():
            for key in [k for k in steps if k[0] == job_id]:
                del steps[key]

    def step_usage(self, job: Job) -> dict[str, dict[str, dict[str, float]]]:
        """The live usage of ``job``'s steps: {step: {node: usage}}, from its nodes' agents."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for alloc in job.allocation:
            for (job_id, step), usage in self.usage.get(alloc.node, {}).items():
                if job_id == job.id:
                    out.setdefault(step, {})[alloc.node] = usage
        return out

    def terminate(self, job: Job, state: str) -> None:
        if job.allocation:
            self._tell(job.allocation[0].node, "terminate",
                       {"job_id": job.id, "generation": job.generation, "state": state})

    def fence(self, node: str, job_id: int, generation: int) -> None:
        """Kill a job an agent runs that schedd does not know as running there."""
        log.warning("fencing job %d generation %d on %s", job_id, generation, node)
        self._tell(node, "terminate", {"job_id": job_id, "generation": generation,
                                       "state": "CANCELLED"})

    def launch_step(self, node: str, step: dict[str, Any]) -> None:
        """One node's share of an srun step (operations.STEP_LAUNCH_FIELDS)."""
        self._tell(node, "launch_step", {"step": step})

    def step_input(self, node: str, body: dict[str, Any]) -> None:
        """srun --pty's input (or the terminal's new size) for a step's pseudo-terminal."""
        self._tell(node, "step_input", body)

    def terminate_steps(self, node: str, job_id: int, step_id: int | None, state: str) -> None:
        """Stop one step (or, step_id None, every step) of a job on a node."""
        body: dict[str, Any] = {"job_id": job_id, "state": state}
        if step_id is not None:
            body["step_id"] = step_id
        self._tell(node, "terminate_steps", body)

    def signal(self, job: Job, signum: int, batch_only: bool, full: bool = False) -> None:
        """Slurm's scancel --signal: the job's steps (every node of it), or with ``batch_only``
        its batch shell alone, or with ``full`` both (agentd's Launcher.signal)."""
        body = {"job_id": job.id, "generation": job.generation, "signal": str(signum),
                "batch_only": batch_only, "full": full}
        for node in dict.fromkeys(a.node for a in job.allocation):
            self._tell(node, "signal", body)
