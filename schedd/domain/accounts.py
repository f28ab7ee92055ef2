"""The association tree, QOS and limits in schedd's memory: loaded from the ledger at start-up,
changed by sacctmgr (``handlers/sacctmgr/``), read by submit and by the snapshot.

Slurm's model: accounts form a tree under ``root``; a user joins an account through an
association (with its own shares and limits); every association may carry limits and a QOS
list (empty = its parent's). A job runs in one association (its account and user) and one QOS.

Out of the box (no account but ``root``) kiln needs no sacctmgr at all: every user's jobs go to
account ``root`` and the user's association is created on first submission (an *automatic*
association). Once an administrator adds an account, membership is enforced as Slurm's
AccountingStorageEnforce=associations,limits,qos does; once the administrator adds a user to a
real account, the user's automatic root association goes (``Accounts.join``), unless the
administrator names root too: Slurm has no automatic associations, so a user an administrator
placed in an account is only where the administrator put them.
"""

from __future__ import annotations

import dataclasses
import pwd
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kiln.slurm import tres
from schedd.ledger.records import AccountingChange
from schedd.scheduler.limits import pending_tres, per_job_reason
from schedd.scheduler.snapshot import (
    AssocKey,
    AssocLimits,
    Limits,
    LimitTable,
    PendingJob,
    QOSLimits,
)

ROOT = "root"
ADMIN_LEVELS = {"none": "None", "operator": "Operator", "administrator": "Administrator",
                "admin": "Administrator"}
INVALID_ACCOUNT = "Invalid account or account/partition combination specified"
INVALID_QOS = "Invalid qos specification"
POLICY = ("Job violates accounting/QOS policy (job submit limit, user's size and/or time "
          "limits)")

_TRES_LIMITS = ("grp_tres", "grp_tres_mins", "max_tres_per_job", "max_tres_per_user")
_INT_LIMITS = ("grp_jobs", "grp_submit_jobs", "max_jobs", "max_submit_jobs", "max_wall",
               "max_jobs_per_user", "max_submit_per_user")
_ROW_LIMITS = ("grp_tres", "grp_tres_mins", "grp_jobs", "grp_submit_jobs", "max_jobs",
               "max_submit_jobs", "max_tres_per_job", "max_wall")


class AccountsError(Exception):
    """A bad sacctmgr request; the message is one user-facing line."""


@dataclass(slots=True)
class Association:
    """An account's own association (``user == ""``) or a user's association with it."""

    account: str
    user: str = ""
    parent: str | None = None  # accounts only: the parent account (None for root)
    shares: int = 1
    description: str = ""  # accounts only
    organization: str = ""  # accounts only
    qos: list[str] = field(default_factory=list)  # empty: the parent's
    default_qos: str = ""
    priority: int | None = None
    limits: Limits = field(default_factory=Limits)
    # kiln, accounts only: TRES guaranteed to the account; burst jobs of accounts over theirs
    # are reclaimed for it (scheduler/preempt.py, docs/preemption.md)
    guarantee: dict[str, int] = field(default_factory=dict)
    # kiln, users only: made by ``auto_associate`` at a first submission, not by sacctmgr
    automatic: bool = False

    @property
    def key(self) -> AssocKey:
        return (self.account, self.user)


@dataclass(slots=True)
class User:
    name: str
    uid: int
    default_account: str
    admin_level: str = "None"


@dataclass(slots=True)
class QOS:
    name: str
    description: str = ""
    priority: int = 0
    preempt: list[str] = field(default_factory=list)
    preempt_mode: str = "cluster"
    grace_time: int = 0
    usage_factor: float = 1.0
    flags: list[str] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)

    @property
    def deny_on_limit(self) -> bool:
        return any(f.lower() == "denyonlimit" for f in self.flags)


# --- rows <-> objects ---------------------------------------------------------------------


def limits_from_row(row: dict[str, Any]) -> Limits:
    kw: dict[str, Any] = {}
    for name in _TRES_LIMITS:
        if name in row:
            kw[name] = tres.parse(row[name] or "")
    for name in _INT_LIMITS:
        if name in row:
            kw[name] = row[name]
    return Limits(**kw)


def limits_to_row(lim: Limits, qos: bool = False) -> dict[str, Any]:
    names = _ROW_LIMITS + (("max_jobs_per_user", "max_submit_per_user", "max_tres_per_user")
                           if qos else ())
    row: dict[str, Any] = {}
    for name in names:
        value = getattr(lim, name)
        row[name] = tres.to_string(value, units=False) if isinstance(value, dict) else value
    return row


