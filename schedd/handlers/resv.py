"""``create_reservation``, ``update_reservation``, ``delete_reservation``,
``query_reservations``: scontrol's advance reservations (model in ``schedd/domain/reservation.py``).

Operators create, change and delete; everyone may look. Each change is written to the ledger
(with an audit line) before it is answered, and wakes the scheduler: a reservation changes what
may start now.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kiln.identity import Caller, is_operator
from kiln.model import Job
from kiln.wire import protocol
from schedd.domain.reservation import (
    IN_USE,
    INVALID_RESERVATION,
    INVALID_USER,
    Planner,
    Request,
    Reservation,
    ReservationError,
    check_members,
    edit_members,
    next_name,
    window,
)
from schedd.lifecycle.context import Context, RequestError

_TYPES: dict[str, Any] = {
    "name": str, "start_time": (int, float, type(None)), "end_time": (int, float, type(None)),
    "duration": (int, type(None)), "nodes": list, "node_cnt": int, "gpus": int, "users": list,
    "accounts": list, "flags": list, "partition": str,
}
# update only: scontrol's Users+=, Users-=, Accounts+=, Accounts-= (names to add or take out)
_EDITS = {"add_users": ("users", True), "remove_users": ("users", False),
          "add_accounts": ("accounts", True), "remove_accounts": ("accounts", False)}


def _request(d: dict[str, Any], base: Request | None = None) -> Request:
    req = dataclasses.replace(base) if base is not None else Request()
    for key, value in d.items():
        typ = _TYPES.get(key)
        if typ is None:
            raise RequestError(f"Invalid reservation field: {key}")
        if isinstance(value, bool) or not isinstance(value, typ):
            raise RequestError(f"reservation field {key!r} has the wrong type")
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise RequestError(f"reservation field {key!r} must list names")
        if key in ("node_cnt", "gpus", "duration") and value is not None and value < 0:
            raise RequestError(f"reservation field {key!r} must not be negative")
        setattr(req, key, value)
    req.flags = [f.upper() for f in req.flags]
    return req


def _planner(ctx: Context, skip: str = "") -> Planner:
    return Planner(ctx.state.nodes, ctx.state.running(),
                   [r for r in ctx.state.reservations.values() if r.name != skip],
                   lambda job: _job_end(ctx, job))


def _job_end(ctx: Context, job: Job) -> float:
    limit = ctx.state.time_limit(job)
    return job.start_time + (limit if limit is not None
                             else ctx.cfg.scheduler.default_time_limit)


def _build(ctx: Context, req: Request, name: str, now: float, caller: Caller) -> Reservation:
    try:
        check_members(req, (a for (a, u) in ctx.state.accounts.assocs if not u))
        start, end = window(req, now)
        holdings = _planner(ctx, skip=name).plan(req, start, end, name)
    except ReservationError as exc:
        raise RequestError(str(exc)) from None
    partition = req.partition or ctx.cfg.default_partition.name
    return Reservation(name=name, start_time=start, end_time=end, nodes=sorted(holdings),
                       gpus=req.gpus, holdings=holdings, users=req.users, accounts=req.accounts,
                       flags=req.flags, partition=partition, created_by=caller.uid,
                       created_at=now)


def _save(ctx: Context, caller: Caller, resv: Reservation, action: str, now: float) -> None:
    ctx.state.save_reservation(resv, caller.uid, action, now)
    ctx.wake_scheduler()


def create_reservation(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    if not is_operator(caller):
        raise RequestError(INVALID_USER, protocol.E_PERMISSION)
    req = _request(body["reservation"])
    name = req.name or next_name(caller.user, ctx.state.reservations)
    if name in ctx.state.reservations:
        raise RequestError("Duplicate reservation name")
    now = ctx.now()
    resv = _build(ctx, req, name, now, caller)
    _save(ctx, caller, resv, "create_reservation", now)
    return {"name": name}


def update_reservation(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    if not is_operator(caller):
        raise RequestError(INVALID_USER, protocol.E_PERMISSION)
    old = ctx.state.reservations.get(body["name"])
    if old is None:
        raise RequestError(INVALID_RESERVATION)
    changes = dict(body["changes"])
    edits = {key: changes.pop(key) for key in _EDITS if key in changes}
    base = Request(name=old.name, start_time=old.start_time, end_time=old.end_time,
                   nodes=list(old.nodes), gpus=old.gpus, users=list(old.users),
                   accounts=list(old.accounts), flags=list(old.flags), partition=old.partition)
    if "duration" in changes and "end_time" not in changes:
        base.end_time = None
    if "start_time" in changes and "end_time" not in changes and "duration" not in changes:
        base.end_time, base.duration = None, int(old.end_time - old.start_time)
    if {"nodes", "node_cnt", "gpus"} & changes.keys():
        base.nodes, base.gpus = [], 0  # new resources asked for: choose them again
    elif old.gpus:
        base.nodes = list(old.nodes)  # keep the GPUs on the nodes they are on
    req = _request(changes, base)
    _edit_members(req, edits)
    now = ctx.now()
    resv = _build(ctx, req, old.name, now, caller)
    resv.created_by, resv.created_at = old.created_by, old.created_at
    _save(ctx, caller, resv, "update_reservation", now)
    return {"name": resv.name}


def _edit_members(req: Request, edits: dict[str, Any]) -> None:
    """Apply Users+=/-= and Accounts+=/-= to ``req`` (after any Users=/Accounts=)."""
    for field in ("users", "accounts"):
        add, remove = edits.get(f"add_{field}", []), edits.get(f"remove_{field}", [])
        for key, names in ((f"add_{field}", add), (f"remove_{field}", remove)):
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise RequestError(f"reservation field {key!r} must list names")
        if add or remove:
            try:
                setattr(req, field, edit_members(getattr(req, field), add, remove,
                                                 field[:-1].capitalize(), req.name))
            except ReservationError as exc:
                raise RequestError(str(exc)) from None


def delete_reservation(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    if not is_operator(caller):
        raise RequestError(INVALID_USER, protocol.E_PERMISSION)
    name = body["name"]
    if name not in ctx.state.reservations:
        raise RequestError(INVALID_RESERVATION)
    if any(j.reservation == name for j in ctx.state.running()):
        raise RequestError(IN_USE)
    now = ctx.now()
    ctx.state.delete_reservation(name, caller.uid, now)
    ctx.wake_scheduler()
    return {"name": name}


def query_reservations(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    now = ctx.now()
    names = {str(n) for n in body.get("names") or []}
    if names and not names & ctx.state.reservations.keys():
        raise RequestError(INVALID_RESERVATION)
    out = [r.to_wire(now) for r in sorted(ctx.state.reservations.values(),
                                          key=lambda r: (r.start_time, r.name))
           if (not names or r.name in names) and r.end_time > now]
    return {"reservations": out, "now": now}


