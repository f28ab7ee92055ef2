"""Advance reservations (scontrol create reservation).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("start_time", sa.Float(), nullable=False),
        sa.Column("end_time", sa.Float(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("holdings", sa.JSON(), nullable=False),
        sa.Column("users", sa.JSON(), nullable=False),
        sa.Column("accounts", sa.JSON(), nullable=False),
        sa.Column("flags", sa.JSON(), nullable=False),
        sa.Column("partition", sa.String(), nullable=False),
        sa.Column("created_by", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_reservations")),
    )


def downgrade() -> None:
    op.drop_table("reservations")
