"""Start forecasts as quantiles: ``jobs.forecast_band``, the first p50 and p90 start kiln
published for a job while it waited, with when and the plan's own starts before calibration
(``[p50, p90, published, plan p50, plan p90]``), written with its start; ``kiln stats``
checks it against the start (docs/scheduler.md, "Forecasts as quantiles").

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("forecast_band", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("forecast_band")
