"""Job steps: the batch step and each srun of a job, for sacct's JOBID.batch / JOBID.N rows.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_steps",
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("node_list", sa.String(), nullable=False),
        sa.Column("num_nodes", sa.Integer(), nullable=False),
        sa.Column("num_tasks", sa.Integer(), nullable=False),
        sa.Column("cpus", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=False),
        sa.Column("exit_signal", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.Float(), nullable=False),
        sa.Column("end_time", sa.Float(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"],
                                name=op.f("fk_job_steps_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "step_id", name=op.f("pk_job_steps")),
    )


def downgrade() -> None:
    op.drop_table("job_steps")
