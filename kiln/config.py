"""kiln.toml: one file per cluster, read with tomllib, found the same way by every command.

Lookup order: ``$KILN_CONF`` (a file), ``$KILN_HOME/kiln.toml`` (default ``~/.kiln``), then
``/etc/kiln/kiln.toml``. Two clusters in two directories therefore never mix. Standard library
only: the CLI reads this on its fast path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from kiln import paths
from kiln.model import License, Partition
from kiln.paths import ConfigError
from kiln.slurm.topology import Topology, TopologyError
from kiln.slurm.topology import parse as parse_topology

# what a partition's jobs do when their node loses schedd (Partition.on_isolation)
ISOLATION_MODES = ("kill", "keep")

# Slurm's PrivateData values kiln acts on (config key private_data)
PRIVATE_DATA = frozenset({"jobs", "usage", "accounts", "users"})


IDLE_GPU_ACTIONS = ("notify", "requeue", "cancel")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any, where: str) -> float:
    """A config duration: seconds as a number, or a string of one number and a unit,
    ``"90s"``, ``"30m"``, ``"2h"``, ``"1d"`` (a bare number in a string is seconds)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        secs = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().lower()
        unit = _DURATION_UNITS.get(text[-1])
        try:
            secs = float(text[:-1] if unit else text) * (unit or 1)
        except ValueError:
            secs = -1.0
    else:
        secs = -1.0
    if not secs > 0 or secs != secs or secs == float("inf"):
        raise ConfigError(f"{where}: a duration such as \"30m\", \"90s\" or \"2h\", "
                          f"not {value!r}")
    return secs


@dataclass(slots=True)
class IdleGPUConfig:
    """``[scheduler.idle_gpu]``: running jobs whose GPUs all stay below ``below_util`` percent
    for ``after`` are flagged IdleGPU, mailed, and acted on (schedd/lifecycle/idlegpu.py).
    Off by default: on once kiln.toml has the table (unless it says ``enabled = false``)."""

    enabled: bool = False
    after: Any = 1800.0  # a duration (parse_duration: "30m"), seconds once loaded
    below_util: float = 5.0  # percent: a GPU reading below this is idle
    action: str = "notify"  # notify | requeue | cancel (IDLE_GPU_ACTIONS)

    def check(self, where: str) -> None:
        self.after = parse_duration(self.after, f"{where} after")
        if isinstance(self.below_util, bool) or not isinstance(self.below_util, (int, float)) \
                or not 0 < self.below_util <= 100:
            raise ConfigError(f"{where} below_util: a percentage above 0 and at most 100, not "
                              f"{self.below_util!r}")
        if self.action not in IDLE_GPU_ACTIONS:
            raise ConfigError(f"{where} action: one of {', '.join(IDLE_GPU_ACTIONS)}, not "
                              f"{self.action!r}")
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"{where} enabled: true or false, not {self.enabled!r}")


