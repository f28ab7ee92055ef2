"""Signal names and ``--signal`` values, as Slurm spells them (standard library only).

One rule for every place that reads a signal: ``scancel -s``, ``sbatch --signal``, the agent's
walltime warning and the preemption notice.

- A signal is a name with or without ``SIG``, in any case (``USR1``, ``SIGUSR1``, ``usr1``),
  or its number in ASCII digits (``10``). The number must be a signal this system can deliver
  (``signal.valid_signals()``: 1..64 on Linux less the two glibc keeps for itself); 0, negative
  and out-of-range numbers are refused, as are unknown names.
- ``--signal=[B:|R:|BR:|RB:]SIG[@secs]``: ``secs`` (default 60, at most 0xFFFF: Slurm keeps it
  in 16 bits) before the time limit, to the batch shell only with ``B``. ``R`` (signal when a
  reservation ends) is accepted, kept when the value is written back, and otherwise ignored.

Every refusal is a ``SignalError`` (a ``ValueError``) whose message is one line.
"""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass

DEFAULT_SIGNAL_SECONDS = 60  # Slurm's default when --signal has no @secs
MAX_SIGNAL_SECONDS = 0xFFFF  # Slurm keeps sig_time in 16 bits
_FLAGS = {"B": "B", "R": "R", "BR": "BR", "RB": "BR"}  # Slurm's spellings (any case) -> one
_DIGITS = frozenset("0123456789")


class SignalError(ValueError):
    """A signal name or ``--signal`` value that cannot be used; the message is one line."""


def _shown(text: str) -> str:
    """``text`` quoted on one line, at most 64 characters of it (it may come off the wire)."""
    return repr(str(text)[:64])


def _number(word: str) -> bool:
    return bool(word) and all(c in _DIGITS for c in word)


def parse_signal(text: str) -> int:
    """'USR1', 'SIGUSR1', 'usr1' or '10' -> the signal number, as scancel -s and --signal take
    it. Surrounding blanks are ignored."""
    word = str(text).strip()
    if _number(word):
        number = int(word)
        if number in _signal.valid_signals():
            return number
        raise SignalError(f"invalid signal number {_shown(word)}")
    name = word.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    member = _signal.Signals.__members__.get(name)
    if member is None:
        raise SignalError(f"invalid signal name {_shown(word)}")
    return int(member)


def signal_name(signum: int) -> str:
    """10 -> 'USR1' (Slurm's spelling, no SIG); a number with no name (35) -> '35'."""
    try:
        return _signal.Signals(signum).name[3:]
    except ValueError:
        return str(int(signum))


@dataclass(frozen=True, slots=True)
class SignalSpec:
    """A parsed ``--signal``: which signal, how many seconds before the limit, to whom."""

    signum: int
    seconds: int = DEFAULT_SIGNAL_SECONDS
    batch_only: bool = False

    @classmethod
    def parse(cls, text: str) -> SignalSpec:
        """The same as ``parse_signal_option``."""
        return parse_signal_option(text)


def _split(text: str) -> tuple[str, int, int]:
    """--signal text -> (flags 'B'/'R'/'BR'/'', signal number, seconds)."""
    rest = str(text).strip()
    flags = ""
    if ":" in rest:
        typed, rest = rest.split(":", 1)
        flags = _FLAGS.get(typed.upper(), "")
        if not flags:
            raise SignalError(f"invalid --signal flags {_shown(typed)} in {_shown(text)}")
    seconds = DEFAULT_SIGNAL_SECONDS
    if "@" in rest:
        rest, when = rest.split("@", 1)
        when = when.strip()
        if not _number(when) or int(when) > MAX_SIGNAL_SECONDS:
            raise SignalError(f"invalid --signal time {_shown(when)} in {_shown(text)}")
        seconds = int(when)
    return flags, parse_signal(rest), seconds


def parse_signal_option(text: str) -> SignalSpec:
    """'[B:|R:]SIG[@secs]' -> SignalSpec; 'USR1' -> SignalSpec(SIGUSR1, 60, False)."""
    flags, signum, seconds = _split(text)
    return SignalSpec(signum, seconds, "B" in flags)


def normalize_signal_option(text: str) -> str:
    """The --signal value as schedd stores it: 'b:SIGUSR1@120' -> 'B:USR1@120', '10' ->
    'USR1@60' (flags as one of 'B:', 'R:', 'BR:', the time always written)."""
    flags, signum, seconds = _split(text)
    return f"{flags + ':' if flags else ''}{signal_name(signum)}@{seconds}"


def notice_signal(spec: str | None) -> tuple[int, bool]:
    """What to send a job that is told to stop early (preemption): its ``--signal`` as
    (signal number, batch shell only); SIGTERM to the whole job when it has none, or one
    that does not parse."""
    if spec:
        try:
            parsed = parse_signal_option(spec)
        except SignalError:
            pass
        else:
            return parsed.signum, parsed.batch_only
    return int(_signal.SIGTERM), False
