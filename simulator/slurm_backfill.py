"""``kiln sim --policy slurm``: a model of Slurm 22.05's scheduling, for comparison.

Not kiln's scheduler core: this module replays a trace the way ``slurmctld`` of Slurm 22.05
(``SchedulerType=sched/backfill``, ``PriorityType=priority/multifactor``,
``SelectType=select/cons_tres``, one partition) would schedule it. Every rule below names the
Slurm 22.05.8 source it follows (tag ``slurm-22-05-8-1`` of github.com/SchedMD/slurm); the
line numbers are that tag's.

Two ways a batch job starts
---------------------------

Not at submission: ``_slurm_rpc_submit_batch_job`` calls ``job_allocate`` with
``allocate == 0``, which makes it ``test_only`` (``job_mgr.c`` 5490-5491); only ``salloc`` and
``srun`` allocate there. (Seen on the reference install: every ``sbatch`` job starts in a
scheduling pass, none in its submission RPC.)

1. **The main scheduler** (``job_scheduler.c`` ``_schedule``): walks the pending jobs in
   priority order (``sort_job_queue2``: priority, then submit time, then job id) and starts each
   that fits now; the first that does not fit (``ESLURM_NODES_BUSY``) closes its partition
   (``fail_by_part``, 1810-1819, 1976-1995), so with one partition it is a strict FIFO prefix.
   It runs: when a job ends (``proc_req.c`` ``_slurm_rpc_epilog_complete``, 2015-2035:
   ``schedule(false)``, at most ``default_queue_depth`` = 100 jobs, ``job_scheduler.c`` 1036,
   1573); after a submission, from the background loop once ``batch_sched_delay`` = 3 s have
   passed since its last call (``controller.c`` 174, 2221-2227, ``queue_job_scheduler``
   1148-1152); and on the whole queue every ``sched_interval`` = 60 s (``controller.c``
   2213-2219, ``job_scheduler.c`` 1226-1242). ``sched_min_interval`` is 2 *microseconds*
   (``job_scheduler.c`` 130), so it does not delay anything here.
2. **The backfill scheduler** (``backfill.c`` ``_attempt_backfill``, 1716-3060), every
   ``bf_interval`` = 30 s (``backfill_agent``, 1017-1090: it sleeps ``bf_interval``, and when
   nothing changed since the last cycle, ``_more_work`` 3257-3268, polls each second).

One backfill cycle (``_attempt_backfill``)
-------------------------------------------

- The plan, ``node_space``, starts as one record from ``now`` rounded down to
  ``bf_resolution`` (60 s) to ``now + bf_window`` (1440 min) rounded down, with every node
  available (1810-1824). Running jobs are not in it (``bf_running_job_reserve`` is off, and
  ``_bf_reserve_running``, 1420-1470, reserves only whole-node or licensed jobs): they are seen
  by the will-run test only.
- Jobs are walked in priority order (``sort_job_queue``, 1849). At most ``bf_max_job_test`` =
  500 jobs are tested (``DEF_BF_MAX_JOB_TEST``, 115; the check at 1886-1891 counts the jobs
  that reached ``_try_sched``, ``bf_last_depth_try``, 2480-2483). ``bf_max_job_user`` (default
  0, off) skips a user's jobs past that count in a cycle (``_job_exceeds_max_bf_param``,
  1566-1662). ``bf_continue`` only matters when a cycle yields its locks (every 2 s of
  real time, ``bf_yield_interval``); the model's cycles take no time, so it changes nothing.
- For each job, from ``start_res = now`` (2361-2440): its usable nodes are those available in
  every plan record overlapping ``[start_res, start_res + time_limit]``; ``later_start`` is the
  end of the first record after which more nodes become available (2390-2414). Too few nodes:
  retry from ``later_start`` (``TRY_LATER``) or give up (2452-2471).
- ``_try_sched`` -> cons_tres ``_will_run_test`` (``select/cons_common/job_test.c``
  1882-2060): if the job fits now on those nodes it starts now; else the running jobs are
  removed in order of their end (start + time limit), in batches: the first batch takes those
  ending within 30 s of the first end rounded up to a 30 s barrier, and the window doubles after
  each batch; the job's start is the end of the LAST job of the first batch after which it fits
  (so the estimate can be later than the exact one). Then ``start = max(start, start_res)``
  (2585-2588).
- Start now: ``_start_job`` (2663-2834). Later than ``later_start``: retry from there
  (2849-2856). Later than ``now + bf_window``: no reservation (2866-2880). Otherwise start and
  end are rounded DOWN to ``bf_resolution`` (2859-2864) and, unless that overlaps an existing
  reservation (``_test_resv_overlap``, 3391-3420: retry from the start), the job's nodes are
  taken out of the plan for that span (``_add_reservation``, 3272-3384: whole nodes, at least
  one ``bf_resolution`` long). EVERY job tested gets a reservation this way, not only the first.

Priority (``priority/multifactor``)
-----------------------------------

``priority_multifactor.c`` ``_get_priority_internal`` 519-600: the weighted sum of the factors,
cut to an integer, at least 1. Age = min(pending time, ``PriorityMaxAge``) / ``PriorityMaxAge``
(2070-2083). Fair share is Fair Tree (``fair_tree.c``, the default since 19.05): each
association's Level FS = S / U (shares over siblings, usage over its parent's, 171-206),
siblings sorted by it, users ranked from the top, fs factor = rank / users (326-392). Usage is
billing-seconds (one per CPU, or per GPU on the GPU model) decayed with
``PriorityDecayHalfLife``. Priorities are recomputed every ``PriorityCalcPeriod`` and set at
submission. The weights are the reference install's (``shared/slurm-reference``,
``h_scontrol_resv.txt``: ``PriorityWeightAge=1000``, ``PriorityWeightFairShare=10000``,
``PriorityWeightQOS=10000`` with QOS ``normal`` of priority 0, the others 0, half-life and max
age 7 days, ``PriorityCalcPeriod`` 1 min). Jobs of the trace's users are placed as in
``simulator/machine.py``: user ``u<user>`` under account ``g<group>``, one share each.

Time limits are whole minutes in Slurm: a job's limit is its estimate rounded up to a minute.
Slurm's clock is whole seconds (``time(NULL)``): every decision uses ``floor(now)``.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.machine import Machine, Shape
from simulator.replay import JobRecord, Replay, SimError
from simulator.swf import Trace, TraceJob

WILL_RUN_WINDOW = 30  # job_test.c 1985: ``int time_window = 30;``


@dataclass(frozen=True, slots=True)
class SlurmParams:
    """slurm.conf settings the model follows; defaults are Slurm 22.05's (weights: the
    reference install's)."""

    bf_interval: int = 30  # backfill.c 100
    bf_window: int = 1440 * 60  # backfill.c 102 (minutes in slurm.conf)
    bf_resolution: int = 60  # backfill.c 101
    bf_max_job_test: int = 500  # backfill.c 115
    bf_max_job_user: int = 0  # backfill.c 206
    bf_continue: bool = False  # no effect in a model whose cycles take no time
    sched_interval: int = 60  # job_scheduler.c 1242
    batch_sched_delay: int = 3  # controller.c 174
    default_queue_depth: int = 100  # job_scheduler.c 1036
    weight_age: int = 1000
    weight_fairshare: int = 10000
    weight_qos: int = 10000  # QOS normal has priority 0: contributes nothing
    max_age: int = 7 * 86400  # PriorityMaxAge
    decay_half_life: int = 7 * 86400  # PriorityDecayHalfLife
    calc_period: int = 60  # PriorityCalcPeriod of the reference install
    one_user: bool = False  # every job of one user (a replay submitted by one account)
    # seconds from a job's end until its CPUs are free again and the main scheduler runs (the
    # epilog-complete round trip to slurmd; 0 in trace replays, measured by the validation)
    release_delay: float = 0.0