@dataclass(slots=True)
class SchedulerConfig:
    """Policy knobs of the scheduler core, in Slurm's names where Slurm has one."""

    interval: float = 1.0  # seconds between periodic cycles (cycles also run on events)
    min_interval: float = 0.02  # sched_min_interval: events within this many seconds share a cycle
    backfill: bool = True
    bf_max_reservations: int = 1  # 1 = EASY's protection; large = conservative (docs/scheduler.md)
    bf_max_job_test: int = 10_000  # pending jobs looked at per cycle
    bf_resolution: int = 60  # seconds: reservation times are rounded up to this
    bf_window: int = 7 * 86400  # how far ahead reservations are planned, seconds
    fill: str = "hole_area"  # "priority" (Slurm), "area" (GPUs x minutes, ties by name),
    # "short_area": jobs of at most bf_short_job seconds first, widest first, then by area, or
    # "hole_area": jobs that end before the first reservation first, each class by area
    bf_short_job: int = 600  # seconds
    bf_due_wait: int = 0  # seconds: a job waiting this long is due (backfill.py); 0 = never
    # a job passed over in the hole by later jobs holding more than this many times its planned
    # run in machine-seconds is owed a reservation (scheduler/overtake.py); 0 = never
    bf_overtake: float = 0.0
    predict_runtime: bool = False  # plan holes on predicted median run times (docs/scheduler.md)
    # seconds between two publications of every waiting job's p50/p90 start (kiln stats
    # checks them against the starts); 0 = never published (kiln why still computes its own)
    forecast_interval: float = 10.0
    default_time_limit: int = 365 * 86400  # planning horizon for UNLIMITED jobs, seconds
    # multifactor priority (Slurm's PriorityWeight*)
    weight_age: int = 1000
    weight_fairshare: int = 10_000
    weight_job_size: int = 0
    weight_partition: int = 1000
    weight_qos: int = 1000
    weight_assoc: int = 0
    max_age: int = 7 * 86400  # PriorityMaxAge, seconds
    decay_half_life: int = 7 * 86400  # PriorityDecayHalfLife, seconds
    usage_reset: str = "none"  # PriorityUsageResetPeriod: none|daily|weekly|monthly
    tres_billing_weights: dict[str, float] = field(
        default_factory=lambda: {"cpu": 1.0, "mem": 0.0, "gres/gpu": 1.0}
    )
    billing_max_tres: bool = False  # PriorityFlags=MAX_TRES: dominant resource (DRF)
    # AccountingStorageTRES's typed GPUs (["gres/gpu:1g.10gb", "gres/gpu:3g.40gb"]): sacct's
    # AllocTRES/ReqTRES name gres/gpu:<type>=N beside gres/gpu=N for the types listed, as
    # Slurm 22.05 does only for the TRES it stores (limits count every type regardless)
    accounting_storage_tres: list[str] = field(default_factory=list)
    favor_small: bool = False  # PriorityFavorSmall: the job-size factor favours small jobs
    size_relative_to_time: bool = False  # PriorityFlags=SMALL_RELATIVE_TO_TIME
    # preemption (scheduler/preempt.py, docs/preemption.md)
    preempt_mode: str = "requeue"  # cluster PreemptMode, for QOS whose PreemptMode is "cluster"
    preempt_restart_cost: int = 600  # seconds, for jobs without --restart-cost
    preempt_max_candidates: int = 12  # per node: victim sets searched exhaustively among these
    # PreemptExemptTime, seconds: a run younger than this is nobody's victim (Slurm's default
    # is off; kiln's keeps a requeued victim from being preempted again at once)
    preempt_exempt_time: int = 60
    burst_qos: str = "burst"  # jobs of this QOS may exceed their account's guarantee
    reclaims_per_cycle: int = 1  # preemptors per cycle that may reclaim burst jobs
    idle_gpu: IdleGPUConfig = field(default_factory=IdleGPUConfig)  # [scheduler.idle_gpu]
    # SchedulerParameters=max_switch_wait: the longest a --switches job waits for its leaf
    # switches (or blocks) before it takes what there is, seconds (scheduler/topology.py)
    max_switch_wait: int = 300


