"""Hard walltime: when a job is warned, told to stop and killed, as pure arithmetic.

The agent times every job itself, from its own launch time, and keeps doing so while schedd is
unreachable (SPEC §4). This module holds no processes and reads no clock: ``Walltime`` answers
"what is due at ``now``" and ``Ending`` remembers a kill in progress, so the launcher only has
to deliver the signals and tests can walk a job's life on a made-up clock.

Slurm's sequence, which kiln keeps:

1. ``--signal=[B:]SIG[@secs]``: SIG is sent ``secs`` (default 60) before the limit, to the batch
   shell only with ``B:``, else to the whole job (its process group).
2. At the limit: SIGCONT and SIGTERM to the whole group, state TIMEOUT. Cancellation starts the
   same way at once (state CANCELLED, or what the caller asks for).
3. KillWait seconds later (default 30): SIGKILL to whatever of the group is still alive.
"""

from __future__ import annotations

from dataclasses import dataclass

# The signal vocabulary is Slurm's, shared with the CLI and schedd: one parser for them all.
# agentd/launcher.py and the tests use these names from here.
from schedd.slurm.signals import SignalError as SignalSpecError
from schedd.slurm.signals import SignalSpec, parse_signal

__all__ = ["Ending", "SignalSpec", "SignalSpecError", "Walltime", "parse_signal"]


@dataclass(slots=True)
class Walltime:
    """One job's time limit as the agent measures it: from ``start`` (the agent's launch time).

    ``time_limit`` is in seconds, ``None`` for UNLIMITED (then nothing is ever due).
    """

    start: float
    time_limit: int | None
    warning: SignalSpec | None = None
    warned: bool = False

    @property
    def deadline(self) -> float | None:
        return None if self.time_limit is None else self.start + self.time_limit

    @property
    def warn_at(self) -> float | None:
        if self.warning is None or self.deadline is None:
            return None
        return self.deadline - self.warning.seconds

    def warning_due(self, now: float) -> bool:
        """True once, when the ``--signal`` warning should go out (the caller sends it)."""
        at = self.warn_at
        if self.warned or at is None or now < at:
            return False
        self.warned = True
        return True

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline


@dataclass(slots=True)
class Ending:
    """A job being stopped: SIGTERM went out at ``began``; SIGKILL is due at ``kill_at``.

    ``state`` is what the job will be reported as (TIMEOUT, CANCELLED, ...): the first reason to
    end a job wins, so a cancel arriving during a timeout does not turn TIMEOUT into CANCELLED.
    """

    state: str
    began: float
    kill_at: float
    killed: bool = False

    @classmethod
    def start(cls, state: str, now: float, kill_wait: int) -> Ending:
        return cls(state=state, began=now, kill_at=now + max(kill_wait, 0))

    def kill_due(self, now: float) -> bool:
        return not self.killed and now >= self.kill_at
