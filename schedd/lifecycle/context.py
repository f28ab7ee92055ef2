"""What a request handler and a lifecycle transition are handed: the ``Context`` and ``RequestError``.

A handler is ``handle(ctx, caller, body) -> reply body``. It validates what it was given (the
envelope and every field were checked by ``kiln.wire.protocol`` already), changes state only
through ``ctx.state`` (which commits to the ledger before memory), and raises ``RequestError``
for anything the caller did wrong: the daemon turns that into an error reply.

``Context`` is the services object the daemon builds once and hands to every handler, timer
and transition (never the daemon itself): each member typed, every one always present. Its
types are named for the type checker only (``TYPE_CHECKING``), and none of the modules they
live in imports this one: the members' classes (``Pace``, ``victims.Tracker``, the idle-GPU
``Watch``, ``RequestError``) sit in modules of their own below the code that acts with a
Context, so even the type checker's imports make no circle (import-linter counts them).
In ``lifecycle/``, which handlers call, so that it never imports the handlers package.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schedd.requesterror import RequestError

__all__ = ["Context", "RequestError"]  # RequestError: where handlers have always found it

if TYPE_CHECKING:  # for the type checker only; no module named here imports this one
    from kiln.config import Config
    from schedd.domain.steps import StepTable
    from schedd.lifecycle.agents import AgentRegistry
    from schedd.lifecycle.mail import Outbox
    from schedd.lifecycle.pace import Pace
    from schedd.lifecycle.planner import Planner
    from schedd.lifecycle.victims import Tracker
    from schedd.offload import Offload
    from schedd.reports.diag import SchedulerDiag
    from schedd.reports.metrics import SchedulerMetrics
    from schedd.state import State


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
