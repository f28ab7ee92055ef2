"""Who is asking: taken from the OS (the ipc peer's credentials), never from a message field."""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True)
class Caller:
    uid: int
    gid: int
    pid: int = 0

    @property
    def user(self) -> str:
        return user_name(self.uid)


def from_peer_address(address: str | None) -> Caller | None:
    """libzmq's ipc ``Peer-Address`` property reads ``localhost:UID:GID:PID``."""
    if not address:
        return None
    parts = address.rsplit(":", 3)
    if len(parts) != 4:
        return None
    try:
        return Caller(uid=int(parts[1]), gid=int(parts[2]), pid=int(parts[3]))
    except ValueError:
        return None


@lru_cache(maxsize=4096)
def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@lru_cache(maxsize=4096)
def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def is_operator(caller: Caller) -> bool:
    """root and the user schedd runs as (Slurm's SlurmUser) may act on every job.
    AdminLevel Operator/Administrator from the accounts ledger joins this with issue 4."""
    return caller.uid in (0, os.getuid())
