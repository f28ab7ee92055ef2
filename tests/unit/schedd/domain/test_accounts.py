"""Automatic root associations (issue 31, item 4): the one a first submission makes on a cluster
with no account but root goes once an administrator adds the user to a real account, unless the
administrator keeps it; migration 0013 classifies and tidies the ledgers made before."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from schedd.domain.accounts import (
    INVALID_ACCOUNT,
    ROOT,
    Accounts,
    AccountsError,
    Association,
    User,
    account_row,
    association_row,
)
from schedd.ledger.engine import make_engine
from schedd.ledger.migrate import alembic_config, upgrade
from schedd.ledger.records import AccountingChange
from schedd.ledger.store import Store


def _cluster_with_a_newcomer() -> Accounts:
    """ann submitted when root was the only account; then the admin added account physics."""
    accounts = Accounts()
    accounts.missing_defaults()
    assert accounts.resolve("ann", "", "")[0] == ROOT
    accounts.assocs[("physics", "")] = Association("physics", parent=ROOT)
    return accounts


def _add(accounts: Accounts, user: str, wanted: list[str], default: str = "") -> AccountingChange:
    """What sacctmgr add user does to the tree: the rule, then the new associations."""
    change = AccountingChange()
    accounts.join(user, wanted, default, change)
    for account in wanted:
        accounts.assocs.setdefault((account, user), Association(account, user))
    return change


def test_the_first_submission_makes_an_automatic_association() -> None:
    accounts = _cluster_with_a_newcomer()
    assert accounts.assocs[(ROOT, "ann")].automatic
    assert not accounts.assocs[(ROOT, ROOT)].automatic  # the fresh ledger's own
    row = association_row(accounts.assocs[(ROOT, "ann")])
    assert row["automatic"] is True
    again = Accounts.from_rows({"accounts": [account_row(accounts.assocs[(ROOT, "")])],
                                "associations": [row]})
    assert again.assocs[(ROOT, "ann")].automatic


def test_a_real_account_replaces_the_automatic_root_association() -> None:
    accounts = _cluster_with_a_newcomer()
    assert accounts.resolve("ann", ROOT, "")[0] == ROOT  # still hers before the admin acts
    change = _add(accounts, "ann", ["physics"])
    assert change.delete_associations == [(ROOT, "ann")]
    assert [(u["name"], u["default_account"]) for u in change.users] == [("ann", "physics")]
    assert (ROOT, "ann") not in accounts.assocs
    assert accounts.resolve("ann", "", "")[:2] == ("physics", "normal")
    with pytest.raises(AccountsError, match=INVALID_ACCOUNT):
        accounts.resolve("ann", ROOT, "")


def test_default_account_names_which_real_account_replaces_root() -> None:
    accounts = _cluster_with_a_newcomer()
    accounts.assocs[("bio", "")] = Association("bio", parent=ROOT)
    _add(accounts, "ann", ["physics", "bio"], default="bio")
    assert accounts.users["ann"].default_account == "bio"


def test_naming_root_keeps_it_as_the_administrators() -> None:
    accounts = _cluster_with_a_newcomer()
    change = _add(accounts, "ann", [ROOT, "physics"])
    assert change.delete_associations == [] and change.users == []
    assert [(a["account"], a["user"], a["automatic"]) for a in change.associations] == [
        (ROOT, "ann", False)]
    assert accounts.resolve("ann", ROOT, "")[0] == ROOT
    assert accounts.users["ann"].default_account == ROOT
    _add(accounts, "ann", ["bio"])  # a later real account leaves the kept one alone
    assert accounts.resolve("ann", ROOT, "")[0] == ROOT


def test_a_root_association_the_admin_added_is_kept() -> None:
    accounts = _cluster_with_a_newcomer()
    accounts.users["bob"] = User("bob", 1002, ROOT)
    accounts.assocs[(ROOT, "bob")] = Association(ROOT, "bob")  # sacctmgr add user bob Account=root
    change = _add(accounts, "bob", ["physics"])
    assert (change.delete_associations, change.users) == ([], [])
    assert accounts.resolve("bob", ROOT, "")[0] == ROOT
    assert accounts.users["bob"].default_account == ROOT  # Slurm keeps a default it was given


# --- migration 0013 -----------------------------------------------------------------------


def _ledger_at_0012(url: str) -> None:
    """root; physics; ann (automatic root only), bob (automatic root, then physics, default
    root), cy (root with Fairshare 5 and physics), dee (physics only, default physics)."""
    engine = make_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0012")
        meta = sa.MetaData()
        meta.reflect(conn)
        accounts, users, assocs = (meta.tables[n] for n in ("accounts", "users", "associations"))
        for name, parent in ((ROOT, None), ("physics", ROOT)):
            conn.execute(accounts.insert().values(name=name, parent=parent, shares=1,
                                                  description=name, organization=name))
        for uid, (name, default) in enumerate(((ROOT, ROOT), ("ann", ROOT), ("bob", ROOT),
                                               ("cy", ROOT), ("dee", "physics"))):
            conn.execute(users.insert().values(name=name, uid=uid, default_account=default,
                                               admin_level="None"))
        for account, user, shares in ((ROOT, ROOT, 1), (ROOT, "ann", 1), (ROOT, "bob", 1),
                                      (ROOT, "cy", 5), ("physics", "cy", 1),
                                      ("physics", "bob", 1), ("physics", "dee", 1)):
            conn.execute(assocs.insert().values(account=account, user=user, shares=shares))
    engine.dispose()


def test_migration_0013_classifies_and_applies_the_rule(empty_ledger: str) -> None:
    url = empty_ledger
    _ledger_at_0012(url)
    upgrade(url)  # kiln db upgrade
    store = Store(url)
    rows = store.load_accounting()
    store.close()
    assocs = {(r["account"], r["user"]): r["automatic"] for r in rows["associations"]}
    assert assocs == {(ROOT, ROOT): False, (ROOT, "ann"): True, (ROOT, "cy"): False,
                      ("physics", "bob"): False, ("physics", "cy"): False,
                      ("physics", "dee"): False}
    defaults = {r["name"]: r["default_account"] for r in rows["users"]}
    assert defaults == {ROOT: ROOT, "ann": ROOT, "bob": "physics", "cy": ROOT,
                        "dee": "physics"}
    accounts = Accounts.from_rows(rows)
    assert accounts.resolve("ann", "", "")[0] == ROOT
    with pytest.raises(AccountsError):
        accounts.resolve("bob", ROOT, "")
    _add(accounts, "ann", ["physics"])  # and the rule goes on from there
    assert (ROOT, "ann") not in accounts.assocs


def test_the_ledger_keeps_which_associations_are_automatic(ledger_store: Store) -> None:
    """Written with the first submission's change, read back at schedd's next start."""
    accounts = Accounts()
    ledger_store.write_accounting(accounts.missing_defaults())
    _, _, change = accounts.resolve("ann", "", "")
    assert change is not None
    ledger_store.write_accounting(change)
    loaded = Accounts.from_rows(ledger_store.load_accounting())
    assert loaded.assocs[(ROOT, "ann")].automatic and not loaded.assocs[(ROOT, ROOT)].automatic
    accounts.assocs[("physics", "")] = Association("physics", parent=ROOT)
    ledger_store.write_accounting(AccountingChange(
        accounts=[account_row(accounts.assocs[("physics", "")])]))
    ledger_store.write_accounting(_add(loaded, "ann", ["physics"]))
    rows = ledger_store.load_accounting()
    assert [(r["account"], r["user"]) for r in rows["associations"]] == [(ROOT, ROOT)]
    assert {r["name"]: r["default_account"] for r in rows["users"]}["ann"] == "physics"
