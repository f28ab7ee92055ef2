"""schedd's in-memory picture of the cluster, kept in step with the ledger: the one door for writes.

Every change goes through a method here: written to the ledger first (one transaction, through
``Store``), then applied in memory, so what a client is told has always been committed and the
two never disagree on the order. Jobs change through ``commit`` (field changes, their events and
step rows); nodes through ``save_node``; accounts, reservations, steps and the audit trail
through their own methods. Requests and the scheduling cycle read from memory only; the ledger
is read once, at start-up (and by the accounting queries, which read history).

What reads it for the core lives beside it: ``schedd/eligibility.py`` (may a pending job be
considered yet) and ``schedd/snapshots.py`` (the core's input); the indexes they read (the
dependents, the singletons) are kept here, in step with every write.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kiln.config import Config
from kiln.model import (
    ACTIVE_STATES,
    Allocation,
    Job,
    JobState,
    Node,
    NodeState,
    Partition,
)
from kiln.slurm import dependency
from kiln.slurm.gres import GpuTypes, kinds_of
from schedd.domain.accounts import Accounts
from schedd.domain.dependents import Dependents
from schedd.domain.reservation import Reservation
from schedd.domain.usage import UsageMeter
from schedd.ledger.records import AccountingChange, JobEvent, LedgerError, StepRecord
from schedd.ledger.store import PreparedInsert, Store
from schedd.scheduler.runtimes import LeadCalibration, RuntimeHistory, shape_of
from schedd.scheduler.snapshot import (
    PendingJob,
    pending_from_job,
)

log = logging.getLogger("schedd.state")

RUNNING_STATES = frozenset({JobState.RUNNING, JobState.COMPLETING})
# the ends whose run time says how long the job's kind runs (a preempted, requeued or
# node-failed run was cut by something else): schedd/scheduler/runtimes.py
RUN_ENDS = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.TIMEOUT,
                      JobState.CANCELLED, JobState.OUT_OF_MEMORY})
RUNS_LOADED = 20_000  # recent runs read into the run-time history at start-up
LEADS_LOADED = 2_000  # recent starts with a published band, to calibrate the next ones


@dataclass(slots=True)
class Submitting:
    """A big array submission between its admission and its commit (``State.submitting``):
    its tasks' association and QOS, how many, and the dependency edges they will hold."""

    account: str
    user: str
    qos: str
    count: int
    edges: int

    def reserved_edges(self, user: str) -> int:
        return self.edges if self.user == user else 0


@dataclass(slots=True)
class NodeUse:
    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0
    jobs: int = 0
    shards: int = 0  # gres/shard in use
    mps: int = 0  # gres/mps units in use
    gpu_ids: list[int] = field(default_factory=list)  # the GPU indices in use (GresUsed by type)

    def add(self, a: Allocation) -> None:
        """One job's allocation on the node."""
        self.cpus += a.cpus
        self.memory_mb += a.memory_mb
        self.gpus += len(a.gpus)
        self.gpu_ids.extend(a.gpus)
        if a.share_kind == "mps":
            self.mps += a.shard_count
        else:
            self.shards += a.shard_count
        self.jobs += 1


def _per_gpu(partitions: Mapping[str, Partition], node: Node, key: str) -> int:
    """A GPU share's units per GPU (``shards_per_gpu``, ``mps_per_gpu``): the node's own, else
    the first of its partitions' that says; 0 = none."""
    own = int(getattr(node, key))
    if own or not node.gpus:
        return own
    for name in node.partitions:
        part = partitions.get(name)
        if part is not None and getattr(part, key):
            return int(getattr(part, key))
    return 0


