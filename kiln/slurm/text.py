"""Free text that reaches another user's terminal: job names, comments, accounts, ...

A control character in a job name (a newline, an escape sequence) would forge a row of
``squeue`` or clear an administrator's screen. schedd refuses them at submit (``has_control``)
and the commands print what they show through ``printable``, so a row written before that check
cannot reach a terminal raw either. Tab is allowed: it moves the cursor, nothing more.
Standard library only.
"""

from __future__ import annotations

# C0 controls but tab, DEL, and the C1 controls (U+0080-U+009F: U+009B is a CSI to a terminal).
# Sets and str.translate rather than a regular expression: ``re`` costs every command a few ms
# to import, and these are its only use in sinfo's and squeue's start.
CONTROL_CHARS = frozenset(chr(c) for c in (*range(0x00, 0x09), *range(0x0A, 0x20),
                                           *range(0x7F, 0xA0)))
_SHOWN = str.maketrans(dict.fromkeys(CONTROL_CHARS, "?"))


def has_control(text: str) -> bool:
    return not CONTROL_CHARS.isdisjoint(text)


def printable(text: str) -> str:
    """``text`` with every control character shown as ``?``."""
    return text.translate(_SHOWN) if has_control(text) else text


def printable_lines(lines: list[str]) -> list[str]:
    """Lines of output with their control characters shown as ``?``; one scan when there are
    none (the usual case)."""
    if not has_control("".join(lines)):
        return lines
    return [line.translate(_SHOWN) for line in lines]
