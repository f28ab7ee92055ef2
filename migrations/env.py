"""Alembic's entry point for kiln, run by ``schedd.ledger.migrate.upgrade`` (``kiln db upgrade``).

The caller hands over an open connection in ``config.attributes["connection"]`` (inside its own
transaction, so a whole upgrade commits or rolls back as one, SQLite included). Developers may
also drive Alembic directly with ``sqlalchemy.url`` set, e.g. to autogenerate a revision:
``alembic_config()`` from the store, ``set_main_option("sqlalchemy.url", ...)``, then
``alembic.command.revision(cfg, "message", autogenerate=True)``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from schedd.ledger.engine import make_engine
from schedd.ledger.tables import Base

config = context.config
target_metadata = Base.metadata


def run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things: later revisions use batch mode (copy and move)
        render_as_batch=connection.dialect.name == "sqlite",
        # the store emits BEGIN itself on SQLite, so DDL is transactional there too
        transactional_ddl=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_on(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as conn:
            run_on(conn)
            conn.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
