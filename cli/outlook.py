"""The lines ``sbatch --test-only`` and ``kiln why`` add to Slurm's answer: the p50 and p90
start under run times predicted from history, and the nearby shapes that start sooner
(schedd/reports/advisor.py). No click and no rich here: sbatch imports it on its fast path.
"""

from __future__ import annotations

from cli.core.formats import fmt_time

TYPE_CHECKING = False  # typing costs every command a few ms to import: for checkers only
if TYPE_CHECKING:
    from typing import Any


def about(seconds: float) -> str:
    """A wait, roughly: ``~25 min``, ``~3 h``, ``~2 d`` (the figures are forecasts)."""
    seconds = max(seconds, 0.0)
    if seconds < 90 * 60:
        return f"~{max(round(seconds / 60), 1)} min"
    if seconds < 36 * 3600:
        hours = seconds / 3600
        return f"~{hours:.1f} h" if hours < 10 else f"~{round(hours)} h"
    return f"~{seconds / 86400:.1f} d"


def _when(start: float, now: float) -> str:
    return "now" if start <= now else f"in {about(start - now)}"


def outlook_lines(reply: dict[str, Any]) -> list[str]:
    """The forecast line and one line per shape that starts sooner (none when the reply has
    neither: an older schedd, or a job the plan does not reach)."""
    now = reply.get("now") or 0.0
    band = reply.get("forecast")
    lines = []
    if band:
        lines.append(f"forecast from recent run times: p50 start {fmt_time(band['p50'])} "
                     f"({_when(band['p50'], now)}), p90 start {fmt_time(band['p90'])} "
                     f"({_when(band['p90'], now)})")
    asked = f"not {_when(band['p50'], now)}" if band else "not planned yet as asked"
    for advice in reply.get("advice") or []:
        lines.append(f"with {advice['change']}: starts {_when(advice['start'], now)}, {asked}")
    return lines
