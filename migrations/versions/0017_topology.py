"""Network topology: ``jobs.switches`` and ``jobs.switch_wait`` (--switches=N[@max-time]),
``jobs.segment`` (--segment=N) and ``jobs.exclusive_topo`` (--exclusive=topo).

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("switches", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("switch_wait", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("segment", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("exclusive_topo", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for name in ("exclusive_topo", "segment", "switch_wait", "switches"):
            batch.drop_column(name)
