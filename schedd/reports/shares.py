"""The fair-share tree as sshare shows it: every association in sacctmgr's order with the
numbers the priority uses (raw and normalised shares, raw, normalised and effective usage,
the fair-share factor and Fair Tree's LevelFS).

The factor itself is the scheduler core's (``scheduler/fairshare.factors``); the rest are
Slurm's sshare columns, computed here from the same decayed usage, once, for the handler that
answers ``sshare`` (and anyone else who wants the figures) to lay out.
"""

from __future__ import annotations

from typing import Any

from kiln.slurm import tres
from schedd.domain.accounts import ROOT, Accounts, Association
from schedd.scheduler import fairshare
from schedd.scheduler.snapshot import AssociationView, AssocKey


def share_rows(accounts: Accounts, views: list[AssociationView]) -> list[dict[str, Any]]:
    """One row per association of ``accounts`` (tree order), its usage from ``views``."""
    by_key = {(v.account, v.user): v for v in views}
    factors = fairshare.factors(views)
    order = accounts.tree_order()
    subtree = subtree_usage(accounts, order, by_key)
    total = subtree.get((ROOT, ""), 0.0)
    norm = normalised_shares(accounts)
    rows = []
    for depth, a in order:
        raw = subtree[a.key]
        rows.append({
            "account": a.account, "user": a.user, "depth": depth,
            "raw_shares": a.shares if a.key != (ROOT, "") else None,
            "norm_shares": norm.get(a.key, 0.0), "raw_usage": raw,
            "norm_usage": raw / total if total > 0 else 0.0,
            "effective_usage": effective_usage(a, accounts, subtree, total),
            "fairshare": factors.get(a.key) if a.user else None,
            "level_fs": level_fs(a, accounts, subtree, norm),
            "grp_tres_mins": tres.to_string(a.limits.grp_tres_mins),
            "uid_user": a.user,
        })
    return rows


def subtree_usage(accounts: Accounts, order: list[tuple[int, Association]],
                  by_key: dict[AssocKey, AssociationView]) -> dict[AssocKey, float]:
    """Each association's usage with its descendants' (an account's RawUsage)."""
    subtree: dict[AssocKey, float] = {}
    for _depth, a in reversed(order):
        own = by_key[a.key].usage if a.key in by_key else 0.0
        kids = [k.key for k in accounts.children(a.account)[0] + accounts.children(
            a.account)[1]] if not a.user else []
        subtree[a.key] = own + sum(subtree.get(k, 0.0) for k in kids)
    return subtree


def normalised_shares(accounts: Accounts) -> dict[AssocKey, float]:
    """Shares over the siblings' shares (Slurm's NormShares: the level's, not the path's)."""
    out: dict[AssocKey, float] = {}
    for _d, a in accounts.tree_order():
        if a.key == (ROOT, ""):
            continue
        parent = accounts.parent_key(a.key)
        if parent is None:
            continue
        users, subs = accounts.children(parent[0])
        total = sum(s.shares for s in users + subs) or 1
        out[a.key] = a.shares / total
    return out


def effective_usage(a: Association, accounts: Accounts, subtree: dict[AssocKey, float],
                    total: float) -> float:
    """Slurm's EffectvUsage: the association's usage over its parent's (1 for root)."""
    if a.key == (ROOT, ""):
        return 1.0
    parent = accounts.parent_key(a.key)
    base = subtree.get(parent, 0.0) if parent else total
    return subtree[a.key] / base if base > 0 else 0.0


def level_fs(a: Association, accounts: Accounts, subtree: dict[AssocKey, float],
             norm: dict[AssocKey, float]) -> float | str:
    """Fair Tree's LevelFS: NormShares / EffectvUsage ("inf" without usage, "" for root)."""
    if a.key == (ROOT, ""):
        return ""
    eff = effective_usage(a, accounts, subtree, subtree.get((ROOT, ""), 0.0))
    return norm.get(a.key, 0.0) / eff if eff > 0 else "inf"
