"""Advance reservations on the command line: ``scontrol create|update|delete|show reservation``
and ``sinfo -T``, in Slurm 22.05's words and layout.

Parsing is done here (times to POSIX seconds, host lists to names, ``TRES=``); schedd decides
the nodes and GPUs (``schedd/domain/reservation.py``). kiln accepts ``TRES=gres/gpu=N`` (a GPU-count
reservation) where Slurm 22.05 answers ``TRES type 'gres/gpu' not supported with reservations``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from cli.core import fail, write_lines
from cli.core.client import Client, ClientError
from cli.core.formats import fmt_duration, fmt_time
from cli.core.options import OptionError, parse_begin, parse_time_limit
from kiln.slurm.hostlist import HostlistError, compress, expand

UNLIMITED_DURATION = 365 * 86400  # Duration=UNLIMITED: a year, re-settable with update
_NAME_KEYS = ("reservationname", "reservation", "res")


def _names(value: str) -> list[str]:
    return [v for v in value.split(",") if v]


def _tres(value: str, fields: dict[str, Any]) -> None:
    for item in _names(value):
        key, eq, count = item.partition("=")
        if not eq or not count.isdigit():
            fail(f"Invalid TRES specification: {item}")
        if key.lower() in ("gres/gpu", "gpu"):
            fields["gpus"] = int(count)
        elif key.lower() == "node":
            fields["node_cnt"] = int(count)
        else:
            fail(f"TRES type '{key}' not supported with reservations")


def _duration(value: str) -> int:
    secs = parse_time_limit(value, "Duration")
    return UNLIMITED_DURATION if secs is None else secs


_MEMBER_KEYS = {"users": "users", "user": "users", "accounts": "accounts", "account": "accounts"}


def parse_fields(pairs: list[tuple[str, str]], now: float) -> dict[str, Any]:
    """scontrol's reservation Key=Value words -> the wire's fields (schedd.domain.reservation.Request)."""
    fields: dict[str, Any] = {}
    for key, value in pairs:
        low = key.lower()
        if low[-1:] in ("+", "-") and low[:-1] in _MEMBER_KEYS:  # Users+=bob, Accounts-=x
            action = "add" if low[-1] == "+" else "remove"
            names = fields.setdefault(f"{action}_{_MEMBER_KEYS[low[:-1]]}", [])
            names.extend(_names(value))
            continue
        try:
            if low in _NAME_KEYS:
                fields["name"] = value
            elif low == "starttime":
                fields["start_time"] = parse_begin(value, now)
            elif low == "endtime":
                fields["end_time"] = parse_begin(value, now)
            elif low == "duration":
                fields["duration"] = _duration(value)
            elif low in ("nodes", "nodelist"):
                fields["nodes"] = expand(value) if value.upper() != "ALL" else []
            elif low == "nodecnt":
                fields["node_cnt"] = int(value)
            elif low == "tres":
                _tres(value, fields)
            elif low in ("users", "user"):
                fields["users"] = _names(value)
            elif low in ("accounts", "account"):
                fields["accounts"] = _names(value)
            elif low == "flags":
                fields["flags"] = [f.upper() for f in _names(value)]
            elif low in ("partitionname", "partition"):
                fields["partition"] = value
            else:
                fail(f"Invalid option for reservation: {key}={value}")
        except (OptionError, ValueError, HostlistError):
            fail(f"Invalid input: {key}={value}", "Request aborted")
    return fields


def _pairs(args: list[str]) -> list[tuple[str, str]]:
    pairs = []
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq:
            if key.lower() in _NAME_KEYS:
                continue  # "create reservation Key=..." names the entity
            fail(f"Invalid input: {arg}", "Request aborted")
        pairs.append((key, value))
    return pairs


def create(args: list[str]) -> int:
    fields = parse_fields(_pairs(args), time.time())
    if any(key.startswith(("add_", "remove_")) for key in fields):
        fail("Users+= and Accounts+= (or -=) change a reservation; to create one use Users= "
             "or Accounts=", "Request aborted")
    with Client() as client:
        try:
            reply = client.call("create_reservation", {"reservation": fields})
        except ClientError as exc:
            fail(f"Error creating the reservation: {exc.message}", prefixed=False)
    print(f"Reservation created: {reply['name']}")
    return 0


def update(pairs: list[tuple[str, str]]) -> int:
    name = pairs[0][1]
    fields = parse_fields(pairs[1:], time.time())
    if not fields:
        fail("No changes specified")
    with Client() as client:
        try:
            client.call("update_reservation", {"name": name, "changes": fields})
        except ClientError as exc:
            fail(f"Error updating the reservation: {exc.message}", prefixed=False)
    print("Reservation updated.")
    return 0


def delete(args: list[str]) -> int:
    """``delete reservation=X``, ``delete ReservationName=X``, ``delete reservation X``."""
    name = ""
    words = list(args)
    while words:
        word = words.pop(0)
        key, eq, value = word.partition("=")
        if eq and key.lower() in _NAME_KEYS:
            name = value
        elif not eq and key.lower() in _NAME_KEYS and words:
            name = words.pop(0)
        else:
            fail(f"invalid keyword: {word}")
    if not name:
        fail("too few arguments for keyword:delete")
    with Client() as client:
        try:
            client.call("delete_reservation", {"name": name})
        except ClientError as exc:
            fail(f"delete_reservation ReservationName={name}: {exc.message}", prefixed=False)
    return 0


def _null(values: list[str]) -> str:
    return ",".join(values) if values else "(null)"


def reservation_lines(r: dict[str, Any]) -> list[str]:
    tres = f"cpu={r['cpus']}" + (f",gres/gpu={r['gpu_count']}" if r.get("gpus") else "")
    return [
        f"ReservationName={r['name']} StartTime={fmt_time(r['start_time'])} "
        f"EndTime={fmt_time(r['end_time'])} "
        f"Duration={fmt_duration(r['end_time'] - r['start_time'])}",
        f"Nodes={compress(r['nodes']) or '(null)'} NodeCnt={len(r['nodes'])} "
        f"CoreCnt={r['cpus']} Features=(null) PartitionName={r.get('partition') or '(null)'} "
        f"Flags={','.join(r.get('flags') or [])}",
        f"TRES={tres}",
        f"Users={_null(r['users'])} Groups=(null) Accounts={_null(r['accounts'])} "
        f"Licenses=(null) State={r['state']} BurstBuffer=(null) Watts=n/a",
        "MaxStartDelay=(null)",
    ]


def show(client: Client, target: str | None, oneliner: bool) -> int:
    try:
        reply = client.call("query_reservations", {"names": [target]} if target else {})
    except ClientError as exc:
        if target:
            fail(f"Reservation {target} not found", prefixed=False)
        fail(f"slurm_load_reservations error: {exc.message}", prefixed=False)
    found = reply.get("reservations", [])
    if not found:
        print("No reservations in the system")
        return 0
    out = []
    for r in found:
        lines = reservation_lines(r)
        if oneliner:
            out.append(" ".join(lines) + "\n")
        else:
            out.append(lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "\n")
    sys.stdout.write("".join(out))
    return 0


def sinfo_reservations(header: bool = True) -> int:
    """``sinfo -T``: one line per reservation."""
    try:
        with Client() as client:
            found = client.call("query_reservations", {}).get("reservations", [])
    except ClientError as exc:
        fail(f"slurm_load_reservations: {exc.message}", prefixed=False)
    rows = [(r["name"], r["state"], fmt_time(r["start_time"]), fmt_time(r["end_time"]),
             fmt_duration(r["end_time"] - r["start_time"]), compress(r["nodes"]))
            for r in found]
    width = max([10] + [len(r[0]) for r in rows])
    lines = [f"{'RESV_NAME':<{width}} {'STATE':>8}  {'START_TIME':>19}  {'END_TIME':>19}  "
             f"{'DURATION':>11}  NODELIST"] if header else []
    lines += [f"{n:<{width}} {s:>8}  {a:>19}  {e:>19}  {d:>11}  {nodes}"
              for n, s, a, e, d, nodes in rows]
    write_lines(lines)
    return 0