@dataclass(slots=True)
class AgentConfig:
    schedd: str = ""  # tcp endpoint of schedd; default: schedd's agent_endpoint
    spool_dir: str = ""  # default {home}/spool/{node}
    fake_gpus: str = ""  # e.g. "8xH100-80GB"; empty = NVML
    fake_mig: str = ""  # MIG instances of every fake GPU, e.g. "3g.40gb:2"; empty = none
    # gres/shard (Slurm 22.05): shards each of this node's GPUs offers to --gres=shard:N
    # jobs, several jobs on one GPU; 0 = none (the partition's shards_per_gpu may say)
    shards_per_gpu: int = 0
    # gres/mps (Slurm 22.05): MPS units each GPU offers to --gres=mps:N jobs (100: N is a
    # percent of the GPU), N on one GPU; 0 = none (the partition's mps_per_gpu may say)
    mps_per_gpu: int = 0
    # the MPS control program agentd starts per GPU for MPS jobs (agentd/mps.py): "" =
    # nvidia-cuda-mps-control from PATH, real GPUs only. A path here is run with fake GPUs
    # too: for tests only (a stand-in script that records its calls), never on a real node
    mps_control: str = ""
    gpu_islands: int = 2  # fake topology: GPUs split into this many NVLink islands
    # fake topology: the CPU ids near each island's GPUs (NVML's affinity), e.g. ["0-31",
    # "32-63"]; [] = unknown (real GPUs report their own)
    gpu_island_cpus: list[str] = field(default_factory=list)
    sample_interval: float = 10.0
    key_file: str = ""  # this node's CURVE secret key; default {keys_dir}/agents/{node}.key_secret
    schedd_key: str = ""  # schedd's CURVE public key; default {keys_dir}/schedd.key
    # srun's forwarded output the agent holds in its (root-owned) spool, MB: per step and per
    # node; at the cap the agent stops reading the tasks' pipes, so they wait in write()
    step_spool_cap_mb: float = 64
    node_spool_cap_mb: float = 1024
    # the commands' endpoint on this node (client_endpoint's path), relayed to schedd over the
    # agent's CURVE channel (docs/architecture.md, "The relay"): true, false, or "auto" = serve
    # it unless a schedd listens there (the head node) or a schedd's socket file is there
    serve_commands: bool | str = "auto"
    relay_only: bool = False  # a login node: relays commands, registers no node, runs no jobs
    # seconds a launch waits for the directory of its -o/-e file (submit libraries make it
    # just after sbatch prints the job id) before the job fails saying why
    output_dir_wait: float = 5.0
    # --- Prolog / Epilog (agentd/prolog.py; docs/admin-guide.md, "Prolog and Epilog") ---
    # programs run as root on the job's node: the prolog when the job is allocated, before
    # any of its processes (Slurm's Prolog with PrologFlags=Alloc), the epilog once its last
    # process has ended and its cgroup is empty; "" = none. A prolog that fails or outlives
    # prolog_timeout drains the node and requeues the job held; a failed epilog drains it.
    prolog: str = ""
    epilog: str = ""
    prolog_timeout: float = 0.0  # seconds; 0 = no limit (Slurm's PrologEpilogTimeout)
    epilog_timeout: float = 0.0
    # Slurm's TaskProlog / TaskEpilog: run as the user before / after each srun task; the
    # task prolog's "export NAME=value", "unset NAME" and "print ..." lines shape the task
    task_prolog: str = ""
    task_epilog: str = ""
    # health checks (Slurm's HealthCheckProgram/HealthCheckInterval, docs/admin-guide.md):
    # a non-zero exit drains the node with the first line of the program's output; with
    # health_check_resume a node the check drained is resumed once it passes again
    health_check_program: str = ""
    health_check_interval: float = 0.0  # seconds; 0 = never
    health_check_timeout: float = 60.0  # seconds a check may run before it counts as failed
    health_check_resume: bool = False
    # Slurm's HealthCheckNodeState: the node states the check runs in, comma-separated (ANY,
    # IDLE, NONDRAINED_IDLE, MIXED, ALLOC; CYCLE spreads the nodes' checks over the interval)
    health_check_node_state: str = "ANY"
    # Slurm's job_container/tmpfs (agentd/jobtmp.py): a private /tmp and /dev/shm per job, on
    # wherever the agent runs as root and can make mount namespaces; job_tmp_base is Slurm's
    # BasePath (default: the node's spool, "jobtmp")
    job_tmp: bool = True
    job_tmp_base: str = ""
    # Slurm's PropagateResourceLimits / PropagateResourceLimitsExcept (kiln/slurm/rlimits.py):
    # which of the submitter's soft limits (ulimit -S) the job's processes get; ALL, NONE or
    # a comma list of AS, CORE, CPU, DATA, FSIZE, MEMLOCK, NOFILE, NPROC, RSS, STACK
    propagate_resource_limits: str = "ALL"
    propagate_resource_limits_except: str = ""
    # Slurm's RebootProgram (scontrol reboot; docs/admin-guide.md, "Rebooting nodes"): run as
    # root on the node with SLURMD_NODENAME in its environment; "" = scontrol reboot refused
    reboot_program: str = ""


SCRIPT_KEYS = ("prolog", "epilog", "task_prolog", "task_epilog", "reboot_program")


MAX_SHARDS_PER_GPU = 4096


