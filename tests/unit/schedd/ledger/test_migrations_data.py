"""The upgrade of a ledger that holds data, from every earlier revision to head, loses none of
it (issue 19, item 7).

For each revision before head: a fresh SQLite ledger is migrated to that revision, every table
then in it gets a row (values by column type, foreign keys pointing at the other rows), and
``kiln db upgrade`` brings it to head. Every row is still there, and every column that still
exists holds what was written (a column a migration retires, such as 0006's ``extra``, is
turned into typed columns by that migration, which has tests of its own)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from schedd.ledger.engine import make_engine
from schedd.ledger.migrate import _script_directory, alembic_config, head_revision, upgrade

EARLIER = [s.revision for s in reversed(list(_script_directory().walk_revisions()))
           if s.revision != head_revision()]


def _value(table: str, column: sa.Column) -> Any:
    kind = column.type
    if column.name == "state":
        return "IDLE" if table == "nodes" else "COMPLETED"
    if isinstance(kind, sa.Boolean):
        return False
    if isinstance(kind, sa.Integer):
        return 1
    if isinstance(kind, sa.Float):
        return 2.5
    if isinstance(kind, sa.JSON):
        return {}
    return "x"  # String, Text: the same "x" everywhere, so foreign keys find their rows


def _fill(url: str) -> dict[str, dict[str, Any]]:
    engine = make_engine(url)
    written: dict[str, dict[str, Any]] = {}
    try:
        meta = sa.MetaData()
        meta.reflect(engine)
        with engine.begin() as conn:
            for table in meta.sorted_tables:
                if table.name == "alembic_version":
                    continue
                row = {c.name: _value(table.name, c) for c in table.columns}
                conn.execute(table.insert().values(**row))
                written[table.name] = row
    finally:
        engine.dispose()
    return written


def _rows(url: str, table: str) -> list[dict[str, Any]]:
    engine = make_engine(url)
    try:
        meta = sa.MetaData()
        meta.reflect(engine, only=[table])
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.select(meta.tables[table])).mappings()]
    finally:
        engine.dispose()


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, str) and not isinstance(a, str):
        try:
            b = json.loads(b)
        except ValueError:
            return False
    return a == b


@pytest.mark.parametrize("revision", EARLIER)
def test_upgrade_from_each_revision_keeps_every_row(tmp_path: Path, revision: str) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)
    engine.dispose()
    written = _fill(url)
    assert written, f"revision {revision} has no tables"
    upgrade(url)  # kiln db upgrade
    lost, changed = [], {}
    for table, row in written.items():
        keys = _primary_key(url, table)
        mine = [r for r in _rows(url, table)  # a migration may add rows of its own (QOS normal)
                if all(_same(row[k], r.get(k)) for k in keys)]
        if len(mine) != 1:
            lost.append(table)
            continue
        diff = {c: (v, mine[0][c]) for c, v in row.items()
                if c in mine[0] and not _same(v, mine[0][c])}
        if diff:
            changed[table] = diff
    assert (lost, changed) == ([], {}), f"the upgrade from {revision} lost rows of {lost}, " \
        f"changed {changed}"


def _primary_key(url: str, table: str) -> list[str]:
    engine = make_engine(url)
    try:
        return list(sa.inspect(engine).get_pk_constraint(table)["constrained_columns"])
    finally:
        engine.dispose()
