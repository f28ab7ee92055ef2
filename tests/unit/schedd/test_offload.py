"""schedd/offload.py: planning off the loop, one worker, owners in turn, a bounded queue."""

from __future__ import annotations

import json
import select
import threading
from collections.abc import Iterator

import pytest

from kiln.wire import protocol
from schedd.lifecycle.context import RequestError
from schedd.offload import Offload, Ticket, wait


@pytest.fixture
def worker() -> Iterator[Offload]:
    off = Offload(per_user=3, max_waiting=5)
    yield off
    off.close()


def _finish(off: Offload, tickets: list[Ticket]) -> None:
    """Collect as the loop does (woken by the worker's byte) until every ticket is done."""
    while not all(t.done for t in tickets):
        assert select.select([off.fileno()], [], [], 30)[0], "the worker never woke the loop"
        off.collect()


def _gate(off: Offload) -> threading.Event:
    """A first request (of owner "gate") that holds the worker until the event is set."""
    gate, entered = threading.Event(), threading.Event()
    off.submit("gate", lambda: (entered.set(), gate.wait(30)))
    assert entered.wait(30)
    return gate


def test_owners_take_turns_whatever_their_number_of_requests(worker: Offload) -> None:
    gate = _gate(worker)
    order: list[str] = []
    tickets = [worker.submit(owner, lambda owner=owner: order.append(owner))
               for owner in (1000, 1000, 1000, 2000)]
    gate.set()
    _finish(worker, tickets)
    assert order == [1000, 2000, 1000, 1000]


def test_one_owner_is_bounded_and_told_in_one_line(worker: Offload) -> None:
    gate = _gate(worker)
    for _ in range(3):
        worker.submit(1000, lambda: None)
    with pytest.raises(RequestError) as refused:
        worker.submit(1000, lambda: None)
    assert refused.value.code == protocol.E_AGAIN
    assert refused.value.message == ("too many forecasts of yours waiting (at most 3); try "
                                     "again once one is answered")
    worker.submit(2000, lambda: None)  # another user is not
    worker.submit(2000, lambda: None)
    with pytest.raises(RequestError) as full:  # 5 waiting in all
        worker.submit(3000, lambda: None)
    assert full.value.message == "schedd's forecast queue is full (5 waiting); try again"
    gate.set()


def test_a_cancelled_request_is_skipped_and_frees_its_place(worker: Offload) -> None:
    gate = _gate(worker)
    ran: list[int] = []
    gone = [worker.submit(1000, lambda: ran.append(1)) for _ in range(3)]
    for ticket in gone:
        ticket.cancelled = True
    kept = worker.submit(1000, lambda: ran.append(2))
    gate.set()
    _finish(worker, [kept])
    assert ran == [2]


def test_results_errors_and_then_come_back_on_the_loop(worker: Offload) -> None:
    loop = threading.get_ident()
    seen: list[tuple[int, object]] = []
    good = worker.submit(1000, lambda: threading.get_ident(),
                         then=lambda t: seen.append((threading.get_ident(), t.result)))
    bad = worker.submit(1000, lambda: 1 / 0)
    _finish(worker, [good, bad])
    assert good.result != loop  # computed by the worker
    assert seen == [(loop, good.result)]  # applied on the loop
    gen = wait(bad)
    assert next(gen) is bad  # parks on the ticket, then raises its error on the loop
    with pytest.raises(ZeroDivisionError):
        next(gen)


def test_a_request_waiting_on_the_worker_is_parked_until_it_is_done(worker: Offload) -> None:
    from kiln.wire.localsock import joined
    from schedd.daemon import Slices

    gate = _gate(worker)
    ticket = worker.submit(1000, lambda: {"n": 1})

    def handler() -> Iterator[Ticket]:
        return (yield from wait(ticket))

    work = Slices(7, handler())  # type: ignore[arg-type]
    assert work.step() is None and work.parked  # neither stepped nor polled for meanwhile
    gate.set()
    _finish(worker, [ticket])
    assert not work.parked
    reply = None
    while reply is None:
        reply = work.step()
    assert json.loads(joined(reply)) == {"v": protocol.VERSION, "id": 7, "ok": True,
                                            "body": {"n": 1}}
