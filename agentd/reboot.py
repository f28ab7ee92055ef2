"""Slurm's RebootProgram: ``[agent] reboot_program``, run as the agent's user (root on a real
node) with SLURMD_NODENAME in its environment when schedd issues ``scontrol reboot``.

It runs in a thread of its own, so the agent's loop goes on heartbeating meanwhile. A program
that really reboots the machine ends the agent with it; the agent that starts after the boot
registers, and schedd counts the node back. A program that ends without ending the machine
(a site's script that power-cycles something else, a test's fake) is over when it exits: the
agent then registers again, which is the same word to schedd. So a program that starts a
reboot must not return before the machine goes down (``systemctl reboot`` returns at once:
``reboot -f``, or ``systemctl reboot; sleep 600``): an agent asked to stop meanwhile does not
register. A program that fails, or is missing, is said in the reason the node is drained with
after it returns.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading

log = logging.getLogger("agentd.reboot")

NO_PROGRAM = "RebootProgram isn't defined"
REASON_MAX = 256


class Reboot:
    def __init__(self, node: str) -> None:
        self.node = node
        self._thread: threading.Thread | None = None
        self._done: str | None = None  # "" the program succeeded, else why not
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, program: str) -> None:
        """Run ``program`` (once: a resent command while it runs is ignored)."""
        if self.running:
            return
        if not program:
            log.error("scontrol reboot: %s on this node", NO_PROGRAM)
            with self._lock:
                self._done = NO_PROGRAM
            return
        log.warning("rebooting: running %s", program)
        self._thread = threading.Thread(target=self._run, args=(program,), name="reboot",
                                        daemon=True)
        self._thread.start()

    def poll(self) -> str | None:
        """Once the program has ended: "" when it succeeded, else the reason to drain the
        node with; None while it runs (or none was asked)."""
        with self._lock:
            done, self._done = self._done, None
        return done

    def _run(self, program: str) -> None:
        env = dict(os.environ, SLURMD_NODENAME=self.node)
        try:
            p = subprocess.run([program], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, check=False)
            out = (p.stderr or p.stdout or "").strip().splitlines()
            why = "" if p.returncode == 0 else (
                f"reboot program failed (exit {p.returncode})" + (f": {out[0]}" if out else ""))
        except OSError as exc:
            why = f"reboot program could not run: {exc.strerror or exc}"
        if why:
            log.error("%s", why)
        else:
            log.warning("reboot program done; registering again")
        with self._lock:
            self._done = why[:REASON_MAX]
