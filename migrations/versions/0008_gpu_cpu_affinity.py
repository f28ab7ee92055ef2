"""GPU–CPU affinity: ``gpus.cpus``, the CPU ids near each GPU as NVML reports them ("0-15"),
so the scheduler can place a job's CPUs near its GPUs. (A job's chosen CPU ids travel in the
allocation's JSON, ``cpu_ids``: no column; allocations stored before have none.)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.add_column(sa.Column("cpus", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("cpus")
