"""Fair-share usage on the virtual clock: what the daemon's ledger would have accumulated.

Each trace user becomes a user association under an account named for its trace group (all
under root, one share each); jobs of unknown user (-1) carry no association and so no fair
share. Usage is billing-seconds decayed with ``decay_half_life``, charged continuously while a
job runs: between two instants an association with running billing rate ``r`` evolves as
``U' = -lambda U + r`` (``lambda = ln 2 / half_life``), which this module solves exactly.
"""

from __future__ import annotations

import math

from kiln.config import SchedulerConfig
from schedd.scheduler.snapshot import AssociationView, PendingJob


class UsageLedger:
    """Decayed usage per (account, user) association, updated as jobs start and end.

    Every association decays by the same factor, so the whole ledger is brought up to date at
    most once per instant (one ``exp`` for all); the AssociationView objects handed to the core
    are made once per association and updated in place.
    """

    def __init__(self, config: SchedulerConfig):
        self.decay = math.log(2) / config.decay_half_life if config.decay_half_life > 0 else 0.0
        self.weights = config.tres_billing_weights
        self.max_tres = config.billing_max_tres
        self.at = 0.0  # the instant every usage is up to date at
        self.tree: list[AssociationView] = []  # accounts and users, in order of appearance
        self.users: list[AssociationView] = []
        self.rates: list[float] = []  # billing units running now, per entry of ``users``
        self.index: dict[tuple[str, str], int] = {}  # (account, user) -> index in ``users``
        self.accounts: set[str] = set()
        self.charging: dict[int, tuple[int, float]] = {}  # job -> (user index, rate)

    def billing(self, job: PendingJob) -> float:
        """Slurm's billing TRES of a job: weighted sum (or max, with MAX_TRES) of cpu and gpu."""
        cpu = self.weights.get("cpu", 0.0) * job.cpus_per_node * job.num_nodes
        gpu = self.weights.get("gres/gpu", 0.0) * job.gpus_per_node * job.num_nodes
        return max(cpu, gpu) if self.max_tres else cpu + gpu

    def start(self, job: PendingJob, now: float) -> None:
        if not job.user:
            return
        self.advance(now)
        i = self.index.get((job.account, job.user))
        if i is None:
            i = self._add(job.account, job.user)
        rate = self.billing(job)
        self.rates[i] += rate
        self.charging[job.job_id] = (i, rate)

    def end(self, job_id: int, now: float) -> None:
        charged = self.charging.pop(job_id, None)
        if charged is None:
            return
        self.advance(now)
        i, rate = charged
        self.rates[i] = max(self.rates[i] - rate, 0.0)

    def views(self, now: float) -> list[AssociationView]:
        """The association tree with usage as of ``now``."""
        self.advance(now)
        return self.tree

    def advance(self, now: float) -> None:
        """Bring every usage to ``now``: ``U <- U k + r (1 - k) / lambda``, ``k = e^(-lambda dt)``."""
        dt = now - self.at
        if dt <= 0:
            return
        if self.decay:
            keep = math.exp(-self.decay * dt)
            gain = (1.0 - keep) / self.decay
        else:
            keep, gain = 1.0, dt
        for view, rate in zip(self.users, self.rates, strict=True):
            view.usage = view.usage * keep + rate * gain
        self.at = now

    def _add(self, account: str, user: str) -> int:
        if account not in self.accounts:
            self.accounts.add(account)
            self.tree.append(AssociationView(account=account))
        view = AssociationView(account=account, user=user)
        self.tree.append(view)
        self.users.append(view)
        self.rates.append(0.0)
        self.index[(account, user)] = len(self.users) - 1
        return len(self.users) - 1
