"""Run-time predictions and start forecasts in a replay, as the daemon makes them.

Two uses, each off unless asked for:

- **planning on predictions** (the policy's ``predict_runtime``): every job is planned for its
  predicted median run time (``schedd/scheduler/runtimes.py``: the user's recent runs of the same
  shape, capped by the estimate) instead of its estimate. A running job that outlives its
  prediction is re-predicted from the runs longer than what it has run (its estimate when
  none was), so the plan never counts on a job that is already late ending now. The kill time
  stays the estimate: the trace's run time is what the job runs.
- **forecasts** (``kiln sim --forecasts``): when a job arrives and does not start at once, its
  p50 and p90 start are computed as ``kiln why`` and ``sbatch --test-only`` would publish
  them (``scheduler/forecast.py``, the plan re-run under the predictions), and kept to be
  checked against its real start (``metrics.forecast_rows``).

History comes from the replay itself: a job's run time is known once it ends.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from kiln.config import SchedulerConfig
from schedd.scheduler import forecast
from schedd.scheduler.runtimes import LeadCalibration, RuntimeHistory, shape_of
from schedd.scheduler.snapshot import PendingJob, RunningJob, Snapshot


@dataclass(slots=True)
class SimForecaster:
    config: SchedulerConfig
    publish: bool = False  # compute each waiting job's forecast at its arrival
    history: RuntimeHistory = field(default_factory=RuntimeHistory)
    bands: dict[int, tuple[int, int]] = field(default_factory=dict)  # job -> (p50, p90) at arrival
    requests: dict[int, PendingJob] = field(default_factory=dict)  # running job -> its request
    published: dict[int, forecast.Forecast] = field(default_factory=dict)
    calibration: LeadCalibration = field(default_factory=LeadCalibration)
    _ends: list[tuple[float, int]] = field(default_factory=list)  # predicted ends, a heap

    @property
    def plans(self) -> bool:
        return self.config.predict_runtime

    def arrive(self, job: PendingJob) -> None:
        band = self.history.band(job.user, shape_of(job))
        self.bands[job.job_id] = (band.p50, band.p90)
        if self.plans:
            job.predicted_runtime = band.p50

    def started(self, job: PendingJob, run: RunningJob) -> None:
        self.requests[run.job_id] = job
        self.calibration.started(run.job_id, run.start_time)
        if self.plans:
            run.predicted_end = run.start_time + self.bands[run.job_id][forecast.P50]
            heapq.heappush(self._ends, (run.predicted_end, run.job_id))

    def finished(self, job_id: int, runtime: float) -> None:
        job = self.requests.pop(job_id)
        self.bands.pop(job_id, None)
        self.history.record(job.user, shape_of(job), runtime)

    def refresh(self, now: float, running: dict[int, RunningJob]) -> None:
        """Re-predict the running jobs that have outlived their prediction (planning only)."""
        ends = self._ends
        while ends and ends[0][0] <= now:
            _, job_id = heapq.heappop(ends)
            run = running.get(job_id)
            if run is None or run.predicted_end is None or run.predicted_end > now:
                continue
            job = self.requests[job_id]
            band = self.history.band(job.user, shape_of(job), now - run.start_time)
            run.predicted_end = min(run.start_time + band.p50, run.end_time)
            if run.predicted_end > now:
                heapq.heappush(ends, (run.predicted_end, job_id))

    def forecast(self, snapshot: Snapshot, arrived: list[int], started: set[int]) -> None:
        """The p50 and p90 start of the jobs that arrived at this instant and did not start."""
        waiting = [j for j in arrived if j not in started]
        if not self.publish or not waiting:
            return
        predictions = forecast.Predictions(runtime={p.job_id: self.bands[p.job_id]
                                                    for p in snapshot.pending})
        for run in snapshot.running:
            job = self.requests[run.job_id]
            band = self.history.band(job.user, shape_of(job), snapshot.now - run.start_time)
            predictions.end[run.job_id] = (min(run.start_time + band.p50, run.end_time),
                                           min(run.start_time + band.p90, run.end_time))
        found = forecast.forecasts(snapshot, self.config, predictions, waiting)
        now = snapshot.now
        for job_id, f in found.items():
            if f.p50 is None or f.p90 is None:
                continue
            p50, p90 = self.calibration.stretch(now, f.p50, f.p90)
            self.calibration.published(job_id, now, f.p50, f.p90, p90)
            self.published[job_id] = forecast.Forecast(p50, p90)
