"""The ledger's tables: SQLAlchemy 2 declarative models, one per thing schedd must not forget.

The ``jobs`` table has one column per field of :class:`kiln.model.Job`, with the same names,
so a row and a ``Job`` convert into each other by name (``store.job_to_row``/``row_to_job``).
Every sbatch option is kept even where no feature acts on it yet: ``sacct`` and later issues
read them back. Lists and dictionaries (environment, script arguments, marks, the allocation, node
features) are JSON columns, portable between SQLite and PostgreSQL.

The store writes through SQLAlchemy Core (executemany) for speed; these classes give the schema
one typed, readable definition that Alembic compares migrations against.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names: Alembic needs them to alter or drop constraints later, and
# SQLite (which has no ALTER CONSTRAINT) only works through batch migrations that name them.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class JobRow(Base):
    """A batch job (or one array task): the request as submitted and what became of it."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String, default="")
    user: Mapped[str] = mapped_column(String, default="")
    uid: Mapped[int] = mapped_column(BigInteger, default=-1)
    gid: Mapped[int] = mapped_column(BigInteger, default=-1)
    account: Mapped[str] = mapped_column(String, default="")
    partition: Mapped[str] = mapped_column(String, default="")
    qos: Mapped[str] = mapped_column(String, default="normal")
    state: Mapped[str] = mapped_column(String(16), default="PENDING")
    reason: Mapped[str] = mapped_column(String, default="None")
    priority: Mapped[int] = mapped_column(BigInteger, default=0)
    nice: Mapped[int] = mapped_column(Integer, default=0)
    held: Mapped[str] = mapped_column(String(8), default="")

    array_job_id: Mapped[int | None] = mapped_column(Integer)
    array_task_id: Mapped[int | None] = mapped_column(Integer)
    array_spec: Mapped[str] = mapped_column(String, default="")
    array_max_running: Mapped[int] = mapped_column(Integer, default=0)

    submit_time: Mapped[float] = mapped_column(Float, default=0.0)
    eligible_time: Mapped[float] = mapped_column(Float, default=0.0)
    begin_time: Mapped[float] = mapped_column(Float, default=0.0)
    start_time: Mapped[float] = mapped_column(Float, default=0.0)
    end_time: Mapped[float] = mapped_column(Float, default=0.0)
    time_limit: Mapped[int | None] = mapped_column(Integer)
    time_min: Mapped[int | None] = mapped_column(Integer)

    num_nodes: Mapped[int] = mapped_column(Integer, default=1)
    num_nodes_max: Mapped[int] = mapped_column(Integer, default=0)
    num_tasks: Mapped[int] = mapped_column(Integer, default=1)
    ntasks_per_node: Mapped[int] = mapped_column(Integer, default=0)
    cpus_per_task: Mapped[int] = mapped_column(Integer, default=1)
    mem_per_node_mb: Mapped[int] = mapped_column(Integer, default=0)
    mem_per_cpu_mb: Mapped[int] = mapped_column(Integer, default=0)
    mem_per_gpu_mb: Mapped[int] = mapped_column(Integer, default=0)
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    gpus_per_node: Mapped[int] = mapped_column(Integer, default=0)
    gpus_per_task: Mapped[int] = mapped_column(Integer, default=0)
    gpu_type: Mapped[str] = mapped_column(String, default="")
    shards_per_node: Mapped[int] = mapped_column(Integer, default=0)  # --gres=shard:N
    mps_per_node: Mapped[int] = mapped_column(Integer, default=0)  # --gres=mps:N
    exclusive: Mapped[bool] = mapped_column(Boolean, default=False)
    switches: Mapped[int] = mapped_column(Integer, default=0)  # --switches=N
    switch_wait: Mapped[int | None] = mapped_column(Integer)  # its @max-time, seconds
    segment: Mapped[int] = mapped_column(Integer, default=0)  # --segment=N
    exclusive_topo: Mapped[bool] = mapped_column(Boolean, default=False)  # --exclusive=topo
    constraint: Mapped[str] = mapped_column(String, default="")
    nodelist: Mapped[str] = mapped_column(String, default="")
    exclude: Mapped[str] = mapped_column(String, default="")
    reservation: Mapped[str] = mapped_column(String, default="")

    dependency: Mapped[str] = mapped_column(String, default="")
    requeue: Mapped[bool] = mapped_column(Boolean, default=True)
    signal: Mapped[str] = mapped_column(String, default="")
    open_mode: Mapped[str] = mapped_column(String(16), default="truncate")
    stdout: Mapped[str] = mapped_column(String, default="")
    stderr: Mapped[str] = mapped_column(String, default="")
    workdir: Mapped[str] = mapped_column(String, default="")
    export: Mapped[str] = mapped_column(String, default="ALL")
    comment: Mapped[str] = mapped_column(Text, default="")
    mail_type: Mapped[str] = mapped_column(String, default="")
    mail_user: Mapped[str] = mapped_column(String, default="")
    submit_host: Mapped[str] = mapped_column(String, default="")
    command: Mapped[str] = mapped_column(String, default="")
    script: Mapped[str] = mapped_column(Text, default="")
    environment: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    script_args: Mapped[list[Any] | None] = mapped_column(JSON, default=list)
    alloc_sid: Mapped[int] = mapped_column(BigInteger, default=0)
    restart_cost: Mapped[int | None] = mapped_column(Integer)
    stdin: Mapped[str] = mapped_column(String, default="")
    wckey: Mapped[str] = mapped_column(String, default="")
    licenses: Mapped[str] = mapped_column(String, default="")
    interactive: Mapped[bool] = mapped_column(Boolean, default=False)

    node_list: Mapped[str] = mapped_column(String, default="")
    allocation: Mapped[list[Any]] = mapped_column(JSON, default=list)
    batch_host: Mapped[str] = mapped_column(String, default="")
    exit_code: Mapped[int] = mapped_column(Integer, default=0)
    exit_signal: Mapped[int] = mapped_column(Integer, default=0)
    restart_count: Mapped[int] = mapped_column(Integer, default=0)
    generation: Mapped[int] = mapped_column(Integer, default=0)
    cancelled_by: Mapped[int | None] = mapped_column(BigInteger)

    # server-owned state (kiln.model.Job's typed fields; marks as JSON of their to_wire)
    admin_priority: Mapped[int | None] = mapped_column(BigInteger)
    launched_limit: Mapped[int | None] = mapped_column(Integer)
    stop: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    preempt: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    stats: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=dict)
    expected_start: Mapped[float] = mapped_column(Float, default=0.0)
    sched_nodes: Mapped[str] = mapped_column(String, default="")
    forecast_first: Mapped[list[Any] | None] = mapped_column(JSON)
    forecast_last: Mapped[list[Any] | None] = mapped_column(JSON)
    forecast_band: Mapped[list[Any] | None] = mapped_column(JSON)
    set_aside: Mapped[str] = mapped_column(String, default="")
    mail_sent: Mapped[str] = mapped_column(String, default="")
    idle_gpu_s: Mapped[float | None] = mapped_column(Float)  # lifecycle/idlegpu.py
    idle_since: Mapped[float] = mapped_column(Float, default=0.0)

    # what squeue and sacct filter on, and forecast_stats reads newest first
    __table_args__ = (
        Index("ix_jobs_state", "state"),
        Index("ix_jobs_user", "user"),
        Index("ix_jobs_array_job_id", "array_job_id"),
        Index("ix_jobs_end_time", "end_time"),
        Index("ix_jobs_start_time", "start_time"),  # kiln stats, kiln why: the newest starts
    )


