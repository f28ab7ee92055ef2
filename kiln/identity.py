"""Who is asking: taken from the kernel (the local socket's SO_PEERCRED), never from a message field."""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable
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


# uid -> AdminLevel from the accounts ledger; set by schedd once it has loaded its accounts
_admin_lookup: Callable[[int], str] | None = None


def set_admin_lookup(lookup: Callable[[int], str] | None) -> None:
    global _admin_lookup
    _admin_lookup = lookup


def admin_level(caller: Caller) -> str:
    """Slurm's AdminLevel: root and the user schedd runs as (SlurmUser) are Administrators;
    everyone else has what sacctmgr gave them (None, Operator, Administrator)."""
    if caller.uid in (0, os.getuid()):
        return "Administrator"
    return _admin_lookup(caller.uid) if _admin_lookup is not None else "None"


def is_operator(caller: Caller) -> bool:
    """May act on every job, and change accounts, QOS and limits: root, SlurmUser, and users
    with AdminLevel Operator or Administrator."""
    return admin_level(caller) in ("Operator", "Administrator")