def _split(text: str | None) -> list[str]:
    return [p for p in (text or "").split(",") if p]


def assoc_from_row(row: dict[str, Any], user: str = "") -> Association:
    return Association(
        account=row["account"] if "account" in row else row["name"], user=user,
        parent=row.get("parent"), shares=row.get("shares", 1),
        description=row.get("description", ""), organization=row.get("organization", ""),
        qos=_split(row.get("qos")), default_qos=row.get("default_qos") or "",
        priority=row.get("priority"), limits=limits_from_row(row),
        guarantee=tres.parse(row.get("guarantee") or ""),
        automatic=bool(row.get("automatic")) if user else False,
    )


def account_row(a: Association) -> dict[str, Any]:
    return {"name": a.account, "parent": a.parent, "shares": a.shares,
            "description": a.description, "organization": a.organization,
            "guarantee": tres.to_string(a.guarantee, units=False), **_assoc_common(a)}


def association_row(a: Association) -> dict[str, Any]:
    return {"account": a.account, "user": a.user, "shares": a.shares,
            "automatic": a.automatic, **_assoc_common(a)}


def _assoc_common(a: Association) -> dict[str, Any]:
    return {"qos": ",".join(a.qos), "default_qos": a.default_qos, "priority": a.priority,
            **limits_to_row(a.limits)}


def qos_from_row(row: dict[str, Any]) -> QOS:
    return QOS(name=row["name"], description=row.get("description", ""),
               priority=row.get("priority", 0), preempt=_split(row.get("preempt")),
               preempt_mode=row.get("preempt_mode") or "cluster",
               grace_time=row.get("grace_time", 0), usage_factor=row.get("usage_factor", 1.0),
               flags=_split(row.get("flags")), limits=limits_from_row(row))


def qos_row(q: QOS) -> dict[str, Any]:
    return {"name": q.name, "description": q.description, "priority": q.priority,
            "preempt": ",".join(q.preempt), "preempt_mode": q.preempt_mode,
            "grace_time": q.grace_time, "usage_factor": q.usage_factor,
            "flags": ",".join(q.flags), **limits_to_row(q.limits, qos=True)}


def user_row(u: User) -> dict[str, Any]:
    return dataclasses.asdict(u)


def uid_of(name: str, taken: Iterable[int]) -> int:
    """The Unix uid of a user name; a name without a Unix account gets a unique negative
    placeholder (sacctmgr may add users before their accounts exist on the hosts)."""
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return min([-1, *(u - 1 for u in taken if u < 0)])


# --- the tree -----------------------------------------------------------------------------


