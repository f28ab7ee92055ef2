"""``fake_gpu`` (kiln fake-gpu) and ``node_events`` (kiln events): GPU health's commands.

``fake_gpu`` is for operators (identity from the socket's peer credentials) and only for nodes
whose agent runs ``--fake-gpus``: it relays the injection to the agent, whose fake NVML feeds
the same fault stream real NVML does (agentd/gpuhealth.py). ``node_events`` reads the nodes'
audit history: GPU faults, drains and resumes, injections.
"""

from __future__ import annotations

import pwd
from typing import Any

from kiln.identity import Caller, is_operator
from kiln.wire import protocol
from schedd.lifecycle.context import Context, RequestError

DENIED = "Access/permission denied"


def fake_gpu(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    if not is_operator(caller):
        raise RequestError(DENIED, protocol.E_PERMISSION)
    name, index, action = body["node"], body["gpu"], body["action"]
    value = int(body.get("value") or 0)
    node = ctx.state.nodes.get(name)
    if node is None:
        raise RequestError(f"Invalid node name specified: {name}")
    if not node.gpus:
        raise RequestError(f"node {name} has no GPUs")
    if not node.fake_gpus:
        raise RequestError(f"node {name} has real GPUs: kiln fake-gpu injects only into "
                           "the fake GPUs of an agent started with --fake-gpus")
    if index not in {g.index for g in node.gpus}:
        raise RequestError(f"node {name} has no GPU {index} (it has {len(node.gpus)})")
    if action == "xid" and value < 1:
        raise RequestError("--xid needs an Xid number, e.g. --xid 79")
    if action == "util" and value > 100:
        raise RequestError(f"--util {value}: a percentage, 0 to 100")
    now = ctx.now()
    if not ctx.state.node_alive(node, now):
        raise RequestError(f"node {name} is not responding")
    ctx.agents.fake_gpu(name, index, action, value)
    ctx.state.audit(caller.uid, "fake_gpu", f"node {name}",
                    f"gpu={index} {action}" + (f" {value}" if action in ("xid", "util") else ""),
                    now)
    return {"node": name, "gpu": index, "action": action}


def node_events(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    names = [str(n) for n in body.get("names") or []]
    missing = [n for n in names if n not in ctx.state.nodes]
    if missing:
        raise RequestError(f"Invalid node name specified: {missing[0]}")
    rows = ctx.state.store.node_audit(names, int(body.get("limit") or 100))
    return {"events": [{"time": r.time, "user": _user(r.actor_uid), "action": r.action,
                        "node": r.target.removeprefix("node "), "detail": r.detail}
                       for r in rows]}


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)
