"""schedd survives any row of its own ledger (issue 11): a job whose row cannot be read whole,
or that the scheduler core cannot take, is set aside — held for an administrator with the
reason — never a crash loop; and migration 0006 moves what ``jobs.extra`` held into typed
columns, dropping what a client had planted."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import sqlalchemy as sa

from kiln.config import Config
from kiln.model import Job, JobState, Node
from schedd import snapshots
from schedd.ledger import tables as t
from schedd.ledger.migrate import upgrade
from schedd.ledger.store import Store
from schedd.state import State
from tests.builders import sqlite_ledger

NOW = 2_000_000.0


def _store(tmp_path: Path) -> Store:
    return Store(sqlite_ledger(tmp_path))


def test_an_unreadable_row_is_loaded_set_aside_not_a_crash(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.insert_jobs([Job(id=1, name="ok", submit_time=NOW), Job(id=2, name="bad"),
                       Job(id=3, name="bad2")])
    with store.engine.begin() as conn:  # rows edited by hand (or written by a bug)
        conn.execute(sa.update(t.jobs).where(t.jobs.c.id == 2).values(
            stop={"generation": "x"}, admin_priority=None, nice=0))
        conn.execute(sa.text("UPDATE jobs SET allocation = '[{\"node\": 1}]', "
                             "time_limit = 'soon' WHERE id = 3"))
    jobs = {j.id: j for j in store.load_jobs()}
    assert jobs[1].set_aside == "" and not jobs[1].held
    assert jobs[2].set_aside == "unreadable ledger field(s): stop" and jobs[2].stop is None
    assert (jobs[2].held, jobs[2].reason, jobs[2].name) == ("admin", "JobHeldAdmin", "bad")
    assert "allocation" in jobs[3].set_aside and "time_limit" in jobs[3].set_aside
    store.close()


def test_a_job_the_core_cannot_take_is_set_aside_and_the_rest_schedule(tmp_path: Path) -> None:
    store = _store(tmp_path)
    state = State(Config(home=tmp_path, db_url=store.url), store)
    state.nodes["n1"] = Node("n1", 8, 1000, last_heartbeat=NOW)
    state.add_jobs([Job(id=1, submit_time=NOW, time_limit=60),
                    Job(id=2, submit_time=NOW, time_limit=60, nodelist="n[1-")], [])
    snapshot, blocked = snapshots.build(state, NOW)
    assert [p.job_id for p in snapshot.pending] == [1]
    assert blocked == {2: "JobHeldAdmin"}
    job = state.jobs[2]
    assert job.held == "admin" and "cannot be scheduled" in job.set_aside
    assert store.load_jobs()[1].set_aside == job.set_aside  # it was committed
    snapshot, blocked = snapshots.build(state, NOW + 1)  # and stays aside, quietly
    assert blocked == {2: "JobHeldAdmin"} and [p.job_id for p in snapshot.pending] == [1]
    store.close()


def _migration():
    path = Path(__file__).parents[3] / "migrations" / "versions" / "0006_typed_job_state.py"
    spec = importlib.util.spec_from_file_location("m0006", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_migration_0006_keeps_typed_values_and_drops_planted_ones() -> None:
    convert = _migration().convert
    extra = {"admin_priority": "x", "run_limit": 10**9, "script_args": ["a", 3],
             "alloc_sid": 77, "restart_cost": 120, "wckey": "w", "stats": {"rss_max_kb": 5,
                                                                          "evil": 1, "samples": -1},
             "preempt": {"by": 9, "generation": 3, "at": 1.0, "deadline": 2.0,
                         "mode": "requeue"},
             "requeue_on_end": {"hold": True, "state": "NODE_FAIL"},
             "forecast_first": [1, 2], "forecast_last": "bad", "expected_start": 5}
    row = convert(extra, 3, "COMPLETING")
    assert row["admin_priority"] is None and "run_limit" not in row
    assert row["script_args"] == ["a"] and (row["alloc_sid"], row["restart_cost"]) == (77, 120)
    assert row["stats"] == {"rss_max_kb": 5.0}
    assert row["preempt"]["by"] == 9 and row["stop"]["ended"] == "NODE_FAIL"
    assert row["stop"]["generation"] == 3 and row["stop"]["hold"] is True
    assert (row["forecast_first"], row["forecast_last"]) == ([1.0, 2.0], None)
    stale = convert(extra, 4, "PENDING")  # marks of another run, or of a job not stopping
    assert stale["preempt"] is None and stale["stop"] is None
    assert convert("not a dict", 0, "PENDING")["script_args"] == []


def test_migration_0006_upgrades_a_ledger_with_extra(tmp_path: Path) -> None:
    """A ledger at 0005 holding jobs with extra reaches head without losing what it held."""
    from alembic import command

    from schedd.ledger.migrate import alembic_config

    url = f"sqlite:///{tmp_path}/old.db"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0005")
        conn.execute(sa.text(
            "INSERT INTO jobs (id, name, \"user\", uid, gid, account, partition, qos, state, "
            "reason, priority, nice, held, array_spec, array_max_running, submit_time, "
            "eligible_time, begin_time, start_time, end_time, num_nodes, num_nodes_max, "
            "num_tasks, ntasks_per_node, cpus_per_task, mem_per_node_mb, mem_per_cpu_mb, "
            "mem_per_gpu_mb, gpus, gpus_per_node, gpus_per_task, gpu_type, exclusive, "
            "\"constraint\", nodelist, exclude, reservation, dependency, requeue, signal, "
            "open_mode, stdout, stderr, workdir, export, comment, mail_type, mail_user, "
            "submit_host, command, script, environment, extra, node_list, allocation, "
            "batch_host, exit_code, exit_signal, restart_count, generation) VALUES (7, 'j', "
            "'root', 0, 0, 'root', 'gpu', 'normal', 'COMPLETED', 'None', 0, 0, '', '', 0, "
            "1.0, 1.0, 0.0, 2.0, 3.0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, '', 0, '', '', '', "
            "'', '', 1, '', 'truncate', '', '', '/tmp', 'ALL', '', '', '', '', '', "
            "'#!/bin/sh', '{}', :extra, '', '[]', '', 0, 0, 0, 1)"),
            {"extra": '{"stats": {"rss_max_kb": 2048}, "admin_priority": 5, '
                      '"forecast_first": [1.5, 0.5], "script_args": ["--x"]}'})
    engine.dispose()
    upgrade(url)
    store = Store(url)
    job = store.load_jobs(active_only=False)[0]
    assert (job.stats, job.admin_priority, job.forecast_first, job.script_args) == (
        {"rss_max_kb": 2048.0}, 5, [1.5, 0.5], ["--x"])
    assert job.state == JobState.COMPLETED and not job.set_aside
    with store.engine.connect() as conn:
        assert "extra" not in {c["name"] for c in sa.inspect(conn).get_columns("jobs")}
    store.close()
