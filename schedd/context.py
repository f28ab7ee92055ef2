"""What a request handler and a lifecycle transition may use: the ``Context`` and ``RequestError``.

A handler is ``handle(ctx, caller, body) -> reply body``. It validates what it was given (the
envelope and every field were checked by ``kiln.wire.protocol`` already), changes state only
through ``ctx.state`` (which commits to the ledger before memory), and raises ``RequestError``
for anything the caller did wrong: the daemon turns that into an error reply.

Kept out of ``schedd/handlers/`` so that the lifecycle, which handlers call, never imports the
handlers package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kiln.wire import protocol

if TYPE_CHECKING:  # below this module in the tiers (nothing there imports schedd.context)
    from kiln.config import Config
    from schedd.domain.steps import StepTable
    from schedd.state import State


class RequestError(Exception):
    """The caller asked for something that cannot be done; ``message`` is Slurm's text."""

    def __init__(self, message: str, code: str = protocol.E_INVALID):
        super().__init__(message)
        self.code = code
        self.message = message


class Context(Protocol):
    cfg: Config
    state: State
    steps: StepTable
    # the lifecycle's own objects (typed as Any here: schedd.lifecycle imports this module)
    agents: Any  # lifecycle.agents.AgentRegistry
    preemption: Any  # lifecycle.preemption.Tracker
    planner: Any  # lifecycle.planner.Planner
    diag: Any  # reports.diag.SchedulerDiag: the cycles' figures (sdiag)
    offload: Any  # offload.Offload: planning off the loop, users in turn

    def now(self) -> float: ...

    def wake_scheduler(self) -> None: ...