class JobEventRow(Base):
    """One step of a job's history: a state change, a hold, an update, with who did it."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("jobs.id", ondelete="CASCADE"), index=True
    )
    time: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String, default="")
    actor_uid: Mapped[int | None] = mapped_column(BigInteger)
    detail: Mapped[str] = mapped_column(Text, default="")


class NodeRow(Base):
    """A compute node as its agent last registered it, and its admin state (DRAIN, reason)."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    cpus: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    features: Mapped[list[Any]] = mapped_column(JSON, default=list)
    partitions: Mapped[list[Any]] = mapped_column(JSON, default=list)
    state: Mapped[str] = mapped_column(String(16), default="IDLE")
    reason: Mapped[str] = mapped_column(String, default="")
    address: Mapped[str] = mapped_column(String, default="")
    last_heartbeat: Mapped[float] = mapped_column(Float, default=0.0)
    boot_time: Mapped[float] = mapped_column(Float, default=0.0)


class GPURow(Base):
    """One GPU of a node; replaced whole whenever the node re-registers."""

    __tablename__ = "gpus"

    node: Mapped[str] = mapped_column(
        String, ForeignKey("nodes.name", ondelete="CASCADE"), primary_key=True
    )
    index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    uuid: Mapped[str] = mapped_column(String, default="")
    model: Mapped[str] = mapped_column(String, default="")
    memory_mb: Mapped[int] = mapped_column(Integer, default=0)
    island: Mapped[int] = mapped_column(Integer, default=0)
    cpus: Mapped[str] = mapped_column(String, default="")  # near CPU ids (NVML), "0-15,32"
    # why the GPU is out of service ("" = healthy): schedd/lifecycle/gpuhealth.py
    fault: Mapped[str] = mapped_column(String, default="", server_default="")


