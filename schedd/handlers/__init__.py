"""One module per kind of request; ``CLIENT_HANDLERS``/``AGENT_HANDLERS`` map ops to functions.

A handler is ``handle(ctx, caller, body) -> reply body``. It validates what it was given (the
envelope was checked already), commits through ``ctx.state`` before it answers, and raises
``RequestError`` for anything the caller did wrong: the daemon turns that into an error reply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from schedd import protocol

if TYPE_CHECKING:
    from schedd.agents import AgentRegistry
    from schedd.config import Config
    from schedd.state import State
    from schedd.steps import StepTable


class RequestError(Exception):
    def __init__(self, message: str, code: str = protocol.E_INVALID):
        super().__init__(message)
        self.code = code
        self.message = message


class Context(Protocol):
    cfg: Config
    state: State
    agents: AgentRegistry
    steps: StepTable

    def now(self) -> float: ...

    def wake_scheduler(self) -> None: ...


Handler = Callable[[Context, Any, dict[str, Any]], dict[str, Any]]


def _registry() -> tuple[dict[str, Handler], dict[str, Handler]]:
    from schedd.handlers import (
        accounting,
        accounts,
        agent,
        control,
        insight,
        jobcontrol,
        nodes,
        query,
        reservations,
        steps,
        submit,
    )

    client = {
        "ping": lambda ctx, caller, body: {"pong": True, "time": ctx.now()},
        "submit": submit.submit,
        "query_jobs": query.query_jobs,
        "cancel": control.cancel,
        "hold": control.hold,
        "release": control.release,
        "query_nodes": nodes.query_nodes,
        "query_partitions": nodes.query_partitions,
        "show_config": nodes.show_config,
        "sacctmgr": accounts.sacctmgr,
        "sshare": accounts.sshare,
        "acct_jobs": accounting.acct_jobs,
        "acct_report": accounting.acct_report,
        "step_start": steps.step_start,
        "step_wait": steps.step_wait,
        "step_cancel": steps.step_cancel,
        "job_why": insight.job_why,
        "forecast_stats": insight.forecast_stats,
        "update_job": jobcontrol.update_job,
        "requeue": jobcontrol.requeue,
        "update_node": jobcontrol.update_node,
        "create_reservation": reservations.create_reservation,
        "update_reservation": reservations.update_reservation,
        "delete_reservation": reservations.delete_reservation,
        "query_reservations": reservations.query_reservations,
    }
    agents = {
        "register": agent.register,
        "heartbeat": agent.heartbeat,
        "job_started": agent.job_started,
        "job_ended": agent.job_ended,
        "step_ended": steps.step_ended,
        "step_output": steps.step_output,
    }
    return client, agents


CLIENT_HANDLERS, AGENT_HANDLERS = _registry()