@dataclass(slots=True)
class _Job:
    job: TraceJob
    shape: Shape
    limit: int  # seconds, whole minutes
    assoc: int  # index of its user association
    prio: int = 1
    key: tuple[int, float, int] = (0, 0.0, 0)  # sort_job_queue2's order


@dataclass(slots=True)
class _Running:
    job_id: int
    limit_end: int  # start + time limit: what the will-run test believes
    nodes: tuple[int, ...]
    per: int
    mask: int
    assoc: int


@dataclass(slots=True)
class SlurmReplay:
    """What :func:`replay_slurm` returns: the common Replay plus how the jobs started."""

    replay: Replay
    started_by: Counter[str] = field(default_factory=Counter)  # submit / main / backfill
    backfill_cycles: int = 0
    main_passes: int = 0


class _FairTree:
    """Decayed usage per (account, user) association and Fair Tree's fs factors."""

    def __init__(self, half_life: int):
        self.decay = math.log(2) / half_life if half_life > 0 else 0.0
        self.accounts: dict[str, list[int]] = {}
        self.account_of: list[str] = []
        self.index: dict[tuple[str, str], int] = {}
        self.usage: list[float] = []
        self.rate: list[float] = []  # billing units running now
        self.at = 0.0
        self.factor: list[float] = []

    def assoc(self, account: str, user: str) -> int:
        key = (account, user)
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.usage)
            self.usage.append(0.0)
            self.rate.append(0.0)
            self.account_of.append(account)
            self.accounts.setdefault(account, []).append(i)
            self.recompute()
        return i

    def advance(self, now: float) -> None:
        """Usage up to ``now``: U' = -lambda U + rate, solved exactly."""
        dt = now - self.at
        if dt <= 0:
            return
        if self.decay:
            f = math.exp(-self.decay * dt)
            g = (1 - f) / self.decay
            self.usage = [u * f + r * g for u, r in zip(self.usage, self.rate, strict=True)]
        else:
            self.usage = [u + r * dt for u, r in zip(self.usage, self.rate, strict=True)]
        self.at = now

    def recompute(self) -> None:
        """fair_tree.c ``_calc_tree_fs``: rank users depth first by Level FS, ties shared."""
        n_users = len(self.usage)
        factor = [0.0] * n_users
        acct_usage = {a: sum(self.usage[i] for i in m) for a, m in self.accounts.items()}
        total = sum(acct_usage.values())
        s_acct = 1.0 / len(self.accounts) if self.accounts else 0.0

        def level(s: float, u: float) -> float:
            return math.inf if u == 0 else s / u

        accts = sorted(self.accounts, key=lambda a: -level(s_acct, acct_usage[a] / total
                                                           if total else 0.0))
        rank = rnt = n_users
        prev_acct: float | None = None
        for a in accts:
            lf_a = level(s_acct, acct_usage[a] / total if total else 0.0)
            acct_tied = prev_acct is not None and lf_a == prev_acct
            prev_acct = lf_a
            members = self.accounts[a]
            s_user = 1.0 / len(members)
            au = acct_usage[a]
            users = sorted(members, key=lambda i: -level(s_user, self.usage[i] / au if au else 0.0))
            prev: float | None = None
            for k, i in enumerate(users):
                lf = level(s_user, self.usage[i] / au if au else 0.0)
                tied = acct_tied if k == 0 else lf == prev
                if not tied:
                    rank = rnt
                factor[i] = rank / n_users
                rnt -= 1
                prev = lf
        self.factor = factor


