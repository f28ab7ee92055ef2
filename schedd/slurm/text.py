"""Free text that reaches another user's terminal: job names, comments, accounts, ...

A control character in a job name (a newline, an escape sequence) would forge a row of
``squeue`` or clear an administrator's screen. schedd refuses them at submit (``has_control``)
and the commands print what they show through ``printable``, so a row written before that check
cannot reach a terminal raw either. Tab is allowed: it moves the cursor, nothing more.
Standard library only.
"""

from __future__ import annotations

import re

# C0 controls but tab, DEL, and the C1 controls (U+0080-U+009F: U+009B is a CSI to a terminal)
CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def has_control(text: str) -> bool:
    return CONTROL.search(text) is not None


def printable(text: str) -> str:
    """``text`` with every control character shown as ``?``."""
    return CONTROL.sub("?", text) if CONTROL.search(text) else text


def printable_lines(lines: list[str]) -> list[str]:
    """Lines of output with their control characters shown as ``?``; one scan when there are
    none (the usual case)."""
    if CONTROL.search("".join(lines)) is None:
        return lines
    return [CONTROL.sub("?", line) for line in lines]
