"""Run times predicted from history: how long a job will really run, as quantiles.

A job's time limit is what kills it; what it really runs is usually much less. EASY++
(Tsafrir, Etsion and Feitelson, 2007) predicts it from the user's own recent runs. kiln keeps,
per user and job shape, the last ``KEEP`` actual run times and answers with two quantiles of
them, each capped by the limit (the kill time stays the limit):

- **p50**: the median-rank run of the recent ones (``ceil(0.5 (n + 1))``-th smallest);
- **p90**: the ``ceil(0.9 (n + 1))``-th smallest, or the limit when fewer than 9 runs are known.

Why those ranks: if a new run is like the recent ones (exchangeable), it is at most the k-th
smallest of n earlier runs with probability ``k / (n + 1)`` whatever their distribution, so the
p90 is an upper bound that holds 9 times in 10 without assuming a shape (a conformal bound),
and a user with too little history gets the one bound that always holds: the limit.

A running job has run ``elapsed`` seconds already: its quantiles are those of the recent runs
that lasted longer (the history conditioned on what is known), the limit when none did.

The shape is what makes runs comparable: nodes, CPUs and GPUs per node, and the time limit;
a user's runs of the same nodes, CPUs and GPUs under another limit stand in when the exact
shape has no history. No database here: the daemon feeds it from the ledger and from jobs
that end, the simulator from the replay.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from schedd.scheduler.forecast import Predictions
from schedd.scheduler.snapshot import PendingJob, Snapshot

KEEP = 20  # recent runs kept per (user, shape)


@dataclass(frozen=True, slots=True)
class Shape:
    """What makes two runs of one user comparable."""

    num_nodes: int
    cpus_per_node: int
    gpus_per_node: int
    time_limit: int  # seconds

    @property
    def loose(self) -> tuple[int, int, int]:
        """The shape without its limit: the fallback when the exact shape has no history."""
        return (self.num_nodes, self.cpus_per_node, self.gpus_per_node)


@dataclass(frozen=True, slots=True)
class Band:
    """Predicted run time in seconds: median and 90th percentile, each at most the limit."""

    p50: int
    p90: int


def rank_quantile(runs: Iterable[float], q: float) -> float | None:
    """The ``ceil(q (n + 1))``-th smallest run, or None when that rank is past the n runs."""
    ordered = sorted(runs)
    k = math.ceil(q * (len(ordered) + 1))
    if not ordered or k > len(ordered):
        return None
    return ordered[max(k, 1) - 1]


class RuntimeHistory:
    """The recent run times of each user and shape; ``band`` predicts from them."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._exact: dict[tuple[str, Shape], deque[float]] = {}
        self._loose: dict[tuple[str, tuple[int, int, int]], deque[float]] = {}

    def record(self, user: str, shape: Shape, runtime: float) -> None:
        """A run that ended after ``runtime`` seconds (a run cut by its limit counts too)."""
        value = max(float(runtime), 0.0)
        for table, key in ((self._exact, (user, shape)), (self._loose, (user, shape.loose))):
            runs = table.get(key)
            if runs is None:
                runs = table[key] = deque(maxlen=self.keep)
            runs.append(value)

    def runs(self, user: str, shape: Shape) -> list[float]:
        """The runs a prediction uses: the exact shape's, else the same size's under any limit."""
        exact = self._exact.get((user, shape))
        if exact:
            return list(exact)
        return list(self._loose.get((user, shape.loose), ()))

    def band(self, user: str, shape: Shape, elapsed: float = 0.0) -> Band:
        """p50 and p90 run time (seconds, from the start) of a job of this user and shape that
        has run ``elapsed`` seconds; the limit where the history cannot tell."""
        limit = max(int(shape.time_limit), 1)
        longer = [r for r in self.runs(user, shape) if r > elapsed]
        out = []
        for q in (0.5, 0.9):
            value = rank_quantile(longer, q)
            seconds = limit if value is None else min(int(math.ceil(value)), limit)
            out.append(max(seconds, min(int(elapsed) + 1, limit), 1))
        return Band(out[0], out[1])


def shape_of(job: PendingJob) -> Shape:
    """A job's shape as the core sees it (its limit already resolved)."""
    return Shape(job.num_nodes, job.cpus_per_node, job.gpus_per_node, int(job.time_limit))