def _check_shards(cfg: Config) -> None:
    """``shards_per_gpu`` and ``mps_per_gpu`` ([agent] and each [[partition]]) are whole
    numbers 0..4096."""
    for key in ("shards_per_gpu", "mps_per_gpu"):
        for where, value in [("[agent]", getattr(cfg.agent, key))] + [
                (f"[[partition]] {p.name}", getattr(p, key)) for p in cfg.partitions]:
            if not isinstance(value, int) or isinstance(value, bool) \
                    or not 0 <= value <= MAX_SHARDS_PER_GPU:
                raise ConfigError(f"{where} {key}: a whole number 0..{MAX_SHARDS_PER_GPU}, "
                                  f"not {value!r}")


def _check_agent_scripts(agent: AgentConfig) -> None:
    """``[agent]`` prolog/epilog paths are absolute (or empty) and their timeouts are
    seconds >= 0; the programs themselves are looked for on the node that runs them."""
    for key in SCRIPT_KEYS:
        value = getattr(agent, key)
        if not isinstance(value, str) or (value and not value.startswith("/")) or \
                "\0" in value:
            raise ConfigError(f"[agent] {key}: an absolute path to a program (or \"\" for "
                              f"none), not {value!r}")
    for key in ("prolog_timeout", "epilog_timeout"):
        value = getattr(agent, key)
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                not 0 <= value <= 1e7:
            raise ConfigError(f"[agent] {key}: seconds >= 0 (0 = no limit), not {value!r}")
        setattr(agent, key, float(value))
    health_check_states(agent.health_check_node_state)
    if not isinstance(agent.job_tmp, bool):
        raise ConfigError(f"[agent] job_tmp: true or false, not {agent.job_tmp!r}")
    base = agent.job_tmp_base
    if not isinstance(base, str) or (base and not base.startswith("/")) or "\0" in base:
        raise ConfigError(f"[agent] job_tmp_base: an absolute path (or \"\" for the node's "
                          f"spool), not {base!r}")
    propagated_limits(agent)


def propagated_limits(agent: AgentConfig) -> frozenset[str]:
    """The limits ``[agent] propagate_resource_limits[_except]`` name (kiln/slurm/rlimits.py)."""
    from kiln.slurm import rlimits

    for key in ("propagate_resource_limits", "propagate_resource_limits_except"):
        if not isinstance(getattr(agent, key), str):
            raise ConfigError(f"[agent] {key}: a comma list of limits, not "
                              f"{getattr(agent, key)!r}")
    try:
        return rlimits.propagated(agent.propagate_resource_limits,
                                  agent.propagate_resource_limits_except)
    except rlimits.LimitsError as exc:
        raise ConfigError(f"[agent] propagate_resource_limits: {exc}") from None


HEALTH_CHECK_STATES = ("ANY", "IDLE", "NONDRAINED_IDLE", "MIXED", "ALLOC", "CYCLE")


def health_check_states(value: object) -> frozenset[str]:
    """``[agent] health_check_node_state`` as Slurm's HealthCheckNodeState words, upper case:
    a comma-separated list of ANY, IDLE, NONDRAINED_IDLE, MIXED, ALLOC and CYCLE (CYCLE alone
    means ANY, spread over the interval)."""
    words = [w.strip().upper() for w in value.split(",")] if isinstance(value, str) else [""]
    bad = [w for w in words if w not in HEALTH_CHECK_STATES]
    if bad:
        raise ConfigError(f"[agent] health_check_node_state: a comma-separated list of "
                          f"{', '.join(HEALTH_CHECK_STATES)}, not {value!r}")
    return frozenset(words)


@dataclass(slots=True)
class MailConfig:
    """``[mail]``: how --mail-type mail leaves (schedd/lifecycle/mail.py): MailProg, called as
    slurmctld calls it, or SMTP when ``smtp_host`` is set."""

    mail_prog: str = "/usr/bin/mail"  # MailProg
    smtp_host: str = ""
    smtp_port: int = 25
    smtp_from: str = ""  # default slurm@<this host>
    domain: str = ""  # appended to a bare user name over SMTP (Slurm's MailDomain)


