"""``reconfigure``, ``reboot_nodes``, ``cancel_reboot``: scontrol's administration of the
daemons and the nodes, operators only (root, SlurmUser, AdminLevel Operator or above).

``reconfigure`` re-reads kiln.toml: schedd takes what it can take live (kiln/reconfig.py),
tells every agent to re-read its own, and answers with the keys that need a restart. A file
that does not load changes nothing. The reboots' course is schedd/lifecycle/reboot.py's.
"""

from __future__ import annotations

import logging
from typing import Any

from kiln import config as kconfig
from kiln import reconfig
from kiln.identity import Caller, is_operator
from kiln.wire import protocol
from schedd.handlers.selection import DENIED
from schedd.lifecycle import reboot
from schedd.lifecycle.admission import INVALID_NODE
from schedd.lifecycle.context import Context, RequestError

log = logging.getLogger("schedd.admin")

NO_REBOOT_PROGRAM = "RebootProgram isn't defined"
REBOOT_IN_PROGRESS = "Reboot already in progress"


def _operator(caller: Caller) -> None:
    if not is_operator(caller):
        raise RequestError(DENIED, protocol.E_PERMISSION)


def reconfigure(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    _operator(caller)
    try:
        new = kconfig.load(ctx.cfg.path)
    except kconfig.ConfigError as exc:
        raise RequestError(str(exc)) from None
    applied, restart = reconfig.apply_schedd(ctx.cfg, new)
    now = ctx.now()
    agents = [n.name for n in ctx.state.nodes.values() if ctx.state.node_alive(n, now)]
    ctx.agents.reconfigure(agents)
    log.warning("reconfigured from %s: %s%s", ctx.cfg.path or "the defaults",
                ", ".join(applied) or "nothing changed",
                "".join(f"; {line}" for line in restart))
    ctx.state.audit(caller.uid, "reconfigure", str(ctx.cfg.path or ""),
                    " ".join(applied), now)
    ctx.wake_scheduler()
    return {"applied": applied, "restart": restart, "agents": len(agents)}


def _nodes(ctx: Context, names: list[str]) -> list[str]:
    """The names asked for (``ALL``: every node); an unknown one is Slurm's error."""
    if [n.upper() for n in names] == ["ALL"]:
        return sorted(ctx.state.nodes)
    if not names or any(n not in ctx.state.nodes for n in names):
        raise RequestError(INVALID_NODE)
    return list(dict.fromkeys(names))


def reboot_nodes(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    _operator(caller)
    names = _nodes(ctx, [str(n) for n in body["names"]])
    if not ctx.cfg.agent.reboot_program:
        raise RequestError(NO_REBOOT_PROGRAM)
    now = ctx.now()
    for name in names:
        reboot.request(ctx, ctx.state.nodes[name], bool(body.get("asap")),
                       str(body.get("next_state") or ""), str(body.get("reason") or ""),
                       caller.uid, now)
    ctx.wake_scheduler()
    return {"nodes": names}


def cancel_reboot(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    _operator(caller)
    names = _nodes(ctx, [str(n) for n in body["names"]])
    now = ctx.now()
    issued = [n for n in names if not reboot.cancel(ctx, ctx.state.nodes[n], caller.uid, now)]
    if issued:
        raise RequestError(REBOOT_IN_PROGRESS)
    return {"nodes": names}
