"""``[agent] health_check_node_state`` (Slurm's HealthCheckNodeState): which node states a
health check runs in, and CYCLE's spreading of the first check (agentd/health.py)."""

from __future__ import annotations

import pytest

from agentd.health import HealthCheck
from kiln.config import ConfigError, health_check_states


def _check(states: str, node: str = "node1", interval: float = 10.0) -> HealthCheck:
    return HealthCheck("/bin/true", interval, node, node_states=health_check_states(states))


def test_words_are_slurms_any_case_comma_separated() -> None:
    assert health_check_states("idle, Mixed,CYCLE") == {"IDLE", "MIXED", "CYCLE"}
    assert health_check_states("ANY") == {"ANY"}


@pytest.mark.parametrize("bad", ["", "busy", "IDLE,,MIXED", 3])
def test_other_words_are_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"health_check_node_state: a comma-separated list"):
        health_check_states(bad)


@pytest.mark.parametrize(("states", "alloc", "drained", "runs"), [
    ("ANY", "ALLOCATED", True, True),
    ("IDLE", "IDLE", False, True), ("IDLE", "IDLE", True, True),
    ("NONDRAINED_IDLE", "IDLE", False, True), ("NONDRAINED_IDLE", "IDLE", True, False),
    ("IDLE", "MIXED", False, False), ("MIXED", "MIXED", False, True),
    ("ALLOC", "ALLOCATED", False, True), ("ALLOC", "MIXED", False, False),
    ("IDLE,MIXED", "ALLOCATED", False, False), ("CYCLE", "ALLOCATED", False, True),
])
def test_eligible_by_the_nodes_state(states: str, alloc: str, drained: bool,
                                     runs: bool) -> None:
    check = _check(states)
    check.node_state = (alloc, drained)
    assert check.eligible() is runs


def test_only_a_filter_asks_schedd_for_the_state() -> None:
    assert not _check("ANY").wants_state
    assert not _check("CYCLE").wants_state
    assert _check("ALLOC,CYCLE").wants_state


class _Counted(HealthCheck):
    """A check that counts its runs instead of running a program."""

    runs = 0

    def _run(self) -> None:
        self.runs += 1


def _counted(states: str, node: str = "node1", interval: float = 10.0) -> _Counted:
    return _Counted("/bin/true", interval, node, node_states=health_check_states(states))


def _runs(check: _Counted, now: float) -> bool:
    before = check.runs
    check.tick(now)
    if check._thread is not None:
        check._thread.join()
    return check.runs > before


def test_a_filtered_check_waits_for_schedds_word_then_skips_a_round_it_is_not_in() -> None:
    check = _counted("ALLOC")
    assert not _runs(check, 100.0)  # no word on the node's state yet: nothing consumed
    check.node_state = ("IDLE", False)
    assert not _runs(check, 100.5)  # idle: this round is skipped
    check.node_state = ("ALLOCATED", False)
    assert not _runs(check, 105.0)  # the next round is an interval after the skipped one
    assert _runs(check, 110.6)
    assert not _runs(check, 111.0)


def test_without_a_filter_every_interval_runs() -> None:
    check = _counted("ANY")
    assert _runs(check, 0.0) and not _runs(check, 9.0) and _runs(check, 10.0)


def test_cycle_spreads_the_first_checks_of_a_cluster_over_the_interval() -> None:
    firsts = []
    for i in range(50):
        check = _counted("CYCLE", node=f"node{i}", interval=100.0)
        firsts.append(next(t for t in range(0, 102) if _runs(check, float(t))))
    assert all(0 <= t <= 100 for t in firsts)
    assert len(set(firsts)) > 25  # spread, not all at once
    assert min(firsts) < 30 and max(firsts) > 70
