"""Start forecasts as quantiles: the plan re-run under predicted run times.

``squeue --start`` shows the plan's start under time limits: every running job and every job
ahead is assumed to use its whole limit, which is a bound, rarely what happens. A forecast
re-runs the same core (``cycle.schedule``) on the same snapshot twice, once with every job
planned for its predicted median run time (p50) and once for its predicted 90th percentile
(p90), and reads each job's start in each plan:

- the **p50 start**: when the job starts if runs ahead are as long as usual;
- the **p90 start**: when it starts if they all run as long as their 90th percentile.

The predictions come from the caller (``Predictions``: computed from history at the edge,
``schedd/scheduler/runtimes.py``), each capped by the limit; a job without one is planned at its
limit. A forecast plans a start for every job it looks at, not only for the first
``bf_max_reservations`` (``forecast_config``): each job is reserved in turn, as Slurm's
backfill plans expected starts, up to ``depth`` jobs. Pure, like the rest of the core: the
plans promise nothing and change nothing (the cycle's own plan is untouched).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field

from kiln.config import SchedulerConfig
from schedd.scheduler.cycle import ranked_order, schedule
from schedd.scheduler.snapshot import Snapshot

DEPTH = 200  # jobs a forecast reserves in turn; those further back get no forecast
P50, P90 = 0, 1  # the two quantiles, as indices into the prediction pairs


@dataclass(slots=True)
class Predictions:
    """Predicted run times, made at the edge: pending job -> (p50, p90) seconds of run, and
    running job -> (p50, p90) end times. A job left out is planned at its limit."""

    runtime: dict[int, tuple[int, int]] = field(default_factory=dict)
    end: dict[int, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Forecast:
    """A job's start in the p50 and the p90 plan (None: not planned, e.g. past ``bf_window``
    or past the depth)."""

    p50: float | None
    p90: float | None


def forecast_config(config: SchedulerConfig, depth: int = DEPTH) -> SchedulerConfig:
    """The cycle's policy, planning on predictions and reserving for each of ``depth`` jobs."""
    return dataclasses.replace(config, predict_runtime=True,
                               bf_max_reservations=max(config.bf_max_reservations, depth))


def under(snapshot: Snapshot, predictions: Predictions, which: int) -> Snapshot:
    """The snapshot with quantile ``which`` (P50 or P90) of every prediction filled in."""
    pending = [dataclasses.replace(p, predicted_runtime=predictions.runtime[p.job_id][which])
               if p.job_id in predictions.runtime else p for p in snapshot.pending]
    running = [dataclasses.replace(r, predicted_end=predictions.end[r.job_id][which])
               if r.job_id in predictions.end else r for r in snapshot.running]
    return dataclasses.replace(snapshot, pending=pending, running=running, explain=False)


def starts_in(snapshot: Snapshot, config: SchedulerConfig) -> dict[int, float]:
    """Each pending job's start in the plan of ``snapshot``: now if it starts, else its
    planned start; jobs the plan gives neither are left out."""
    decisions = schedule(snapshot, config)
    out = dict(decisions.expected_start)
    out.update(dict.fromkeys((s.job_id for s in decisions.starts), snapshot.now))
    return out


def depth_for(snapshot: Snapshot, config: SchedulerConfig, wanted: Collection[int],
              depth: int = DEPTH) -> int:
    """How many reservations reach the ``wanted`` jobs: their last place in the walk's order
    (``cycle.ranked_order``), at most ``depth``. Reservations are made in walk order, so the
    jobs behind a job are reserved after it: planning them would cost much and could change
    only what the fill rule gathers (jobs that start now, if at all)."""
    if snapshot.preemption is not None:  # preemption reorders the walk: plan the whole depth
        return depth
    order, _ = ranked_order(dataclasses.replace(snapshot, explain=False), config)
    want = set(wanted)
    last = max((i for i, job in enumerate(order) if job.job_id in want), default=depth)
    return min(last + 1, depth)


def forecasts(snapshot: Snapshot, config: SchedulerConfig, predictions: Predictions,
              wanted: Collection[int] | None = None, depth: int = DEPTH) -> dict[int, Forecast]:
    """The p50 and p90 start of each pending job (of ``wanted`` only, when given)."""
    if wanted is not None:
        depth = depth_for(snapshot, config, wanted, depth)
    planning = forecast_config(config, depth)
    p50 = starts_in(under(snapshot, predictions, P50), planning)
    p90 = starts_in(under(snapshot, predictions, P90), planning)
    ids = wanted if wanted is not None else [p.job_id for p in snapshot.pending]
    return {j: _band(p50.get(j), p90.get(j)) for j in ids}


def _band(p50: float | None, p90: float | None) -> Forecast:
    """Backfill is not monotone (a longer run ahead can open a hole that a shorter one
    did not), so the p90 plan may start a job before the p50 plan does: the p90 start is then
    the p50 start, never earlier."""
    if p50 is not None and p90 is not None and p90 < p50:
        p90 = p50
    return Forecast(p50, p90)


def p50_start(snapshot: Snapshot, config: SchedulerConfig, predictions: Predictions,
              job_id: int, depth: int = DEPTH) -> float | None:
    """One job's p50 start alone (the shape advisor compares shapes by it)."""
    depth = depth_for(snapshot, config, [job_id], depth)
    return starts_in(under(snapshot, predictions, P50), forecast_config(config, depth)).get(job_id)
