"""The reservation model: windows, member checks, and how nodes and GPUs are chosen
(schedd/domain/reservation.py)."""

from __future__ import annotations

import pytest

from kiln.model import Job, JobState, Node, NodeAllocation, NodeState
from schedd.domain.reservation import (
    BUSY_NODES,
    INVALID_ACCOUNT,
    INVALID_NODE,
    NO_MEMBERS,
    NODE_CONFIG,
    Planner,
    Request,
    Reservation,
    ReservationError,
    check_members,
    next_name,
    window,
)
from tests.builders import node

NOW = 1_000_000.0


def running(job_id: int, node_name: str, gpus: list[int], end: float, resv: str = "") -> Job:
    """A running job on ``node_name`` whose limit ends at ``end``."""
    limit = int(end - (NOW - 60))
    return Job(id=job_id, state=JobState.RUNNING, start_time=NOW - 60, time_limit=limit,
               reservation=resv, allocation=[NodeAllocation(node_name, 8, 1000, gpus)])


def planner(nodes: list[Node], jobs: list[Job] = (), others: list[Reservation] = ()) -> Planner:
    return Planner({n.name: n for n in nodes}, jobs, others,
                   lambda j: j.start_time + j.time_limit)


def test_window_from_duration_or_end() -> None:
    assert window(Request(start_time=NOW + 60, duration=600), NOW) == (NOW + 60, NOW + 660)
    assert window(Request(end_time=NOW + 30), NOW) == (NOW, NOW + 30)
    with pytest.raises(ReservationError):
        window(Request(start_time=NOW + 60, end_time=NOW + 30), NOW)
    with pytest.raises(ReservationError):
        window(Request(), NOW)


def test_members_must_be_named_and_known() -> None:
    with pytest.raises(ReservationError, match=NO_MEMBERS):
        check_members(Request(), ["chem"])
    with pytest.raises(ReservationError, match=INVALID_ACCOUNT):
        check_members(Request(accounts=["nope"]), ["chem"])
    with pytest.raises(ReservationError, match="Invalid flag"):
        check_members(Request(accounts=["chem"], flags=["FOO"]), ["chem"])
    check_members(Request(accounts=["chem"], users=["root"], flags=["MAINT"]), ["chem"])


def test_node_count_takes_free_nodes_in_name_order() -> None:
    p = planner([node("a"), node("b"), node("c")], [running(1, "a", [0], NOW + 3600)])
    held = p.plan(Request(node_cnt=2), NOW + 600, NOW + 1200, "r")
    assert held == {"b": [64, 512_000, 8], "c": [64, 512_000, 8]}


def test_job_ending_before_the_window_does_not_make_a_node_busy() -> None:
    p = planner([node("a")], [running(1, "a", [0], NOW + 300)])
    assert p.plan(Request(node_cnt=1), NOW + 600, NOW + 1200, "r") == {"a": [64, 512_000, 8]}


def test_busy_named_node_is_refused_unless_ignore_jobs() -> None:
    p = planner([node("a")], [running(1, "a", [0], NOW + 3600)])
    with pytest.raises(ReservationError, match=BUSY_NODES):
        p.plan(Request(nodes=["a"]), NOW, NOW + 600, "r")
    held = p.plan(Request(nodes=["a"], flags=["IGNORE_JOBS"]), NOW, NOW + 600, "r")
    assert held == {"a": [64, 512_000, 8]}


def test_unknown_drained_and_too_few_nodes() -> None:
    p = planner([node("a"), node("b", state=NodeState.DRAIN)])
    with pytest.raises(ReservationError, match=INVALID_NODE):
        p.plan(Request(nodes=["zz"]), NOW, NOW + 60, "r")
    with pytest.raises(ReservationError, match=NODE_CONFIG):
        p.plan(Request(node_cnt=2), NOW, NOW + 60, "r")
    assert set(p.plan(Request(node_cnt=2, flags=["MAINT"]), NOW, NOW + 60, "r")) == {"a", "b"}