def predictions(history: RuntimeHistory, snapshot: Snapshot,
                running: Mapping[int, PendingJob]) -> Predictions:
    """The forecast's input: a band for every pending job, and a p50 and p90 end for every
    running job whose request is known (``running``: job id -> its request as a PendingJob),
    conditioned on how long it has run."""
    out = Predictions()
    for job in snapshot.pending:
        band = history.band(job.user, shape_of(job))
        out.runtime[job.job_id] = (band.p50, band.p90)
    for run in snapshot.running:
        request = running.get(run.job_id)
        if request is None:
            continue
        band = history.band(request.user, shape_of(request), snapshot.now - run.start_time)
        out.end[run.job_id] = (min(run.start_time + band.p50, run.end_time),
                               min(run.start_time + band.p90, run.end_time))
    return out


def km_quantile(events: Iterable[float], censored: Iterable[float], q: float) -> float | None:
    """The q-quantile of values some of which are only known to exceed what was seen
    (``censored``: right-censored), by Kaplan-Meier, with the finite-sample rank correction
    (q (n + 1) / n). None without any event; where the censored values hide the quantile
    (too many still unknown above the last event), the largest value seen: a lower bound."""
    points = sorted([(v, 1) for v in events] + [(v, 0) for v in censored],
                    key=lambda p: (p[0], -p[1]))  # events before censorings at one value
    n = len(points)
    if not n or not any(e for _, e in points):
        return None
    target = min(q * (n + 1) / n, 1.0)
    survival, at_risk, i = 1.0, n, 0
    while i < n:
        value, deaths, j = points[i][0], 0, i
        while j < n and points[j][0] == value:
            deaths += points[j][1]
            j += 1
        if deaths:
            survival *= 1.0 - deaths / at_risk
            if 1.0 - survival >= target - 1e-12:
                return value
        at_risk -= j - i
        i = j
    return points[-1][0]


