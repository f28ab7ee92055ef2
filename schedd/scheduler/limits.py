"""Schedule-time limits of associations and QOS, as Slurm 22.05 enforces them
(AccountingStorageEnforce=associations,limits,qos): a job over a limit stays PENDING with the
limit's reason (``AssocGrpGRES``, ``AssocMaxJobsLimit``, ``QOSMaxWallDurationPerJobLimit`` ...).

Pure: the input is a :class:`LimitTable` (the association tree with each node's own limits and
its GrpTRESMins usage, and the QOS), the running jobs and ``now``. How limits combine:

- ``Max*`` limits (MaxJobs, MaxWall, MaxTRESPerJob) are per association: a user association
  without its own value uses its account's, and so on up to root. MaxJobs counts the running
  jobs of that one association.
- ``Grp*`` limits (GrpTRES, GrpJobs, GrpTRESMins) of an association count every job below it:
  the user's own jobs for a user association, all its users' and sub-accounts' for an account.
- GrpTRESMins counts the (decayed) usage of this budget period, plus what running jobs still
  hold (remaining time limit x TRES), plus what the job would hold (its limit x TRES).
- QOS limits are checked before association limits, as Slurm does.

The cycle asks ``blocked(job)`` before it places a job and ``charge(job, allocation)`` for every
job it starts, so the jobs started in one cycle count against the limits of the next ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from kiln.model import NodeAllocation
from kiln.slurm import tres as t
from kiln.slurm.gres import GpuTypes, allocation_types
from schedd.scheduler.snapshot import (
    AssocKey,
    Limits,
    LimitTable,
    NodeView,
    PendingJob,
    RunningJob,
)

# Slurm's reason words: (kind, TRES) -> suffix after "Assoc"/"QOS"
_GRP_TRES = {"cpu": "GrpCpuLimit", "mem": "GrpMemLimit", "node": "GrpNodeLimit",
             "billing": "GrpBilling"}
_GRP_MINS = {"cpu": "GrpCPUMinutesLimit", "mem": "GrpMemMinutes", "node": "GrpNodeMinutes",
             "billing": "GrpBillingMinutes"}
_MAX_PER_JOB = {"cpu": "MaxCpuPerJobLimit", "mem": "MaxMemPerJob", "node": "MaxNodePerJobLimit",
                "billing": "MaxBillingPerJob"}
_MAX_PER_USER = {"cpu": "MaxCpuPerUserLimit", "mem": "MaxMemPerUser",
                 "node": "MaxNodePerUserLimit", "billing": "MaxBillingPerUser"}


def tres_reason(prefix: str, kind: dict[str, str], gres: str, name: str) -> str:
    """'Assoc' + 'GrpGRES' for gres/*, else the TRES's own word."""
    if name.startswith("gres/"):
        return prefix + gres
    return prefix + kind.get(name, kind["cpu"])


def pending_tres(job: PendingJob, billing: float | None = None) -> dict[str, int]:
    return t.job_tres(job.cpus_per_node * job.num_nodes, job.mem_per_node_mb * job.num_nodes,
                      job.num_nodes, job.gpus_per_node * job.num_nodes, job.gpu_type, billing,
                      job.shards_per_node * job.num_nodes, job.mps_per_node * job.num_nodes)


def allocation_tres(allocation: Iterable[NodeAllocation],
                    gpu_types: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {"cpu": 0, "mem": 0, "node": 0}
    for a in allocation:
        out["cpu"] += a.cpus
        out["mem"] += a.memory_mb
        out["node"] += 1
        if a.gpus:
            out["gres/gpu"] = out.get("gres/gpu", 0) + len(a.gpus)
            for kind, n in allocation_types(a.node, a.gpus, gpu_types).items():
                out[f"gres/gpu:{kind}"] = out.get(f"gres/gpu:{kind}", 0) + n
        if a.shards:  # gres/shard or gres/mps
            key = f"gres/{a.share_kind}"
            out[key] = out.get(key, 0) + a.shard_count
    return out


def over(request: dict[str, int], used: dict[str, float], limit: dict[str, int]) -> str:
    """The first TRES (in Slurm's order) whose use plus request exceeds the limit, or ''."""
    for name in sorted(limit, key=t.sort_key):
        if used.get(name, 0) + request.get(name, 0) > limit[name] and request.get(name, 0) > 0:
            return name
    return ""


def subtree_usage(table: LimitTable) -> dict[AssocKey, dict[str, float]]:
    """GrpTRESMins usage of each association with everything below it (TRES-minutes)."""
    out: dict[AssocKey, dict[str, float]] = {}
    for key, assoc in table.assocs.items():
        if not assoc.tres_mins_used:
            continue
        for anc in table.chain(*key):
            acc = out.setdefault(anc, {})
            for name, v in assoc.tres_mins_used.items():
                acc[name] = acc.get(name, 0.0) + v
    return out


def spent_budgets(table: LimitTable, running: Iterable[RunningJob],
                  gpu_types: dict[str, str]) -> dict[int, str]:
    """Running jobs to end because a GrpTRESMins budget above them is spent: {job id: why}.

    As Slurm 22.05 does (acct_policy_job_time_out): once an association's usage in this
    period, running jobs' time so far included, reaches its GrpTRESMins for a TRES, every
    running job below it that holds that TRES is timed out. Admission already counts running
    jobs' whole time limit, so this bites only when a budget is lowered, or a time limit raised,
    under running jobs.
    """
    used = subtree_usage(table)
    spent: dict[AssocKey, list[str]] = {}
    for key, assoc in table.assocs.items():
        names = [n for n, cap in sorted(assoc.limits.grp_tres_mins.items(), key=lambda i:
                                        t.sort_key(i[0]))
                 if used.get(key, {}).get(n, 0.0) >= cap]
        if names:
            spent[key] = names
    out: dict[int, str] = {}
    if not spent:
        return out
    for job in running:
        held = allocation_tres(job.allocation, gpu_types)
        for key in table.chain(job.account, job.user):
            name = next((n for n in spent.get(key, []) if held.get(n, 0) > 0), "")
            if name:
                cap = table.assocs[key].limits.grp_tres_mins[name]
                who = f"{key[0]}/{key[1]}" if key[1] else key[0]
                out[job.job_id] = (f"association {who} reached its GrpTRESMins "
                                   f"{name}={cap} minutes")
                break
    return out


@dataclass(slots=True)
class _Tally:
    jobs: int = 0
    tres: dict[str, float] = field(default_factory=dict)
    run_mins: dict[str, float] = field(default_factory=dict)

    def add(self, job_tres: dict[str, int], minutes: float) -> None:
        self.jobs += 1
        for name, amount in job_tres.items():
            self.tres[name] = self.tres.get(name, 0) + amount
            self.run_mins[name] = self.run_mins.get(name, 0.0) + amount * minutes


class Enforcer:
    """One cycle's view of the limits: what running (and just started) jobs use."""

    def __init__(self, table: LimitTable, running: Iterable[RunningJob],
                 nodes: Iterable[NodeView], now: float) -> None:
        self.table = table
        self.now = now
        nodes = list(nodes)
        self.gpu_types = GpuTypes({n.name: n.gpu_type for n in nodes},
                                  {n.name: n.gpu_kinds for n in nodes if n.gpu_kinds})
        self.subtree: dict[AssocKey, _Tally] = {}  # Grp: every job below an association
        self.own: dict[AssocKey, _Tally] = {}  # Max: the association's own jobs
        self.qos: dict[str, _Tally] = {}
        self.qos_user: dict[tuple[str, str], _Tally] = {}
        self.used_mins = subtree_usage(table)
        self._seen = 0  # starts of the walk already charged (see screen)
        self._by_id: dict[int, PendingJob] = {}
        for run in running:
            self._add(run.account, run.user, run.qos,
                      allocation_tres(run.allocation, self.gpu_types),
                      max(run.end_time - now, 0.0) / 60.0)

    def _add(self, account: str, user: str, qos: str, job_tres: dict[str, int],
             minutes: float) -> None:
        chain = self.table.chain(account, user)
        for key in chain:
            self.subtree.setdefault(key, _Tally()).add(job_tres, minutes)
        if chain:
            self.own.setdefault(chain[0], _Tally()).add(job_tres, minutes)
        self.qos.setdefault(qos, _Tally()).add(job_tres, minutes)
        self.qos_user.setdefault((qos, user), _Tally()).add(job_tres, minutes)

    def charge(self, job: PendingJob, allocation: Iterable[NodeAllocation] = ()) -> None:
        """Count a job the cycle starts (its allocation when known, else its request)."""
        alloc = list(allocation)
        job_tres = allocation_tres(alloc, self.gpu_types) if alloc else pending_tres(job)
        self._add(job.account, job.user, job.qos, job_tres, job.time_limit / 60.0)

    def blocked(self, job: PendingJob) -> str:
        """The Slurm reason that keeps the job pending now, or '' when its limits allow it."""
        verdict = self.verdict(job)
        return verdict.reason if verdict is not None else ""

    def verdict(self, job: PendingJob) -> Verdict | None:
        """The limit that keeps the job pending now, with where it is set and what uses it
        (``kiln why`` prints it), or None when its limits allow it."""
        request = pending_tres(job)
        qos = self.table.qos.get(job.qos)
        if qos is not None:
            found = self._qos_verdict(job, qos.limits, request)
            if found is not None:
                return found
        return self._assoc_verdict(job, request)

    def _qos_verdict(self, job: PendingJob, lim: Limits, request: dict[str, int]
                     ) -> Verdict | None:
        where = f"QOS {job.qos}"
        found = per_job_verdict("QOS", lim.max_wall, lim.max_tres_per_job, job, request, where)
        if found is not None:
            return found
        mine = self.qos_user.get((job.qos, job.user), _Tally())
        if lim.max_jobs_per_user is not None and mine.jobs >= lim.max_jobs_per_user:
            return _jobs_verdict("QOSMaxJobsPerUserLimit", "MaxJobsPerUser",
                                 lim.max_jobs_per_user, mine, where + f" (user {job.user})")
        found = _tres_verdict("QOS", _MAX_PER_USER, "MaxGRESPerUser", "MaxTRESPerUser", request,
                              mine, lim.max_tres_per_user, where + f" (user {job.user})")
        if found is not None:
            return found
        everyone = self.qos.get(job.qos, _Tally())
        if lim.grp_jobs is not None and everyone.jobs >= lim.grp_jobs:
            return _jobs_verdict("QOSGrpJobsLimit", "GrpJobs", lim.grp_jobs, everyone, where)
        found = _tres_verdict("QOS", _GRP_TRES, "GrpGRES", "GrpTRES", request, everyone,
                              lim.grp_tres, where)
        if found is not None:
            return found
        need = {k: v * job.time_limit / 60.0 for k, v in request.items()}
        return _mins_verdict("QOS", need, everyone.run_mins, lim.grp_tres_mins, where)

    def _assoc_verdict(self, job: PendingJob, request: dict[str, int]) -> Verdict | None:
        chain = self.table.chain(job.account, job.user)
        if not chain:
            return None
        wall_at, max_wall = self.table.effective_at(chain, "max_wall")
        tres_at, max_tres = self.table.effective_at(chain, "max_tres_per_job")
        found = per_job_verdict("Assoc", max_wall, {}, job, request,  # type: ignore[arg-type]
                                set_on(wall_at, chain[0]))
        found = found or per_job_verdict("Assoc", None, max_tres or {},  # type: ignore[arg-type]
                                         job, request, set_on(tres_at, chain[0]))
        if found is not None:
            return found
        jobs_at, max_jobs = self.table.effective_at(chain, "max_jobs")
        own = self.own.get(chain[0], _Tally())
        if max_jobs is not None and own.jobs >= max_jobs:  # type: ignore[operator]
            return _jobs_verdict("AssocMaxJobsLimit", "MaxJobs", max_jobs,  # type: ignore[arg-type]
                                 own, set_on(jobs_at, chain[0]))
        need = {k: v * job.time_limit / 60.0 for k, v in request.items()}
        for key in chain:
            found = self._grp_verdict(key, request, need)
            if found is not None:
                return found
        return None

    def _grp_verdict(self, key: AssocKey, request: dict[str, int],
                     need: dict[str, float]) -> Verdict | None:
        lim = self.table.assocs[key].limits
        tally = self.subtree.get(key, _Tally())
        where = assoc_label(key)
        if lim.grp_jobs is not None and tally.jobs >= lim.grp_jobs:
            return _jobs_verdict("AssocGrpJobsLimit", "GrpJobs", lim.grp_jobs, tally, where)
        found = _tres_verdict("Assoc", _GRP_TRES, "GrpGRES", "GrpTRES", request, tally,
                              lim.grp_tres, where)
        if found is not None or not lim.grp_tres_mins:
            return found
        used = dict(self.used_mins.get(key, {}))
        for k, v in tally.run_mins.items():
            used[k] = used.get(k, 0.0) + v
        return _mins_verdict("Assoc", need, used, lim.grp_tres_mins, where)

    # --- the two hooks the cycle uses ----------------------------------------------------

    def screen(self, order: Iterable[PendingJob], started: list[tuple[int, list]],
               reasons: dict[int, str]) -> Iterator[PendingJob]:
        """``order`` without the jobs a limit holds back (their reason goes to ``reasons``).
        Before each job, the jobs the walk started meanwhile (``started`` grows as it walks)
        are charged, so three 1-GPU jobs under GrpTRES=gres/gpu=2 give two starts."""
        by_id = self._by_id
        for job in order:
            by_id[job.job_id] = job
            self._charge_new(started, by_id)
            reason = self.blocked(job)
            if reason:
                reasons[job.job_id] = reason
                continue
            yield job

    def _charge_new(self, started: list[tuple[int, list]], by_id: dict[int, PendingJob]) -> None:
        while self._seen < len(started):
            job_id, alloc = started[self._seen]
            self.charge(by_id[job_id], alloc)
            self._seen += 1

    def settle(self, started: list[tuple[int, list]],
               reasons: dict[int, str]) -> list[tuple[int, list]]:
        """The starts that respect the limits, charged in order. Starts the walk made after the
        screen saw its last job (the fill phase gathers jobs and starts them together) are
        checked here; one a limit forbids is dropped and keeps pending with that reason."""
        by_id = self._by_id
        kept = list(started[: self._seen])
        for job_id, alloc in started[len(kept):]:
            job = by_id.get(job_id)
            reason = self.blocked(job) if job is not None else ""
            if reason:
                reasons[job_id] = reason
                continue
            if job is not None:
                self.charge(job, alloc)
            kept.append((job_id, alloc))
        return kept


def per_job_reason(prefix: str, max_wall: int | None, max_tres: dict[str, int],
                   job: PendingJob, request: dict[str, int]) -> str:
    """MaxWall and MaxTRESPerJob: a property of the job alone (DenyOnLimit rejects these at
    submit time)."""
    found = per_job_verdict(prefix, max_wall, max_tres, job, request, "")
    return found.reason if found is not None else ""


def per_job_verdict(prefix: str, max_wall: int | None, max_tres: dict[str, int],
                    job: PendingJob, request: dict[str, int], where: str) -> Verdict | None:
    if max_wall is not None and job.time_limit > max_wall:
        return Verdict(f"{prefix}MaxWallDurationPerJobLimit", f"MaxWall={max_wall // 60} minutes",
                       where, need=f"a time limit of {job.time_limit // 60} minutes",
                       never=True, what="minutes")
    name = over(request, {}, max_tres or {})
    if name:
        return Verdict(tres_reason(prefix, _MAX_PER_JOB, "MaxGRESPerJob", name),
                       f"MaxTRESPerJob={name}={max_tres[name]}", where,
                       need=f"{name}={request[name]}", never=True, what=name)
    return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """A limit that holds a job back, in the words ``kiln why`` prints.

    ``reason`` is Slurm's word (``AssocGrpGRES``); ``limit`` the limit as sacctmgr spells it
    (``GrpTRES=gres/gpu=4``); ``where`` the association or QOS it is set on; ``need`` what the
    job asks of it; ``in_use`` what running jobs hold of it there now (with ``jobs`` of them,
    ``mine`` the job's owner's) — empty for a limit on the job alone; ``never``: the job alone
    is over the limit, so it can never start under it."""

    reason: str
    limit: str
    where: str
    need: str
    never: bool
    what: str = ""  # the TRES (or "jobs", "minutes") the limit counts
    in_use: str = ""
    jobs: int = 0


def assoc_label(key: AssocKey) -> str:
    account, user = key
    return f"user {user}'s association in account {account}" if user else f"account {account}"


def set_on(at: AssocKey | None, own: AssocKey) -> str:
    """Where a Max* limit is set, and whose association inherits it."""
    if at is None:
        return ""
    if at == own:
        return assoc_label(at)
    return f"{assoc_label(at)} (inherited by {assoc_label(own)})"


def _jobs_verdict(reason: str, word: str, cap: int, tally: _Tally, where: str) -> Verdict:
    return Verdict(reason, f"{word}={cap}", where, need="one more running job",
                   never=cap <= 0, what="jobs", in_use=f"{tally.jobs} running job(s)",
                   jobs=tally.jobs)


def _tres_verdict(prefix: str, kind: dict[str, str], gres: str, word: str,
                  request: dict[str, int], tally: _Tally, limit: dict[str, int],
                  where: str) -> Verdict | None:
    name = over(request, tally.tres, limit)
    if not name:
        return None
    held = int(tally.tres.get(name, 0))
    return Verdict(tres_reason(prefix, kind, gres, name), f"{word}={name}={limit[name]}", where,
                   need=f"{name}={request[name]}", never=request[name] > limit[name],
                   what=name, in_use=f"{name}={held} held by {tally.jobs} running job(s)",
                   jobs=tally.jobs)


def _mins_verdict(prefix: str, need: dict[str, float], used: dict[str, float],
                  limit: dict[str, int], where: str) -> Verdict | None:
    name = over(need, used, limit)  # type: ignore[arg-type]
    if not name:
        return None
    return Verdict(tres_reason(prefix, _GRP_MINS, "GrpGRESMinutes", name),
                   f"GrpTRESMins={name}={limit[name]}", where,
                   need=f"{name}={need[name]:.0f} minutes (its request times its time limit)",
                   never=need[name] > limit[name], what=name,
                   in_use=f"{used.get(name, 0.0):.0f} minutes used this period or held by "
                          "running jobs")