class PartitionRow(Base):
    """A partition as configured, kept so sacct can name partitions that left the config."""

    __tablename__ = "partitions"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    nodes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    default: Mapped[bool] = mapped_column(Boolean, default=False)
    max_time: Mapped[int | None] = mapped_column(Integer)
    default_time: Mapped[int | None] = mapped_column(Integer)
    priority_tier: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(16), default="UP")


class LimitColumns:
    """The limits sacctmgr sets on an account, a user association or a QOS (Slurm's names).

    TRES limits are TRES strings (``gres/gpu=2,cpu=8``, see ``kiln/slurm/tres.py``), '' = none;
    counts and MaxWall (seconds) are NULL when unset.
    """

    grp_tres: Mapped[str] = mapped_column(String, default="", server_default="")
    grp_tres_mins: Mapped[str] = mapped_column(String, default="", server_default="")
    grp_jobs: Mapped[int | None] = mapped_column(Integer)
    grp_submit_jobs: Mapped[int | None] = mapped_column(Integer)
    max_jobs: Mapped[int | None] = mapped_column(Integer)
    max_submit_jobs: Mapped[int | None] = mapped_column(Integer)
    max_tres_per_job: Mapped[str] = mapped_column(String, default="", server_default="")
    max_wall: Mapped[int | None] = mapped_column(Integer)


class AssocColumns(LimitColumns):
    """What an association adds to its limits: its QOS list ('' = its parent's), default QOS
    and Priority (for the multifactor association factor)."""

    qos: Mapped[str] = mapped_column(String, default="", server_default="")
    default_qos: Mapped[str] = mapped_column(String, default="", server_default="")
    priority: Mapped[int | None] = mapped_column(Integer)


class AccountRow(AssocColumns, Base):
    """A node of the account tree (sacctmgr's Account) and its own association's limits;
    ``root`` has no parent."""

    __tablename__ = "accounts"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    parent: Mapped[str | None] = mapped_column(
        String, ForeignKey("accounts.name", ondelete="RESTRICT")
    )
    shares: Mapped[int] = mapped_column(Integer, default=1)
    description: Mapped[str] = mapped_column(String, default="")
    organization: Mapped[str] = mapped_column(String, default="")
    # kiln: TRES the account is guaranteed (``gres/gpu=4``): burst jobs of accounts over
    # theirs are reclaimed for it (docs/preemption.md); migration 0005
    guarantee: Mapped[str] = mapped_column(String, default="", server_default="")


class UserRow(Base):
    """A user known to the accounting (sacctmgr's User) and their AdminLevel."""

    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    uid: Mapped[int] = mapped_column(BigInteger, unique=True)
    default_account: Mapped[str] = mapped_column(String, ForeignKey("accounts.name"))
    admin_level: Mapped[str] = mapped_column(String(16), default="None")


class AssociationRow(AssocColumns, Base):
    """A user's membership of an account with its fair-share weight (Slurm's association)."""

    __tablename__ = "associations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account: Mapped[str] = mapped_column(String, ForeignKey("accounts.name", ondelete="CASCADE"))
    user: Mapped[str] = mapped_column(String, ForeignKey("users.name", ondelete="CASCADE"))
    shares: Mapped[int] = mapped_column(Integer, default=1)
    # kiln: created by a first submission on a cluster with no account but root, not by an
    # administrator; it goes away once the user is added to a real account (docs/accounts.md,
    # "Out of the box"); migration 0013
    automatic: Mapped[bool] = mapped_column(Boolean, default=False)

    __table_args__ = (UniqueConstraint("account", "user", name="uq_associations_account_user"),)


