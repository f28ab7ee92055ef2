"""The four policies ``kiln sim`` compares, as SchedulerConfig knobs of the one scheduler core.

Trace replay plans in exact seconds (``bf_resolution = 1``): trace times are whole seconds, and
rounding reservations up to a minute would handicap the backfilling policies against FCFS.

- ``fcfs``: no backfill. Textbook first-come-first-served: start jobs in submit order until the
  first that does not fit; everything behind it waits.
- ``easy``: backfill with ONE reservation (the queue head's), as in EASY backfilling
  (Lifka 1995; Mu'alem & Feitelson 2001): a later job may start now only if it does not delay
  the head.
- ``conservative``: backfill where every waiting job gets a reservation (``bf_max_reservations``
  = 1,000,000): a later job may start only if it delays no earlier job.

These three are the textbook algorithms, so they run in submit order: every priority weight is 0,
leaving the core's tie-break (submit time, then job id); holes are filled in that order too
(``fill = "priority"``, Slurm's rule), planning uses the estimates (no runtime prediction), and
they look at the whole queue with no planning horizon (``bf_window`` of 100 years,
``bf_max_job_test`` of 10,000,000).

- ``kiln``: kiln as shipped: the default SchedulerConfig (multifactor priority with fair share
  over the trace's users/groups, its default reservations, window and fill rule), except
  ``bf_resolution = 1`` as above. With ``--config FILE`` its ``[scheduler]`` table is used
  instead, ``bf_resolution`` included when the file sets it.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from kiln.config import ConfigError, SchedulerConfig, from_dict

POLICIES = ("fcfs", "easy", "conservative", "kiln")
TRACE_RESOLUTION = 1  # seconds
UNBOUNDED_RESERVATIONS = 1_000_000
UNBOUNDED_JOB_TEST = 10_000_000
UNBOUNDED_WINDOW = 100 * 365 * 86400
NO_PRIORITY = {
    "weight_age": 0,
    "weight_fairshare": 0,
    "weight_job_size": 0,
    "weight_partition": 0,
    "weight_qos": 0,
    "weight_assoc": 0,
}


def policy_config(policy: str, config_file: str | Path | None = None) -> SchedulerConfig:
    """The SchedulerConfig that makes the core behave as ``policy``; ValueError if unknown."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (choose from {', '.join(POLICIES)})")
    if policy == "kiln":
        return _kiln(config_file)
    textbook = dataclasses.replace(
        SchedulerConfig(),
        bf_resolution=TRACE_RESOLUTION,
        bf_window=UNBOUNDED_WINDOW,
        bf_max_job_test=UNBOUNDED_JOB_TEST,
        fill="priority",
        predict_runtime=False,
        **NO_PRIORITY,
    )
    if policy == "fcfs":
        return dataclasses.replace(textbook, backfill=False)
    reservations = 1 if policy == "easy" else UNBOUNDED_RESERVATIONS
    return dataclasses.replace(textbook, backfill=True, bf_max_reservations=reservations)


def _kiln(config_file: str | Path | None) -> SchedulerConfig:
    if config_file is None:
        return dataclasses.replace(SchedulerConfig(), bf_resolution=TRACE_RESOLUTION)
    path = Path(config_file)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    scheduler = from_dict(data, path).scheduler
    table = data.get("scheduler", {})
    if "bf_resolution" not in table:
        scheduler = dataclasses.replace(scheduler, bf_resolution=TRACE_RESOLUTION)
    return scheduler