class State:
    def __init__(self, cfg: Config, store: Store):
        self.cfg = cfg
        self.store = store
        self.jobs: dict[int, Job] = {}
        self.nodes: dict[str, Node] = {}
        self.partitions: dict[str, Partition] = {p.name: p for p in cfg.partitions}
        self.next_job_id = 1
        self._finished_cache: dict[tuple[int, int | None], list[JobState]] = {}
        # array id -> task id -> job (the array's jobs in memory): a dependency term or an
        # array's task list costs a lookup, not a scan of every job
        self._arrays: dict[int, dict[int, Job]] = {}
        # pending jobs' dependencies, judged once and then edge by edge: the index from each
        # job (task, array) to its dependents (schedd/domain/dependents.py)
        self.dependents = Dependents()
        # an in-memory array's tasks, summed up for a whole-array reference; dropped when one
        # of them changes
        self._array_summaries: dict[int, dependency.Summary] = {}
        self.dependency_terms_evaluated = 0  # references looked up (tests, metrics)
        # what pending jobs' dependencies expand to (array tasks counted, repeats merged):
        # job id -> (user, edges); user -> edges of their pending jobs ([schedd]
        # max_dependency_edges_per_user)
        self._edges: dict[int, tuple[str, int]] = {}
        self._edge_exprs: dict[int, str] = {}
        self.user_edges: Counter[str] = Counter()
        # big array submissions admitted and not yet committed (handlers/submit.py makes their
        # rows a slice at a time): what they will add, counted meanwhile by admission's checks
        # (MaxJobCount, the submit limits, the dependency edges), so that no submission
        # between their slices is admitted past a limit that the two together break
        self.submitting: list[Submitting] = []
        # --dependency=singleton: (user, name) -> (a job of theirs runs, lowest pending id);
        # rebuilt after a change, not once per singleton job
        self._singletons: dict[tuple[str, str], tuple[bool, float]] | None = None
        self.accounts = Accounts()  # associations, QOS, limits (schedd/domain/accounts.py)
        self.usage = UsageMeter(cfg.scheduler)  # fair-share and GrpTRESMins usage
        self.reservations: dict[str, Reservation] = {}  # advance reservations by name
        # how long jobs really ran, and how the forecasts' waits turned out (kiln why,
        # sbatch --test-only, kiln stats: schedd/scheduler/runtimes.py)
        self.runtimes = RuntimeHistory()
        self.leads = LeadCalibration(floor=float(cfg.scheduler.bf_resolution or 1))
        # how many times jobs entered each state (and "submitted") since schedd started: sdiag
        self.state_counts: Counter[str] = Counter()

    # --- loading ------------------------------------------------------------------------------

    def load(self, now: float) -> None:
        for job in self.store.load_jobs(active_only=True,
                                        finished_since=now - self.cfg.min_job_age):
            self._keep(job)
        self.index_dependencies()
        marks = self.store.node_reason_marks()
        for node in self.store.load_nodes():
            node.last_heartbeat = 0.0  # alive only once its agent registers again
            node.partitions = self.partitions_of(node.name)
            mark = marks.get(node.name)
            if node.reason and mark is not None and mark.detail.endswith(f"reason={node.reason}"):
                node.reason_time, node.reason_uid = mark.time, mark.actor_uid
            self.nodes[node.name] = node
        self.next_job_id = self.store.max_job_id() + 1
        self.load_accounts(now)
        for row in self.store.load_reservations():
            resv = Reservation.from_row(row)
            self.reservations[resv.name] = resv
        self.load_history(now)
        log.info("loaded %d jobs, %d nodes; next job id %d",
                 len(self.jobs), len(self.nodes), self.next_job_id)

    def load_accounts(self, now: float) -> None:
        """The association tree, QOS and usage; a fresh ledger gets root and QOS normal."""
        self.accounts = Accounts.from_rows(self.store.load_accounting())
        defaults = self.accounts.missing_defaults()
        if defaults.accounts or defaults.users or defaults.associations or defaults.qos:
            self.store.write_accounting(defaults)
        self.usage.load(self.store, self.accounts, now)

    def load_history(self, now: float) -> None:
        """The run-time history and the forecasts' record, from the ledger's recent jobs."""
        for job in self.store.recent_runs([s.value for s in RUN_ENDS], RUNS_LOADED):
            self._record_run(job)
        started = [job for page in self.store.iter_started_since(0.0, LEADS_LOADED, 1000)
                   for job in page]
        for job in reversed(started):
            band = job.forecast_band
            if band:
                self.leads.published(job.id, band[2], band[3], band[4], band[1])
                self._record_lead(job)

    def _record_run(self, job: Job) -> None:
        if job.start_time and job.end_time >= job.start_time:
            self.runtimes.record(job.user, shape_of(self.pending_view(job)),
                                 job.end_time - job.start_time)

    def _record_lead(self, job: Job) -> None:
        if job.forecast_band and job.start_time:
            self.leads.started(job.id, job.start_time)

    def gpu_types(self) -> GpuTypes:
        """Node -> its GPU model, for the typed TRES (``gres/gpu:<type>``) of allocations; a
        node of several types (a mixed MIG layout) by GPU index (``GpuTypes.kinds``)."""
        kinds = {name: k for name, node in self.nodes.items() if (k := kinds_of(node.gpus))}
        return GpuTypes({name: "" if name in kinds else node.gpu_model
                         for name, node in self.nodes.items() if node.gpus}, kinds)

    def accrue_usage(self, now: float) -> None:
        """Charge running (and just ended) jobs' use to their associations (schedd/domain/usage.py)."""
        self.usage.accrue(self.jobs.values(), self.accounts, now, self.gpu_types())
        self.usage.save(self.store, now)

    def partitions_of(self, node_name: str) -> list[str]:
        return [p.name for p in self.partitions.values() if not p.nodes or node_name in p.nodes]

    # --- changes ------------------------------------------------------------------------------

    def _keep(self, job: Job) -> None:
        self.jobs[job.id] = job
        self._singletons = None
        if job.array_job_id is not None and job.array_task_id is not None:
            self._arrays.setdefault(job.array_job_id, {})[job.array_task_id] = job
        self._array_summaries.pop(job.id, None)
        if job.array_job_id is not None:
            self._array_summaries.pop(job.array_job_id, None)

    def index_dependencies(self) -> None:
        """The index from each job to its dependents and the users' dependency edges, built
        afresh from the jobs in memory (at start-up, from the ledger's): every pending job's
        dependency judged once."""
        self.dependents = Dependents()
        self._edges.clear()
        self.user_edges.clear()
        memo: dict[str, int] = {}
        for job in self.jobs.values():
            self._count_edges(job, memo)
            if job.state == JobState.PENDING and job.dependency:
                self.watch_dependency(job)

    def _forget(self, job_id: int) -> Job:
        job = self.jobs.pop(job_id)
        self._singletons = None
        if job.array_job_id is not None and job.array_task_id is not None:
            tasks = self._arrays.get(job.array_job_id, {})
            tasks.pop(job.array_task_id, None)
            if not tasks:
                self._arrays.pop(job.array_job_id, None)
        self._array_summaries.pop(job.id, None)
        if job.array_job_id is not None:
            self._array_summaries.pop(job.array_job_id, None)
        self.dependents.unwatch(job_id)
        self._uncount_edges(job_id)
        return job

    def _state_changed(self, job: Job) -> None:
        """The references that cover this job (itself, its task, its whole array) are judged
        again, and only they; the job itself stops or starts waiting on its own dependency."""
        self._singletons = None
        refs: list[tuple[int, int | None]] = [(job.id, None)]
        self._array_summaries.pop(job.id, None)
        if job.array_job_id is not None:
            self._array_summaries.pop(job.array_job_id, None)
            refs += [(job.array_job_id, None), (job.array_job_id, job.array_task_id)]
        self.dependents.changed(refs)
        if job.state != JobState.PENDING:
            self.dependents.unwatch(job.id)
        self._count_edges(job)

    # --- dependency edges ---------------------------------------------------------------------

    def dependency_edges(self, dep: dependency.Dependency) -> int:
        """What a dependency expands to: each distinct reference of each term counts the jobs it
        covers (a whole array its tasks), at least one; a repeat counts once (parse merged it)."""
        refs = [ref for term in dep.terms for ref in term.job_ids]
        seen = self.summaries(list(dict.fromkeys(refs)))
        return sum(max(1, seen[ref].total) for ref in refs)

    def _count_edges(self, job: Job, memo: dict[str, int] | None = None) -> None:
        """Keep the user's tally of pending dependency edges in step with this job."""
        waits = job.state == JobState.PENDING and bool(job.dependency)
        known = self._edges.get(job.id)
        if waits and known is not None and known[0] == job.user \
                and self._edge_exprs.get(job.id) == job.dependency:
            return
        self._uncount_edges(job.id)
        if not waits:
            return
        edges = memo.get(job.dependency) if memo is not None else None
        if edges is None:
            try:
                edges = self.dependency_edges(dependency.parse(job.dependency))
            except dependency.DependencyError:
                edges = 0
            if memo is not None:
                memo[job.dependency] = edges
        self._edges[job.id] = (job.user, edges)
        self._edge_exprs[job.id] = job.dependency
        self.user_edges[job.user] += edges

    def edges_of(self, job_id: int) -> int:
        """What a pending job's dependency counts against its user's tally (0: none)."""
        known = self._edges.get(job_id)
        return known[1] if known is not None else 0

    def _uncount_edges(self, job_id: int) -> None:
        known = self._edges.pop(job_id, None)
        self._edge_exprs.pop(job_id, None)
        if known is not None:
            self.user_edges[known[0]] -= known[1]
            if self.user_edges[known[0]] <= 0:
                del self.user_edges[known[0]]

    def add_jobs(self, jobs: list[Job], events: list[JobEvent],
                 prepared: list[PreparedInsert] | None = None) -> None:
        """Store new jobs with their events (one transaction), then keep them here;
        ``prepared``: their rows already bound (``Store.prepare_insert``), ``events`` in them."""
        if prepared is None:
            self.store.insert_jobs(jobs, events)
        else:
            self.store.insert_prepared(prepared)
        self.state_counts["submitted"] += len(jobs)
        memo: dict[str, int] = {}  # an array's tasks share one expression: counted once
        for job in jobs:
            self._keep(job)
            self._count_edges(job, memo)
            self._state_changed(job)  # a job once unknown (a vanished dependency) is now known
        self.next_job_id = max(self.next_job_id, max(j.id for j in jobs) + 1)

    def commit(self, changes: list[tuple[Job, dict[str, Any]]],
               events: Iterable[JobEvent] = (), steps: Iterable[StepRecord] = ()) -> None:
        """Write field changes of in-memory jobs (with their events and step rows) to the
        ledger in one transaction, then apply them here."""
        if not changes:
            return
        self.store.update_jobs([(job.id, fields) for job, fields in changes], list(events),
                               list(steps))
        for job, fields in changes:
            for key, value in fields.items():
                setattr(job, key, value)
            if "state" in fields:
                self._state_changed(job)
                self.state_counts[getattr(job.state, "value", str(job.state))] += 1
                if job.state in RUN_ENDS:
                    self._record_run(job)
                elif job.state == JobState.RUNNING and "start_time" in fields:
                    self._record_lead(job)
            if "dependency" in fields:
                self.dependents.unwatch(job.id)  # judged afresh when next asked
                self._count_edges(job)
            if "name" in fields:
                self._singletons = None

    def set_aside(self, job: Job, why: str, now: float) -> None:
        """Hold a job schedd cannot schedule (its fields make the core fail) for an
        administrator, with the reason (``scontrol show job``, ``kiln why``); never a crash."""
        log.error("job %d is set aside: %s", job.id, why)
        fields: dict[str, Any] = {"set_aside": why[:1000]}
        if job.state == JobState.PENDING:
            fields.update(held="admin", reason="JobHeldAdmin")
        try:
            self.commit([(job, fields)], [JobEvent(job.id, now, job.state.value,
                                                   reason="JobHeldAdmin",
                                                   detail=f"set aside: {why}"[:1000])])
        except LedgerError:
            for key, value in fields.items():  # the ledger refuses the row too: memory only
                setattr(job, key, value)

    def save_node(self, node: Node) -> None:
        """Store a node as registered or changed (its GPU list replaced), then keep it."""
        self.store.upsert_node(node)
        self.nodes[node.name] = node

    def audit(self, actor_uid: int, action: str, target: str, detail: str, now: float) -> None:
        self.store.audit(actor_uid, action, target, detail, now)

    def write_accounting(self, change: AccountingChange) -> None:
        """One sacctmgr command's rows and deletions; the caller updates ``accounts`` after."""
        self.store.write_accounting(change)

    def save_reservation(self, resv: Reservation, actor_uid: int, action: str,
                         now: float) -> None:
        self.store.save_reservation(resv.to_row(), actor_uid, action, now)
        self.reservations[resv.name] = resv

    def delete_reservation(self, name: str, actor_uid: int | None, now: float) -> None:
        self.store.delete_reservation(name, actor_uid, now)
        self.reservations.pop(name, None)

    def save_steps(self, rows: list[StepRecord]) -> None:
        self.store.save_steps(rows)

    def end_step(self, live: Any) -> None:
        """Record a step's end (a ``domain.steps.LiveStep``); a ledger failure is logged, not
        raised: the step has ended whatever the ledger says."""
        try:
            self.store.end_step(live.job_id, str(live.step_id), live.state, live.exit_code,
                                live.exit_signal, live.end_time, live.stats)
        except LedgerError as exc:
            log.warning("cannot record the end of step %d.%d: %s", live.job_id, live.step_id,
                        exc)

    def purge(self, now: float) -> None:
        """Forget finished jobs older than MinJobAge (they stay in the ledger for sacct)."""
        horizon = now - self.cfg.min_job_age
        old = [j.id for j in self.jobs.values() if j.state.finished and j.end_time < horizon]
        for job_id in old:
            job = self._forget(job_id)
            self._finished_cache[(job_id, None)] = [job.state]
            if job.array_job_id is not None and job.array_task_id is not None:
                self._finished_cache[(job.array_job_id, job.array_task_id)] = [job.state]
        if len(self._finished_cache) > 100_000:
            self._finished_cache.clear()
        for name in [r.name for r in self.reservations.values() if r.end_time <= now]:
            self.delete_reservation(name, None, now)  # ended: Slurm forgets it too

    # --- queries ------------------------------------------------------------------------------

    def running(self) -> Iterable[Job]:
        return (j for j in self.jobs.values() if j.state in RUNNING_STATES)

    def pending(self) -> Iterable[Job]:
        return (j for j in self.jobs.values() if j.state == JobState.PENDING)

    def shards_per_gpu(self, node: Node) -> int:
        """gres/shard: the node's own (its agent's [agent] shards_per_gpu), else the first of
        its partitions' that says; 0 = its GPUs offer no shards."""
        return _per_gpu(self.partitions, node, "shards_per_gpu")

    def mps_per_gpu(self, node: Node) -> int:
        """gres/mps: MPS units per GPU, the same way (its agent's, else its partition's)."""
        return _per_gpu(self.partitions, node, "mps_per_gpu")

    def node_alive(self, node: Node, now: float) -> bool:
        return now - node.last_heartbeat <= self.cfg.node_timeout

    def node_use(self) -> dict[str, NodeUse]:
        use = {name: NodeUse() for name in self.nodes}
        for job in self.running():
            for a in job.allocation:
                use.setdefault(a.node, NodeUse()).add(a)
        return use

    def node_display_state(self, node: Node, use: NodeUse, now: float) -> str:
        """sinfo's and scontrol's state word; a reboot (lifecycle/reboot.py) adds its flag,
        ``+REBOOT_REQUESTED`` or ``+REBOOT_ISSUED``."""
        base = self._display_base(node, use, now)
        flag = {"requested": "+REBOOT_REQUESTED", "issued": "+REBOOT_ISSUED"}
        return base + flag.get(node.reboot, "")

    def _display_base(self, node: Node, use: NodeUse, now: float) -> str:
        if not self.node_alive(node, now) or node.state == NodeState.DOWN:
            return "DOWN"
        if node.state == NodeState.DRAIN:
            return "DRAINING" if use.jobs else "DRAINED"
        return self.node_alloc_state(node, use)

    @staticmethod
    def node_alloc_state(node: Node, use: NodeUse) -> str:
        """IDLE, MIXED or ALLOCATED, by what the node's jobs hold, whatever its drain."""
        healthy = len(node.healthy_gpus)
        if use.jobs == 0:  # a failed GPU (lifecycle/gpuhealth.py): part of it is unavailable
            return "MIXED" if healthy < len(node.gpus) else "IDLE"
        full = use.cpus >= node.cpus or (node.gpus and use.gpus >= healthy)
        return "ALLOCATED" if full else "MIXED"

    def use_of(self, name: str) -> NodeUse:
        """What the running jobs hold on one node (node_use for one)."""
        u = NodeUse()
        for job in self.running():
            for a in job.allocation:
                if a.node == name:
                    u.add(a)
        return u

    def _in_memory(self, job_id: int, task: int | None) -> list[JobState]:
        if task is not None:
            found = self._arrays.get(job_id, {}).get(task)
            return [found.state] if found is not None else []
        tasks = self._arrays.get(job_id)
        states = [j.state for j in tasks.values()] if tasks else []
        own = self.jobs.get(job_id)
        if own is not None and own.array_job_id != job_id:  # not already one of the tasks
            states.append(own.state)
        return states

    def states_of(self, job_id: int, task: int | None = None) -> list[JobState]:
        """States of a job, of one array task, or of every task of the array with that id
        (for dependencies): by index, no scan; jobs no longer in memory are looked up in the
        ledger once."""
        return self.states_of_many([(job_id, task)])[(job_id, task)]

    def states_of_many(self, refs: Iterable[tuple[int, int | None]]
                       ) -> dict[tuple[int, int | None], list[JobState]]:
        """``states_of`` for many references, with one ledger query for all that are not in
        memory (a dependency of a thousand terms is one query, not a thousand)."""
        out: dict[tuple[int, int | None], list[JobState]] = {}
        missing: list[tuple[int, int | None]] = []
        for ref in refs:
            self.dependency_terms_evaluated += 1
            found = self._in_memory(*ref) or self._finished_cache.get(ref)
            if found:
                out[ref] = found
            else:
                missing.append(ref)
        if missing:
            rows = self.store.query_jobs(job_ids=sorted({ref[0] for ref in missing}))
            for job_id, task in missing:
                found = [j.state for j in rows
                         if (j.array_job_id == job_id and j.array_task_id == task)
                         or (task is None and (j.id == job_id or j.array_job_id == job_id))]
                out[(job_id, task)] = found
                if found:  # a job that left memory has finished: its states stay; an id never
                    self._finished_cache[(job_id, task)] = found  # seen may yet be
        return out

    def _summary_in_memory(self, job_id: int, task: int | None) -> dependency.Summary | None:
        if task is not None:
            found = self._arrays.get(job_id, {}).get(task)
            return dependency.summarize([found.state]) if found is not None else None
        if job_id in self._arrays:
            summary = self._array_summaries.get(job_id)
            if summary is None:
                summary = dependency.summarize(self._in_memory(job_id, None))
                self._array_summaries[job_id] = summary
            return summary
        own = self.jobs.get(job_id)
        return dependency.summarize([own.state]) if own is not None else None

    def summaries(self, refs: list[tuple[int, int | None]]
                   ) -> dict[tuple[int, int | None], dependency.Summary]:
        """What each reference covers, summed up: a whole in-memory array from its kept
        summary (O(1)), the rest as ``states_of_many`` finds them (one ledger query)."""
        out: dict[tuple[int, int | None], dependency.Summary] = {}
        rest = []
        for ref in refs:
            summary = self._summary_in_memory(*ref)
            if summary is not None and summary.total:
                self.dependency_terms_evaluated += 1
                out[ref] = summary
            else:
                rest.append(ref)
        if rest:
            for ref, states in self.states_of_many(rest).items():
                out[ref] = dependency.summarize(states)
        return out

    def array_task_ids(self, array_job_id: int) -> tuple[int, ...]:
        return tuple(sorted(self._arrays.get(array_job_id, {})))

    def array_tasks(self, array_job_id: int) -> list[Job]:
        """The array's tasks still in memory, in task order."""
        tasks = self._arrays.get(array_job_id, {})
        return [tasks[t] for t in sorted(tasks)]

    # --- the job as the core sees it (eligibility: schedd/eligibility.py; snapshots: schedd/snapshots.py) ------------------------------------------------------------

    def time_limit(self, job: Job) -> int | None:
        """The limit a job runs under: its own, else its partition's default, else the max."""
        if job.time_limit is not None:
            return job.time_limit
        part = self.partitions.get(job.partition)
        if part is None:
            return None
        return part.default_time if part.default_time is not None else part.max_time

    def watch_dependency(self, job: Job) -> bool:
        """Index a pending job's dependency (judged in full, once for all jobs that share the
        expression); False if it does not parse."""
        if self.dependents.join(job.id, job.dependency):
            return True
        try:
            dep = dependency.parse(job.dependency)
        except dependency.DependencyError:
            return False
        self.dependents.watch(job.id, job.dependency, dep, self.summaries)
        return True

    def singleton_index(self) -> dict[tuple[str, str], tuple[bool, float]]:
        if self._singletons is None:
            index: dict[tuple[str, str], tuple[bool, float]] = {}
            for o in self.jobs.values():
                if o.state in RUNNING_STATES or o.state == JobState.PENDING:
                    running, first = index.get((o.user, o.name), (False, float("inf")))
                    if o.state in RUNNING_STATES:
                        running = True
                    else:
                        first = min(first, o.id)
                    index[(o.user, o.name)] = (running, first)
            self._singletons = index
        return self._singletons

    def pending_view(self, job: Job) -> PendingJob:
        limit = self.time_limit(job)
        part = self.partitions.get(job.partition)
        return pending_from_job(
            job,
            time_limit=limit if limit is not None else self.cfg.scheduler.default_time_limit,
            partition_priority=part.priority_tier if part else 1,
            qos_priority=qos.priority if (qos := self.accounts.qos.get(job.qos)) else 0,
            max_switch_wait=self.cfg.scheduler.max_switch_wait,
        )


def is_active(job: Job) -> bool:
    return job.state in ACTIVE_STATES
