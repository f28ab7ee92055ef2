"""Admission: whether a job may be submitted (or changed) as asked, and what schedd fills in.

``admit`` is a submission's whole validation, top to bottom, once (``handlers/submit.py`` calls
it and stores what it returns); its checks are shared with ``update_job`` (scontrol update).
The fields were typed and bounded by ``kiln.wire.protocol`` before any of this runs; what is
checked here is what needs the cluster's state: partitions and their limits, whether any node
could ever hold the job, accounts and QOS (with Slurm's messages), dependencies, reservations.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from itertools import chain
from typing import TYPE_CHECKING, Any

from kiln.identity import Caller, is_operator
from kiln.model import Job, JobState, Node
from kiln.slurm import arrayspec, dependency, licenses, mailuser
from kiln.slurm.gres import gres_type
from kiln.slurm.hostlist import HostlistError, compress, expand
from kiln.slurm.text import has_control
from kiln.wire import protocol
from schedd.domain.accounts import POLICY, AccountsError, deny_on_limit_reason
from schedd.domain.reservation import ACCESS_DENIED
from schedd.lifecycle.context import Context, RequestError
from schedd.state import Submitting

if TYPE_CHECKING:
    from schedd.scheduler.snapshot import PendingJob

log = logging.getLogger("schedd.admission")

DENIED = "Access/permission denied"  # as handlers/selection.py's
INVALID_TIME = "Requested time limit is invalid (missing or exceeds some limit)"
INVALID_PARTITION = "Invalid partition name specified"
NODE_CONFIG = "Requested node configuration is not available"
INVALID_NODE = "Invalid node name specified"
INVALID_LICENSE = "Invalid license specification"
INVALID_NICE = "Invalid --nice value"  # ESLURM_INVALID_NICE: a negative nice, not an operator
# MaxJobCount: slurmctld answers EAGAIN, and sbatch retries, then prints strerror(EAGAIN)
JOB_LIMIT = "Resource temporarily unavailable"
# free text another user's squeue, sacct or scontrol prints, by the option that sets it
TEXT_FIELDS = {"name": "--job-name", "comment": "--comment", "account": "--account",
               "partition": "--partition", "qos": "--qos", "wckey": "--wckey",
               "mail_user": "--mail-user", "mail_type": "--mail-type",
               "reservation": "--reservation", "constraint": "--constraint",
               "licenses": "--licenses", "gpu_type": "--gres", "submit_host": "submit host"}
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job) if f.init)  # __init__'s order
_FIELD_AT = {name: i for i, name in enumerate(_JOB_FIELDS)}
_FLOATS = frozenset(f.name for f in dataclasses.fields(Job) if isinstance(f.default, float))


@dataclasses.dataclass(slots=True)
class Admitted:
    """What ``admit`` let in: the submission's ``template`` and its ``jobs`` to store now, or
    for an array of more than ``slice_above`` tasks no jobs yet but its ``tasks``, made a
    slice at a time by the caller (``ArrayTasks.make``; handlers/submit.py)."""

    template: Job
    jobs: list[Job]
    tasks: ArrayTasks | None = None


def admit(ctx: Context, caller: Caller, body: dict[str, Any], now: float,
          slice_above: int = 0) -> Admitted:
    """A submission (the ``submit`` request's body), validated top to bottom: the job and what
    schedd fills in, its ``--priority`` (an operator's), then — unless it is ``--test-only``,
    whose job alone is returned — its array's tasks (at most max_array_size), MaxJobCount, the
    submit limits and the user's dependency load. The jobs to store, ids given; nothing is
    stored here.

    An array of more than ``slice_above`` tasks (when given) is admitted with its tasks still
    to make: their ids are given out (``next_job_id`` moves past them) and what they will add
    is reserved in ``State.submitting`` (the caller removes that entry, committed or not)."""
    template = build_job(ctx, caller, body["job"], now)
    if body.get("priority") is not None:  # sbatch --priority, as scontrol update Priority=
        if not is_operator(caller):
            raise RequestError(DENIED, protocol.E_PERMISSION)
        template.admin_priority = body["priority"]
    if body.get("test_only"):
        return Admitted(template, [template])
    if not template.array_spec:
        template.id = ctx.state.next_job_id
        check_new_jobs(ctx, template, 1)
        return Admitted(template, [template])
    tasks = array_tasks(ctx, template)  # at most max_array_size
    edges = check_new_jobs(ctx, template, tasks.count)
    if not slice_above or tasks.count <= slice_above:
        return Admitted(template, tasks.make(0, tasks.count))
    ctx.state.next_job_id = tasks.base + tasks.count
    tasks.reservation = Submitting(template.account, template.user, template.qos,
                                   tasks.count, edges)
    ctx.state.submitting.append(tasks.reservation)
    return Admitted(template, [], tasks)


def check_new_jobs(ctx: Context, template: Job, count: int) -> int:
    """MaxJobCount, the submit limits and the user's dependency load, for ``count`` new jobs
    of ``template`` (an array's tasks): before anything is stored. Their dependency edges."""
    check_job_count(ctx, count)
    check_submit_limits(ctx, template, count)
    return check_dependency_load(ctx, template, count)


def build_job(ctx: Context, caller: Caller, spec: dict[str, Any], now: float) -> Job:
    """Validate a submission and fill in what schedd decides: owner, partition, account."""
    if caller.uid == 0 and not ctx.cfg.allow_root_jobs:
        raise RequestError("Access/permission denied: jobs of root are not allowed on this "
                           "cluster (set allow_root_jobs = true in kiln.toml)",
                           protocol.E_PERMISSION)
    # operations.SUBMIT_SCHEMA has typed and bounded every field; only the allow-listed ones
    # are here, and none of them is state schedd owns
    fields = {key: float(value) if key in _FLOATS else value for key, value in spec.items()
              if key in protocol.SUBMIT_FIELDS}
    check_text(fields)
    job = Job(id=0, **fields)
    if job.interactive:
        _hold_allocation(job)
    if job.nice < 0 and not is_operator(caller):
        # Slurm: a negative nice (a higher priority) is for root, SlurmUser and operators
        raise RequestError(INVALID_NICE, protocol.E_PERMISSION)
    job.user, job.uid, job.gid = caller.user, caller.uid, caller.gid
    job.submit_time = job.eligible_time = now
    job.state, job.reason = JobState.PENDING, "None"
    if job.held:  # as `scontrol hold` sets it: squeue says why at once, with no cycle
        job.reason = "JobHeldUser"
    size = protocol.environment_bytes(job.environment)
    if size > protocol.MAX_ENV_BYTES:
        raise RequestError(f"environment of {size} bytes is over the limit of "
                           f"{protocol.MAX_ENV_BYTES} bytes (names and values together)")
    size = sum(len(a.encode()) + 1 for a in job.script_args)
    if size > protocol.MAX_ENV_BYTES:  # no exec could take more (Linux: ARG_MAX, 2 MiB)
        raise RequestError(f"script arguments of {size} bytes are over the limit of "
                           f"{protocol.MAX_ENV_BYTES} bytes")
    if not job.script.startswith("#!"):
        raise RequestError("This does not look like a batch script")
    if not job.workdir or not os.path.isabs(job.workdir):
        raise RequestError("working directory must be an absolute path")
    job.name = job.name or "sbatch"
    job.licenses = check_licenses(ctx, job.licenses)
    _check_partition(ctx, job)
    job.nodelist = resolve_nodes(ctx, job.nodelist)  # -w
    job.exclude = resolve_nodes(ctx, job.exclude)  # -x
    check_shape(ctx, job)
    if job.dependency:
        _check_dependency(ctx, job.dependency)
    settle_account(ctx, job, spec)  # account, QOS and DenyOnLimit
    check_reservation(ctx, job)  # --reservation: exists and admits the job
    return job


# What an allocation of salloc runs on its first node: Slurm's extern step, a process that only
# holds the allocation (salloc's command runs where salloc runs; srun starts the steps).
EXTERN_HOLDER = "#!/bin/sh\n# salloc: the extern step holds the allocation\nexec sleep 100000000\n"


def _hold_allocation(job: Job) -> None:
    """salloc's job: no batch script of the user's, no output files; one allocation, no array."""
    if job.array_spec:
        raise RequestError("an allocation (salloc) cannot be a job array")
    job.script, job.script_args = EXTERN_HOLDER, []
    job.stdout = job.stderr = os.devnull
    job.command = job.command or "(salloc)"


def check_text(fields: dict[str, Any]) -> None:
    """No control character (a newline, an escape sequence) in the free text other users'
    commands print: one line naming the option. Tab is allowed. (Slurm takes them.)"""
    for key, label in TEXT_FIELDS.items():
        value = fields.get(key)
        if isinstance(value, str) and has_control(value):
            raise RequestError(f"Invalid {label} value: control characters are not allowed")
    value = fields.get("mail_user")
    if isinstance(value, str) and (why := mailuser.problem(value)):
        # it reaches MailProg's command line and SMTP's To: header (lifecycle/mail.py)
        raise RequestError(f"Invalid --mail-user value: {why}")


def check_licenses(ctx: Context, text: str) -> str:
    """-L: each name a configured license, no more than the cluster has (Slurm's "Invalid
    license specification"); stored as ``name:count``."""
    if not text:
        return ""
    try:
        wanted = licenses.parse(text)
    except licenses.LicenseError:
        raise RequestError(INVALID_LICENSE) from None
    have = {lic.name: lic.count for lic in ctx.cfg.licenses}
    if any(count > have.get(name, -1) for name, count in wanted.items()):
        raise RequestError(INVALID_LICENSE)
    return licenses.text(wanted)


def resolve_nodes(ctx: Context, expr: str) -> str:
    """A -w/-x hostlist resolved once, at admission, to the nodes it names, stored compressed:
    Slurm's "Invalid node name specified" for a name that is not a node (once any node is
    known) and for an expression over ``hostlist.MAX_NAMES``; no cycle expands it again
    beyond the nodes that exist."""
    if not expr:
        return ""
    try:
        names = expand(expr)
    except HostlistError:
        raise RequestError(INVALID_NODE) from None
    known = ctx.state.nodes.keys() | {n for p in ctx.state.partitions.values() for n in p.nodes}
    if known and not known.issuperset(names):
        raise RequestError(INVALID_NODE)
    return compress(names)


def _check_dependency(ctx: Context, expr: str) -> int:
    """Slurm's "Job dependency problem" for bad syntax, for a job id that never existed, and
    (with why) for a dependency that expands to more than ``[schedd] max_dependency_jobs``.
    A job that has left memory is still found in the ledger, so, unlike Slurm after
    MinJobAge, depending on a long-finished job works. Returns what it expands to."""
    try:
        parsed = dependency.parse(expr)
    except dependency.DependencyError as exc:
        raise RequestError(str(exc)) from None
    refs = [ref for term in parsed.terms for ref in term.job_ids]
    if not all(ctx.state.states_of_many(refs).values()):  # one ledger query for them all
        raise RequestError("Job dependency problem")
    edges = ctx.state.dependency_edges(parsed)
    limit = ctx.cfg.max_dependency_jobs
    if edges > limit:
        raise RequestError(f"Job dependency problem: it waits on {edges} jobs (array tasks "
                           f"counted), over the limit of {limit} (max_dependency_jobs)")
    return edges


def check_dependency_load(ctx: Context, job: Job, count: int, replacing: int = 0) -> int:
    """The user's pending jobs together may wait on at most ``[schedd]
    max_dependency_edges_per_user`` jobs (each of ``count`` new jobs, an array's tasks, counts
    its dependency; ``replacing``: what a changed job's old one counted). The new jobs'
    edges."""
    if not job.dependency:
        return 0
    edges = _check_dependency(ctx, job.dependency) * count
    total = _user_edges(ctx, job.user) - replacing + edges
    limit = ctx.cfg.max_dependency_edges_per_user
    if edges and total > limit:
        raise RequestError(f"Job dependency problem: your pending jobs would wait on {total} "
                           f"jobs in all (array tasks counted), over the limit of {limit} "
                           f"(max_dependency_edges_per_user)")
    return edges


def _user_edges(ctx: Context, user: str) -> int:
    """The user's pending jobs' dependency edges, with those of submissions not yet stored."""
    return ctx.state.user_edges.get(user, 0) + sum(
        s.reserved_edges(user) for s in ctx.state.submitting)


def check_dependency_change(ctx: Context, jobs: list[Job], expr: str) -> None:
    """scontrol update Dependency= of these jobs: the expression as at submit, and each owner's
    pending jobs together within ``max_dependency_edges_per_user`` once all are changed."""
    if not expr:
        return
    edges = _check_dependency(ctx, expr)
    owners: dict[str, list[Job]] = {}
    for job in jobs:
        if job.state == JobState.PENDING:
            owners.setdefault(job.user, []).append(job)
    limit = ctx.cfg.max_dependency_edges_per_user
    for user, theirs in owners.items():
        total = (_user_edges(ctx, user) + edges * len(theirs)
                 - sum(ctx.state.edges_of(job.id) for job in theirs))
        if edges and total > limit:
            raise RequestError(f"Job dependency problem: the pending jobs of {user} would wait "
                               f"on {total} jobs in all (array tasks counted), over the limit "
                               f"of {limit} (max_dependency_edges_per_user)")


def _check_partition(ctx: Context, job: Job) -> None:
    partitions = ctx.state.partitions
    if job.partition:
        if "," in job.partition:
            job.partition = job.partition.split(",")[0]
        if job.partition not in partitions:
            raise RequestError(INVALID_PARTITION)
    else:
        job.partition = ctx.cfg.default_partition.name
    part = partitions[job.partition]
    limit = job.time_limit if job.time_limit is not None else part.default_time
    if job.time_limit is not None and job.time_limit <= 0:
        raise RequestError(INVALID_TIME)
    if part.max_time is not None and (limit is None or limit > part.max_time):
        raise RequestError(INVALID_TIME)


def check_shape(ctx: Context, job: Job) -> None:
    """Refuse what no node of the partition could ever hold (Slurm does so at submit)."""
    for name in ("num_nodes", "num_tasks", "cpus_per_task"):
        if getattr(job, name) < 1:
            raise RequestError(NODE_CONFIG)
    for name in ("gpus", "gpus_per_node", "gpus_per_task", "mem_per_node_mb", "mem_per_cpu_mb",
                 "mem_per_gpu_mb", "ntasks_per_node"):
        if getattr(job, name) < 0:
            raise RequestError(NODE_CONFIG)
    check_topology(ctx, job)
    view = ctx.state.pending_view(job)
    nodes = [n for n in ctx.state.nodes.values() if job.partition in n.partitions]
    if not nodes:
        return  # no node has registered yet: the job waits for one
    if view.shards_per_node:  # gres/shard: some node's GPUs must offer that many
        most, name = _largest(nodes, lambda n: len(n.gpus) * ctx.state.shards_per_gpu(n))
        if most == 0:  # no node of the partition offers shards: Slurm's unknown gres
            raise RequestError("Invalid generic resource (gres) specification")
        if most < view.shards_per_node:
            raise RequestError(f"{NODE_CONFIG}\nno node has {view.shards_per_node} GPU shards "
                               f"(largest: {most}, {name})")
    if view.mps_per_node:  # gres/mps: N units on one GPU, so some node's mps_per_gpu >= N
        most, name = _largest(nodes, lambda n: ctx.state.mps_per_gpu(n) if n.gpus else 0)
        if most == 0:  # no node of the partition offers MPS: Slurm's unknown gres
            raise RequestError("Invalid generic resource (gres) specification")
        if most < view.mps_per_node:
            raise RequestError(f"{NODE_CONFIG}\nno node has mps:{view.mps_per_node} on one GPU "
                               f"(largest: {most}, {name})")
    fitting = [n for n in nodes if _holds(n, view)]
    if len(fitting) < view.num_nodes:
        # Slurm's line first (scripts match it), then which resource does not fit
        raise RequestError(f"{NODE_CONFIG}\n{misfit(job.partition, nodes, view)}")


def check_topology(ctx: Context, job: Job) -> None:
    """--segment=S: the job's nodes must come in whole segments, each of which some block
    (or leaf switch) can hold; --switches=N: N at least 1."""
    if job.switches < 0 or job.segment < 0:
        raise RequestError(NODE_CONFIG)
    if not job.segment:
        return
    if job.num_nodes % job.segment:
        raise RequestError(f"{NODE_CONFIG}\n--segment={job.segment} does not divide the "
                           f"job's {job.num_nodes} nodes")
    topo = ctx.cfg.topology
    if topo is not None and topo.places:
        largest = max(p.leaf_size for p in topo.places.values())
        if job.segment > largest:
            what = "block" if topo.plugin == "block" else "leaf switch"
            raise RequestError(f"{NODE_CONFIG}\nno {what} holds a segment of {job.segment} "
                               f"nodes (largest: {largest})")


def _holds(node: Node, view: PendingJob) -> bool:
    return (node.cpus >= view.cpus_per_node and node.memory_mb >= view.mem_per_node_mb
            and node.gpu_count(view.gpu_type.lower()) >= view.gpus_per_node
            and (not view.gpu_type or node.gpu_count(view.gpu_type.lower()) > 0)
            and view.features <= set(node.features))


def _largest(nodes: list[Node], value: Callable[[Node], int]) -> tuple[int, str]:
    best = min(nodes, key=lambda n: (-value(n), n.name))
    return value(best), best.name


def misfit(partition: str, nodes: list[Node], view: PendingJob) -> str:
    """One line naming what no node of ``partition`` (``nodes``, not empty) can give a job
    shaped as ``view``, and the nearest fit there is."""
    if view.num_nodes > len(nodes):
        return (f"{view.num_nodes} nodes requested, partition {partition} has "
                f"{len(nodes)} ({compress(sorted(n.name for n in nodes))})")
    gpu_type = view.gpu_type.lower()
    typed = [n for n in nodes if n.gpu_count(gpu_type)] if gpu_type else nodes
    if not typed:
        types = sorted({gres_type(g.model) for n in nodes for g in n.gpus})
        here = f"types here: {', '.join(types)}" if types else "no node here has GPUs"
        return f"no node has GPUs of type {gpu_type} ({here})"
    if view.gpus_per_node and all(n.gpu_count(gpu_type) < view.gpus_per_node for n in typed):
        most, name = _largest(typed, lambda n: n.gpu_count(gpu_type))
        kind = f"{gpu_type} GPUs" if gpu_type else "GPUs"
        return f"no node has {view.gpus_per_node} {kind} (largest: {most}, {name})"
    if all(n.memory_mb < view.mem_per_node_mb for n in nodes):
        most, name = _largest(nodes, lambda n: n.memory_mb)
        return (f"no node has {view.mem_per_node_mb} MB of memory "
                f"(largest: {most} MB, {name})")
    if all(n.cpus < view.cpus_per_node for n in nodes):
        most, name = _largest(nodes, lambda n: n.cpus)
        return f"no node has {view.cpus_per_node} CPUs (largest: {most}, {name})"
    missing = sorted(f for f in view.features if not any(f in n.features for n in nodes))
    if missing:
        have = sorted({f for n in nodes for f in n.features})
        return (f"no node has feature {', '.join(missing)} "
                f"(features here: {', '.join(have) or 'none'})")
    share = _share(view)
    fitting = sorted(n.name for n in nodes if _holds(n, view))
    if not fitting:
        return f"no node has {share} at once"
    return (f"{view.num_nodes} nodes requested with {share} each; only {len(fitting)} "
            f"can hold that ({compress(fitting)})")


def _share(view: PendingJob) -> str:
    parts = [f"{view.cpus_per_node} CPUs"]
    if view.mem_per_node_mb:
        parts.append(f"{view.mem_per_node_mb} MB of memory")
    if view.gpus_per_node:
        parts.append(f"{view.gpus_per_node} {view.gpu_type.lower() + ' ' if view.gpu_type else ''}"
                     "GPUs")
    if view.features:
        parts.append("features " + ",".join(sorted(view.features)))
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


@dataclasses.dataclass(slots=True)
class ArrayTasks:
    """An array's tasks to be made (``make``): ids ``base + 1 ...`` in task order, the last
    task keeping the array's own id ``base``, as in Slurm."""

    template: Job
    base: int
    task_ids: list[int]
    max_running: int
    reservation: Submitting | None = None

    @property
    def count(self) -> int:
        return len(self.task_ids)

    def make(self, start: int, stop: int) -> list[Job]:
        """Tasks ``start`` to ``stop`` (indices in task order) as Jobs."""
        template, base, last = self.template, self.base, len(self.task_ids) - 1
        # each task as dataclasses.replace would make it (a shallow copy, the task's own fields
        # set), by positional arguments: replace's keyword dict of every field cost 31 ms of a
        # 1,000-task array's 55 ms submission
        values = [getattr(template, name) for name in _JOB_FIELDS]
        at = _FIELD_AT
        values[at["array_job_id"]], values[at["array_max_running"]] = base, self.max_running
        jobs = []
        for index in range(start, min(stop, len(self.task_ids))):
            job_id = base if index == last else base + 1 + index
            values[at["id"]], values[at["array_task_id"]] = job_id, self.task_ids[index]
            values[at["script_args"]] = list(template.script_args)
            jobs.append(Job(*values))
        return jobs


def array_tasks(ctx: Context, template: Job) -> ArrayTasks:
    """The tasks of ``template``'s ``--array`` (at most max_array_size), ids from
    ``next_job_id``; nothing made yet."""
    try:
        spec = arrayspec.parse(template.array_spec, ctx.cfg.max_array_size)
    except arrayspec.ArraySpecError as exc:
        raise RequestError(str(exc)) from None
    return ArrayTasks(template, ctx.state.next_job_id, list(spec.task_ids), spec.max_running)


def settle_account(ctx: Context, job: Job, spec: dict[str, Any]) -> None:
    """Settle the job's account and QOS (Slurm's submit errors otherwise) and, with the QOS
    flag DenyOnLimit, refuse a job over a per-job limit."""
    accounts = ctx.state.accounts
    try:
        account, qos, change = accounts.resolve(job.user, spec.get("account") or "",
                                                spec.get("qos") or "")
    except AccountsError as exc:
        raise RequestError(str(exc)) from None
    if change is not None:
        ctx.state.write_accounting(change)
        ctx.state.usage.sync(accounts)
    job.account, job.qos = account, qos
    reason = deny_on_limit_reason(accounts, ctx.state.pending_view(job))
    if reason:
        raise RequestError(f"{reason}\n{POLICY}")


def check_job_count(ctx: Context, new_jobs: int) -> None:
    """MaxJobCount: at most ``max_job_count`` pending and running jobs (every array task one);
    beyond, Slurm's EAGAIN (sbatch waits and retries)."""
    limit = ctx.cfg.max_job_count
    jobs = ctx.state.jobs
    new_jobs += sum(s.count for s in ctx.state.submitting)  # admitted, not yet stored
    if len(jobs) + new_jobs <= limit:  # finished jobs within MinJobAge count only here
        return
    active = sum(1 for j in jobs.values() if not j.state.finished)
    if active + new_jobs > limit:
        log.error("MaxJobCount limit reached (%d): a submission of %d job(s) refused", limit,
                  new_jobs)
        raise RequestError(JOB_LIMIT, protocol.E_AGAIN)


def check_submit_limits(ctx: Context, job: Job, new_jobs: int) -> None:
    """MaxSubmitJobs and GrpSubmitJobs (association and QOS): pending and running jobs count,
    every array task as one job. Slurm rejects with the limit's name, then the policy line."""
    accounts = ctx.state.accounts
    if not accounts.has_limits():
        return
    active = chain(
        ((j.account, j.user, j.qos) for j in ctx.state.jobs.values()
         if j.state in (JobState.PENDING, JobState.RUNNING, JobState.COMPLETING,
                        JobState.SUSPENDED)),
        ((s.account, s.user, s.qos) for s in ctx.state.submitting for _ in range(s.count)))
    reason = accounts.submit_violation(job.account, job.user, job.qos, new_jobs,
                                       accounts.count_jobs(active))
    if reason:
        raise RequestError(f"{reason}\n{POLICY}")


def check_reservation(ctx: Context, job: Job) -> None:
    """sbatch --reservation=: the reservation must exist and admit the job's user or account."""
    if not job.reservation:
        return
    resv = ctx.state.reservations.get(job.reservation)
    if resv is None:
        raise RequestError("Requested reservation is invalid")
    if not resv.admits(job.user, job.account):
        raise RequestError(ACCESS_DENIED)