@dataclass(slots=True)
class CgroupConfig:
    """``[cgroup]``: per-job containment on each node (agentd/cgroups.py), with the names and
    meaning of Slurm's cgroup.conf (ConstrainCores, ConstrainRAMSpace, ...) in snake case. On
    wherever the node's hierarchy is writable; an agent that cannot enforce one says so."""

    enabled: bool = True
    constrain_cores: bool = True
    constrain_ram_space: bool = True
    allowed_ram_space: float = 100.0  # percent of the job's --mem
    constrain_swap_space: bool = True
    constrain_devices: bool = True
    pids_max: int = 4096  # processes and threads per job; 0 = no limit
    unkillable_step_timeout: int = 60  # seconds after SIGKILL before the node is drained
    root: str = "/sys/fs/cgroup"
    device_dir: str = "/dev"  # where the GPUs' nvidiaN nodes are (stand-ins in tests)


@dataclass(slots=True)
class AccountingConfig:
    """``[accounting]``: prices for kiln's cost report (``sreport cluster AccountCost``).

    ``gpu_price`` maps a GPU type in gres spelling (``h100``, ``a100``) to a price per GPU-hour;
    a type missing from it costs ``default_gpu_price``. ``currency`` is only printed.
    """

    gpu_price: dict[str, float] = field(default_factory=dict)
    default_gpu_price: float = 0.0
    currency: str = ""


@dataclass(slots=True)
class RestdConfig:
    """[restd]: kiln restd, Slurm's REST API (restd/; docs/rest.md)."""

    listen: str = ""  # HOST:PORT of the TCP listener (JWT only); "" = none
    socket: str = ""  # the unix socket (local auth or JWT); default {home}/restd.sock
    # seconds a token of `scontrol token` lives unless lifespan= says (Slurm's default)
    token_lifespan: int = 1800