class QOSRow(LimitColumns, Base):
    """A QOS (sacctmgr's QOS): priority, preemption and limits; ``normal`` exists from the
    start. ``preempt`` and ``flags`` are comma lists (``low,scavenger``, ``DenyOnLimit``)."""

    __tablename__ = "qos"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    description: Mapped[str] = mapped_column(String, default="")
    priority: Mapped[int] = mapped_column(Integer, default=0)
    preempt: Mapped[str] = mapped_column(String, default="")
    preempt_mode: Mapped[str] = mapped_column(String(16), default="cluster")
    grace_time: Mapped[int] = mapped_column(Integer, default=0)  # seconds
    usage_factor: Mapped[float] = mapped_column(Float, default=1.0)
    flags: Mapped[str] = mapped_column(String, default="")
    max_jobs_per_user: Mapped[int | None] = mapped_column(Integer)
    max_submit_per_user: Mapped[int | None] = mapped_column(Integer)
    max_tres_per_user: Mapped[str] = mapped_column(String, default="")


class TresUsageRow(Base):
    """GrpTRESMins usage of one association in the current budget period: TRES-minutes by
    TRES name, decayed like fair-share usage, zeroed when the period (usage_reset) turns."""

    __tablename__ = "tres_usage"

    account: Mapped[str] = mapped_column(String, primary_key=True)
    user: Mapped[str] = mapped_column(String, primary_key=True)  # "" = the account itself
    minutes: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    period_start: Mapped[float] = mapped_column(Float, default=0.0)
    updated: Mapped[float] = mapped_column(Float, default=0.0)


class AuditRow(Base):
    """Who changed what: cancel, hold, update, sacctmgr and scontrol actions."""

    __tablename__ = "audit"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float, index=True)
    actor_uid: Mapped[int] = mapped_column(BigInteger)
    action: Mapped[str] = mapped_column(String)
    target: Mapped[str] = mapped_column(String, default="")
    detail: Mapped[str] = mapped_column(Text, default="")


class FairshareUsageRow(Base):
    """Decayed usage per association (billing-weighted seconds), saved so restarts keep it."""

    __tablename__ = "fairshare_usage"

    account: Mapped[str] = mapped_column(String, primary_key=True)
    user: Mapped[str] = mapped_column(String, primary_key=True)  # "" = the account itself
    usage: Mapped[float] = mapped_column(Float, default=0.0)
    updated: Mapped[float] = mapped_column(Float, default=0.0)


class JobStepRow(Base):
    """One step of a job: ``JOBID.batch`` (the script) or ``JOBID.N`` (an srun inside it)."""

    __tablename__ = "job_steps"

    job_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    step_id: Mapped[str] = mapped_column(String(16), primary_key=True)  # "batch", "0", "1", ...
    name: Mapped[str] = mapped_column(String, default="")
    node_list: Mapped[str] = mapped_column(String, default="")
    num_nodes: Mapped[int] = mapped_column(Integer, default=1)
    num_tasks: Mapped[int] = mapped_column(Integer, default=1)
    cpus: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16), default="RUNNING")
    exit_code: Mapped[int] = mapped_column(Integer, default=0)
    exit_signal: Mapped[int] = mapped_column(Integer, default=0)
    start_time: Mapped[float] = mapped_column(Float, default=0.0)
    end_time: Mapped[float] = mapped_column(Float, default=0.0)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ReservationRow(Base):
    """An advance reservation (scontrol create reservation): window, holdings, members."""

    __tablename__ = "reservations"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    start_time: Mapped[float] = mapped_column(Float)
    end_time: Mapped[float] = mapped_column(Float)
    nodes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    gpus: Mapped[int] = mapped_column(Integer, default=0)  # TRES=gres/gpu=N; 0 = whole nodes
    holdings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # node -> [c, m, g]
    users: Mapped[list[Any]] = mapped_column(JSON, default=list)
    accounts: Mapped[list[Any]] = mapped_column(JSON, default=list)
    flags: Mapped[list[Any]] = mapped_column(JSON, default=list)
    partition: Mapped[str] = mapped_column(String, default="")
    created_by: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


class MetaRow(Base):
    """Small key/value facts about the ledger itself, e.g. the highest job id ever issued."""

    __tablename__ = "kiln_meta"

    key: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[str] = mapped_column(Text, default="")


jobs = JobRow.__table__
job_events = JobEventRow.__table__
nodes = NodeRow.__table__
gpus = GPURow.__table__
partitions = PartitionRow.__table__
accounts = AccountRow.__table__
users = UserRow.__table__
associations = AssociationRow.__table__
audit = AuditRow.__table__
fairshare_usage = FairshareUsageRow.__table__
kiln_meta = MetaRow.__table__
job_steps = JobStepRow.__table__
qos = QOSRow.__table__
tres_usage = TresUsageRow.__table__
reservations = ReservationRow.__table__