class _Sim:
    def __init__(self, trace: Trace, machine: Machine, params: SlurmParams):
        self.p = params
        self.machine = machine
        self.n = len(machine.nodes)
        self.cap = machine.gpus_per_node or machine.nodes[0].cpus
        self.free = [machine.gpus_per_node or node.cpus for node in machine.nodes]
        self.all_mask = (1 << self.n) - 1
        self.fs = _FairTree(params.decay_half_life)
        self.pending: dict[int, _Job] = {}
        self.order: list[tuple[tuple[int, float, int], int]] = []  # sorted (key, job id)
        self.running: dict[int, _Running] = {}
        self.by_end: list[tuple[int, int]] = []  # sorted (limit_end, job id)
        self.ends: list[tuple[float, int]] = []  # heap of (actual end, job id)
        self.records: list[JobRecord] = []
        self.started_at: dict[int, float] = {}
        self.first_res: dict[int, float] = {}
        self.last_res: dict[int, float] = {}
        self.started_by: Counter[str] = Counter()
        self.jobs: dict[int, _Job] = {}
        self.last_change = -math.inf  # last submit, start or end (backfill.c _more_work)
        self.bf_cycles = 0
        self.main_passes = 0

    # ------------------------------------------------------------------ priority
    def priority(self, j: _Job, now: int) -> int:
        p = self.p
        age = min(max(now - int(j.job.submit), 0), p.max_age) / p.max_age if p.max_age else 0.0
        value = age * p.weight_age + self.fs.factor[j.assoc] * p.weight_fairshare
        return max(int(value), 1)

    def reprioritise(self, now: int) -> None:
        self.fs.advance(now)
        self.fs.recompute()
        for j in self.pending.values():
            j.prio = self.priority(j, now)
            j.key = (-j.prio, j.job.submit, j.job.job_id)
        self.order = sorted((j.key, i) for i, j in self.pending.items())

    # ------------------------------------------------------------------ resources
    def fit(self, free: list[int], avail: int, shape: Shape) -> tuple[int, ...] | None:
        """cons_tres's pick, first fit in node order: ``num_nodes`` nodes of ``avail`` with
        ``per_node`` units free, or None."""
        k, per = shape.num_nodes, shape.per_node
        chosen: list[int] = []
        m = avail
        while m:
            low = m & -m
            i = low.bit_length() - 1
            if free[i] >= per:
                chosen.append(i)
                if len(chosen) == k:
                    return tuple(chosen)
            m ^= low
        return None

    def start(self, j: _Job, nodes: tuple[int, ...], now: float, how: str) -> None:
        job_id = j.job.job_id
        del self.pending[job_id]
        per = j.shape.per_node
        mask = 0
        for i in nodes:
            self.free[i] -= per
            if self.free[i] < 0:
                raise SimError(f"t={now:g}: starting job {job_id} overcommits node {i}")
            mask |= 1 << i
        limit_end = int(now) + j.limit
        r = _Running(job_id, limit_end, nodes, per, mask, j.assoc)
        self.running[job_id] = r
        bisect.insort(self.by_end, (limit_end, job_id))
        heapq.heappush(self.ends, (now + j.job.run + self.p.release_delay, job_id))
        self.started_at[job_id] = now
        self.started_by[how] += 1
        self.fs.advance(now)
        self.fs.rate[j.assoc] += j.shape.units
        self.last_change = now

    def finish(self, job_id: int, now: float) -> None:
        r = self.running.pop(job_id)
        self.by_end.remove((r.limit_end, job_id))
        for i in r.nodes:
            self.free[i] += r.per
        j = self.jobs.pop(job_id)
        self.fs.advance(now)
        self.fs.rate[r.assoc] -= j.shape.units
        start = self.started_at.pop(job_id)
        self.records.append(JobRecord(job_id, j.job.submit, start, now - self.p.release_delay,
                                      j.job.procs, j.shape.units, j.job.run, j.job.user))
        self.last_change = now

    def drop_started(self) -> None:
        self.order = [(k, i) for k, i in self.order if i in self.pending]

    # ------------------------------------------------------------------ the three starts
    def submit(self, tj: TraceJob, shape: Shape, now: float) -> None:
        """A batch job joins the queue: ``job_allocate`` is called with ``allocate == 0`` for
        ``sbatch`` (``job_mgr.c`` 5490-5491: ``test_only``), so it never starts at submission."""
        p = self.p
        user = "u0" if p.one_user else f"u{tj.user}"
        account = "default" if p.one_user or tj.group < 0 else f"g{tj.group}"
        assoc = self.fs.assoc(account, user)
        limit = max(60, int(math.ceil(tj.estimate / 60)) * 60)
        j = _Job(tj, shape, limit, assoc)
        self.jobs[tj.job_id] = j
        self.pending[tj.job_id] = j
        j.prio = self.priority(j, int(now))
        j.key = (-j.prio, tj.submit, tj.job_id)
        self.last_change = now
        bisect.insort(self.order, (j.key, tj.job_id))

    def main_pass(self, now: float, full: bool) -> None:
        """job_scheduler.c _schedule: FIFO prefix in priority order."""
        self.main_passes += 1
        depth = 0
        started = False
        for _key, job_id in self.order:
            if not full and depth > self.p.default_queue_depth:
                break
            depth += 1
            j = self.pending[job_id]
            nodes = self.fit(self.free, self.all_mask, j.shape)
            if nodes is None:
                break
            self.start(j, nodes, now, "main")
            started = True
        if started:
            self.drop_started()

    def will_run(self, j: _Job, avail: int, now: int) -> tuple[int, tuple[int, ...]] | None:
        """cons_tres _will_run_test: now, or the end of the last running job of the first
        batch whose removal lets the job fit."""
        nodes = self.fit(self.free, avail, j.shape)
        if nodes is not None:
            return now, nodes
        runs = [self.running[i] for _, i in self.by_end if self.running[i].mask & avail]
        if not runs:
            return None
        future = list(self.free)
        anchor = runs[0].limit_end + (WILL_RUN_WINDOW - runs[0].limit_end % WILL_RUN_WINDOW)
        window = WILL_RUN_WINDOW
        i, n = 0, len(runs)
        while i < n:
            while True:
                r = runs[i]
                for x in r.nodes:
                    future[x] += r.per
                last = r
                i += 1
                if i >= n or runs[i].limit_end > anchor + window:
                    break
            window *= 2
            while i < n and runs[i].limit_end > anchor + window:
                window *= 2
            nodes = self.fit(future, avail, j.shape)
            if nodes is not None:
                # a job past its limit and not yet killed: _guess_job_end says "later"
                return (last.limit_end if last.limit_end > now else now + 1), nodes
        return None

    def backfill(self, now_f: float) -> None:
        """backfill.c _attempt_backfill."""
        p = self.p
        self.bf_cycles += 1
        now = int(now_f)
        res = p.bf_resolution
        window_end = (now + p.bf_window) // res * res
        # the plan: boundaries t[0] < t[1] < ... and masks[i] for [t[i], t[i+1])
        times = [now // res * res, window_end]
        masks = [self.all_mask]
        tested = 0
        per_user: Counter[int] = Counter()
        started = False
        for _key, job_id in list(self.order):
            if tested >= p.bf_max_job_test:
                break
            j = self.pending[job_id]
            if p.bf_max_job_user:
                if per_user[j.assoc] >= p.bf_max_job_user:
                    continue
                per_user[j.assoc] += 1
            k = j.shape.num_nodes
            start_res = now
            counted = False
            while True:  # TRY_LATER
                end_time = max(start_res, now) + j.limit
                avail, later = self.all_mask, 0
                last = len(masks) - 1
                for idx in range(len(masks)):
                    b, e, m = times[idx], times[idx + 1], masks[idx]
                    if e > start_res and idx < last and not later:
                        if self.all_mask & masks[idx + 1] & ~(avail & m):
                            later = e
                    if e <= start_res:
                        pass
                    elif b <= end_time:
                        avail &= m
                    else:
                        break
                if avail.bit_count() < k:
                    if later:
                        start_res = later
                        continue
                    break
                if not counted:
                    tested += 1
                    counted = True
                found = self.will_run(j, avail, now)
                if found is None:
                    if later:
                        start_res = later
                        continue
                    break
                begin, nodes = found
                begin = max(begin, start_res)
                if begin <= now:
                    self.start(j, nodes, now_f, "backfill")
                    started = True
                    break
                if later and begin > later:
                    start_res = later
                    continue
                if begin > now + p.bf_window:
                    break
                sr = begin // res * res
                er = max((begin + j.limit) // res * res, sr + res)
                mask = 0
                for x in nodes:
                    mask |= 1 << x
                if _overlaps(times, masks, mask, sr, er):
                    if begin <= start_res:
                        break
                    start_res = begin
                    continue
                _reserve(times, masks, mask, sr, er)
                self.first_res.setdefault(job_id, float(begin))
                self.last_res[job_id] = float(begin)
                break
        if started:
            self.drop_started()


def _overlaps(times: list[int], masks: list[int], mask: int, start: int, end: int) -> bool:
    """backfill.c _test_resv_overlap: a record overlapping [start, end) lacks one of the nodes."""
    for idx, m in enumerate(masks):
        if times[idx + 1] > start and times[idx] < end and mask & ~m:
            return True
    return False


def _split(times: list[int], masks: list[int], t: int) -> None:
    i = bisect.bisect_right(times, t) - 1
    if 0 <= i < len(masks) and times[i] < t < times[i + 1]:
        times.insert(i + 1, t)
        masks.insert(i + 1, masks[i])


def _reserve(times: list[int], masks: list[int], mask: int, start: int, end: int) -> None:
    """backfill.c _add_reservation: take ``mask``'s nodes out of the plan over [start, end)."""
    start = max(start, times[0])
    end = min(end, times[-1])
    if end <= start:
        return
    _split(times, masks, start)
    _split(times, masks, end)
    keep = ~mask
    for idx in range(len(masks)):
        if times[idx] >= start and times[idx + 1] <= end:
            masks[idx] &= keep


def replay_slurm(trace: Trace, machine: Machine, params: SlurmParams | None = None,
                 progress: Callable[[int, int], None] | None = None) -> SlurmReplay:
    """Replay ``trace`` on ``machine`` as Slurm 22.05 would schedule it (module docstring)."""
    p = params or SlurmParams()
    sim = _Sim(trace, machine, p)
    arrivals = [(job, shape) for job in trace.jobs if (shape := machine.shape(job.procs))]
    began = time.perf_counter()
    inf = math.inf
    i, n = 0, len(arrivals)
    t0 = math.floor(arrivals[0][0].submit) if arrivals else 0
    next_bf = t0 + p.bf_interval  # backfill_agent's next look
    last_bf = -inf  # last_backfill_time
    last_bg = t0  # controller.c last_sched_time
    next_full = t0 + p.sched_interval  # last_full_sched_time + sched_interval
    next_calc = t0 + p.calc_period  # the decay thread's next priority update
    sched_request = False  # queue_job_scheduler was called (job_sched_cnt > 0)
    requested = t0  # when it was first called since the last main pass
    steps = 0
    while i < n or sim.ends or sim.pending:
        t_arr = arrivals[i][0].submit if i < n else inf
        t_end = sim.ends[0][0] if sim.ends else inf
        timers = inf
        if sim.pending:  # the timers only matter while jobs wait
            # never before the request: after an idle spell last_bg is far behind, and the
            # controller's loop runs the pass at its first look after the request
            bg = max(last_bg + p.batch_sched_delay, requested) if sched_request else inf
            timers = min(next_bf, next_full, next_calc, bg)
        now = min(t_arr, t_end, timers)
        if now == inf:
            raise SimError(f"{len(sim.pending)} job(s) can never start (job {min(sim.pending)})")
        if now == t_end:
            while sim.ends and sim.ends[0][0] == now:
                sim.finish(heapq.heappop(sim.ends)[1], now)
            if sim.pending:
                sim.main_pass(now, full=False)  # _slurm_rpc_epilog_complete: schedule(false)
        elif now == t_arr:
            if not sim.pending:  # timers that fired on an empty queue changed nothing
                if next_calc <= now:
                    sim.fs.advance(now)
                    sim.fs.recompute()
                    next_calc = _next_tick(next_calc, p.calc_period, now)
                next_full = _next_tick(next_full, p.sched_interval, now)
                if next_bf < now:  # idle: the agent polls each second
                    next_bf += math.ceil(now - next_bf)
            while i < n and arrivals[i][0].submit == now:
                sim.submit(*arrivals[i], now)
                if not sched_request:
                    requested = now
                sched_request = True
                i += 1
        else:
            tick = int(now)
            if now == next_calc:
                sim.reprioritise(tick)
                next_calc += p.calc_period
            if now == next_full:
                sim.main_pass(now, full=True)
                last_bg = tick
                sched_request = False
                next_full += p.sched_interval
            elif sched_request and now >= max(last_bg + p.batch_sched_delay, requested):
                sim.main_pass(now, full=False)
                last_bg = tick
                sched_request = False
            if now == next_bf:
                if sim.last_change >= last_bf:
                    sim.backfill(now)
                    last_bf = now
                    next_bf = now + p.bf_interval
                else:  # nothing changed (_more_work): poll each second until something does
                    nxt = min(t_arr, t_end)
                    next_bf = now + max(1, math.ceil(nxt - now)) if nxt < inf else max(
                        now + 1, next_full)
        steps += 1
        if progress is not None and steps % 4096 == 0:
            progress(i, n)
    if sim.pending:
        raise SimError(f"{len(sim.pending)} job(s) never started (job {min(sim.pending)})")
    wall = time.perf_counter() - began
    sim.records.sort(key=lambda r: (r.submit, r.job_id))
    result = Replay(sim.records, sim.first_res, sim.last_res, sim.bf_cycles + sim.main_passes,
                    wall, wall, len(trace.jobs) - n, model="model of Slurm 22.05")
    return SlurmReplay(result, sim.started_by, sim.bf_cycles, sim.main_passes)


def _next_tick(current: float, period: int, after: float) -> float:
    """The first ``current + k * period`` at or after ``after`` (a periodic timer's next firing
    once the idle time it skipped is over)."""
    if current >= after:
        return current
    return current + math.ceil((after - current) / period) * period