@dataclass(slots=True)
class Config:
    home: Path
    path: Path | None = None
    cluster_name: str = "kiln"
    db_url: str = ""
    db_url_file: str = ""  # a file (0600) holding db_url, so kiln.toml can stay world-readable
    client_endpoint: str = ""
    agent_endpoint: str = "tcp://127.0.0.1:6817"
    kill_wait: int = 30  # KillWait, seconds
    min_job_age: int = 300  # MinJobAge, seconds
    heartbeat_interval: float = 2.0
    node_timeout: float = 30.0  # SlurmdTimeout: no heartbeat for this long -> node DOWN
    # an agent that has not heard schedd for this long stops the jobs of partitions whose
    # on_isolation is "kill" (docs/robustness.md, "Fencing"); shorter than node_timeout, so
    # they are gone before schedd requeues them elsewhere. 0: two thirds of node_timeout
    fence_timeout: float = 0.0
    # a job on a GPU that failed gets its --signal, then this many seconds to checkpoint before
    # it is stopped NODE_FAIL and requeued (schedd/lifecycle/gpuhealth.py)
    gpu_fault_grace: float = 5.0
    max_array_size: int = 1001
    max_job_count: int = 10_000  # MaxJobCount: pending and running jobs schedd accepts
    # what --dependency may expand to (a whole-array reference counts its tasks, a repeat
    # once): per job, and for all of one user's pending jobs together (an array's tasks each),
    # so no state change costs schedd more than its dependents can (schedd/domain/dependents.py)
    max_dependency_jobs: int = 10_000
    max_dependency_edges_per_user: int = 100_000
    # bytes of replies clients have not taken yet, in all and per user (kiln/wire/localsock.py):
    # past either, the slowest reader is dropped
    reply_buffer_bytes: int = 64 * 1024 * 1024
    reply_buffer_per_user_bytes: int = 32 * 1024 * 1024
    allow_root_jobs: bool = False
    curve: bool = False  # agents must present a CURVE key listed in keys_dir/authorized
    keys_dir: str = ""  # default {home}/keys
    log_dir: str = ""
    metrics_listen: str = ""  # HOST:PORT of schedd's Prometheus endpoint; "" = off (metrics.py)
    # Slurm's PrivateData: what users see only of their own (operators see everything);
    # a job's environment, export values, script and arguments are private whatever this says
    private_data: list[str] = field(default_factory=list)
    # high availability (schedd/leader.py; PostgreSQL only): schedds take a leader lease
    ha: bool = False
    client_peers: list[str] = field(default_factory=list)  # other schedds' client endpoints
    agent_peers: list[str] = field(default_factory=list)  # other schedds' agent endpoints
    # nodes whose agents may relay commands of root (and of schedd's own user); none by default
    relay_root_nodes: list[str] = field(default_factory=list)
    # users whose kiln restd may act for the uid of a peer of its unix socket (its local
    # auth, docs/rest.md); none by default (then restd serves JWT callers only)
    rest_relays: list[str] = field(default_factory=list)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    partitions: list[Partition] = field(default_factory=list)
    licenses: list[License] = field(default_factory=list)  # [[license]] name, count
    accounting: AccountingConfig = field(default_factory=AccountingConfig)
    cgroup: CgroupConfig = field(default_factory=CgroupConfig)
    mail: MailConfig = field(default_factory=MailConfig)
    restd: RestdConfig = field(default_factory=RestdConfig)
    # [topology]: the network (kiln/slurm/topology.py); None = flat, no topology
    topology: Topology | None = None

    def __post_init__(self) -> None:
        self.home = Path(self.home)
        if not self.db_url:
            self.db_url = f"sqlite:///{self.home / 'kiln.db'}"
        if not self.client_endpoint:
            self.client_endpoint = f"ipc://{self.home / 'schedd.sock'}"
        if not self.log_dir:
            self.log_dir = str(self.home / "log")
        if not self.agent.schedd:
            self.agent.schedd = self.agent_endpoint
        if not self.partitions:
            self.partitions = [Partition(name="gpu", default=True)]
        kinds = self.private_data if isinstance(self.private_data, list) else [None]
        if not {str(k).lower() for k in kinds} <= PRIVATE_DATA:
            raise ConfigError(f"[schedd] private_data: a list of "
                              f"{', '.join(sorted(PRIVATE_DATA))}, not {self.private_data!r}")
        self.private_data = [str(k).lower() for k in kinds]
        if self.agent.serve_commands not in (True, False, "auto"):
            raise ConfigError(f"[agent] serve_commands: true, false or \"auto\", not "
                              f"{self.agent.serve_commands!r}")
        _check_agent_scripts(self.agent)
        _check_shards(self)
        for key in ("max_dependency_jobs", "max_dependency_edges_per_user"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"[schedd] {key}: a whole number >= 1, not {value!r}")
        self._check_fencing()
        if not isinstance(self.relay_root_nodes, list) or not all(
                isinstance(n, str) for n in self.relay_root_nodes):
            raise ConfigError(f"[schedd] relay_root_nodes: a list of node names, not "
                              f"{self.relay_root_nodes!r}")
        if not isinstance(self.rest_relays, list) or not all(
                isinstance(n, str) for n in self.rest_relays):
            raise ConfigError(f"[schedd] rest_relays: a list of user names, not "
                              f"{self.rest_relays!r}")
        if not isinstance(self.restd.token_lifespan, int) or self.restd.token_lifespan < 1:
            raise ConfigError(f"[restd] token_lifespan: a whole number of seconds >= 1, not "
                              f"{self.restd.token_lifespan!r}")
        if not self.restd.socket:
            self.restd.socket = str(self.home / "restd.sock")

    def _check_fencing(self) -> None:
        """fence_timeout < node_timeout (else a cut-off node's jobs could still run when
        schedd requeues them) and > heartbeat_interval (else a quiet moment fences them);
        each partition's on_isolation is "kill" or "keep"."""
        if not self.fence_timeout:
            self.fence_timeout = self.node_timeout * 2 / 3
        if self.fence_timeout >= self.node_timeout:
            raise ConfigError(
                f"[schedd] fence_timeout ({self.fence_timeout:g} s) must be shorter than "
                f"node_timeout ({self.node_timeout:g} s): a cut-off node stops its jobs before "
                f"schedd requeues them elsewhere")
        if self.fence_timeout <= self.heartbeat_interval:
            raise ConfigError(
                f"[schedd] fence_timeout ({self.fence_timeout:g} s) must be longer than "
                f"heartbeat_interval ({self.heartbeat_interval:g} s)")
        for part in self.partitions:
            if part.on_isolation not in ISOLATION_MODES:
                raise ConfigError(f"[[partition]] {part.name}: on_isolation must be \"kill\" "
                                  f"or \"keep\", not {part.on_isolation!r}")

    @property
    def fence_kill_wait(self) -> int:
        """KillWait for a fenced job: SIGKILL no later than this after its SIGTERM, so that the
        job is gone before schedd can requeue it: node_timeout, less the fence_timeout, the
        supervisor's one-second check and a heartbeat interval (the most by which the agent
        may have heard schedd after schedd heard it), whatever KillWait is."""
        left = self.node_timeout - self.fence_timeout - 1.0 - self.heartbeat_interval
        return max(0, min(self.kill_wait, int(left)))

    def private(self, kind: str) -> bool:
        """PrivateData=kind: users see only their own (jobs, usage, accounts, users)."""
        return kind in self.private_data

    @property
    def keys_path(self) -> Path:
        return Path(self.keys_dir) if self.keys_dir else self.home / "keys"

    @property
    def default_partition(self) -> Partition:
        return next((p for p in self.partitions if p.default), self.partitions[0])


