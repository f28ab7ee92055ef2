"""Planning off the loop: forecasts and the shape advisor in one worker thread, users in turn.

``kiln why`` of a job far back in the queue and ``sbatch --test-only`` re-run the scheduler
core several times (the p50 and p90 plans, then one plan per nearby shape:
``reports/advisor.py``): 0.4-1 s at 2,000 pending jobs on 64 nodes. On schedd's one thread
that held every other user for as long (issue 12). The planning is pure (a snapshot in, an
answer out), so it need not run there:

- the handler takes the snapshot on the loop (as the cycle does: ``lifecycle/planner.py``),
  with everything the planning reads from state copied into it (``Planner.frozen``), and
  hands a function of that copy to ``submit``; the request is then a long request
  (``localsock.Work``) that is *parked*: the loop neither steps it nor polls for it until the
  worker is done (``Ticket.done``), and is woken by a byte on ``fileno()``;
- one worker thread runs the functions, one at a time, taking the users in turn (round robin
  by owner: the uid of a request's caller, "schedd" for the forecast timer), so one user's
  twenty ``--test-only`` wait behind each other, not in front of another user's one;
- the queue is bounded: ``PER_USER`` of one owner waiting or running, ``MAX_WAITING`` in
  all; one more is refused at once in one line (``RequestError``, code ``again``).

The worker holds the GIL only while it computes, and CPython hands the GIL over to a thread
that waits for it every ``sys.getswitchinterval()``: a request that comes meanwhile waits
that long, not the whole plan. The default 5 ms is paid at each of the loop's blocking calls
(a poll, a send), so while a plan runs the interval is ``PLANNING_SWITCH`` (0.5 ms). On the
hostile-user bench the bystander's API p99 was 49 ms without the advisor attack and 104-139
ms with it at 5 ms, 93-108 ms at 0.5 ms (one quiet run each: docs/benchmarks.md).
The loop's own work stays on the loop: what the worker returns is applied there
(``Ticket.then``, or the generator that parked, resumed by the loop).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from kiln.wire import protocol
from schedd.requesterror import RequestError

log = logging.getLogger("schedd.offload")

PLANNING_SWITCH = 0.0005  # s: sys.setswitchinterval while the worker plans
PER_USER = 4  # planning requests of one owner waiting or running
MAX_WAITING = 64  # ... of everyone

Owner = int | str  # a caller's uid, or "schedd" for the daemon's own timers


@dataclass(slots=True, eq=False)
class Ticket:
    """One function for the worker; ``done`` once ``result`` (or ``error``) is set."""

    owner: Owner
    fn: Callable[[], Any]
    then: Callable[[Ticket], None] | None = None  # run on the loop once done (``collect``)
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    cancelled: bool = field(default=False)  # its client went away: skipped if not started


class Offload:
    """The worker and its queue. ``submit`` and ``collect`` are called on the loop only."""

    def __init__(self, per_user: int = PER_USER, max_waiting: int = MAX_WAITING):
        self.per_user, self.max_waiting = per_user, max_waiting
        self._queues: OrderedDict[Owner, deque[Ticket]] = OrderedDict()
        self._running: Ticket | None = None
        self._finished: deque[Ticket] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def fileno(self) -> int:
        """Readable when a ticket is done: the loop then calls ``collect``."""
        return self._wake_r

    def submit(self, owner: Owner, fn: Callable[[], Any],
               then: Callable[[Ticket], None] | None = None) -> Ticket:
        """Queue ``fn`` for the worker, behind the other requests of ``owner``; refused in one
        line when the owner or the queue is full."""
        with self._cond:
            mine = sum(not t.cancelled for t in self._queues.get(owner, ())) + (
                self._running is not None and self._running.owner == owner)
            if mine >= self.per_user:
                raise RequestError(f"too many forecasts of yours waiting (at most "
                                   f"{self.per_user}); try again once one is answered",
                                   protocol.E_AGAIN)
            if sum(not t.cancelled for q in self._queues.values() for t in q) \
                    >= self.max_waiting:
                raise RequestError(f"schedd's forecast queue is full ({self.max_waiting} "
                                   "waiting); try again", protocol.E_AGAIN)
            ticket = Ticket(owner, fn, then)
            self._queues.setdefault(owner, deque()).append(ticket)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="kiln-planning",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()
        return ticket

    def busy(self, owner: Owner) -> bool:
        """Has ``owner`` a request waiting or running?"""
        with self._cond:
            return bool(self._queues.get(owner)) or (
                self._running is not None and self._running.owner == owner)

    def collect(self) -> None:
        """On the loop, when ``fileno`` is readable: the finished tickets' ``then``."""
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            with self._cond:
                if not self._finished:
                    return
                ticket = self._finished.popleft()
            if ticket.then is not None:
                try:
                    ticket.then(ticket)
                except Exception:  # noqa: BLE001 - a forecast must never stop the loop
                    log.exception("applying a forecast failed")

    def close(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
            if self._thread.is_alive():  # mid-plan: its wake-up must not hit a reused fd
                return
        os.close(self._wake_r)
        os.close(self._wake_w)

    # --- the worker thread ------------------------------------------------------------------

    def _next(self) -> Ticket | None:
        """The first owner's first ticket; the owner goes to the back of the line."""
        with self._cond:
            while not self._stopping:
                while self._queues:
                    owner, queue = next(iter(self._queues.items()))
                    ticket = queue.popleft()
                    del self._queues[owner]
                    if queue:
                        self._queues[owner] = queue  # behind everyone else now
                    if not ticket.cancelled:
                        self._running = ticket
                        return ticket
                self._cond.wait()
            return None

    def _work(self) -> None:
        while (ticket := self._next()) is not None:
            usual = sys.getswitchinterval()
            sys.setswitchinterval(PLANNING_SWITCH)  # the loop waits less for the GIL
            try:
                ticket.result = ticket.fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the loop, never lost
                ticket.error = exc
            finally:
                sys.setswitchinterval(usual)
            with self._cond:
                self._running = None
                ticket.done = True
                self._finished.append(ticket)
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:  # the loop has a wake-up unread already
                pass
            except OSError:  # closed: schedd is stopping
                return


def wait(ticket: Ticket) -> Generator[Ticket, None, Any]:
    """In a handler written as a generator (``daemon.Slices``): park the request until the
    worker is done, then its result (or its exception, raised here on the loop)."""
    yield ticket
    if ticket.error is not None:
        raise ticket.error
    return ticket.result
