"""Time-limit notices remembered: ``jobs.mail_sent``, the TIME_LIMIT_50/80/90 and TIME_LIMIT
mails (``--mail-type``) already sent for the job's current run, so a schedd that restarts
neither sends them again nor forgets the ones still due. A run that was going at the upgrade
has none recorded (its notices were kept in memory only).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("mail_sent", sa.String(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("mail_sent")
