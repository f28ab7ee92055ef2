"""MPS (gres/mps): ``jobs.mps_per_node``, the MPS units (percent of one GPU, in the node's
mps_per_gpu) ``--gres=mps:N`` asks for on each node. Which GPU a run holds them on is in its
``allocation`` (JSON, ``"shards"`` with ``"share_kind": "mps"``), which needs no column.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("mps_per_node", sa.Integer(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("mps_per_node")
