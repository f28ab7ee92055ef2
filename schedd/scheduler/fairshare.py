"""Fair share: the association tree, decayed usage, TRES billing and Slurm's classic factor.

Usage is billing x seconds, decayed with a half-life (PriorityDecayHalfLife, 7 days by default)
so last month's burst is forgiven and yesterday's is not. Billing weighs each TRES
(``tres_billing_weights``); with ``billing_max_tres`` (Slurm's PriorityFlags=MAX_TRES) it is the
dominant weighted resource, which is DRF's dominant share when the weights are 1/capacity.

The factor is Slurm's classic one, ``F = 2^(-U_eff / S_norm)``:

- ``S_norm`` = the association's shares over its siblings', times its parent's ``S_norm``;
- ``U_norm`` = its subtree's usage over the whole cluster's;
- ``U_eff`` = ``U_norm`` directly under root, else
  ``U_norm + (U_eff(parent) - U_norm) * shares / siblings' shares``.

``factors()`` is the pure function the core calls on a snapshot's associations;
``FairShareTree`` is the small stateful object the daemon owns, updates incrementally and
persists as a plain dict in the ledger.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import Any

from schedd.scheduler.snapshot import AssociationView, AssocKey

ROOT = "root"



def billing(tres: Mapping[str, float], weights: Mapping[str, float], max_tres: bool) -> float:
    """TRES-weighted billing of an allocation, e.g. ``{"cpu": 8, "mem": 64000, "gres/gpu": 2}``.

    A ``gres/gpu:<type>`` weight applies to that type and replaces the generic ``gres/gpu``
    weight for it. With ``max_tres`` the dominant weighted resource counts, otherwise the sum.
    """
    parts = []
    for name, amount in tres.items():
        weight = weights.get(name)
        if weight is None and name.startswith("gres/gpu:"):
            weight = weights.get("gres/gpu", 0.0)
        parts.append(amount * (weight or 0.0))
    if not parts:
        return 0.0
    return max(parts) if max_tres else sum(parts)


def decay(usage: float, seconds: float, half_life: float) -> float:
    """``usage`` after ``seconds`` of exponential decay (no decay for a half-life of 0)."""
    if half_life <= 0 or seconds <= 0:
        return usage
    return usage * math.pow(2.0, -seconds / half_life)


@dataclass(slots=True, frozen=True)
class _Shape:
    """What ``factors`` derives from the tree's shape alone (who hangs under whom, with how many
    shares), kept while the shape stays the same: between two cycles only the usage moves.

    ``keys`` are the associations in first-seen order, ``pick`` the index of the view that
    stands for each (the last with that key), ``chains`` each one's own key and its ancestors
    in the order its usage is added to their subtrees (a loop of parents is cut after as many
    steps as there are associations)."""

    keys: tuple[AssocKey, ...]
    pick: tuple[int, ...]
    shares: dict[AssocKey, int]
    parent_of: dict[AssocKey, AssocKey | None]
    sibling_shares: dict[AssocKey | None, int]
    chains: tuple[tuple[AssocKey, ...], ...]


_SHAPE = attrgetter("account", "user", "parent", "shares")
_USAGE = attrgetter("usage")


@lru_cache(maxsize=8)
def _shape_of(shape: tuple[tuple[str, str, str, int], ...]) -> _Shape:
    last = {(account, user): i for i, (account, user, _, _) in enumerate(shape)}
    keys = tuple(last)
    limit = len(keys)
    parent_of: dict[AssocKey, AssocKey | None] = {}
    sibling_shares: dict[AssocKey | None, int] = {}
    for key, i in last.items():
        account, user, parent_name, shares = shape[i]
        if user:
            parent: AssocKey | None = (account, "")
        elif not parent_name or parent_name == ROOT or parent_name == account:
            parent = None
        else:
            parent = (parent_name, "")
        if parent is not None and parent not in last:
            parent = None
        parent_of[key] = parent
        sibling_shares[parent] = sibling_shares.get(parent, 0) + max(shares, 0)
    chains = []
    for key in keys:
        chain: list[AssocKey] = []
        k: AssocKey | None = key
        while k is not None and len(chain) <= limit:
            chain.append(k)
            k = parent_of[k]
        chains.append(tuple(chain))
    return _Shape(keys, tuple(last.values()), {k: shape[i][3] for k, i in last.items()},
                  parent_of, sibling_shares, tuple(chains))


def factors(associations: Iterable[AssociationView],
            wanted: Collection[AssocKey] | None = None) -> dict[AssocKey, float]:
    """Slurm's classic fair-share factor of every association (or of the ``wanted`` ones and
    their ancestors), in [0, 1].

    Linear in the tree, and the simulator calls it every cycle, so what depends on the tree's
    shape alone is kept between calls (``_Shape``); the sums of usage are redone every call,
    each in the same order. A missing parent, or a loop of parents, puts the association
    directly under root.
    """
    views = associations if isinstance(associations, list) else list(associations)
    if not views:
        return {}
    tree = _shape_of(tuple(map(_SHAPE, views)))
    parent_of, sibling_shares, shares = tree.parent_of, tree.sibling_shares, tree.shares
    limit = len(tree.keys)
    usages = list(map(_USAGE, views))
    subtree = dict.fromkeys(tree.keys, 0.0)
    cluster = 0.0
    for ancestors, usage in zip(tree.chains, map(usages.__getitem__, tree.pick), strict=True):
        if usage:
            for k in ancestors:
                subtree[k] += usage
            cluster += usage
    out: dict[AssocKey, float] = {}
    norm: dict[AssocKey, tuple[float, float]] = {}  # key -> (S_norm, U_eff)
    for key in tree.keys if wanted is None else (k for k in wanted if k in shares):
        chain = []
        k = key
        while k is not None and k not in norm and len(chain) <= limit:
            chain.append(k)
            k = parent_of[k]
        s_parent, u_parent = norm[k] if k is not None and k in norm else (1.0, 0.0)
        top = k is None or k not in norm  # the chain starts under root
        for k in reversed(chain):
            parent = None if top else parent_of[k]
            top = False
            part = max(shares[k], 0) / (sibling_shares[parent_of[k]] or 1)
            s_norm = s_parent * part
            u_norm = subtree[k] / cluster if cluster > 0 else 0.0
            u_eff = u_norm if parent is None else u_norm + (u_parent - u_norm) * part
            norm[k] = (s_norm, u_eff)
            out[k] = math.pow(2.0, -u_eff / s_norm) if s_norm > 0 else 0.0
            s_parent, u_parent = s_norm, u_eff
    return out


def job_factor(table: Mapping[AssocKey, float], account: str, user: str) -> float:
    """The factor a job gets: its user association's, else its account's, else 0 (a job
    outside the tree has no share)."""
    found = table.get((account, user))
    if found is None:
        found = table.get((account, ""), 0.0)
    return found


@dataclass(slots=True)
class FairShareTree:
    """The daemon's fair-share state: associations with shares and their decayed usage.

    Update it incrementally (``add_usage`` for a running job over an interval, ``decay_to``
    now), hand ``views()`` to the snapshot, persist ``to_dict()`` in the ledger.
    """

    half_life: float = 7 * 86400.0
    last_decay: float = 0.0
    assocs: dict[AssocKey, AssociationView] = field(default_factory=dict)

    def set_association(
        self, account: str, user: str = "", parent: str = "", shares: int = 1, priority: int = 0
    ) -> None:
        """Add or change an association; its usage is kept."""
        old = self.assocs.get((account, user))
        usage = old.usage if old else 0.0
        self.assocs[(account, user)] = AssociationView(
            account=account, parent=parent, user=user, shares=shares, usage=usage,
            priority=priority,
        )

    def remove_association(self, account: str, user: str = "") -> None:
        self.assocs.pop((account, user), None)

    def decay_to(self, now: float) -> None:
        """Decay every usage from the last decay to ``now``."""
        seconds = now - self.last_decay
        if seconds <= 0:
            return
        if self.last_decay > 0:
            for a in self.assocs.values():
                a.usage = decay(a.usage, seconds, self.half_life)
        self.last_decay = now

    def add_usage(self, account: str, user: str, billing_rate: float, start: float,
                  end: float) -> None:
        """Charge ``billing_rate`` x (end - start) to the association, decayed to ``end``.

        The charge is decayed from the interval's midpoint, which is exact to first order and
        the same whether the daemon charges every minute or once at the job's end.
        """
        if end <= start:
            return
        self.decay_to(end)
        key = (account, user) if (account, user) in self.assocs else (account, "")
        a = self.assocs.get(key)
        if a is None:
            a = AssociationView(account=account, user=user)
            self.assocs[key] = a
        charge = billing_rate * (end - start)
        a.usage += decay(charge, (end - start) / 2, self.half_life)

    def views(self) -> list[AssociationView]:
        """What goes into ``Snapshot.associations`` (copies: the snapshot is a value)."""
        return [
            AssociationView(a.account, a.parent, a.user, a.shares, a.usage, a.priority)
            for _k, a in sorted(self.assocs.items())
        ]

    def factors(self) -> dict[AssocKey, float]:
        return factors(self.assocs.values())

    def cycle_factors(self) -> dict[AssocKey, float] | None:
        """The factors as the cycle weighs them (``cycle.ranked_order``): None without an
        association tree, where fair share is the same (1) for every job, not 0 for each."""
        return self.factors() or None

    def to_dict(self) -> dict[str, Any]:
        return {
            "half_life": self.half_life,
            "last_decay": self.last_decay,
            "associations": [
                {"account": a.account, "parent": a.parent, "user": a.user, "shares": a.shares,
                 "usage": a.usage, "priority": a.priority}
                for a in self.views()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FairShareTree:
        tree = cls(half_life=float(data.get("half_life", 7 * 86400.0)),
                   last_decay=float(data.get("last_decay", 0.0)))
        for d in data.get("associations", []):
            a = AssociationView(
                account=str(d["account"]), parent=str(d.get("parent", "")),
                user=str(d.get("user", "")), shares=int(d.get("shares", 1)),
                usage=float(d.get("usage", 0.0)), priority=int(d.get("priority", 0)),
            )
            tree.assocs[(a.account, a.user)] = a
        return tree
