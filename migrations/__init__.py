"""kiln's Alembic environment: ``env.py``, the revision template and ``versions/``.

A package (not a loose directory) so that it ships inside the wheel: ``kiln db upgrade`` and
schedd find it with ``schedd.ledger.migrate.alembic_config()``, with no alembic.ini anywhere.
"""
