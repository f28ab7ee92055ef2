"""Network namespaces for partition tests: an agent on the far side of a veth pair whose link
the test cuts and restores.

Only addresses this module creates, inside namespaces it creates, are ever used: a /30 out of
10.213.0.0/16 per namespace (host end .1, namespace end .2). Everything is removed on exit,
including any process still running inside the namespace.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


class NetnsUnavailable(RuntimeError):
    """``ip netns`` cannot be used here (no iproute2, or no CAP_NET_ADMIN)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and res.returncode != 0:
        raise NetnsUnavailable(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res


@dataclass(frozen=True)
class Netns:
    name: str
    host_if: str  # the veth end left in the host's namespace
    ns_if: str  # the end moved into the namespace
    host_addr: str  # where schedd listens for this namespace's agent
    ns_addr: str

    def argv(self, *command: str) -> list[str]:
        """``command`` run inside the namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.name, *command]

    def cut(self) -> None:
        """Take the link down: nothing passes between the namespace and the host."""
        _ip("link", "set", self.host_if, "down")

    def restore(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def pids(self) -> list[int]:
        res = _ip("netns", "pids", self.name, check=False)
        return [int(p) for p in res.stdout.split()]


def _free_subnet() -> int:
    used = _ip("-o", "-4", "addr", "show").stdout
    for _ in range(64):
        third = secrets.randbelow(256)
        if f"10.213.{third}." not in used:
            return third
    raise NetnsUnavailable("no free 10.213.x.0/30 subnet found")


@contextmanager
def namespace() -> Iterator[Netns]:
    """A fresh namespace joined to the host by a veth pair with private addresses."""
    tag = secrets.token_hex(3)
    third = _free_subnet()
    ns = Netns(name=f"kiln-ns-{tag}", host_if=f"kvh{tag}", ns_if=f"kvn{tag}",
               host_addr=f"10.213.{third}.1", ns_addr=f"10.213.{third}.2")
    _ip("netns", "add", ns.name)
    try:
        _ip("link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if)
        _ip("link", "set", ns.ns_if, "netns", ns.name)
        _ip("addr", "add", f"{ns.host_addr}/30", "dev", ns.host_if)
        _ip("link", "set", ns.host_if, "up")
        _ip("netns", "exec", ns.name, "ip", "addr", "add", f"{ns.ns_addr}/30", "dev", ns.ns_if)
        _ip("netns", "exec", ns.name, "ip", "link", "set", ns.ns_if, "up")
        _ip("netns", "exec", ns.name, "ip", "link", "set", "lo", "up")
        yield ns
    finally:
        _kill_inside(ns)
        _ip("link", "del", ns.host_if, check=False)  # removes both ends
        _ip("netns", "del", ns.name, check=False)


def _kill_inside(ns: Netns) -> None:
    """SIGKILL what still runs in the namespace (our agent and its jobs), each by its pid."""
    for _ in range(50):
        pids = ns.pids()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)

