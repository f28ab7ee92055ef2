"""The fence's clock: when schedd last proved that it hears this agent.

Each job's supervisor (``agentd/stepd.py``) fences its job once the spool's ``schedd-heard``
file is older than ``fence_timeout``; this module sets that file's time. schedd marks a node
DOWN (and requeues its jobs) ``node_timeout`` after the last heartbeat or registration it
*received*, so what keeps a fence away must be proof of that: schedd's answer to one of them.
The clock is set to when that heartbeat was *sent* — schedd cannot have received it earlier —
so the supervisor's deadline is never later than schedd's.

What does not restart it: the agent's own sends (heard or not), and schedd's commands (a
launch, a signal, a terminate). With a link that fails one way, commands can keep arriving
while schedd hears nothing; counting them would let the old run outlive its node's
``node_timeout`` beside the copy schedd requeued elsewhere.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger("agentd")

RENEWING_OPS = ("register", "heartbeat")  # the requests schedd's node_timeout counts from
MAX_ASKED = 1024  # unanswered heartbeats remembered (an outage's, at one a second or so)


class Lease:
    """Which renewing requests are in flight (message id -> when sent), and the send time of
    the latest one schedd answered: the fence's clock, written through ``touch``."""

    def __init__(self, touch: Callable[[float], None]):
        self._touch = touch  # sets the spool's schedd-heard time (Spool.touch_heard)
        self._asked: OrderedDict[int, float] = OrderedDict()
        self.renewed_at = 0.0  # send time of the latest answered heartbeat or registration

    def asked(self, msg_id: int, sent_at: float) -> None:
        """A heartbeat or registration went out."""
        self._asked[msg_id] = sent_at
        while len(self._asked) > MAX_ASKED:
            self._asked.popitem(last=False)

    def answered(self, msg_id: int, renews: bool) -> None:
        """schedd replied to ``msg_id``; ``renews``: it took it as a sign of life (an accepted
        registration, a heartbeat from a node it knows). The clock moves only forward."""
        sent_at = self._asked.pop(msg_id, None)
        if sent_at is None or not renews or sent_at <= self.renewed_at:
            return
        self.renewed_at = sent_at
        try:
            self._touch(sent_at)
        except OSError as exc:
            log.warning("cannot set the fence's clock in the spool: %s", exc)
