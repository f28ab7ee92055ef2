"""Usage accrual: what running jobs consume, charged to their associations, for fair share
(``sshare`` RawUsage, the priority's fair-share factor) and GrpTRESMins budgets.

The daemon calls ``accrue`` before each scheduling cycle: every job that ran since the last
accrual (still running, or ended since) is charged for the part of its run in that interval, so
no second is charged twice or lost. Fair-share usage is billing x seconds (``fairshare.billing``,
TRES-weighted) times the QOS UsageFactor, decayed with PriorityDecayHalfLife; GrpTRESMins usage
is TRES x minutes per TRES, decayed the same way (Slurm's behaviour; a half-life of 0 makes it a
hard budget). Both are zeroed when the budget period ``usage_reset`` (none, daily, weekly,
monthly: PriorityUsageResetPeriod) turns, and by ``sacctmgr modify ... set RawUsage=0``.
Saved to the ledger every ``SAVE_INTERVAL`` seconds and at shutdown.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from kiln.config import SchedulerConfig
from kiln.model import Job, JobState
from schedd.domain.accounts import ROOT, Accounts
from schedd.ledger.store import Store
from schedd.scheduler.fairshare import FairShareTree, billing, decay
from schedd.scheduler.limits import allocation_tres
from schedd.scheduler.snapshot import AssocKey

SAVE_INTERVAL = 30.0  # seconds between saves of usage to the ledger
RESET_PERIODS = ("none", "daily", "weekly", "monthly")


def period_start(now: float, period: str) -> float:
    """The start (local midnight) of the budget period holding ``now``; 0 for 'none'."""
    if period not in RESET_PERIODS[1:]:
        return 0.0
    t = time.localtime(now)
    day = t.tm_mday
    if period == "weekly":
        day -= t.tm_wday  # back to Monday
    elif period == "monthly":
        day = 1
    return time.mktime((t.tm_year, t.tm_mon, day, 0, 0, 0, 0, 0, -1))


class UsageMeter:
    """The daemon's usage state: the fair-share tree and each association's TRES-minutes."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.fairshare = FairShareTree(half_life=float(config.decay_half_life))
        self.tres_mins: dict[AssocKey, dict[str, float]] = {}
        self.period = 0.0  # start of the current budget period
        self.last = 0.0  # time of the last accrual
        self.last_save = 0.0
        self.dirty: set[AssocKey] = set()

    # --- loading and the tree ------------------------------------------------------------

    def load(self, store: Store, accounts: Accounts, now: float) -> None:
        self.sync(accounts)
        for (account, user), value in store.load_fairshare().items():
            view = self.fairshare.assocs.get((account, user))
            if view is not None:
                view.usage = value
        self.fairshare.last_decay = now
        for key, (minutes, start) in store.load_tres_usage().items():
            self.tres_mins[key] = minutes
            self.period = max(self.period, start)
        if not self.period:
            self.period = period_start(now, self.config.usage_reset)
        self.last = self.last_save = now

    def sync(self, accounts: Accounts) -> None:
        """Mirror the association tree (shares, parents) into the fair-share tree. The account
        root is the tree's root, not a node: its users sit beside the top-level accounts."""
        wanted = set()
        for key, a in accounts.assocs.items():
            if key == (ROOT, ""):
                continue
            wanted.add(key)
            self.fairshare.set_association(a.account, a.user, a.parent or "", a.shares,
                                           a.priority or 0)
        for key in list(self.fairshare.assocs):
            if key not in wanted:
                self.fairshare.remove_association(*key)

    # --- accrual -------------------------------------------------------------------------

    def accrue(self, jobs: Iterable[Job], accounts: Accounts, now: float,
               gpu_types: dict[str, str]) -> None:
        """Charge every job that ran in (last, now] for its part of that interval
        (``gpu_types``: node -> GPU type, for gres/gpu:<type>)."""
        self.roll_period(now)
        since = self.last
        if now <= since:
            return
        self.decay_tres(now - since)
        weights = self.config.tres_billing_weights
        for job in jobs:
            if not job.start_time or not job.allocation:
                continue
            running = job.state in (JobState.RUNNING, JobState.COMPLETING)
            end = now if running else min(job.end_time or now, now)
            start = max(job.start_time, since)
            if end <= start:
                continue
            job_tres: dict[str, float] = dict(allocation_tres(job.allocation, gpu_types))
            qos = accounts.qos.get(job.qos)
            factor = qos.usage_factor if qos is not None else 1.0
            rate = billing(job_tres, weights, self.config.billing_max_tres) * factor
            self.fairshare.add_usage(job.account, job.user, rate, start, end)
            self.charge_tres((job.account, job.user), job_tres, (end - start) / 60.0 * factor)
        self.fairshare.decay_to(now)
        self.last = now

    def charge_tres(self, key: AssocKey, job_tres: dict[str, float], minutes: float) -> None:
        acc = self.tres_mins.setdefault(key, {})
        for name, amount in job_tres.items():
            acc[name] = acc.get(name, 0.0) + amount * minutes
        self.dirty.add(key)

    def decay_tres(self, seconds: float) -> None:
        half_life = self.fairshare.half_life
        if half_life <= 0:
            return
        for key, acc in self.tres_mins.items():
            for name in acc:
                acc[name] = decay(acc[name], seconds, half_life)
            self.dirty.add(key)

    def roll_period(self, now: float) -> None:
        start = period_start(now, self.config.usage_reset)
        if start > self.period:
            self.period = start
            self.reset(list(self.fairshare.assocs) + list(self.tres_mins))

    def reset(self, keys: Iterable[AssocKey]) -> None:
        """Zero the usage of these associations (sacctmgr ... set RawUsage=0)."""
        for key in keys:
            view = self.fairshare.assocs.get(key)
            if view is not None:
                view.usage = 0.0
            self.tres_mins[key] = {}
            self.dirty.add(key)

    # --- persistence ---------------------------------------------------------------------

    def save(self, store: Store, now: float, force: bool = False) -> None:
        if not force and now - self.last_save < SAVE_INTERVAL:
            return
        self.last_save = now
        store.save_fairshare({k: a.usage for k, a in self.fairshare.assocs.items()}, now)
        if self.dirty:
            store.save_tres_usage({k: self.tres_mins.get(k, {}) for k in self.dirty},
                                  self.period, now)
            self.dirty.clear()

