"""New jobs and their events go into the ledger as plain tuples (``store._insert_many``), not
as dicts through the compiled INSERT: the rows stored must be the very rows the Core INSERT
stored (JSON text, booleans, floats, NULLs), on SQLite and on PostgreSQL."""

from __future__ import annotations

from sqlalchemy import text

from kiln.model import Job, JobState, NodeAllocation, PreemptMark, StopMark
from schedd.ledger import store as st
from schedd.ledger.records import JobEvent


def _jobs() -> list[Job]:
    base = dict(user="u", uid=5, gid=5, account="a", partition="p", submit_time=1.5,
                script="#!/bin/sh\ntrue\n")
    env = {"A": "1", "B": "é \u2028"}  # shared by tasks, as expand_array shares it
    jobs = [Job(id=i, environment=env, script_args=["x", str(i)] if i % 2 else [],
                array_job_id=1, array_task_id=i, **base) for i in range(1, 6)]
    jobs.append(Job(id=10, state=JobState.RUNNING, start_time=3.25, exclusive=True,
                    requeue=False, interactive=True, stats={"x": 1.0, "y": 2.5},
                    allocation=[NodeAllocation("n1", 2, 100, [0, 1], [3, 4])],
                    stop=StopMark(1, "cancel", "CANCELLED", False, False, 5, None),
                    preempt=PreemptMark(1, 12, 4.0, 9.0, "requeue"), forecast_first=[1.0, 2.0],
                    idle_gpu_s=None, **base))
    return jobs


EVENTS = [JobEvent(1, 2.0, "PENDING", actor_uid=5, detail="submitted"),
          JobEvent(10, 3.0, "RUNNING", reason="r"), JobEvent(2, 2.5, "PENDING")]


def _stored(store: st.Store) -> tuple[list[tuple], list[tuple]]:
    with store.engine.connect() as conn:
        jobs = [tuple(r) for r in conn.execute(text("SELECT * FROM jobs ORDER BY id"))]
        events = [tuple(r) for r in conn.execute(text(
            "SELECT job_id, time, state, reason, actor_uid, detail FROM job_events "
            "ORDER BY id"))]
    return jobs, events


def test_tuples_store_what_the_core_insert_stored(ledger_store: st.Store) -> None:
    with ledger_store._write("the Core INSERT") as conn:  # the way it was done before
        conn.execute(st.INSERT_JOBS, [st.job_to_row(j) for j in _jobs()])
        conn.execute(st.INSERT_EVENTS, [st._event_row(e) for e in EVENTS])
    before = _stored(ledger_store)
    with ledger_store._write("emptying") as conn:
        conn.execute(text("DELETE FROM job_events"))
        conn.execute(text("DELETE FROM jobs"))
    ledger_store.insert_jobs(_jobs(), EVENTS)
    assert _stored(ledger_store) == before
    assert len(before[0]) == 6 and len(before[1]) == 3
    loaded = {j.id: j for j in ledger_store.load_jobs(active_only=False)}
    assert loaded == {j.id: j for j in _jobs()}


def test_an_insert_that_fails_writes_nothing(ledger_store: st.Store) -> None:
    ledger_store.insert_jobs(_jobs()[:1], EVENTS[:1])
    try:
        ledger_store.insert_jobs(_jobs()[1:3] + _jobs()[:1], EVENTS[2:])  # job 1 again
    except st.LedgerError as exc:
        assert "inserting 3 job(s) failed" in str(exc)
    else:
        raise AssertionError("a duplicate job id was stored")
    jobs, events = _stored(ledger_store)
    assert [r[0] for r in jobs] == [1] and len(events) == 1