def kiln_home() -> Path:
    return Path(paths.kiln_home())


def find_config_path() -> Path | None:
    found = paths.find_config_path()
    return Path(found) if found else None


def load(path: Path | str | None = None) -> Config:
    """Read the cluster's config (or the one at ``path``); defaults where the file is silent."""
    path = Path(path) if path else find_config_path()
    if path is None:
        return Config(home=kiln_home())
    _, data = paths.read_raw(str(path))
    return from_dict(data, path)


def from_dict(data: dict[str, Any], path: Path | None = None) -> Config:
    where = str(path or "config")
    data = dict(data)
    home = Path(data.pop("home", None) or (path.parent if path else kiln_home()))
    sched = data.pop("scheduler", {})
    sched = dict(sched) if isinstance(sched, dict) else sched
    raw_idle = sched.pop("idle_gpu", {}) if isinstance(sched, dict) else {}
    idle = _build(IdleGPUConfig, raw_idle, f"{where} [scheduler.idle_gpu]")
    if isinstance(raw_idle, dict) and raw_idle and "enabled" not in raw_idle:
        idle.enabled = True  # the table's presence turns the watch on
    idle.check(f"{where} [scheduler.idle_gpu]")
    scheduler = _build(SchedulerConfig, sched, f"{where} [scheduler]", idle_gpu=idle)
    agent = _build(AgentConfig, data.pop("agent", {}), f"{where} [agent]")
    accounting = _build(AccountingConfig, data.pop("accounting", {}), f"{where} [accounting]")
    cgroup = _build(CgroupConfig, data.pop("cgroup", {}), f"{where} [cgroup]")
    mail = _build(MailConfig, data.pop("mail", {}), f"{where} [mail]")
    restd = _build(RestdConfig, data.pop("restd", {}), f"{where} [restd]")
    partitions = [
        _build(Partition, p, f"{where} [[partition]]") for p in data.pop("partition", [])
    ]
    licenses = [_build(License, lic, f"{where} [[license]]") for lic in data.pop("license", [])]
    for lic in licenses:
        if not isinstance(lic.name, str) or not lic.name or not isinstance(lic.count, int) \
                or lic.count < 0:
            raise ConfigError(f"{where} [[license]]: a name and a count >= 0, not {lic!r}")
    try:
        topology = parse_topology(data.pop("topology", None), f"{where} [topology]")
    except TopologyError as exc:
        raise ConfigError(str(exc)) from None
    schedd = data.pop("schedd", {})
    top = {**data, **schedd}
    if top.get("db_url_file") and not top.get("db_url"):
        top["db_url"] = _read_secret(str(top["db_url_file"]), f"{where}: db_url_file")
    cfg = _build(
        Config, top, where, home=home, path=path, scheduler=scheduler, agent=agent,
        partitions=partitions, licenses=licenses, accounting=accounting, cgroup=cgroup,
        mail=mail, restd=restd, topology=topology,
    )
    return cfg


def _read_secret(path: str, where: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError as exc:
        raise ConfigError(f"{where} {path}: {exc.strerror}") from None


def _build(cls: type, values: dict[str, Any], where: str, **fixed: Any) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a table")
    known = {f.name: f for f in fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known or key in fixed:
            raise ConfigError(f"{where}: unknown key {key!r}")
        kwargs[key] = value
    try:
        return cls(**kwargs, **fixed)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
