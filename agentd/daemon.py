"""agentd: the node agent's loop.

Every turn:
1. wait up to a tick for a message from schedd (launch, signal, terminate, or a reply);
2. act on it through the launcher;
3. poll the launcher: reap ended jobs, enforce walltimes (the agent keeps time itself, whether
   or not schedd can be reached), and report every end until schedd acknowledges it; send
   step tasks' forwarded output (agentd/forward.py) until schedd has taken it;
4. heartbeat on its interval, listing what runs here, so schedd can reconcile.

schedd's answer to a heartbeat (or registration) sets the spool's ``schedd-heard`` file to
when that heartbeat was sent (agentd/lease.py): the clock by which each job's supervisor
(agentd/stepd.py) fences its job once schedd has not heard the node for ``fence_timeout``
(docs/robustness.md, "Fencing"). Commands from schedd do not set it.

Talks to schedd over one DEALER socket whose identity is the node name. On a node that is not
the head it also serves the commands' endpoint and relays them to schedd (agentd/relay.py); a
login node's agent does only that (``--relay-only``: no node registered, no jobs).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import os
import signal
import socket
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import zmq

from agentd import cgroups as cgroup_mod
from agentd import gpuhealth, jobtmp
from agentd import gpus as gpu_discovery
from agentd.forward import check_cap
from agentd.health import HealthCheck
from agentd.jobtmp import JobTmp
from agentd.launcher import Finished, Launcher, LaunchError, OutputDirMissing
from agentd.lease import RENEWING_OPS, Lease
from agentd.mps import Mps, find_program
from agentd.prolog import Outcome, Scripts, exit_env, script_env
from agentd.reboot import Reboot
from agentd.relay import Relay, should_serve
from agentd.sampler import make_sampler
from agentd.step_tasks import StepRunner
from kiln import config as kconfig
from kiln import keys, reconfig
from kiln.logs import setup_logging
from kiln.slurm import stats as stat_keys
from kiln.wire import operations, protocol

log = logging.getLogger("agentd")

TICK_MS = 100
NODE_PROLOG = "_node_prolog"  # marks a prolog's payload: a job whose batch host is elsewhere
NODE_EPILOG = "node epilog"  # the payload of such a job's epilog
RESEND_AFTER = 3.0  # seconds before an unacknowledged report is sent again


class Agent:
    def __init__(self, cfg: kconfig.Config, node_name: str, cpus: int | None = None,
                 memory_mb: int | None = None, fake_gpus: str | None = None,
                 features: list[str] | None = None, spool_dir: str | None = None,
                 relay_only: bool | None = None, serve_commands: bool | str | None = None,
                 shards_per_gpu: int | None = None, mps_per_gpu: int | None = None,
                 fake_mig: str | None = None):
        self.cfg = cfg
        self.name = node_name
        self.relay_only = cfg.agent.relay_only if relay_only is None else relay_only
        host_cpus, host_mem = gpu_discovery.node_resources()
        fake = cfg.agent.fake_gpus if fake_gpus is None else fake_gpus
        if self.relay_only:
            fake = "0"  # a login node offers nothing to jobs
        mig = cfg.agent.fake_mig if fake_mig is None else fake_mig
        self.gpus = gpu_discovery.discover(fake, cfg.agent.gpu_islands, seed=node_name,
                                           island_cpus=cfg.agent.gpu_island_cpus,
                                           fake_mig=mig if fake and fake != "0" else "")
        # the physical GPU of each GPU handed out (a MIG instance's parent): the health watch
        # and the fake NVML are of physical GPUs, a fault of one fails each of its instances
        self.gpu_parents = gpu_discovery.parents(self.gpus)
        physical = gpu_discovery.physical_count(self.gpus)
        # GPU faults (agentd/gpuhealth.py): fake GPUs' own NVML, which kiln fake-gpu feeds
        self.fake_nvml = gpuhealth.FakeNvml(physical, self.gpu_parents) \
            if fake and self.gpus else None
        self.health: gpuhealth.Watcher | None = None
        if self.fake_nvml is not None:
            self.health = gpuhealth.Watcher(self.fake_nvml, physical, counters_every=0.5,
                                            parents=self.gpu_parents)
        elif self.gpus:
            self.health = gpuhealth.nvml_watcher(physical, self.gpu_parents)
        self._gpu_faults: list[gpuhealth.Fault] = []  # not yet taken by schedd
        self._fault_msgs: dict[int, list[gpuhealth.Fault]] = {}  # heartbeat id -> its faults
        self.sampler = make_sampler(self.gpus, bool(fake), cfg.agent.sample_interval,
                                    overrides=self.fake_nvml)
        self.cpus = cpus or host_cpus
        self.memory_mb = memory_mb or host_mem
        self.features = features or []
        shards = cfg.agent.shards_per_gpu if shards_per_gpu is None else shards_per_gpu
        if not 0 <= shards <= kconfig.MAX_SHARDS_PER_GPU:
            raise ValueError(f"shards per GPU: 0..{kconfig.MAX_SHARDS_PER_GPU}, not {shards}")
        self.shards_per_gpu = shards if self.gpus else 0
        mps = cfg.agent.mps_per_gpu if mps_per_gpu is None else mps_per_gpu
        if not 0 <= mps <= kconfig.MAX_SHARDS_PER_GPU:
            raise ValueError(f"MPS per GPU: 0..{kconfig.MAX_SHARDS_PER_GPU}, not {mps}")
        self.mps_per_gpu = mps if self.gpus else 0
        spool = Path(spool_dir or cfg.agent.spool_dir or cfg.home / "spool" / node_name)
        self.cgroups = None if self.relay_only else _make_cgroups(cfg, node_name, spool)
        if self.cgroups is not None:  # a MIG job's devices: its parent GPU and caps only
            self.cgroups.set_mig({g.index: (g.parent, tuple(g.caps)) for g in self.gpus
                                  if isinstance(g, gpu_discovery.MigGPU)})
        self.launcher = Launcher(spool, node_name, kill_wait=cfg.kill_wait,
                                 allow_root=cfg.allow_root_jobs, cgroups=self.cgroups,
                                 job_tmp=None if self.relay_only else _make_job_tmp(cfg, spool))
        self.launcher.propagate = kconfig.propagated_limits(cfg.agent)
        recovered = self.launcher.recover()
        self.mps = Mps(spool / "mps", find_program(cfg.agent.mps_control, bool(fake)),
                       bool(fake))  # gres/mps: the GPUs' control daemons (agentd/mps.py)
        a = cfg.agent  # Prolog / Epilog (agentd/prolog.py), off the loop
        self.scripts = Scripts(a.prolog, a.epilog, a.prolog_timeout, a.epilog_timeout,
                               spool / "prolog")
        self._held_steps: dict[int, list[dict[str, Any]]] = {}  # job id -> steps (prolog)
        # the prologs run here for multi-node jobs whose batch host is another node:
        # (job, generation) -> (passed, why not), answered again to a resent job_prolog
        self._node_prologs: OrderedDict[tuple[int, int], tuple[bool, str]] = OrderedDict()
        # epilogs of such jobs, waiting for the job's step tasks here to be gone
        self._node_epilogs: dict[tuple[int, int], dict[str, Any]] = {}
        self._node_epilogs_running: set[tuple[int, int]] = set()
        self._drains: list[str] = []  # reasons for schedd to drain this node (heartbeat)
        # (job, generation) -> the environment its epilog gets (kept from its launch)
        self._script_envs: dict[tuple[int, int], dict[str, str]] = {}
        for r in self.launcher.running():  # re-attached after a restart: from the spool
            record = self.launcher.record(r["job_id"], r["generation"])
            if record is not None and record.get("mps_gpus"):
                self.mps.adopt(("job", r["job_id"], r["generation"]), record["mps_gpus"])
            if self.scripts.configured("epilog") and record is not None:
                with contextlib.suppress(KeyError):
                    self._script_envs[(r["job_id"], r["generation"])] = script_env(
                        record, node_name, "epilog_slurmd")
        self.steps = StepRunner(  # srun's tasks (agentd/step_tasks.py)
            self.launcher, node_name,
            step_cap=check_cap(cfg.agent.step_spool_cap_mb, "step_spool_cap_mb"),
            node_cap=check_cap(cfg.agent.node_spool_cap_mb, "node_spool_cap_mb"),
            task_prolog=cfg.agent.task_prolog, task_epilog=cfg.agent.task_epilog)
        self._step_reports: dict[int, tuple[int, int]] = {}  # msg id -> (job id, step id)
        self._step_outputs: dict[int, Any] = {}  # msg id -> the chunk it carried (its token)
        self.ctx = zmq.Context()
        # an HA pair: the leader's agent endpoint is whichever answers; failover on silence
        self.endpoints = [cfg.agent.schedd, *cfg.agent_peers]
        self._endpoint = 0
        self._last_heard = time.time()  # any word from schedd (its silence: fail-over)
        self.lease = Lease(self.launcher.spool.touch_heard)  # the fence's clock
        self.sock = self._open_socket(self.endpoints[0])
        self._ids = itertools.count(1)
        self._requests: dict[int, str] = {}  # msg id -> op, for replies
        self._unacked: OrderedDict[tuple[int, int], tuple[float, dict[str, Any]]] = OrderedDict()
        self._report_ids: dict[int, tuple[int, int]] = {}
        self._seen: OrderedDict[tuple[int, int], None] = OrderedDict()  # launches handled
        # launches waiting for their output directory: key -> (spec, give up at)
        self._waiting: dict[tuple[int, int], tuple[dict[str, Any], float]] = {}
        self.heartbeat_interval = cfg.heartbeat_interval
        self.health_check = HealthCheck(
            "" if self.relay_only else cfg.agent.health_check_program,
            cfg.agent.health_check_interval, node_name, timeout=cfg.agent.health_check_timeout,
            node_states=kconfig.health_check_states(cfg.agent.health_check_node_state))
        self.reboot = Reboot(node_name)  # scontrol reboot: [agent] reboot_program
        self._last_heartbeat = 0.0
        self._registered = False
        self._register_keys: list[tuple[int, int]] = []
        self._stopping = False
        for fin in recovered:  # ended while no agent watched: sent with the registration
            self._unacked[(fin.job_id, fin.generation)] = (0.0, self._end_body(fin))
        self.poller = zmq.Poller()
        self.poller.register(self.sock, zmq.POLLIN)
        self.relay: Relay | None = None  # the commands' endpoint, when this is not the head
        setting = cfg.agent.serve_commands if serve_commands is None else serve_commands
        serve, why = should_serve(setting, cfg.client_endpoint)
        if serve:
            self.relay = Relay(cfg.client_endpoint, node_name, lambda: next(self._ids),
                               self._send_frame, self._silence_window)
            self.relay.register(self.poller)
            log.info("serving the commands' endpoint %s, relayed to schedd (%s)",
                     self.relay.path, why)
        else:
            log.info("not serving the commands' endpoint: %s", why)
            if self.relay_only:
                log.warning("relay-only, but not serving the commands' endpoint: this agent "
                            "does nothing")

    def _open_socket(self, endpoint: str) -> zmq.Socket:
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, self.name.encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_MESSAGE_BYTES)
        if self.cfg.curve:
            self._use_curve(self.cfg)
        self.sock.connect(endpoint)
        return self.sock

    def _fail_over(self, now: float) -> None:
        """schedd has been silent too long and there is another to try: move to the next
        endpoint and register there (with every unacknowledged end report)."""
        self._endpoint = (self._endpoint + 1) % len(self.endpoints)
        log.warning("schedd silent for %.0f s: trying %s", now - self._last_heard,
                    self.endpoints[self._endpoint])
        if self.relay is not None:
            self.relay.lost()  # the commands waiting are told; nothing is resent
        self.poller.unregister(self.sock)
        self.sock.close(0)
        self.sock = self._open_socket(self.endpoints[self._endpoint])
        self.poller.register(self.sock, zmq.POLLIN)
        self._last_heard = now
        self._registered = False
        self.register()

    def _silence_window(self) -> float:
        """Seconds without a word from schedd after which it counts as gone."""
        return max(3 * self.heartbeat_interval, 3.0)

    def _use_curve(self, cfg: kconfig.Config) -> None:
        """Authenticate to schedd with this node's key pair, and schedd by its public key."""
        secret_file = Path(cfg.agent.key_file) if cfg.agent.key_file else \
            keys.agent_secret(cfg.keys_path, self.name)
        server_file = Path(cfg.agent.schedd_key) if cfg.agent.schedd_key else \
            keys.server_public(cfg.keys_path)
        self.sock.curve_publickey, self.sock.curve_secretkey = keys.load_secret(secret_file)
        self.sock.curve_serverkey = keys.load_public(server_file)

    # --- sending -------------------------------------------------------------------------------

    def _send(self, op: str, body: dict[str, Any]) -> int:
        msg_id = next(self._ids)
        self._requests[msg_id] = op
        if op in RENEWING_OPS:
            self.lease.asked(msg_id, time.time())
        if len(self._requests) > 10_000:  # replies that never came (schedd restarted)
            for key in list(self._requests)[:5_000]:
                del self._requests[key]
        try:
            self.sock.send(protocol.request(op, body, msg_id), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("schedd unreachable; %s not sent", op)
        return msg_id

    def _send_frame(self, frame: bytes) -> bool:
        try:
            self.sock.send(frame, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def register(self) -> None:
        if self.relay_only:  # no node: a hello, so that schedd's replies say it is there
            self._send("relay_hello", {"node": self.name})
            self._last_heartbeat = time.time()
            return
        node = {"name": self.name, "cpus": self.cpus, "memory_mb": self.memory_mb,
                "gpus": [_gpu_wire(g) for g in self.gpus], "fake_gpus": bool(self.fake_nvml),
                "shards_per_gpu": self.shards_per_gpu, "mps_per_gpu": self.mps_per_gpu,
                "features": self.features, "address": socket.gethostname(),
                "boot_time": _boot_time(), "slurmd_start_time": _agent_start()}
        if self.cgroups is not None:  # scontrol show node's line, and the node's reason
            node.update(cgroup=self.cgroups.node_line(), cgroup_reason=self.cgroups.reason())
        self._register_keys = list(self._unacked)
        self._send("register", {"node": node, "running": self._running(),
                                "finished": [r for _, r in self._unacked.values()]})
        self._last_heartbeat = time.time()

    def _jobs_here(self) -> set[int]:
        """The jobs with something on this node: a batch script, step tasks, a prolog or an
        epilog (to run or running), a launch or steps waiting."""
        return ({r["job_id"] for r in self.launcher.running()} | set(self.steps.job_ids()) |
                {j for j, _ in self.scripts.running()} | {j for j, _ in self._waiting} |
                {j for j, _ in self._node_epilogs} | set(self._held_steps))

    def _job_tmp_left(self) -> bool:
        """Whether a job's private /tmp is here with nothing of the job left on this node."""
        tmp = self.launcher.job_tmp
        return tmp is not None and bool(tmp.job_ids() - self._jobs_here())

    def _running(self) -> list[dict[str, Any]]:
        out = []
        for r in self.launcher.running():
            item = {"job_id": r["job_id"], "generation": r["generation"]}
            age = self.launcher.checkpoint_age(r["job_id"], r["generation"], time.time())
            if age is not None:
                item["checkpoint_age"] = age
            usage = self.sampler.usage(r["job_id"], r["generation"])  # for sstat
            if usage:
                item["usage"] = usage
            util = self.sampler.gpu_now(r["job_id"], r["generation"])  # the idle-GPU watch
            if util:
                item["gpu_util"] = util
            out.append(item)
        out += [{"job_id": j, "generation": g} for j, g in self._waiting]  # held, not started
        # in their prolog (not started yet: "configuring") or their epilog (ended, not yet
        # reported)
        out += [{"job_id": j, "generation": g, "configuring": True}
                for j, g in self.scripts.running("prolog")]
        out += [{"job_id": j, "generation": g} for j, g in self.scripts.running("epilog")
                if (j, g) not in self._node_epilogs_running]  # those are schedd's no more
        return out

    def _end_body(self, fin: Finished) -> dict[str, Any]:
        body = {"node": self.name, "job_id": fin.job_id, "generation": fin.generation,
                "state": fin.state, "exit_code": fin.exit_code, "exit_signal": fin.exit_signal,
                "end_time": fin.end_time}
        stats = self.sampler.finish(fin.job_id, fin.generation, fin.cpu,  # agentd/sampler.py
                                    fin.peak_rss_kb)
        if fin.max_rss_kb:  # the job cgroup's own peak (agentd/cgroups.py): MaxRSS
            peak = max(int(stats.get(stat_keys.STAT_RSS_MAX, 0)), fin.max_rss_kb)
            stats[stat_keys.STAT_RSS_MAX] = peak
        if stats:
            body["stats"] = stats
        return body

    def _report(self, fin: Finished, error: str = "", drain: str = "",
                prolog_failed: bool = False) -> None:
        body = self._end_body(fin)
        if error:
            body["error"] = error[:512]
        if drain:  # schedd drains this node with the reason before it records the end
            body["drain"] = drain[:256]
        if prolog_failed:
            body["prolog_failed"] = True
        key = (fin.job_id, fin.generation)
        self._unacked[key] = (time.time(), body)
        self._report_ids[self._send("job_ended", body)] = key

    # --- receiving -----------------------------------------------------------------------------

    def _on_message(self, frame: bytes, more: list[bytes] | None = None) -> None:
        self._last_heard = time.time()
        if self.relay is not None:
            self.relay.heard()
        try:
            msg = protocol.decode(frame)
        except protocol.ProtocolError as exc:
            log.warning("bad message from schedd: %s", exc.message)
            return
        if self.relay is not None and "op" not in msg and self.relay.on_reply(msg, more or []):
            return
        if "op" in msg:
            self._on_command(msg)
        else:
            self._on_reply(msg)

    def _on_reply(self, msg: dict[str, Any]) -> None:
        msg_id = msg.get("id")
        op = self._requests.pop(msg_id, None) if isinstance(msg_id, int) else None
        if op in RENEWING_OPS:  # schedd heard it, and counts it unless it asks us to register
            self.lease.answered(msg_id, bool(msg.get("ok")) and  # type: ignore[arg-type]
                                not (msg.get("body") or {}).get("register"))
        if not msg.get("ok"):
            err = msg.get("error") or {}
            log.warning("schedd refused %s: %s", op, err.get("message"))
            if op == "register":
                self._registered = False
            elif op == "step_output":  # resending it would be refused again: drop the stream
                token = self._step_outputs.pop(msg_id, None)  # type: ignore[arg-type]
                if token is not None:
                    self.steps.output_answered(token, {"gone": True})
            return
        body = msg.get("body") or {}
        if op == "heartbeat":  # the faults it carried are schedd's now
            taken = self._fault_msgs.pop(msg_id, [])  # type: ignore[arg-type]
            self._gpu_faults = [f for f in self._gpu_faults if f not in taken]
            if "alloc" in body:  # the node's state, for health_check_node_state
                self.health_check.node_state = (str(body["alloc"]), bool(body.get("drained")))
            if "jobs" in body and self.launcher.job_tmp is not None:
                # the private /tmp of jobs that ended here (agentd/jobtmp.py)
                self.launcher.job_tmp.sweep(self._jobs_here() | set(body["jobs"]))
        if op == "register":
            self._registered = True
            self.heartbeat_interval = float(body.get("heartbeat_interval", self.heartbeat_interval))
            self.launcher.kill_wait = int(body.get("kill_wait", self.launcher.kill_wait))
            for key in self._register_keys:  # register carried them; schedd recorded them
                self._acknowledged(key)
            log.info("registered with schedd")
        elif op == "heartbeat" and body.get("register"):
            if self.relay is not None:
                self.relay.lost()  # a schedd that does not know us never saw what we relayed
            self.register()
        elif op == "relay_hello":
            self._registered = True
            self.heartbeat_interval = float(body.get("heartbeat_interval",
                                                     self.heartbeat_interval))
        elif op == "job_ended":
            key = self._report_ids.pop(msg_id, None)  # type: ignore[arg-type]
            if key is not None:
                self._acknowledged(key)
        elif op == "step_ended":
            key = self._step_reports.pop(msg_id, None)  # type: ignore[arg-type]
            if key is not None:
                self.steps.acknowledged(key)
        elif op == "step_output":
            token = self._step_outputs.pop(msg_id, None)  # type: ignore[arg-type]
            if token is not None:
                self.steps.output_answered(token, body)

    def _acknowledged(self, key: tuple[int, int]) -> None:
        self._unacked.pop(key, None)
        self.launcher.forget(*key)

    def _on_command(self, msg: dict[str, Any]) -> None:
        op, body = msg.get("op"), msg.get("body")
        schema = operations.SCHEDD_TO_AGENT_OPS.get(op) if isinstance(op, str) else None
        if schema is None:
            log.warning("unknown command %r from schedd", op)
            return
        try:
            protocol.check(body, schema, op)
        except protocol.ProtocolError as exc:
            log.warning("bad %s from schedd: %s", op, exc.message)
            return
        if op in ("launch", "launch_step"):  # MIG instances by UUID (agentd/gpus.py)
            spec = body["launch" if op == "launch" else "step"]
            if isinstance(spec.get("environment"), dict):
                spec["environment"] = gpu_discovery.visible_environment(spec["environment"],
                                                                        self.gpus)
        if op == "launch":
            self._launch(body["launch"])
        elif op == "job_prolog":
            self._node_prolog(body["prolog"])
        elif op == "job_epilog":  # run once no step task of the job is left here
            spec = body["epilog"]
            self._node_epilogs[(spec["job_id"], spec["generation"])] = spec
        elif op == "terminate":
            key = (body["job_id"], body["generation"])
            if self.scripts.has(key, "epilog"):
                return  # it has ended; its end is reported once its epilog is done
            if self.scripts.cancel(key, "prolog") is not None:  # cancelled in its prolog:
                self._script_envs.pop(key, None)  # it never starts, and has no epilog
                self._held_steps.pop(key[0], None)
            self._waiting.pop(key, None)
            if not self.launcher.terminate(body["job_id"], body["generation"], body["state"]):
                # not running here (never arrived, or long gone): schedd still waits for an end
                self._report(Finished(body["job_id"], body["generation"], body["state"], 0, 0,
                                      time.time(), time.time()))
        elif op == "signal":
            self._signal(body)
        elif op == "launch_step":
            job_id = body["step"].get("job_id")
            if any(j == job_id for j, _ in self.scripts.running("prolog")):
                self._held_steps.setdefault(job_id, []).append(body["step"])  # after it
            else:
                self._launch_step(body["step"])
        elif op == "terminate_steps":
            self.steps.terminate(body["job_id"], body.get("step_id"), body["state"])
        elif op == "step_input":
            self.steps.input(body)
        elif op == "fake_gpu":
            self._fake_gpu(body)
        elif op == "gpu_reset":
            if self.health is not None:
                self.health.reset(body["gpus"])
            self._gpu_faults = [f for f in self._gpu_faults if f.index not in body["gpus"]]
            log.info("GPUs %s resumed by schedd", body["gpus"])
        elif op == "reboot":
            self.reboot.start(self.cfg.agent.reboot_program)
        elif op == "reconfigure":
            self.reconfigure()

    def reconfigure(self) -> None:
        """scontrol reconfigure: re-read kiln.toml and take its live [agent] keys
        (kiln/reconfig.py) into what was built from them; the others are logged."""
        try:
            new = kconfig.load(self.cfg.path)
        except kconfig.ConfigError as exc:
            log.error("scontrol reconfigure: kiln.toml not reloaded: %s", exc)
            return
        applied, static = reconfig.apply_agent(self.cfg, new)
        a = self.cfg.agent
        self.scripts.paths.update(prolog=a.prolog, epilog=a.epilog)
        self.scripts.timeouts.update(prolog=a.prolog_timeout, epilog=a.epilog_timeout)
        self.steps.task_prolog, self.steps.task_epilog = a.task_prolog, a.task_epilog
        check = self.health_check
        check.interval, check.timeout = a.health_check_interval, a.health_check_timeout
        check.program = "" if self.relay_only else a.health_check_program
        check.set_states(kconfig.health_check_states(a.health_check_node_state))
        self.launcher.propagate = kconfig.propagated_limits(a)
        log.warning("reconfigured from %s: %s", self.cfg.path or "the defaults",
                    ", ".join(applied) or "nothing changed")
        for line in static:
            log.warning("%s", line)

    def _fake_gpu(self, body: dict[str, Any]) -> None:
        """kiln fake-gpu: inject into this node's fake NVML (schedd refuses real GPUs; an
        agent with real ones refuses too)."""
        if self.fake_nvml is None:
            log.warning("kiln fake-gpu refused: this node's GPUs are not fake")
            return
        if body["gpu"] >= len(self.gpu_parents):
            log.warning("kiln fake-gpu refused: no GPU %d here", body["gpu"])
            return
        # on the GPU itself: a MIG instance's parent (its siblings fail with it)
        self.fake_nvml.inject(self.gpu_parents[body["gpu"]], body["action"],
                              body.get("value") or 0)
        log.warning("fake GPU %d: %s %s injected", body["gpu"], body["action"],
                    body.get("value") if body["action"] in ("xid", "util") else "")

    def _signal(self, body: dict[str, Any]) -> None:
        """scancel --signal as Slurm 22.05 delivers it: by default to the job's srun steps
        only, never the batch step (the shell and what it runs, srun's client included); with
        -b (batch_only) to the batch shell alone; with -f (full) to the batch step's whole
        process group and every step."""
        job_id, sig = body["job_id"], body["signal"]
        if body.get("full"):
            self.launcher.signal(job_id, body["generation"], sig, full=True)
        elif body.get("batch_only"):
            self.launcher.signal(job_id, body["generation"], sig, batch_only=True)
        if body.get("full") or not body.get("batch_only"):
            self.steps.signal(job_id, sig)

    def _launch(self, spec: dict[str, Any]) -> None:
        key = (spec.get("job_id"), spec.get("generation"))
        if key in self._seen:
            return  # a resend of a launch already handled
        self._seen[key] = None  # type: ignore[index]
        while len(self._seen) > 10_000:
            self._seen.popitem(last=False)
        if self.scripts.configured("epilog"):
            with contextlib.suppress(KeyError):  # a malformed launch: the launcher says why
                self._script_envs[key] = script_env(  # type: ignore[index]
                    spec, self.name, "epilog_slurmd")
        if self.scripts.configured("prolog"):
            try:
                env = script_env(spec, self.name, "prolog_slurmd")
            except KeyError:
                env = None
            if env is not None:  # the job starts once its prolog has passed (_script_done)
                self.scripts.start("prolog", key, env, spec)  # type: ignore[arg-type]
                return
        self._try_launch(spec, time.time() + self.cfg.agent.output_dir_wait)

    def _launch_step(self, spec: dict[str, Any]) -> None:
        """srun's tasks here; a step on MPS units (gres/mps) holds its GPU's daemon too."""
        gpus = spec.get("mps_gpus")
        if isinstance(gpus, list) and gpus and isinstance(spec.get("environment"), dict):
            key = ("step", spec.get("job_id"), spec.get("step_id"))
            if self.mps.holds(key):  # a resend of a step already here
                self.steps.launch({**spec, "environment": {
                    **spec["environment"], **self.mps.environment(gpus)}})
                return
            spec = {**spec, "environment": {**spec["environment"],
                                            **self.mps.acquire(key, gpus)}}
            if not self.steps.launch(spec):
                self.mps.release(key)  # refused (a bad one): holds nothing
            return
        self.steps.launch(spec)

    def _node_prolog(self, spec: dict[str, Any]) -> None:
        """The prolog of a multi-node job whose batch host is another node (schedd sends
        the batch script once every node's prolog has passed); its result goes back in
        ``prolog_done``, again for a resend."""
        key = (spec["job_id"], spec["generation"])
        if self.scripts.has(key, "prolog"):
            return
        if key in self._node_prologs:
            self._prolog_done(key, *self._node_prologs[key])
            return
        self.scripts.start("prolog", key, script_env(spec, self.name, "prolog_slurmd"),
                           {**spec, NODE_PROLOG: True})

    def _start_node_epilogs(self) -> None:
        if not self._node_epilogs:
            return
        live = set(self.steps.job_ids())
        for key, spec in list(self._node_epilogs.items()):
            if key[0] in live or self.scripts.has(key, "epilog"):
                continue
            del self._node_epilogs[key]
            env = script_env(spec, self.name, "epilog_slurmd")
            env.update(exit_env(int(spec.get("exit_code") or 0),
                                int(spec.get("exit_signal") or 0)))
            self.scripts.start("epilog", key, env, NODE_EPILOG)
            self._node_epilogs_running.add(key)

    def _prolog_done(self, key: tuple[int, int], ok: bool, why: str) -> None:
        self._node_prologs[key] = (ok, why)
        while len(self._node_prologs) > 10_000:
            self._node_prologs.popitem(last=False)
        body: dict[str, Any] = {"node": self.name, "job_id": key[0], "generation": key[1],
                                "ok": ok}
        if why:
            body["error"] = why[:512]
        self._send("prolog_done", body)

    def _script_done(self, outcome: Outcome) -> None:
        """A prolog or epilog has ended (agentd/prolog.py): start the job, or report its end;
        a failure drains this node (and a failed prolog requeues the job held)."""
        job_id, generation = outcome.key
        now = time.time()
        if outcome.kind == "prolog":
            spec = outcome.payload
            steps = self._held_steps.pop(job_id, [])  # srun's, sent while the prolog ran
            if spec.get(NODE_PROLOG):  # not the batch host: schedd decides
                self._prolog_done(outcome.key, outcome.ok,
                                  "" if outcome.ok else f"prolog failed: {outcome.why}")
                for step in steps if outcome.ok else []:
                    self._launch_step(step)
                return
            if outcome.ok:
                self._try_launch(spec, now + self.cfg.agent.output_dir_wait)
                for step in steps:
                    self._launch_step(step)
                return
            self._script_envs.pop(outcome.key, None)  # no epilog for a job that never ran
            self._report(Finished(job_id, generation, "FAILED", outcome.exit_code & 0xFF, 0,
                                  now, now),
                         error=f"prolog failed: {outcome.why}",
                         drain="Prolog error", prolog_failed=True)
            return
        if outcome.payload == NODE_EPILOG:  # a job whose batch host is elsewhere
            self._node_epilogs_running.discard(outcome.key)
            if not outcome.ok:
                self._drains.append("Epilog error")
            return
        fin, error = outcome.payload
        if outcome.ok:
            self._report(fin, error=error)
            return
        self._report(fin, error=error, drain="Epilog error")

    def _job_over(self, fin: Finished, error: str = "") -> None:
        """A job has ended here (its cgroup empty): its epilog first, when there is one, then
        the report to schedd."""
        self.mps.release(("job", fin.job_id, fin.generation))
        env = self._script_envs.pop((fin.job_id, fin.generation), None)
        if env is None or not self.scripts.configured("epilog"):
            self._report(fin, error=error)
            return
        env.update(exit_env(fin.exit_code, fin.exit_signal))
        self.scripts.start("epilog", (fin.job_id, fin.generation), env, (fin, error))

    def _try_launch(self, spec: dict[str, Any], give_up_at: float) -> None:
        """Start the job; one whose output directory is missing waits (``_retry_waiting``)
        until ``give_up_at``, then fails saying why (the job's Reason, in scontrol and sacct)."""
        key = (spec["job_id"], spec["generation"])
        self._waiting.pop(key, None)
        final = time.time() >= give_up_at
        if spec.get("mps_gpus"):  # gres/mps: the GPU's daemon, and where the job finds it
            spec = {**spec, "environment": {
                **spec["environment"], **self.mps.acquire(("job", *key), spec["mps_gpus"])}}
        try:
            self.launcher.launch(spec, final=final)
        except OutputDirMissing as exc:
            if not final:
                self.mps.release(("job", *key))  # taken again at the next try
                self._waiting[key] = (spec, give_up_at)
                return
            self._launch_failed(spec, exc)
            return
        except (LaunchError, protocol.ProtocolError) as exc:
            self._launch_failed(spec, exc)
            return
        self.sampler.track(spec)
        self._send("job_started", {"node": self.name, "job_id": spec["job_id"],
                                   "generation": spec["generation"], "start_time": time.time()})

    def _launch_failed(self, spec: dict[str, Any], exc: Exception) -> None:
        log.error("launch of job %s failed: %s", spec.get("job_id"), exc)
        now = time.time()
        code = exc.exit_code if isinstance(exc, LaunchError) else 1
        self._job_over(Finished(int(spec["job_id"]), int(spec["generation"]), "FAILED", code,
                                0, now, now), error=f"launch failed: {exc}")

    def _retry_waiting(self) -> None:
        for spec, give_up_at in list(self._waiting.values()):
            self._try_launch(spec, give_up_at)

    # --- loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        self.register()
        while not self._stopping:
            ready = self._wait()
            if ready:
                for _ in range(1000):
                    try:
                        frames = self.sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_message(frames[0], frames[1:])
                if self.relay is not None:
                    self.relay.server.ready(ready, time.monotonic())
            self._retry_waiting()
            now = time.time()
            self.sampler.tick(now, self.launcher.running(), self.steps.live_tasks())
            self._watch_gpus(now)
            for fin in self.launcher.poll(now):
                self._job_over(fin, error=f"launch failed: {fin.error}" if fin.error else "")
            self._start_node_epilogs()
            for outcome in self.scripts.poll(now):
                self._script_done(outcome)
            for key, body in self.steps.poll(now):
                self.mps.release(("step", *key))
                self._step_reports[self._send("step_ended", body)] = key
            for token, body in self.steps.output_due(now):
                self._step_outputs[self._send("step_output", body)] = token
            for pending in (self._step_reports, self._step_outputs):
                if len(pending) > 10_000:  # replies that never came (resent on their own)
                    pending.clear()
            self.health_check.tick(now)  # in a thread of its own: the loop never waits on it
            self._reboot_done()
            if now - self._last_heartbeat >= self.heartbeat_interval:
                self._heartbeat(now)
            if now - self._last_heard > self._silence_window():
                if len(self.endpoints) > 1:
                    self._fail_over(now)
                elif self.relay is not None and self.relay.pending:
                    # the commands waiting are told; the socket stays (a fresh one would be
                    # refused by schedd's ROUTER while it still holds the old connection)
                    log.warning("schedd silent for %.0f s: %d relayed commands told the "
                                "connection was lost", now - self._last_heard,
                                len(self.relay.pending))
                    self.relay.lost()
            elif self.relay is not None and self.relay.server.conns:
                self.relay.server.ready({}, time.monotonic())  # clients that stopped reading
        if self.relay is not None:
            self.relay.close()
        self.launcher.close()  # its supervisor fork server; the supervisors run on
        self.scripts.close()  # a prolog's job never started: the next agent is sent it again
        if self.cgroups is not None:
            self.cgroups.close()  # this node's directories, once no job is left in them
        self.sock.close(0)
        self.ctx.term()

    def _wait(self) -> dict[Any, int]:
        """Wait up to a tick for schedd, a command on the local endpoint, or step output the
        agent would read now (the pipes of steps under their spool cap); what is ready."""
        pipes = self.steps.pipes()
        for fd in pipes:
            self.poller.register(fd, zmq.POLLIN)
        try:
            return dict(self.poller.poll(TICK_MS))
        finally:
            for fd in pipes:
                try:
                    self.poller.unregister(fd)
                except KeyError:
                    pass

    def _watch_gpus(self, now: float) -> None:
        """New GPU faults go to schedd at once (a heartbeat now), until it has taken them."""
        if self.health is None:
            return
        faults = self.health.poll(now)
        for fault in faults:
            log.error("GPU %d: %s (%s)", fault.index, fault.kind, fault.detail)
        if faults:
            self._gpu_faults = (self._gpu_faults + faults)[-256:]
            self._last_heartbeat = 0.0

    def _reboot_done(self) -> None:
        """The reboot program has ended without ending the machine: register again (schedd
        then puts the node in the state its reboot asked); a failure drains it after."""
        why = self.reboot.poll()
        if why is None or self._stopping:  # the program is ending the machine, and us
            return
        if why:
            self._drains.append(why)
        self.register()

    def _heartbeat(self, now: float) -> None:
        self._last_heartbeat = now
        if self.relay_only:
            self.register()  # a hello
            return
        if not self._registered:
            self.register()
            return
        body = {"node": self.name, "running": self._running(), "steps": self.steps.job_ids(),
                "step_usage": self.sampler.step_usage()}
        if self.launcher.unkillable:  # UnkillableStepTimeout: schedd drains the node, once
            body["drain"] = self.launcher.unkillable.pop(0)[:256]
        elif self._drains:  # a failed epilog of a job whose batch host is another node
            body["drain"] = self._drains.pop(0)[:256]
        faults = self._gpu_faults[:64]
        if faults:
            body["gpu_faults"] = [f.wire() for f in faults]
        verdict = self.health_check.verdict()
        if verdict is not None:  # "" passed; else the failing check's first line
            body["health"] = verdict
        if self.health_check.wants_state:  # the reply says the node's state
            body["want_state"] = True
        if self._job_tmp_left():  # the reply says which of them schedd still counts here
            body["want_jobs"] = True
        msg_id = self._send("heartbeat", body)
        if faults:
            self._fault_msgs[msg_id] = faults
            while len(self._fault_msgs) > 64:  # replies that never came: resent anyway
                self._fault_msgs.pop(next(iter(self._fault_msgs)))
        for key, (sent, body) in list(self._unacked.items()):
            if now - sent >= RESEND_AFTER:
                self._unacked[key] = (now, body)
                self._report_ids[self._send("job_ended", body)] = key

    def stop(self, *_: Any) -> None:
        self._stopping = True


def _gpu_wire(gpu: Any) -> dict[str, Any]:
    """A GPU as registration describes it; its health is schedd's to keep (``fault``), a MIG
    instance's parent and caps the agent's (``gpus.MigGPU``)."""
    d = dataclasses.asdict(gpu)
    for name in ("fault", "parent", "gi", "ci", "caps"):
        d.pop(name, None)
    return d


def _make_job_tmp(cfg: kconfig.Config, spool: Path) -> JobTmp | None:
    """The node's private /tmp per job (agentd/jobtmp.py), or None (off, or cannot work)."""
    if not cfg.agent.job_tmp:
        return None
    why = jobtmp.probe()
    if why:
        log.warning("private /tmp per job (job_tmp) off: %s", why)
        return None
    return JobTmp(Path(cfg.agent.job_tmp_base or spool / "jobtmp"))


def _make_cgroups(cfg: kconfig.Config, node_name: str, spool: Path) -> cgroup_mod.Cgroups:
    """This node's job cgroups from ``[cgroup]``; what cannot be enforced is logged once. The
    cgroups are ``kiln/<node>.<a hash of the spool directory>``: two clusters on one host (test
    clusters, each with its node1 and its job 1) never meet, and a restarted agent (same
    spool) finds its jobs' cgroups again."""
    c = cfg.cgroup
    settings = cgroup_mod.Settings(
        enabled=c.enabled, constrain_cores=c.constrain_cores,
        constrain_ram_space=c.constrain_ram_space, allowed_ram_space=c.allowed_ram_space,
        constrain_swap_space=c.constrain_swap_space, constrain_devices=c.constrain_devices,
        pids_max=c.pids_max, unkillable_step_timeout=c.unkillable_step_timeout,
        root=c.root, device_dir=c.device_dir)
    instance = hashlib.sha256(str(spool.resolve()).encode()).hexdigest()[:8]
    cgroups = cgroup_mod.Cgroups(node_name, settings, instance=instance)
    if cgroups.active and not cgroups.unenforced:
        log.info("%s", cgroups.summary())
    else:
        log.warning("%s", cgroups.summary())
    return cgroups
def _agent_start() -> float:
    """This agent process's start (scontrol's SlurmdStartTime), from the kernel."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no /proc: schedd takes the registration's time
        return 0.0


def _boot_time() -> float:
    try:
        import psutil

        return float(psutil.boot_time())
    except Exception:
        return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentd", description="kiln's node agent")
    parser.add_argument("-f", "--config", help="kiln.toml (default: $KILN_HOME/kiln.toml)")
    parser.add_argument("--node", default=socket.gethostname().split(".")[0],
                        help="node name (default: the short host name)")
    parser.add_argument("--fake-gpus", help="pretend GPUs, e.g. 8xH100-80GB (0 for none)")
    parser.add_argument("--fake-mig", help="partition every fake GPU into MIG instances, "
                                           "e.g. 3g.40gb:2 ([agent] fake_mig)")
    parser.add_argument("--cpus", type=int, help="CPUs to offer (default: all)")
    parser.add_argument("--memory", type=int, help="memory to offer, MB (default: all)")
    parser.add_argument("--features", default="", help="comma-separated node features")
    parser.add_argument("--spool", help="spool directory")
    parser.add_argument("--shards-per-gpu", type=int,
                        help="gres/shard: shards each GPU offers ([agent] shards_per_gpu)")
    parser.add_argument("--mps-per-gpu", type=int,
                        help="gres/mps: MPS units each GPU offers ([agent] mps_per_gpu)")
    parser.add_argument("--relay-only", action="store_true", default=None,
                        help="a login node: relay commands to schedd; register no node, run "
                             "no jobs ([agent] relay_only)")
    parser.add_argument("--serve-commands", choices=("auto", "yes", "no"),
                        help="serve the commands' endpoint and relay it to schedd "
                             "([agent] serve_commands; auto: unless schedd listens there)")
    parser.add_argument("--log-file")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    try:
        cfg = kconfig.load(args.config)
        setup_logging(args.log_file, args.log_level.upper())
        agent = Agent(cfg, args.node, cpus=args.cpus, memory_mb=args.memory,
                      fake_gpus=args.fake_gpus,
                      features=[f for f in args.features.split(",") if f],
                      spool_dir=args.spool, relay_only=args.relay_only,
                      shards_per_gpu=args.shards_per_gpu, mps_per_gpu=args.mps_per_gpu,
                      fake_mig=args.fake_mig,
                      serve_commands={"yes": True, "no": False, "auto": "auto",
                                      None: None}[args.serve_commands])
    except (kconfig.ConfigError, ValueError, gpu_discovery.GPUDiscoveryError, OSError,
            keys.KeyFileError) as exc:
        print(f"agentd: error: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    if agent.relay_only:
        log.info("agentd %s: relay only (no node), schedd %s (pid %d)", agent.name,
                 cfg.agent.schedd, os.getpid())
    else:
        log.info("agentd %s: %d CPUs, %d MB, %d GPUs, schedd %s (pid %d)", agent.name, agent.cpus,
                 agent.memory_mb, len(agent.gpus), cfg.agent.schedd, os.getpid())
    agent.run()
    log.info("agentd %s stopped (pid %d)", agent.name, os.getpid())  # a clean exit, status 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
