"""schedd's ledger: the durable record of jobs, nodes, accounts, fair share and audit.

``tables`` defines the schema (SQLAlchemy 2 models; Alembic migrations live in the top-level
``migrations`` package) and ``store`` is the only code that reads or writes it. Imported by
schedd and ``kiln db``, never by the CLI's fast path.
"""

from schedd.ledger.store import (
    AccountRecord,
    AssociationRecord,
    AuditRecord,
    JobEvent,
    LedgerError,
    SchemaError,
    Store,
    UserRecord,
    current_revision,
    head_revision,
    upgrade,
)

__all__ = [
    "AccountRecord",
    "AssociationRecord",
    "AuditRecord",
    "JobEvent",
    "LedgerError",
    "SchemaError",
    "Store",
    "UserRecord",
    "current_revision",
    "head_revision",
    "upgrade",
]
