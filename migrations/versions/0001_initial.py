"""The initial ledger: jobs and their events, nodes and GPUs, partitions, the account tree
(accounts, users, associations), fair-share usage, the audit trail and kiln_meta.

Revision ID: 0001
Revises: None
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "accounts",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("parent", sa.String(), nullable=True),
        sa.Column("shares", sa.Integer(), nullable=False),
        sa.Column("description", sa.String(), nullable=False),
        sa.Column("organization", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(
            ["parent"],
            ["accounts.name"],
            name=op.f("fk_accounts_parent_accounts"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_accounts")),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("actor_uid", sa.BigInteger(), nullable=False),
        sa.Column("action", sa.String(), nullable=False),
        sa.Column("target", sa.String(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit")),
    )
    op.create_index(op.f("ix_audit_time"), "audit", ["time"])
    op.create_table(
        "fairshare_usage",
        sa.Column("account", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("usage", sa.Float(), nullable=False),
        sa.Column("updated", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("account", "user", name=op.f("pk_fairshare_usage")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("uid", sa.BigInteger(), nullable=False),
        sa.Column("gid", sa.BigInteger(), nullable=False),
        sa.Column("account", sa.String(), nullable=False),
        sa.Column("partition", sa.String(), nullable=False),
        sa.Column("qos", sa.String(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("priority", sa.BigInteger(), nullable=False),
        sa.Column("nice", sa.Integer(), nullable=False),
        sa.Column("held", sa.String(length=8), nullable=False),
        sa.Column("array_job_id", sa.Integer(), nullable=True),
        sa.Column("array_task_id", sa.Integer(), nullable=True),
        sa.Column("array_spec", sa.String(), nullable=False),
        sa.Column("array_max_running", sa.Integer(), nullable=False),
        sa.Column("submit_time", sa.Float(), nullable=False),
        sa.Column("eligible_time", sa.Float(), nullable=False),
        sa.Column("begin_time", sa.Float(), nullable=False),
        sa.Column("start_time", sa.Float(), nullable=False),
        sa.Column("end_time", sa.Float(), nullable=False),
        sa.Column("time_limit", sa.Integer(), nullable=True),
        sa.Column("time_min", sa.Integer(), nullable=True),
        sa.Column("num_nodes", sa.Integer(), nullable=False),
        sa.Column("num_nodes_max", sa.Integer(), nullable=False),
        sa.Column("num_tasks", sa.Integer(), nullable=False),
        sa.Column("ntasks_per_node", sa.Integer(), nullable=False),
        sa.Column("cpus_per_task", sa.Integer(), nullable=False),
        sa.Column("mem_per_node_mb", sa.Integer(), nullable=False),
        sa.Column("mem_per_cpu_mb", sa.Integer(), nullable=False),
        sa.Column("mem_per_gpu_mb", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpus_per_node", sa.Integer(), nullable=False),
        sa.Column("gpus_per_task", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sa.String(), nullable=False),
        sa.Column("exclusive", sa.Boolean(), nullable=False),
        sa.Column("constraint", sa.String(), nullable=False),
        sa.Column("nodelist", sa.String(), nullable=False),
        sa.Column("exclude", sa.String(), nullable=False),
        sa.Column("reservation", sa.String(), nullable=False),
        sa.Column("dependency", sa.String(), nullable=False),
        sa.Column("requeue", sa.Boolean(), nullable=False),
        sa.Column("signal", sa.String(), nullable=False),
        sa.Column("open_mode", sa.String(length=16), nullable=False),
        sa.Column("stdout", sa.String(), nullable=False),
        sa.Column("stderr", sa.String(), nullable=False),
        sa.Column("workdir", sa.String(), nullable=False),
        sa.Column("export", sa.String(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("mail_type", sa.String(), nullable=False),
        sa.Column("mail_user", sa.String(), nullable=False),
        sa.Column("submit_host", sa.String(), nullable=False),
        sa.Column("command", sa.String(), nullable=False),
        sa.Column("script", sa.Text(), nullable=False),
        sa.Column("environment", sa.JSON(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("node_list", sa.String(), nullable=False),
        sa.Column("allocation", sa.JSON(), nullable=False),
        sa.Column("batch_host", sa.String(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("exit_signal", sa.Integer(), nullable=False),
        sa.Column("restart_count", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("cancelled_by", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index("ix_jobs_array_job_id", "jobs", ["array_job_id"])
    op.create_index("ix_jobs_end_time", "jobs", ["end_time"])
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_index("ix_jobs_user", "jobs", ["user"])
    op.create_table(
        "kiln_meta",
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_kiln_meta")),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("cpus", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("features", sa.JSON(), nullable=False),
        sa.Column("partitions", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("address", sa.String(), nullable=False),
        sa.Column("last_heartbeat", sa.Float(), nullable=False),
        sa.Column("boot_time", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "partitions",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("default", sa.Boolean(), nullable=False),
        sa.Column("max_time", sa.Integer(), nullable=True),
        sa.Column("default_time", sa.Integer(), nullable=True),
        sa.Column("priority_tier", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_partitions")),
    )
    op.create_table(
        "gpus",
        sa.Column("node", sa.String(), nullable=False),
        sa.Column("index", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("uuid", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("island", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["node"], ["nodes.name"], name=op.f("fk_gpus_node_nodes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("node", "index", name=op.f("pk_gpus")),
    )
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("actor_uid", sa.BigInteger(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    op.create_index(op.f("ix_job_events_job_id"), "job_events", ["job_id"])
    op.create_table(
        "users",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("uid", sa.BigInteger(), nullable=False),
        sa.Column("default_account", sa.String(), nullable=False),
        sa.Column("admin_level", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["default_account"], ["accounts.name"], name=op.f("fk_users_default_account_accounts")
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_users")),
        sa.UniqueConstraint("uid", name=op.f("uq_users_uid")),
    )
    op.create_table(
        "associations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("shares", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["account"],
            ["accounts.name"],
            name=op.f("fk_associations_account_accounts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user"], ["users.name"], name=op.f("fk_associations_user_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_associations")),
        sa.UniqueConstraint("account", "user", name="uq_associations_account_user"),
    )


def downgrade() -> None:
    op.drop_table("associations")
    op.drop_table("users")
    op.drop_index(op.f("ix_job_events_job_id"), table_name="job_events")
    op.drop_table("job_events")
    op.drop_table("gpus")
    op.drop_table("partitions")
    op.drop_table("nodes")
    op.drop_table("kiln_meta")
    op.drop_index("ix_jobs_user", table_name="jobs")
    op.drop_index("ix_jobs_state", table_name="jobs")
    op.drop_index("ix_jobs_end_time", table_name="jobs")
    op.drop_index("ix_jobs_array_job_id", table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("fairshare_usage")
    op.drop_index(op.f("ix_audit_time"), table_name="audit")
    op.drop_table("audit")
    op.drop_table("accounts")
