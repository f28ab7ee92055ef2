"""Guaranteed quotas: ``accounts.guarantee`` (sacctmgr ``Guarantee=gres/gpu=4``), the TRES an
account may reclaim from other accounts' burst jobs (docs/preemption.md).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.add_column(sa.Column("guarantee", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("accounts") as batch:
        batch.drop_column("guarantee")