def test_gpu_count_on_the_fewest_nodes_with_a_share_of_cpus() -> None:
    p = planner([node("a"), node("b")], [running(1, "a", [0, 1], NOW + 3600)])
    held = p.plan(Request(gpus=8), NOW, NOW + 600, "r")
    assert held == {"b": [64, 512_000, 8]}
    held = p.plan(Request(gpus=12), NOW, NOW + 600, "r")
    assert held == {"b": [64, 512_000, 8], "a": [32, 256_000, 4]}
    with pytest.raises(ReservationError, match=BUSY_NODES):
        p.plan(Request(gpus=15), NOW, NOW + 600, "r")
    with pytest.raises(ReservationError, match=NODE_CONFIG):
        p.plan(Request(gpus=17), NOW, NOW + 600, "r")


def test_overlapping_reservations_share_a_node_only_as_far_as_it_goes() -> None:
    first = Reservation("first", NOW, NOW + 600, ["a"], gpus=6,
                        holdings={"a": [48, 384_000, 6]})
    p = planner([node("a")], others=[first])
    assert p.plan(Request(gpus=2), NOW + 300, NOW + 900, "second") == {"a": [16, 128_000, 2]}
    with pytest.raises(ReservationError, match=BUSY_NODES):
        p.plan(Request(gpus=3), NOW + 300, NOW + 900, "second")
    assert p.plan(Request(gpus=8), NOW + 600, NOW + 900, "second") == {"a": [64, 512_000, 8]}


def test_member_jobs_do_not_make_their_own_reservation_busy() -> None:
    p = planner([node("a")], [running(1, "a", [0], NOW + 3600, resv="r")])
    assert p.plan(Request(nodes=["a"]), NOW, NOW + 7200, "r") == {"a": [64, 512_000, 8]}


def test_rows_round_trip_and_membership() -> None:
    r = Reservation("r", NOW, NOW + 60, ["a"], gpus=2, holdings={"a": [16, 1000, 2]},
                    users=["alice"], accounts=["chem"], flags=["MAINT"], partition="gpu")
    assert Reservation.from_row(r.to_row()) == r
    assert r.admits("alice", "other") and r.admits("bob", "chem")
    assert not r.admits("bob", "phys")
    assert r.view().holdings == {"a": (16, 1000, 2)}
    wire = r.to_wire(NOW + 1)
    assert (wire["state"], wire["cpus"], wire["gpu_count"]) == ("ACTIVE", 16, 2)
    assert next_name("root", ["root_1", "root_2"]) == "root_3"


def test_ledger_keeps_reservations_across_restarts(tmp_path) -> None:
    from schedd.ledger.store import Store
    from tests.builders import sqlite_ledger

    url = sqlite_ledger(tmp_path)
    store = Store(url)
    r = Reservation("r", NOW, NOW + 60, ["a"], gpus=2, holdings={"a": [16, 1000, 2]},
                    accounts=["chem"], flags=["IGNORE_JOBS"], partition="gpu", created_by=0,
                    created_at=NOW)
    store.save_reservation(r.to_row(), 0, "create_reservation", NOW)
    r.end_time = NOW + 120
    store.save_reservation(r.to_row(), 0, "update_reservation", NOW + 1)
    store.close()
    store = Store(url)
    assert [Reservation.from_row(row) for row in store.load_reservations()] == [r]
    assert [a.action for a in store.load_audit()] == ["create_reservation",
                                                      "update_reservation"]
    store.delete_reservation("r", 0, NOW + 2)
    assert store.load_reservations() == []
    store.close()


def test_members_added_once_and_taken_out_in_order() -> None:
    from schedd.domain.reservation import edit_members

    assert edit_members(["a", "b"], ["c", "a", "c"], ["b"], "User", "r") == ["a", "c"]
    with pytest.raises(ReservationError, match="^User z is not in reservation r$"):
        edit_members(["a"], [], ["z"], "User", "r")
