"""Index ``jobs.start_time``: ``kiln stats`` and every ``kiln why`` of a pending job read the
newest starts a page at a time (``Store.iter_started_since``); without it each page sorted the
whole table (issue 12: one read of 5,000 rows held schedd's loop 60-95 ms).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_start_time", "jobs", ["start_time"])


def downgrade() -> None:
    op.drop_index("ix_jobs_start_time", table_name="jobs")
