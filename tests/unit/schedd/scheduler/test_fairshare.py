"""Fair share: Slurm's classic factor over the association tree, TRES billing, decay, and
the daemon's incremental FairShareTree."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.config import SchedulerConfig
from schedd.scheduler.cycle import schedule
from schedd.scheduler.fairshare import FairShareTree, billing, decay, factors, job_factor
from schedd.scheduler.snapshot import AssociationView, NodeView, PendingJob, Snapshot

NOW = 10_000_000.0
WEEK = 7 * 86400


def test_equal_shares_heavy_usage_runs_second() -> None:
    assocs = [AssociationView("alpha", shares=1), AssociationView("beta", shares=1),
              AssociationView("alpha", user="ann", usage=5e6),
              AssociationView("beta", user="bob", usage=1e3)]
    heavy = PendingJob(1, user="ann", account="alpha", submit_time=NOW - 3600)
    light = PendingJob(2, user="bob", account="beta", submit_time=NOW - 60)
    snap = Snapshot(NOW, [NodeView("n", 1, 0)], [], [heavy, light], associations=assocs)
    d = schedule(snap, SchedulerConfig())
    assert [s.job_id for s in d.starts] == [2]
    assert d.reasons == {1: "Resources"}
    assert d.priorities[2] > d.priorities[1]


def test_classic_factor_values() -> None:
    assocs = [AssociationView("a", shares=1, usage=0), AssociationView("b", shares=3, usage=0)]
    f = factors(assocs)
    assert f[("a", "")] == 1.0 and f[("b", "")] == 1.0  # no usage anywhere: all 1
    assocs = [AssociationView("a", shares=1, usage=25), AssociationView("b", shares=3, usage=75)]
    f = factors(assocs)
    # usage in proportion to shares: U_eff == S_norm for both -> 2^-1
    assert f[("a", "")] == pytest.approx(0.5)
    assert f[("b", "")] == pytest.approx(0.5)


def test_user_under_account_inherits_account_usage() -> None:
    assocs = [
        AssociationView("a", shares=1), AssociationView("b", shares=1),
        AssociationView("a", user="u1", usage=100.0), AssociationView("a", user="u2"),
        AssociationView("b", user="u3"),
    ]
    f = factors(assocs)
    # u2 used nothing but its account did: it ranks below u3, whose account is idle
    assert f[("b", "u3")] > f[("a", "u2")] > f[("a", "u1")]
    s_norm, u_norm = 0.5 * 0.5, 0.0
    u_eff = u_norm + (1.0 - u_norm) * 0.5  # parent's U_eff = its U_norm = 1
    assert f[("a", "u2")] == pytest.approx(2 ** (-u_eff / s_norm))


def test_sub_accounts() -> None:
    assocs = [AssociationView("top"), AssociationView("sub", parent="top"),
              AssociationView("other"), AssociationView("sub", user="x", usage=10.0)]
    f = factors(assocs)
    assert f[("other", "")] > f[("top", "")]
    assert job_factor(f, "sub", "x") == f[("sub", "x")]
    assert job_factor(f, "sub", "nobody") == f[("sub", "")]
    assert job_factor(f, "unknown", "x") == 0.0
    assert job_factor({}, "any", "one") == 0.0


def test_parent_loop_and_missing_parent_end_under_root() -> None:
    assocs = [AssociationView("a", parent="b"), AssociationView("b", parent="a"),
              AssociationView("c", parent="nowhere", usage=5.0),
              AssociationView("a", user="u", usage=1.0)]
    f = factors(assocs)
    assert set(f) == {("a", ""), ("b", ""), ("c", ""), ("a", "u")}
    assert all(0.0 <= v <= 1.0 for v in f.values())
    assert factors(assocs, wanted=[("a", "u")]).keys() >= {("a", "u")}


def test_job_outside_the_tree_has_no_share() -> None:
    assocs = [AssociationView("alpha"), AssociationView("alpha", user="ann")]
    stranger = PendingJob(1, user="zed", account="nowhere", submit_time=NOW - 3600)
    member = PendingJob(2, user="ann", account="alpha", submit_time=NOW - 60)
    snap = Snapshot(NOW, [NodeView("n", 1, 0)], [], [stranger, member], associations=assocs)
    d = schedule(snap, SchedulerConfig())
    assert [s.job_id for s in d.starts] == [2]


def test_billing_sum_and_max_tres() -> None:
    weights = {"cpu": 0.5, "mem": 0.001, "gres/gpu": 4.0, "gres/gpu:a100": 8.0}
    tres = {"cpu": 16, "mem": 64_000, "gres/gpu": 2}
    assert billing(tres, weights, max_tres=False) == 8 + 64 + 8
    assert billing(tres, weights, max_tres=True) == 64
    assert billing({"gres/gpu:a100": 2}, weights, False) == 16
    assert billing({"gres/gpu:h100": 2}, weights, False) == 8


def test_decay_half_life() -> None:
    assert decay(100.0, WEEK, WEEK) == pytest.approx(50.0)
    assert decay(100.0, 2 * WEEK, WEEK) == pytest.approx(25.0)
    assert decay(100.0, WEEK, 0) == 100.0


def test_tree_incremental_usage_and_round_trip() -> None:
    tree = FairShareTree(half_life=WEEK)
    tree.set_association("a", shares=2)
    tree.set_association("b")
    tree.set_association("a", user="ann")
    tree.set_association("b", user="bob")
    tree.add_usage("a", "ann", billing_rate=8.0, start=NOW, end=NOW + 3600)
    ann = tree.assocs[("a", "ann")].usage
    assert ann == pytest.approx(8 * 3600 * math.pow(2, -1800 / WEEK))
    tree.decay_to(NOW + 3600 + WEEK)
    assert tree.assocs[("a", "ann")].usage == pytest.approx(ann / 2)
    f = tree.factors()
    assert f[("b", "bob")] > f[("a", "ann")]
    again = FairShareTree.from_dict(tree.to_dict())
    assert again.to_dict() == tree.to_dict()
    assert again.factors() == f
    assert [v.user for v in again.views()] == ["", "ann", "", "bob"]
    tree.set_association("a", user="ann", shares=5)  # changing shares keeps usage
    assert tree.assocs[("a", "ann")].usage == pytest.approx(ann / 2)
    tree.remove_association("b", "bob")
    assert ("b", "bob") not in tree.factors()


def _classic(views: list[AssociationView]) -> dict:
    """The classic factor straight from its definition (docs/scheduler.md), for a tree without
    loops: the last view of a key stands for it, a missing parent means root."""
    last = {(v.account, v.user): v for v in views}

    def parent(key):
        v = last[key]
        if v.user:
            up = (v.account, "")
        elif v.parent in ("", "root", v.account):
            up = None
        else:
            up = (v.parent, "")
        return up if up in last else None

    def ancestors(key):
        while key is not None:
            yield key
            key = parent(key)

    cluster = sum(v.usage for v in last.values())
    out = {}
    for key in last:
        s_norm, u_eff = 1.0, 0.0
        for k in reversed(list(ancestors(key))):
            siblings = sum(max(last[o].shares, 0) for o in last if parent(o) == parent(k))
            part = max(last[k].shares, 0) / (siblings or 1)
            u_norm = (sum(last[o].usage for o in last if k in ancestors(o)) / cluster
                      if cluster > 0 else 0.0)
            u_eff = u_norm if parent(k) is None else u_norm + (u_eff - u_norm) * part
            s_norm *= part
        out[key] = 2 ** (-u_eff / s_norm) if s_norm > 0 else 0.0
    return out


_NAMES = ["a", "b", "c", "d"]
# an account's parent comes before it in _NAMES (or is root, or missing: "e"): no loops
_VIEW = st.builds(lambda i, up, user, shares, usage: AssociationView(
                      _NAMES[i], parent=(["", "root", "e", *_NAMES])[up % (i + 3)], user=user,
                      shares=shares, usage=usage),
                  st.integers(0, 3), st.integers(0, 6), st.sampled_from(["", "", "u1", "u2"]),
                  st.integers(-1, 4), st.sampled_from([0.0, 1.0, 2.5, 1e6]))
_CHANGE = st.one_of(
    st.tuples(st.just("usage"), st.integers(0, 20), st.floats(0, 1e6)),
    st.tuples(st.just("shares"), st.integers(0, 20), st.integers(-1, 4)),
    st.tuples(st.just("parent"), st.integers(0, 20), st.sampled_from(["", "root", "e"])),
    st.tuples(st.just("add"), st.integers(0, 20), _VIEW),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_VIEW, min_size=1, max_size=12), st.lists(_CHANGE, max_size=8))
def test_factors_follow_the_tree_as_it_changes(views: list[AssociationView],
                                               changes: list) -> None:
    """factors() keeps what the tree's shape gives between calls (the simulator calls it every
    cycle on the same view objects, changing their usage and appending users): after each
    change made in place (usage, shares, parent, a new association, duplicate keys and missing
    parents included) it still gives the classic factor of the tree as it is now, for every
    association and for the ``wanted`` ones."""
    wanted = [("a", "u1"), ("b", ""), ("c", "u2"), ("zz", "")]
    for kind, index, value in [("usage", 0, views[0].usage), *changes]:
        if kind == "add":
            views.append(value)
        else:
            setattr(views[index % len(views)], kind, value)
        expected = _classic(views)
        assert factors(views) == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert factors(tuple(views)) == pytest.approx(expected, rel=1e-9, abs=1e-12)
        some = factors(views, wanted)
        assert {k: some[k] for k in wanted if k in expected} == pytest.approx(
            {k: expected[k] for k in wanted if k in expected}, rel=1e-9, abs=1e-12)
