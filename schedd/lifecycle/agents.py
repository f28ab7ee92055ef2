"""The agents schedd talks to: who is connected, and what to tell them (launch, signal, kill).

Every message to an agent leaves through here (``_tell``: the agents' ROUTER socket, handed
in by the daemon): the cycle's launches, stops, signals. Messages to an agent are one-way; their delivery is checked by reconciliation instead of by
replies: every heartbeat lists what the agent runs, and schedd resends a launch the agent never
confirmed and fences (kills) anything it runs that schedd no longer knows as running there.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from typing import Any, Protocol

import zmq

from kiln.config import Config
from kiln.model import Job, NodeAllocation, Partition
from kiln.wire import protocol
from schedd.domain.jobenv import job_environment, output_paths
from schedd.lifecycle.idlewatch import Watch

log = logging.getLogger("schedd.lifecycle.agents")

class Socket(Protocol):
    """What the registry sends through: the daemon's agent ROUTER (a ``zmq.Socket``)."""

    def send_multipart(self, msg_parts: list[bytes], flags: int = ...) -> Any: ...


class AgentRegistry:
    def __init__(self, cfg: Config, sock: Socket):
        self.cfg = cfg
        self._sock = sock
        self._ids = itertools.count(1)
        self.confirmed: set[tuple[int, int]] = set()  # (job id, generation) the agent started
        # job id -> when (schedd's clock) its $KILN_CHECKPOINT_FILE was last touched, as the
        # batch host's heartbeats report it (schedd/lifecycle/preemption.py scores victims with it)
        self.checkpoints: dict[int, float] = {}
        # Prolog on multi-node jobs (PrologFlags=Alloc, agentd/prolog.py): (job id,
        # generation) -> the nodes other than the batch host whose prolog has not passed yet;
        # the batch script is sent once none is left (and the batch host runs its own first)
        self.prologs: dict[tuple[int, int], set[str]] = {}
        self._prolog_arrays: dict[tuple[int, int], tuple[int, ...]] = {}
        self._prologs_passed: set[tuple[int, int]] = set()
        # node -> {(job id, step: "batch" or "0", "1", ...): its live usage there}, as the node's
        # last heartbeat reported it (kiln.slurm.stats; sstat reads it, nothing stores it)
        self.usage: dict[str, dict[tuple[int, str], dict[str, float]]] = {}
        # jobs on a failed GPU already sent their notice: job id -> (generation, stop at)
        # (schedd/lifecycle/gpuhealth.py; memory only, rebuilt from the GPUs' faults)
        self.gpu_noticed: dict[int, tuple[int, float]] = {}
        # runs' idle-GPU readings ([scheduler.idle_gpu], schedd/lifecycle/idlegpu.py)
        self.idle_gpu = Watch()
        # node -> the Reason its health check drained it with ([agent] health_check_resume
        # resumes only these, and only while the reason and its (lack of an) admin uid stand)
        self.health_drained: dict[str, str] = {}

    def _tell(self, node: str, op: str, body: dict[str, Any]) -> None:
        frame = protocol.request(op, body, next(self._ids))
        try:
            self._sock.send_multipart([node.encode(), frame], zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            log.warning("could not send to agent %s: %s", node, exc)

    def launch(self, job: Job, array_ids: tuple[int, ...] = ()) -> None:
        """Send the batch script to the job's first node (the batch host); with an
        ``[agent] prolog`` and several nodes, first the prolog to every other node (again to
        those that have not answered, when this is a resend), and the script once all passed."""
        key = (job.id, job.generation)
        if self.cfg.agent.prolog and len(job.allocation) > 1 and \
                key not in self._prologs_passed:
            waiting = self.prologs.setdefault(key, {a.node for a in job.allocation[1:]})
            self._prolog_arrays[key] = array_ids
            for index, alloc in enumerate(job.allocation):
                if alloc.node in waiting:
                    self._tell(alloc.node, "job_prolog", {"prolog": self._prolog_spec(
                        job, alloc, index, array_ids)})
            return
        self._launch(job, array_ids)

    def prolog_passed(self, job: Job, node: str) -> None:
        """``node``'s prolog passed; the batch script goes once every node's has."""
        key = (job.id, job.generation)
        waiting = self.prologs.get(key)
        if waiting is None:
            return
        waiting.discard(node)
        if not waiting:
            del self.prologs[key]
            self._prologs_passed.add(key)
            self._launch(job, self._prolog_arrays.pop(key, ()))

    def _prolog_spec(self, job: Job, alloc: NodeAllocation, index: int,
                     array_ids: tuple[int, ...]) -> dict[str, Any]:
        env = job_environment(job, alloc, index, self.cfg.cluster_name, array_ids,
                              topology=self.cfg.topology)
        return {"job_id": job.id, "generation": job.generation, "name": job.name,
                "user": job.user, "uid": job.uid, "gid": job.gid, "gpus": alloc.devices,
                "environment": {k: v for k, v in env.items() if k.startswith("SLURM_")}}

    def epilogs(self, job: Job, allocation: list[NodeAllocation], exit_code: int,
                exit_signal: int) -> None:
        """The ended run's epilog on each of its nodes but the batch host (``job_epilog``)."""
        ran = dataclasses.replace(job, allocation=allocation)
        for index, alloc in enumerate(allocation[1:], start=1):
            spec = self._prolog_spec(ran, alloc, index, ())
            spec.update(exit_code=max(0, min(exit_code, 255)),
                        exit_signal=max(0, min(exit_signal, 128)))
            self._tell(alloc.node, "job_epilog", {"epilog": spec})

    def _launch(self, job: Job, array_ids: tuple[int, ...]) -> None:
        alloc = job.allocation[0]
        stdout, stderr = output_paths(job, alloc.node)
        spec = {
            "job_id": job.id, "generation": job.generation, "name": job.name,
            "user": job.user, "uid": job.uid, "gid": job.gid, "script": job.script,
            "workdir": job.workdir, "stdout": stdout, "stderr": stderr,
            "open_mode": job.open_mode,
            "environment": job_environment(job, alloc, 0, self.cfg.cluster_name, array_ids,
                                           topology=self.cfg.topology),
            "gpus": alloc.devices, "cpus": alloc.cpus, "cpu_ids": list(alloc.cpu_ids),
            "memory_mb": alloc.memory_mb, "time_limit": job.launched_limit,
            "kill_wait": self.cfg.kill_wait, "signal": job.signal, "start_time": job.start_time,
            "on_isolation": self._partition(job).on_isolation,
            "fence_timeout": self.cfg.fence_timeout,
            "fence_kill_wait": self.cfg.fence_kill_wait,
        }
        if job.script_args:  # only then: an agent older than the field still takes the rest
            spec["args"] = list(job.script_args)
        if alloc.mps_gpus:  # gres/mps: the agent runs the GPU's MPS control daemon
            spec["mps_gpus"] = alloc.mps_gpus
        self._tell(alloc.node, "launch", {"launch": spec})

    def _partition(self, job: Job) -> Partition:
        return next((p for p in self.cfg.partitions if p.name == job.partition),
                    self.cfg.default_partition)

    def forget_run(self, job_id: int, generation: int) -> None:
        """A run has ended: its confirmation and checkpoint reports are of no more use."""
        self.confirmed.discard((job_id, generation))
        self.prologs.pop((job_id, generation), None)
        self._prolog_arrays.pop((job_id, generation), None)
        self._prologs_passed.discard((job_id, generation))
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

    def fake_gpu(self, node: str, gpu: int, action: str, value: int) -> None:
        """kiln fake-gpu: inject into the node's fake NVML (agentd/gpuhealth.py)."""
        self._tell(node, "fake_gpu", {"gpu": gpu, "action": action, "value": value})

    def gpu_reset(self, node: str, gpus: list[int]) -> None:
        """The node's GPUs were resumed: its agent watches them afresh."""
        self._tell(node, "gpu_reset", {"gpus": list(gpus)})

    def reboot(self, node: str) -> None:
        """scontrol reboot, issued (lifecycle/reboot.py): the agent runs its reboot_program
        and registers again once it has ended (or the machine has restarted)."""
        self._tell(node, "reboot", {})

    def reconfigure(self, nodes: list[str]) -> None:
        """scontrol reconfigure: each agent re-reads its kiln.toml (agentd/daemon.py)."""
        for node in nodes:
            self._tell(node, "reconfigure", {})

    def signal(self, job: Job, signum: int, batch_only: bool, full: bool = False) -> None:
        """Slurm's scancel --signal: the job's steps (every node of it), or with ``batch_only``
        its batch shell alone, or with ``full`` both (agentd's Launcher.signal)."""
        body = {"job_id": job.id, "generation": job.generation, "signal": str(signum),
                "batch_only": batch_only, "full": full}
        for node in dict.fromkeys(a.node for a in job.allocation):
            self._tell(node, "signal", body)
