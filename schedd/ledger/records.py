"""What the ledger stores besides jobs and nodes, as plain data classes, and its errors.

No SQLAlchemy here: the lifecycle and the handlers build these records and hand them to
``State`` (which hands them to ``Store``) without importing the database layer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


class LedgerError(Exception):
    """A ledger operation failed and wrote nothing; the message is one user-facing line."""


class SchemaError(LedgerError):
    """The database cannot be used as it is (bad URL, unreachable, not migrated, too new)."""


@dataclass(slots=True)
class JobEvent:
    """One step of a job's history: a state change, a hold, an update, and who did it."""

    job_id: int
    time: float
    state: str
    reason: str = ""
    actor_uid: int | None = None
    detail: str = ""


@dataclass(slots=True)
class StepRecord:
    """One job step as sacct shows it: ``JOBID.batch`` (step_id "batch") or ``JOBID.N`` (srun).

    ``state`` is a job state name (RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...);
    ``exit_code``/``exit_signal`` are the worst task's."""

    job_id: int
    step_id: str
    name: str = ""
    node_list: str = ""
    num_nodes: int = 1
    num_tasks: int = 1
    cpus: int = 0
    state: str = "RUNNING"
    exit_code: int = 0
    exit_signal: int = 0
    start_time: float = 0.0
    end_time: float = 0.0
    stats: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclass(slots=True)
class AccountRecord:
    name: str
    parent: str | None
    shares: int = 1
    description: str = ""
    organization: str = ""


@dataclass(slots=True)
class UserRecord:
    name: str
    uid: int
    default_account: str
    admin_level: str = "None"


@dataclass(slots=True)
class AssociationRecord:
    account: str
    user: str
    shares: int = 1


@dataclass(slots=True)
class AuditRecord:
    time: float
    actor_uid: int
    action: str
    target: str
    detail: str = ""


@dataclass(slots=True)
class AccountingChange:
    """One sacctmgr command's effect on the ledger, written in one transaction
    (``Store.write_accounting``): rows to upsert (every column) and keys to delete."""

    accounts: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    users: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    associations: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    qos: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    delete_accounts: list[str] = dataclasses.field(default_factory=list)
    delete_users: list[str] = dataclasses.field(default_factory=list)
    delete_associations: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    delete_qos: list[str] = dataclasses.field(default_factory=list)
    audit: list[AuditRecord] = dataclasses.field(default_factory=list)
