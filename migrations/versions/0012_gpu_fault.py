"""GPU health: ``gpus.fault``, why a GPU is out of service ("" = healthy), set when its agent
reports a fatal NVML fault (an Xid such as 79, a double-bit ECC error, a lost GPU) and cleared
by ``scontrol update NodeName=... State=RESUME`` (schedd/lifecycle/gpuhealth.py). Kept in the
ledger so a restarted schedd never hands the GPU out again.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.add_column(sa.Column("fault", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("fault")
