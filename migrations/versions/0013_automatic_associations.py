"""Automatic root associations: ``associations.automatic``, true for an association kiln made
itself at a user's first submission on a cluster with no account but root. Such an
association goes away once an administrator adds the user to a real account
(``sacctmgr add user U Account=A``); one the administrator added is kept (docs/accounts.md).

Existing rows are classified by what they hold, since the ledger never recorded who made them:
an association under ``root`` of a user other than ``root`` that carries no setting of its own
(Fairshare 1, no QOS, DefaultQOS, Priority or limit) is what a first submission creates, so it is
automatic; anything else (root/root, every association under another account, a root
association an administrator gave a setting) is the administrator's. The rule is then applied to
what the ledger already holds: an automatic root association of a user who also has an
association under another account is deleted, and a DefaultAccount of ``root`` moves to that
user's first other account (the earliest added). Jobs keep their account.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STRINGS = ("qos", "default_qos", "grp_tres", "grp_tres_mins", "max_tres_per_job")
_COUNTS = ("priority", "grp_jobs", "grp_submit_jobs", "max_jobs", "max_submit_jobs", "max_wall")


def upgrade() -> None:
    with op.batch_alter_table("associations") as batch:
        batch.add_column(sa.Column("automatic", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    assoc = sa.table("associations", sa.column("id", sa.Integer), sa.column("account"),
                     sa.column("user"), sa.column("shares", sa.Integer),
                     sa.column("automatic", sa.Boolean),
                     *(sa.column(n) for n in _STRINGS), *(sa.column(n) for n in _COUNTS))
    users = sa.table("users", sa.column("name"), sa.column("default_account"))
    c = assoc.c
    bind = op.get_bind()
    bind.execute(sa.update(assoc).where(
        c.account == "root", c.user != "root", c.shares == 1,
        *(sa.func.coalesce(c[n], "") == "" for n in _STRINGS),
        *(c[n].is_(None) for n in _COUNTS),
    ).values(automatic=True))
    automatic = [r.user for r in bind.execute(
        sa.select(c.user).where(c.account == "root", c.automatic.is_(True)))]
    for user in automatic:
        others = [r.account for r in bind.execute(
            sa.select(c.account).where(c.user == user, c.account != "root").order_by(c.id))]
        if not others:
            continue  # root is the user's only account: the association stays
        bind.execute(sa.delete(assoc).where(c.user == user, c.account == "root"))
        bind.execute(sa.update(users).where(users.c.name == user,
                                            users.c.default_account == "root")
                     .values(default_account=others[0]))


def downgrade() -> None:
    """The column goes; associations the upgrade deleted are not brought back (before 0013 a
    user added to a real account kept the automatic one)."""
    with op.batch_alter_table("associations") as batch:
        batch.drop_column("automatic")