class LeadCalibration:
    """How the plan's waits have turned out lately, to turn a plan's start into a quantile.

    A plan knows the jobs ahead, not those still to come: a job submitted later with a higher
    priority, or one that backfills into a hole, can push a waiting job back (only the first
    ``bf_max_reservations`` jobs are protected), so even a plan under exact run times is an
    early guess for the jobs behind the head. The correction is read from the record, as the
    run times are: for each recent job given a forecast, the ratio of its real wait to the
    wait its plan gave. A new plan's wait is stretched by the p50 and p90 of those ratios, so
    the published p90 holds 9 times in 10 for waits like the recent ones.

    - **Classes.** A job planned to start in two minutes and one planned in three days are not
      pushed back alike (short plans are the more often overrun, relatively), so the record is
      kept per class of planned wait (factors of ``SPAN``: under 4 min, 4-16 min, ... ), the
      last ``keep`` jobs of each; a class with fewer than ``FEWEST`` started jobs borrows the
      record of all classes (a Mondrian conformal scheme: calibrated within each class).
    - **Censoring.** The jobs still waiting count too, as what they are: ratios known only to
      be at least their wait so far over the planned one. Counting only the jobs that have
      started would keep the longest waits out of the record exactly while they are long, and
      the p90 would be too early whenever waits grow; the quantiles are Kaplan-Meier's
      (``km_quantile``).

    - **Adaptive level.** Waits are not exchangeable in time: a burst of arrivals pushes back
      every job waiting behind it, and a record of the hours before the burst does not know.
      So the rank used for the p90 moves with the outcomes, as adaptive conformal inference
      does (Gibbs and Candes, 2021): each p90 that held raises the level's miss budget by
      ``GAMMA`` x 0.1, each that did not (known once its time passes with the job still
      waiting) lowers it by ``GAMMA`` x 0.9. The level never goes below 0.9 itself: the
      adaptation only raises the bound while misses come faster than one in ten, and lets it
      back down to the plain rank, never under it (left free both ways it hovers at the
      target and as often below: 89.5 % instead of 90.9 % on lublin_256).

    With fewer than ``FEWEST`` started jobs in all, the plan is taken as it is.
    """

    FEWEST = 9  # started jobs needed before a record corrects the plan
    SPAN = 4.0  # a class of planned waits spans this factor
    TARGET = 0.9  # the share of jobs that should start by their published p90
    GAMMA = 0.005  # the adaptive level's step

    def __init__(self, keep: int = 200, floor: float = 60.0) -> None:
        self.floor = floor  # seconds: a plan's wait shorter than this counts as this
        self.keep = keep
        # class -> job -> [published, plan p50 start, plan p90 start, start (0 while waiting)]
        self._classes: dict[int, OrderedDict[int, list[float]]] = {}
        self._where: dict[int, int] = {}  # job -> its class
        self._cache: dict[tuple[float, int], tuple[float | None, float | None]] = {}
        self.level = self.TARGET  # the quantile the p90 is read at (adaptive)
        self._due: list[tuple[float, int]] = []  # (published p90, job) not yet judged, a heap
        self._shown: dict[int, float] = {}  # job -> its published p90, until judged

    def copy(self) -> LeadCalibration:
        """A copy that shares nothing mutable (the planning thread's: schedd/offload.py)."""
        other = LeadCalibration(self.keep, self.floor)
        other._classes = {key: OrderedDict((job, entry[:]) for job, entry in jobs.items())
                          for key, jobs in self._classes.items()}
        other._where = dict(self._where)
        other.level = self.level
        other._due = list(self._due)
        other._shown = dict(self._shown)
        return other

    def _class(self, wait: float) -> int:
        return int(math.log(max(wait, self.floor) / self.floor, self.SPAN))

    def published(self, job_id: int, when: float, p50: float, p90: float,
                  shown: float | None = None) -> None:
        """A job's first forecast: its plan's starts, published at ``when``, and the p90
        start shown for it (``stretch``'s), which the adaptive level is judged by."""
        if job_id in self._where:
            return
        if shown is not None:
            self._shown[job_id] = shown
            heapq.heappush(self._due, (shown, job_id))
        key = self._class(p90 - when)
        jobs = self._classes.setdefault(key, OrderedDict())
        jobs[job_id] = [when, p50, p90, 0.0]
        self._where[job_id] = key
        while len(jobs) > self.keep:
            old, _ = jobs.popitem(last=False)
            self._where.pop(old, None)
        self._cache.clear()

    def started(self, job_id: int, start: float) -> None:
        key = self._where.get(job_id)
        entry = self._classes[key].get(job_id) if key is not None else None
        if entry is not None and not entry[3]:
            entry[3] = max(start, entry[0] + 1e-9)
            self._cache.clear()
        shown = self._shown.pop(job_id, None)
        if shown is not None:
            self._judge(start <= shown)

    def _judge(self, held: bool) -> None:
        """One published p90 held or was missed: move the level (adaptive conformal)."""
        miss = 1.0 - self.TARGET
        budget = (1.0 - self.level) + self.GAMMA * (miss - (0.0 if held else 1.0))
        self.level = min(max(1.0 - budget, self.TARGET), 1.0)
        self._cache.clear()

    def _judge_missed(self, now: float) -> None:
        """The jobs whose published p90 has passed while they still wait: misses, known now."""
        while self._due and self._due[0][0] < now:
            _, job_id = heapq.heappop(self._due)
            if self._shown.pop(job_id, None) is not None:
                self._judge(False)

    def _ratios(self, entries: Iterable[list[float]], which: int,
                now: float) -> tuple[list[float], list[float]]:
        events, censored = [], []
        for entry in entries:
            planned = max(entry[which] - entry[0], self.floor)
            if entry[3]:
                events.append((entry[3] - entry[0]) / planned)
            elif now > entry[0]:
                censored.append((now - entry[0]) / planned)
        return events, censored

    def factors(self, now: float, wait: float) -> tuple[float | None, float | None]:
        """The p50 and p90 ratio of real to planned wait for a plan of ``wait`` seconds
        (None: too few started jobs to say)."""
        self._judge_missed(now)
        key = self._class(wait)
        cached = self._cache.get((now, key))
        if cached is not None:
            return cached
        own = self._classes.get(key, OrderedDict()).values()
        out: list[float | None] = []
        for which, q in ((1, 0.5), (2, self.level)):
            events, censored = self._ratios(own, which, now)
            if len(events) < self.FEWEST:
                events, censored = self._ratios(
                    (e for jobs in self._classes.values() for e in jobs.values()), which, now)
            out.append(km_quantile(events, censored, q) if len(events) >= self.FEWEST
                       else None)
        result = self._cache[(now, key)] = (out[0], out[1])
        return result

    def stretch(self, now: float, p50: float, p90: float) -> tuple[float, float]:
        """The plan's p50 and p90 start, each wait stretched by its class's recent ratio."""
        out = []
        for planned, factor in zip((p50, p90), self.factors(now, p90 - now), strict=True):
            out.append(planned if factor is None
                       else now + max(planned - now, self.floor) * factor)
        return out[0], max(out[0], out[1])
