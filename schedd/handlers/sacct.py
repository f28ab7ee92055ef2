"""``acct_jobs`` (sacct) and ``acct_report`` (sreport): answered from the ledger.

Finished jobs leave schedd's memory after MinJobAge but stay in the ledger, so accounting reads
the ledger (one query per request, not per job) and overlays the in-memory copy of jobs still
held there, which carries the freshest priority and pending reason. The figures themselves are
computed by the pure ``schedd.accounting``; this module only selects and assembles.
"""

from __future__ import annotations

import dataclasses
import pwd
from collections.abc import Generator, Iterator
from typing import Any

from kiln.identity import Caller
from kiln.model import Job, JobState
from schedd.handlers.selection import (
    RefSet,
    parse_job_refs,
    parse_states,
    sees_all,
    visible_jobs,
)
from schedd.ledger.records import JobEvent
from schedd.lifecycle.context import Context, RequestError
from schedd.reports import accounting
from schedd.slicing import each

STEP_QUERY_CHUNK = 500  # ids per IN (...) list: far below SQLite's bound-parameter limit
PAGE = 50  # jobs per ledger read of a long query (one slice: ~5 ms on an idle host)
ROW_IDENTITY = frozenset({"kind", "job_id", "job_id_raw", "step"})  # always sent


def _policy(ctx: Context) -> accounting.BillingPolicy:
    sched = ctx.cfg.scheduler
    return accounting.BillingPolicy(dict(sched.tres_billing_weights), sched.billing_max_tres,
                                    frozenset(t.lower() for t in sched.accounting_storage_tres))


def _user_names(users: list[Any]) -> list[str]:
    """-u takes names or uids; the ledger keeps names (and a uid nobody has stays as is)."""
    names = []
    for user in users:
        text = str(user).strip()
        if text.isdigit():
            try:
                names.append(pwd.getpwuid(int(text)).pw_name)
                continue
            except KeyError:
                pass
        names.append(text)
    return names


