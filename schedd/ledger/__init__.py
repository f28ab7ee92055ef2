"""schedd's ledger: the durable record of jobs, nodes, accounts, fair share and audit.

- ``records``: the plain data classes the ledger stores (besides ``kiln.model``'s jobs and
  nodes) and its errors; no SQLAlchemy.
- ``engine``: database URLs and engines (SQLite, PostgreSQL).
- ``migrate``: schema revisions and ``kiln db upgrade`` (Alembic; versions in ``migrations/``).
- ``tables``: the schema, SQLAlchemy Core tables.
- ``store``: ``Store``, the only code that reads or writes the ledger, each call one
  transaction; schedd calls it through ``schedd.state``.

Imported by schedd and ``kiln db``, never by the commands' fast path or by agentd.
"""
