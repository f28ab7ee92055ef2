"""What a request handler and a lifecycle transition are handed: the ``Context`` and ``RequestError``.

A handler is ``handle(ctx, caller, body) -> reply body``. It validates what it was given (the
envelope and every field were checked by ``kiln.wire.protocol`` already), changes state only
through ``ctx.state`` (which commits to the ledger before memory), and raises ``RequestError``
for anything the caller did wrong: the daemon turns that into an error reply.

``Context`` is the services object the daemon builds once and hands to every handler, timer
and transition (never the daemon itself): each member typed, every one always present. Its
types are named for the type checker only (``TYPE_CHECKING``): at run time this module
imports nothing of schedd, so the lifecycle and the handlers, which import it, stay below it.
Kept out of ``schedd/handlers/`` so that the lifecycle, which handlers call, never imports the
handlers package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kiln.wire import protocol

if TYPE_CHECKING:  # for the type checker only (import-linter: exclude_type_checking_imports)
    from kiln.config import Config
    from schedd.domain.steps import StepTable
    from schedd.lifecycle.agents import AgentRegistry
    from schedd.lifecycle.cycle import Pace
    from schedd.lifecycle.mail import Outbox
    from schedd.lifecycle.planner import Planner
    from schedd.lifecycle.preemption import Tracker
    from schedd.offload import Offload
    from schedd.reports.diag import SchedulerDiag
    from schedd.reports.metrics import SchedulerMetrics
    from schedd.state import State


class RequestError(Exception):
    """The caller asked for something that cannot be done; ``message`` is Slurm's text."""

    def __init__(self, message: str, code: str = protocol.E_INVALID):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(eq=False, slots=True)
class Context:
    cfg: Config
    state: State  # the one door for writes (schedd/state.py)
    steps: StepTable  # srun steps of running jobs (schedd/handlers/srun.py)
    agents: AgentRegistry  # what schedd tells the agents (lifecycle/agents.py)
    preemption: Tracker  # victims in GraceTime (lifecycle/preemption.py)
    planner: Planner  # the one snapshot builder (lifecycle/planner.py)
    mail: Outbox  # --mail-type (lifecycle/mail.py)
    diag: SchedulerDiag  # the cycles' figures (sdiag)
    offload: Offload  # planning off the loop, users in turn
    metrics: SchedulerMetrics | None  # None unless metrics_listen
    pace: Pace  # when the next cycle is due (lifecycle/cycle.py)
    clock: Callable[[], float]

    def now(self) -> float:
        return self.clock()

    def wake_scheduler(self) -> None:
        self.pace.due = True
