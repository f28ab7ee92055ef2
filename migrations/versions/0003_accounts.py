"""Accounts, QOS and limits: limit columns on accounts and associations, the ``qos`` table
(with ``normal``), and ``tres_usage`` for GrpTRESMins budgets.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _limit_columns() -> list[sa.Column]:
    return [
        sa.Column("grp_tres", sa.String(), nullable=False, server_default=""),
        sa.Column("grp_tres_mins", sa.String(), nullable=False, server_default=""),
        sa.Column("grp_jobs", sa.Integer(), nullable=True),
        sa.Column("grp_submit_jobs", sa.Integer(), nullable=True),
        sa.Column("max_jobs", sa.Integer(), nullable=True),
        sa.Column("max_submit_jobs", sa.Integer(), nullable=True),
        sa.Column("max_tres_per_job", sa.String(), nullable=False, server_default=""),
        sa.Column("max_wall", sa.Integer(), nullable=True),
    ]


def _assoc_columns() -> list[sa.Column]:
    return [
        sa.Column("qos", sa.String(), nullable=False, server_default=""),
        sa.Column("default_qos", sa.String(), nullable=False, server_default=""),
        sa.Column("priority", sa.Integer(), nullable=True),
        *_limit_columns(),
    ]


def upgrade() -> None:
    for table in ("accounts", "associations"):
        for column in _assoc_columns():
            op.add_column(table, column)
    qos = op.create_table(
        "qos",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("description", sa.String(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("preempt", sa.String(), nullable=False),
        sa.Column("preempt_mode", sa.String(length=16), nullable=False),
        sa.Column("grace_time", sa.Integer(), nullable=False),
        sa.Column("usage_factor", sa.Float(), nullable=False),
        sa.Column("flags", sa.String(), nullable=False),
        sa.Column("max_jobs_per_user", sa.Integer(), nullable=True),
        sa.Column("max_submit_per_user", sa.Integer(), nullable=True),
        sa.Column("max_tres_per_user", sa.String(), nullable=False),
        *_limit_columns(),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_qos")),
    )
    op.bulk_insert(qos, [{
        "name": "normal", "description": "Normal QOS default", "priority": 0, "preempt": "",
        "preempt_mode": "cluster", "grace_time": 0, "usage_factor": 1.0, "flags": "",
        "max_tres_per_user": "", "grp_tres": "", "grp_tres_mins": "", "max_tres_per_job": "",
    }])
    op.create_table(
        "tres_usage",
        sa.Column("account", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("minutes", sa.JSON(), nullable=False),
        sa.Column("period_start", sa.Float(), nullable=False),
        sa.Column("updated", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("account", "user", name=op.f("pk_tres_usage")),
    )


def downgrade() -> None:
    op.drop_table("tres_usage")
    op.drop_table("qos")
    for table in ("associations", "accounts"):
        with op.batch_alter_table(table) as batch:
            for column in reversed(_assoc_columns()):
                batch.drop_column(column.name)