class Accounts:
    """Accounts, users, associations and QOS as schedd knows them (a mirror of the ledger)."""

    def __init__(self) -> None:
        self.assocs: dict[AssocKey, Association] = {}  # accounts have user ""
        self.users: dict[str, User] = {}
        self.qos: dict[str, QOS] = {}

    @classmethod
    def from_rows(cls, rows: dict[str, list[dict[str, Any]]]) -> Accounts:
        self = cls()
        for r in rows.get("accounts", []):
            a = assoc_from_row(r)
            self.assocs[a.key] = a
        for r in rows.get("associations", []):
            a = assoc_from_row(r, user=r["user"])
            self.assocs[a.key] = a
        for r in rows.get("users", []):
            self.users[r["name"]] = User(r["name"], r["uid"], r["default_account"],
                                         r.get("admin_level") or "None")
        for r in rows.get("qos", []):
            self.qos[r["name"]] = qos_from_row(r)
        return self

    def missing_defaults(self) -> AccountingChange:
        """What a fresh ledger lacks: account root, user root (Administrator), its association,
        QOS normal, as Slurm has them after installation."""
        change = AccountingChange()
        if (ROOT, "") not in self.assocs:
            root = Association(ROOT, description="default root account", organization=ROOT,
                               qos=["normal"])
            self.assocs[root.key] = root
            change.accounts.append(account_row(root))
        if "normal" not in self.qos:
            self.qos["normal"] = QOS("normal", description="Normal QOS default")
            change.qos.append(qos_row(self.qos["normal"]))
        if ROOT not in self.users and not any(u.uid == 0 for u in self.users.values()):
            self.users[ROOT] = User(ROOT, 0, ROOT, "Administrator")
            change.users.append(user_row(self.users[ROOT]))
        if (ROOT, ROOT) not in self.assocs and ROOT in self.users:
            self.assocs[(ROOT, ROOT)] = Association(ROOT, ROOT)
            change.associations.append(association_row(self.assocs[(ROOT, ROOT)]))
        return change

    # --- questions -----------------------------------------------------------------------

    @property
    def enforcing(self) -> bool:
        """Membership is enforced once any account besides root exists."""
        return any(a.user == "" and a.account != ROOT for a in self.assocs.values())

    def accounts(self) -> list[Association]:
        return [a for a in self.assocs.values() if not a.user]

    def user_by_uid(self, uid: int) -> User | None:
        return next((u for u in self.users.values() if u.uid == uid), None)

    def admin_level(self, uid: int) -> str:
        user = self.user_by_uid(uid)
        return user.admin_level if user else "None"

    def parent_key(self, key: AssocKey) -> AssocKey | None:
        a = self.assocs[key]
        if a.user:
            return (a.account, "")
        return (a.parent, "") if a.parent else None

    def chain(self, account: str, user: str) -> list[Association]:
        """The association and its ancestors up to root, nearest first."""
        key: AssocKey | None = (account, user)
        out: list[Association] = []
        while key is not None and key in self.assocs and len(out) < 64:
            out.append(self.assocs[key])
            key = self.parent_key(key)
        return out

    def accounts_of(self, user: str) -> set[str]:
        """The accounts ``user`` has an association in, and their ancestors up to root."""
        out: set[str] = set()
        for a in list(self.assocs.values()):
            if a.user == user:
                out.update(x.account for x in self.chain(a.account, a.user))
        return out

    def allowed_qos(self, account: str, user: str) -> list[str]:
        for a in self.chain(account, user):
            if a.qos:
                return a.qos
        return ["normal"]

    def default_qos(self, account: str, user: str) -> str:
        for a in self.chain(account, user):
            if a.default_qos:
                return a.default_qos
        allowed = self.allowed_qos(account, user)
        return "normal" if "normal" in allowed or not allowed else allowed[0]

    def children(self, account: str) -> tuple[list[Association], list[Association]]:
        """(user associations, sub-accounts) of an account, each by name."""
        users = sorted((a for a in self.assocs.values() if a.account == account and a.user),
                       key=lambda a: a.user)
        subs = sorted((a for a in self.assocs.values() if not a.user and a.parent == account),
                      key=lambda a: a.account)
        return users, subs

    def tree_order(self) -> list[tuple[int, Association]]:
        """Every association with its depth, in sacctmgr's and sshare's order: an account,
        then its users, then its sub-accounts (each by name)."""
        out: list[tuple[int, Association]] = []

        def walk(account: str, depth: int) -> None:
            out.append((depth, self.assocs[(account, "")]))
            users, subs = self.children(account)
            out.extend((depth + 1, u) for u in users)
            for sub in subs:
                walk(sub.account, depth + 1)

        if (ROOT, "") in self.assocs:
            walk(ROOT, 0)
        return out

    # --- submission ----------------------------------------------------------------------

    def resolve(self, user: str, requested_account: str, requested_qos: str,
                ) -> tuple[str, str, AccountingChange | None]:
        """The job's account and QOS, or AccountsError with Slurm's submit error. Out of the
        box (nothing but root) the user's association under root is created on the fly: the
        returned change must be committed with the job."""
        change = None
        if not self.enforcing:
            account = requested_account or ROOT
            if account != ROOT:
                raise AccountsError(INVALID_ACCOUNT)
            if (ROOT, user) not in self.assocs:
                change = self.auto_associate(user)
        else:
            known = self.users.get(user)
            account = requested_account or (known.default_account if known else "")
            if not account or (account, user) not in self.assocs:
                raise AccountsError(INVALID_ACCOUNT)
        qos = requested_qos or self.default_qos(account, user)
        if qos not in self.qos or qos not in self.allowed_qos(account, user):
            raise AccountsError(INVALID_QOS)
        return account, qos, change

    def auto_associate(self, user: str) -> AccountingChange:
        change = AccountingChange()
        if user not in self.users:
            self.users[user] = User(user, uid_of(user, (u.uid for u in self.users.values())),
                                    ROOT)
            change.users.append(user_row(self.users[user]))
        self.assocs[(ROOT, user)] = Association(ROOT, user, automatic=True)
        change.associations.append(association_row(self.assocs[(ROOT, user)]))
        return change

    def join(self, user: str, wanted: list[str], default: str,
             change: AccountingChange) -> None:
        """What an administrator adding ``user`` to the accounts ``wanted`` (``sacctmgr add
        user``) does to the user's automatic root association, added to ``change``: with root
        among ``wanted`` it becomes the administrator's and stays; else, once a real account
        is among them, it is deleted (jobs without -A then go to the real account, ``-A root``
        is refused), and a DefaultAccount of root moves to ``default`` if it is among the real
        ones, else to the first. The caller adds the new associations themselves."""
        auto = self.assocs.get((ROOT, user))
        known = self.users.get(user)
        if auto is None or not auto.automatic or known is None:
            return
        if ROOT in wanted:
            auto.automatic = False
            change.associations.append(association_row(auto))
            return
        real = [a for a in wanted if a != ROOT]
        if not real:
            return
        del self.assocs[auto.key]
        change.delete_associations.append(auto.key)
        if known.default_account == ROOT:
            known.default_account = default if default in real else real[0]
            change.users.append(user_row(known))

    def submit_violation(self, account: str, user: str, qos_name: str, new_jobs: int,
                         counts: SubmitCounts) -> str:
        """The reason a submission breaks a submit-count limit (MaxSubmitJobs, GrpSubmitJobs,
        QOS MaxSubmitJobsPerUser/GrpSubmitJobs), or ''."""
        qos = self.qos.get(qos_name)
        if qos is not None:
            lim = qos.limits
            if (lim.max_submit_per_user is not None
                    and counts.qos_user.get((qos_name, user), 0) + new_jobs
                    > lim.max_submit_per_user):
                return "QOSMaxSubmitJobPerUserLimit"
            if (lim.grp_submit_jobs is not None
                    and counts.qos.get(qos_name, 0) + new_jobs > lim.grp_submit_jobs):
                return "QOSGrpSubmitJobsLimit"
        chain = self.chain(account, user)
        max_submit = next((a.limits.max_submit_jobs for a in chain
                           if a.limits.max_submit_jobs is not None), None)
        if chain and max_submit is not None:
            if counts.own.get(chain[0].key, 0) + new_jobs > max_submit:
                return "AssocMaxSubmitJobLimit"
        for a in chain:
            if (a.limits.grp_submit_jobs is not None
                    and counts.subtree.get(a.key, 0) + new_jobs > a.limits.grp_submit_jobs):
                return "AssocGrpSubmitJobsLimit"
        return ""

    def count_jobs(self, jobs: Iterable[tuple[str, str, str]]) -> SubmitCounts:
        """Pending and running jobs, given as (account, user, qos), by association."""
        counts = SubmitCounts()
        for account, user, qos in jobs:
            chain = self.chain(account, user)
            if chain:
                counts.own[chain[0].key] = counts.own.get(chain[0].key, 0) + 1
            for a in chain:
                counts.subtree[a.key] = counts.subtree.get(a.key, 0) + 1
            counts.qos[qos] = counts.qos.get(qos, 0) + 1
            counts.qos_user[(qos, user)] = counts.qos_user.get((qos, user), 0) + 1
        return counts

    # --- the core's view -----------------------------------------------------------------

    def limit_table(self, tres_mins: dict[AssocKey, dict[str, float]]) -> LimitTable:
        """What ``scheduler/limits.py`` needs: each association's own limits and usage."""
        table = LimitTable()
        for key, a in self.assocs.items():
            table.assocs[key] = AssocLimits(a.account, a.user, self.parent_key(key), a.limits,
                                            dict(tres_mins.get(key, {})))
        for name, q in self.qos.items():
            table.qos[name] = QOSLimits(name, q.limits, q.deny_on_limit)
        return table

    def has_limits(self) -> bool:
        empty = Limits()
        return (any(a.limits != empty for a in self.assocs.values())
                or any(q.limits != empty for q in self.qos.values()))


@dataclass(slots=True)
class SubmitCounts:
    own: dict[AssocKey, int] = field(default_factory=dict)
    subtree: dict[AssocKey, int] = field(default_factory=dict)
    qos: dict[str, int] = field(default_factory=dict)
    qos_user: dict[tuple[str, str], int] = field(default_factory=dict)


def deny_on_limit_reason(accounts: Accounts, view: PendingJob) -> str:
    """With the QOS flag DenyOnLimit, a job over a per-job limit (MaxWall, MaxTRESPerJob of
    the QOS or of its association, inherited) is rejected at submit instead of pending."""
    qos = accounts.qos.get(view.qos)
    if qos is None or not qos.deny_on_limit:
        return ""
    request = pending_tres(view)
    reason = per_job_reason("QOS", qos.limits.max_wall, qos.limits.max_tres_per_job, view,
                            request)
    if reason:
        return reason
    chain = accounts.chain(view.account, view.user)
    max_wall = next((a.limits.max_wall for a in chain if a.limits.max_wall is not None), None)
    max_tres = next((a.limits.max_tres_per_job for a in chain if a.limits.max_tres_per_job), {})
    return per_job_reason("Assoc", max_wall, max_tres, view, request)
