"""``scontrol reconfigure``: which kiln.toml keys a running daemon takes from a re-read file,
and which need a restart.

A key is live when every place that uses it reads it from the one ``Config`` object at the
time of use (a cycle's ``cfg.scheduler``, a launch's ``cfg.kill_wait``): changing that object
in place is then the whole reload. A key a daemon copied at its start (its endpoints, its
timers' intervals, its socket's keys, the partitions the ledger holds) cannot change without
a restart; the reload leaves it as it was and says so, one line a key, in Slurm-like words.

schedd applies its own keys (``apply_schedd``) and tells every agent to re-read its file; an
agent applies the ``[agent]`` keys it re-reads the same way (``apply_agent``, agentd/daemon.py).
Standard library only: the agent imports it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kiln.config import Config

# Config's own (top-level and [schedd]) keys schedd reads at the time of use
LIVE_TOP = frozenset({"kill_wait", "min_job_age", "gpu_fault_grace", "max_array_size",
                      "max_job_count", "private_data", "licenses"})
# [scheduler]: each cycle reads cfg.scheduler; forecast_interval is a timer set at start
STATIC_SCHEDULER = frozenset({"forecast_interval"})
# [agent]: what an agent re-reads and uses from then on (the next job, check or reboot)
LIVE_AGENT = frozenset({"prolog", "epilog", "prolog_timeout", "epilog_timeout", "task_prolog",
                        "task_epilog", "health_check_program", "health_check_interval",
                        "health_check_timeout", "health_check_resume",
                        "health_check_node_state", "reboot_program",
                        "output_dir_wait", "propagate_resource_limits",
                        "propagate_resource_limits_except"})
# sections read where they are used: [mail] (each mail), [accounting] (each report)
LIVE_SECTIONS = ("mail", "accounting")
STATIC_SECTIONS = ("cgroup",)  # the agents' containment, set up when each agent starts


def _changed(old: Any, new: Any) -> list[str]:
    """Names of the dataclass fields that differ between two instances of one class."""
    return [f.name for f in dataclasses.fields(old)
            if getattr(old, f.name) != getattr(new, f.name)]


def restart_line(key: str) -> str:
    return f"{key} cannot change without a restart"


def apply_schedd(cfg: Config, new: Config) -> tuple[list[str], list[str]]:
    """Copy what is live from ``new`` into ``cfg`` (in place: every holder sees it); returns
    (the keys changed, a line for each changed key that needs a restart)."""
    applied: list[str] = []
    static: list[str] = []
    for key in _changed(cfg, new):
        if key in ("scheduler", "agent", *LIVE_SECTIONS, *STATIC_SECTIONS):
            continue
        if key in LIVE_TOP:
            setattr(cfg, key, getattr(new, key))
            applied.append(key)
        elif key == "partitions":
            static.append(restart_line("[[partition]]"))
        else:
            static.append(restart_line(key))
    for key in _changed(cfg.scheduler, new.scheduler):
        if key in STATIC_SCHEDULER:
            static.append(restart_line(f"[scheduler] {key}"))
        else:
            setattr(cfg.scheduler, key, getattr(new.scheduler, key))
            applied.append(f"[scheduler] {key}")
    for section in LIVE_SECTIONS:
        for key in _changed(getattr(cfg, section), getattr(new, section)):
            setattr(getattr(cfg, section), key, getattr(getattr(new, section), key))
            applied.append(f"[{section}] {key}")
    for section in STATIC_SECTIONS:
        static += [restart_line(f"[{section}] {key}")
                   for key in _changed(getattr(cfg, section), getattr(new, section))]
    a_applied, a_static = apply_agent(cfg, new)
    return applied + a_applied, static + a_static


def apply_agent(cfg: Config, new: Config) -> tuple[list[str], list[str]]:
    """The ``[agent]`` part: live keys copied into ``cfg.agent``, the others reported. The
    agent then hands the new values to what it built from them (agentd/daemon.py)."""
    applied, static = [], []
    for key in _changed(cfg.agent, new.agent):
        if key in LIVE_AGENT:
            setattr(cfg.agent, key, getattr(new.agent, key))
            applied.append(f"[agent] {key}")
        else:
            static.append(restart_line(f"[agent] {key}"))
    return applied, static