def _window(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _pages(ctx: Context, body: dict[str, Any]) -> Iterator[list[Job]]:
    """The jobs the query names, a ledger page at a time (each page one slice), each as
    schedd holds it in memory if it still does."""
    refs = RefSet(parse_job_refs(body.get("job_ids") or [], ctx.cfg.max_array_size))
    states = parse_states(body["states"]) if body.get("states") else None
    users = _user_names(body.get("users") or []) or None
    pages = ctx.state.store.iter_jobs(
        page=PAGE,
        job_ids=sorted({r.base for r in refs.refs}) if refs else None,
        users=users,
        accounts=[str(a).lower() for a in body.get("accounts") or []] or None,
        states=sorted(str(s) for s in states) if states else None,
        names=[str(n) for n in body.get("names") or []] or None,
        start=_window(body, "start"),
        end=_window(body, "end"),
    )
    partitions = {str(p) for p in body.get("partitions") or []}
    qos = {str(q) for q in body.get("qos") or []}
    nodes = {str(n) for n in body.get("nodes") or []}
    for page in pages:
        out = []
        for stored in page:
            job = ctx.state.jobs.get(stored.id) or stored
            if refs and not refs.matches(job):
                continue
            if partitions and job.partition not in partitions:
                continue
            if qos and job.qos not in qos:
                continue
            if nodes and not nodes.intersection(a.node for a in job.allocation):
                continue
            out.append(job)
        yield out


def _order(job: Job) -> tuple[int, int]:
    """sacct's order: by job, an array's tasks together under the array's id."""
    return (job.array_job_id if job.array_job_id is not None else job.id,
            -1 if job.array_task_id is None else job.array_task_id)


def _steps_of(ctx: Context, jobs: list[Job]) -> dict[int, list[dict[str, Any]]]:
    steps: dict[int, list[dict[str, Any]]] = {}
    ids = [j.id for j in jobs if j.start_time]
    for i in range(0, len(ids), STEP_QUERY_CHUNK):
        for record in ctx.state.store.query_steps(ids[i:i + STEP_QUERY_CHUNK]):
            steps.setdefault(record.job_id, []).append(dataclasses.asdict(record))
    return steps


# job-row fields made from the job's steps (accounting.job_row): sacct -X still reads the steps
# when one of these is asked for, or when no field list is given (all of them)
FROM_STEPS = frozenset({"derived_exit_code", "total_cpu", "user_cpu", "system_cpu"})


def _job_row_needs_steps(body: dict[str, Any]) -> bool:
    fields = body.get("fields")
    return not fields or bool(FROM_STEPS.intersection(map(str, fields)))


def acct_jobs(ctx: Context, caller: Caller,
              body: dict[str, Any]) -> Generator[None, None, dict[str, Any]]:
    """sacct's records: one row per job (array task), followed by its steps' rows.

    A long request: it goes in slices (a ledger page, its jobs' steps, their rows for
    ``slicing.SLICE_SECONDS`` at a time, then the reply's encoding), and the daemon runs
    other work — other users' squeue above all — between them. A page's jobs are turned into
    rows and let go at once: rows hold plain values only, which the cyclic garbage collector
    does not track, where 20,000 jobs held to the end made each of its full collections scan
    a few hundred thousand more objects (issue 12's bystander)."""
    now = ctx.now()
    with_steps = body.get("steps", True) is not False
    need_steps = with_steps or _job_row_needs_steps(body)
    rc = accounting.RowContext(now, _policy(ctx), ctx.state.gpu_types(), ctx.cfg.cluster_name)
    # only what the fields asked for travel (a tenth of the bytes)
    keep = ROW_IDENTITY | {str(f) for f in body["fields"]} if body.get("fields") else None
    made: list[tuple[tuple[int, int], list[dict[str, Any]]]] = []  # (order, a job's rows)

    def job_rows(job: Job, steps: dict[int, list[dict[str, Any]]]) -> None:
        rows: list[dict[str, Any]] = []
        if body.get("duplicates") and job.restart_count:
            for run in earlier_runs(job, ctx.state.store.job_events(job.id)):
                rows.extend(accounting.sacct_rows(run, [], rc, False))
        rows.extend(accounting.sacct_rows(job, steps.get(job.id, []), rc, with_steps))
        if keep is not None:
            rows = [{k: v for k, v in row.items() if k in keep} for row in rows]
        made.append((_order(job), rows))

    for page in _pages(ctx, body):
        yield
        jobs = visible_jobs(ctx, caller, page)  # PrivateData=jobs: own jobs only
        steps = _steps_of(ctx, jobs) if need_steps and jobs else {}
        yield
        yield from each(jobs, lambda job, steps=steps: job_rows(job, steps))
    made.sort(key=lambda item: item[0])  # stable: a job's earlier runs stay before it
    yield
    return {"rows": [row for _, rows in made for row in rows], "now": now,
            "cluster": ctx.cfg.cluster_name}


def earlier_runs(job: Job, events: list[JobEvent]) -> list[Job]:
    """sacct -D: the runs of a requeued job before its current one, rebuilt from its events
    (RUNNING, its end, REQUEUED) as job records of their own. Their steps are not kept (the
    ledger holds the latest run's), so these are job rows only."""
    runs: list[Job] = []
    began: JobEvent | None = None
    ended: JobEvent | None = None
    for ev in events:
        if ev.state == JobState.RUNNING.value:
            began, ended = ev, None
        elif ev.state == JobState.REQUEUED.value:
            if began is not None:  # the run ended as recorded, or as REQUEUED itself
                end = ended or ev
                # a run lost with its node or GPU says why (``GPU 1 of node1 failed: ...``)
                why = ev.detail if end.state == JobState.NODE_FAIL.value and ev.detail else "None"
                runs.append(dataclasses.replace(
                    job, state=JobState(end.state), reason=why, start_time=began.time,
                    end_time=end.time, node_list=began.detail, allocation=[], exit_code=0,
                    exit_signal=0, restart_count=len(runs)))
            began = ended = None
        elif began is not None and ev.state in _ENDS:
            ended = ev
    return runs


_ENDS = frozenset(s.value for s in JobState if s.finished)


def acct_report(ctx: Context, caller: Caller, body: dict[str, Any]) -> dict[str, Any]:
    """sreport's sums over [start, end): usage per association and TRES, cluster capacity,
    allocated and planned time, GPU-hours and their cost per account and GPU type."""
    now = ctx.now()
    start, end = float(body["start"]), min(float(body["end"]), now)
    if end < start:
        raise RequestError("the report's end is before its start")
    window = accounting.Window(start, end)
    jobs = ctx.state.store.query_jobs(start=start, end=end)
    gpu_types = ctx.state.gpu_types()
    report = accounting.usage_report(
        [ctx.state.jobs.get(j.id) or j for j in jobs], ctx.state.nodes.values(), window, now,
        _policy(ctx), gpu_types)
    acct = ctx.cfg.accounting
    reply = report.to_wire(acct.gpu_price, acct.default_gpu_price)
    if not sees_all(ctx, caller, "usage"):  # PrivateData=usage: the cluster's totals, and
        own = accounting.usage_report(  # of the associations and costs, the caller's own
            [ctx.state.jobs.get(j.id) or j for j in jobs if j.uid == caller.uid],
            ctx.state.nodes.values(), window, now, _policy(ctx), gpu_types)
        mine = own.to_wire(acct.gpu_price, acct.default_gpu_price)
        reply["assoc"], reply["cost"] = mine["assoc"], mine["cost"]
    reply.update({
        "now": now, "cluster": ctx.cfg.cluster_name, "currency": acct.currency,
        "accounts": [{"name": a.name, "parent": a.parent}
                     for a in ctx.state.store.load_accounts()],
    })
    if not sees_all(ctx, caller, "accounts"):  # PrivateData=accounts: the caller's own
        mine = ctx.state.accounts.accounts_of(caller.user)
        reply["accounts"] = [a for a in reply["accounts"] if a["name"] in mine]
    return reply
