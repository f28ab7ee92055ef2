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

TYPE_CHECKING = False  # typing is not imported at run time (see agentd/stepd.py)
if TYPE_CHECKING:
    from typing import Any

    from kiln.slurm.signals import SignalError as SignalSpecError
    from kiln.slurm.signals import SignalSpec, parse_signal

# The signal vocabulary is Slurm's, shared with the CLI and schedd: one parser for them all
# (kiln/slurm/signals.py). agentd/launcher.py and the tests use these names from here; they
# are imported on first use, so that the per-job supervisor (agentd/stepd.py), which uses only
# the arithmetic below, starts without them (nor dataclasses).
_SIGNAL_NAMES = {"SignalSpec": "SignalSpec", "SignalSpecError": "SignalError",
                 "parse_signal": "parse_signal"}

__all__ = ["Ending", "SignalSpec", "SignalSpecError", "Walltime", "parse_signal"]


def __getattr__(name: str) -> Any:
    if name in _SIGNAL_NAMES:
        from kiln.slurm import signals

        return getattr(signals, _SIGNAL_NAMES[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Walltime:
    """One job's time limit as the agent measures it: from ``start`` (the agent's launch time).

    ``time_limit`` is in seconds, ``None`` for UNLIMITED (then nothing is ever due).
    ``warning``: the ``--signal`` warning, anything with ``signum``, ``seconds`` and
    ``batch_only`` (a ``SignalSpec``), or None.
    """

    __slots__ = ("start", "time_limit", "warning", "warned")

    def __init__(self, start: float, time_limit: int | None, warning: Any = None,
                 warned: bool = False):
        self.start, self.time_limit, self.warning, self.warned = \
            start, time_limit, warning, warned

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


class Ending:
    """A job being stopped: SIGTERM went out at ``began``; SIGKILL is due at ``kill_at``.

    ``state`` is what the job will be reported as (TIMEOUT, CANCELLED, ...): the first reason to
    end a job wins, so a cancel arriving during a timeout does not turn TIMEOUT into CANCELLED.
    """

    __slots__ = ("state", "began", "kill_at", "killed")

    def __init__(self, state: str, began: float, kill_at: float, killed: bool = False):
        self.state, self.began, self.kill_at, self.killed = state, began, kill_at, killed

    def __repr__(self) -> str:
        return (f"Ending(state={self.state!r}, began={self.began}, kill_at={self.kill_at}, "
                f"killed={self.killed})")

    @classmethod
    def start(cls, state: str, now: float, kill_wait: int) -> Ending:
        return cls(state=state, began=now, kill_at=now + max(kill_wait, 0))

    def kill_due(self, now: float) -> bool:
        return not self.killed and now >= self.kill_at
