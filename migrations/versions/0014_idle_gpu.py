"""Idle GPUs: ``jobs.idle_gpu_s``, the GPU-seconds a run's GPUs read below
``[scheduler.idle_gpu] below_util`` (NULL: the run was not watched), and ``jobs.idle_since``,
since when all of them have (0: they are not), written by schedd/lifecycle/idlegpu.py. Kept in
the ledger so that seff and sacct report a job's idle GPU-hours after it ended, and a restarted
schedd keeps the window it had counted.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("idle_gpu_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("idle_since", sa.Float(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("idle_since")
        batch.drop_column("idle_gpu_s")
