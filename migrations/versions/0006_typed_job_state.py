"""Typed job state: what ``jobs.extra`` held becomes columns, and ``extra`` goes.

``extra`` was an untyped JSON dictionary that a submission could fill and that schedd also kept
its own state in (admin priority, the launched limit, requeue and preemption marks, samples,
forecasts). Each of those is now a column that only schedd writes; the client options it held
(script arguments, session id, --restart-cost, --input, --wckey, -L) are columns too. Values
of the wrong type are dropped, not carried over: a mark without a launch generation, or one
from a run that is no longer the job's current one, is cleared (it could only have been stale).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATS_KEYS = {"samples", "gpu_util_mean", "gpu_util_max", "gpu_mem_max_mb", "rss_max_kb",
               "rss_mean_kb", "cpu_user_s", "cpu_system_s"}
_ENDED = {"CANCELLED", "REQUEUED", "NODE_FAIL", "TIMEOUT", "COMPLETED", "FAILED",
          "OUT_OF_MEMORY", "PREEMPTED"}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and \
        -(2**62) < value < 2**62 else None


def _num(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _str(value: Any, limit: int = 4096) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _pair(value: Any) -> list[float] | None:
    if isinstance(value, list) and len(value) == 2 and all(_num(v) is not None for v in value):
        return [float(v) for v in value]
    return None


def _preempt(mark: Any, generation: int) -> dict[str, Any] | None:
    if not isinstance(mark, dict) or mark.get("generation") != generation:
        return None
    by, at, deadline = _int(mark.get("by")), _num(mark.get("at")), _num(mark.get("deadline"))
    mode = mark.get("mode")
    if by is None or at is None or deadline is None or mode not in ("requeue", "cancel"):
        return None
    return {"generation": generation, "by": by, "at": at, "deadline": deadline, "mode": mode,
            "cause": _str(mark.get("cause"), 64)}


def _stop(mark: Any, generation: int, state: str) -> dict[str, Any] | None:
    """The old ``requeue_on_end`` mark had no generation: it belongs to the current run only
    while that run is being stopped (COMPLETING)."""
    if not isinstance(mark, dict) or state != "COMPLETING":
        return None
    ended = mark.get("state") if mark.get("state") in _ENDED else "REQUEUED"
    failed = ended == "NODE_FAIL"
    return {"generation": generation, "cause": "node_down" if failed else "requeue",
            "ended": ended, "requeue": True, "hold": bool(mark.get("hold")), "actor": None}


def convert(extra: Any, generation: int, state: str) -> dict[str, Any]:
    """The typed columns for one job's old ``extra`` (pure: tested on its own)."""
    extra = extra if isinstance(extra, dict) else {}
    args = extra.get("script_args")
    stats = extra.get("stats") if isinstance(extra.get("stats"), dict) else {}
    cost = _int(extra.get("restart_cost"))
    return {
        "script_args": [a for a in args if isinstance(a, str)] if isinstance(args, list) else [],
        "alloc_sid": _int(extra.get("alloc_sid")) or 0,
        "restart_cost": cost if cost is not None and cost >= 0 else None,
        "stdin": _str(extra.get("stdin")),
        "wckey": _str(extra.get("wckey")),
        "licenses": _str(extra.get("licenses")),
        "admin_priority": _int(extra.get("admin_priority")),
        "launched_limit": _int(extra.get("launched_limit")),
        "stop": _stop(extra.get("requeue_on_end"), generation, state),
        "preempt": _preempt(extra.get("preempt"), generation),
        "stats": {k: float(v) for k, v in stats.items()
                  if k in _STATS_KEYS and _num(v) is not None and float(v) >= 0},
        "expected_start": _num(extra.get("expected_start")) or 0.0,
        "sched_nodes": _str(extra.get("sched_nodes")),
        "forecast_first": _pair(extra.get("forecast_first")),
        "forecast_last": _pair(extra.get("forecast_last")),
        "set_aside": "",
    }


def _columns() -> list[sa.Column]:
    return [
        sa.Column("script_args", sa.JSON(), nullable=True),
        sa.Column("alloc_sid", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("restart_cost", sa.Integer(), nullable=True),
        sa.Column("stdin", sa.String(), nullable=False, server_default=""),
        sa.Column("wckey", sa.String(), nullable=False, server_default=""),
        sa.Column("licenses", sa.String(), nullable=False, server_default=""),
        sa.Column("admin_priority", sa.BigInteger(), nullable=True),
        sa.Column("launched_limit", sa.Integer(), nullable=True),
        sa.Column("stop", sa.JSON(), nullable=True),
        sa.Column("preempt", sa.JSON(), nullable=True),
        sa.Column("stats", sa.JSON(), nullable=True),
        sa.Column("expected_start", sa.Float(), nullable=False, server_default="0"),
        sa.Column("sched_nodes", sa.String(), nullable=False, server_default=""),
        sa.Column("forecast_first", sa.JSON(), nullable=True),
        sa.Column("forecast_last", sa.JSON(), nullable=True),
        sa.Column("set_aside", sa.String(), nullable=False, server_default=""),
    ]


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in _columns():
            batch.add_column(column)
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("extra", sa.JSON),
                    sa.column("generation", sa.Integer), sa.column("state", sa.String),
                    *[sa.column(c.name, c.type) for c in _columns()])
    rows = conn.execute(sa.select(jobs.c.id, jobs.c.extra, jobs.c.generation,
                                  jobs.c.state)).all()
    for job_id, extra, generation, state in rows:
        if isinstance(extra, str):  # a driver that hands JSON back as text
            try:
                extra = json.loads(extra)
            except ValueError:
                extra = {}
        values = convert(extra, generation or 0, state or "")
        conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(**values))
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("extra")


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("extra", sa.JSON(), nullable=True))
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("id", sa.Integer), sa.column("extra", sa.JSON),
                    *[sa.column(c.name, c.type) for c in _columns()])
    for row in conn.execute(sa.select(jobs)).mappings().all():
        extra = {k: row[k] for k in ("script_args", "alloc_sid", "restart_cost", "stdin",
                                     "wckey", "licenses", "admin_priority", "expected_start",
                                     "sched_nodes", "forecast_first", "forecast_last", "stats")
                 if row[k] not in (None, "", [], {}, 0)}
        conn.execute(sa.update(jobs).where(jobs.c.id == row["id"]).values(extra=extra))
    with op.batch_alter_table("jobs") as batch:
        for column in reversed(_columns()):
            batch.drop_column(column.name)
