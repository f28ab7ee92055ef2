"""Which handler answers which operation: the one table the daemon dispatches by.

Every op named here is also in ``kiln.wire.operations`` (``CLIENT_OPS``/``AGENT_OPS``), where its
fields are allow-listed; the handler modules are leaves that never import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schedd.handlers import (
    agent,
    control,
    gpus,
    insight,
    jobcontrol,
    nodeadmin,
    nodes,
    query,
    resv,
    sacct,
    sacctmgr,
    salloc,
    srun,
    submit,
    tokens,
)
from schedd.lifecycle.context import Context

Handler = Callable[[Context, Any, dict[str, Any]], dict[str, Any]]


def ping(ctx: Context, caller: Any, body: dict[str, Any]) -> dict[str, Any]:
    return {"pong": True, "time": ctx.now()}


CLIENT_HANDLERS: dict[str, Handler] = {
    "ping": ping,
    "submit": submit.submit,
    "query_jobs": query.query_jobs,
    "job_stat": query.job_stat,
    "cancel": control.cancel,
    "hold": control.hold,
    "release": control.release,
    "query_nodes": nodes.query_nodes,
    "query_partitions": nodes.query_partitions,
    "query_licenses": nodes.query_licenses,
    "show_config": nodes.show_config,
    "sacctmgr": sacctmgr.sacctmgr,
    "sshare": sacctmgr.sshare,
    "acct_jobs": sacct.acct_jobs,
    "acct_report": sacct.acct_report,
    "step_start": srun.step_start,
    "step_wait": srun.step_wait,
    "step_cancel": srun.step_cancel,
    "step_input": srun.step_input,
    "step_attach": srun.step_attach,
    "allocation": salloc.allocation,
    "relinquish": salloc.relinquish,
    "job_why": insight.job_why,
    "forecast_stats": insight.forecast_stats,
    "job_priority": insight.job_priority,
    "sched_diag": insight.sched_diag,
    "update_job": jobcontrol.update_job,
    "requeue": jobcontrol.requeue,
    "update_node": jobcontrol.update_node,
    "create_reservation": resv.create_reservation,
    "update_reservation": resv.update_reservation,
    "delete_reservation": resv.delete_reservation,
    "query_reservations": resv.query_reservations,
    "reconfigure": nodeadmin.reconfigure,
    "reboot_nodes": nodeadmin.reboot_nodes,
    "cancel_reboot": nodeadmin.cancel_reboot,
    "fake_gpu": gpus.fake_gpu,
    "node_events": gpus.node_events,
    "auth_token": tokens.auth_token,
}

AGENT_HANDLERS: dict[str, Handler] = {
    "register": agent.register,
    "heartbeat": agent.heartbeat,
    "job_started": agent.job_started,
    "job_ended": agent.job_ended,
    "prolog_done": agent.prolog_done,
    "step_ended": srun.step_ended,
    "step_output": srun.step_output,
}
