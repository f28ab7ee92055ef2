"""The ledger against both databases it supports: every case runs on SQLite (a temp file) and on
PostgreSQL (a schema of a throwaway database, see tests/pgutil.py)."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import text

from cli.kiln import main as kiln
from kiln.model import (
    GPU,
    JOB_FIELDS,
    Job,
    JobState,
    Node,
    NodeAllocation,
    NodeState,
    Partition,
    PreemptMark,
    StopMark,
)
from schedd.ledger import tables as t
from schedd.ledger.engine import make_engine, show_url
from schedd.ledger.migrate import current_revision, head_revision, upgrade
from schedd.ledger.records import (
    AccountRecord,
    AssociationRecord,
    JobEvent,
    LedgerError,
    SchemaError,
    UserRecord,
)
from schedd.ledger.store import Store

# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def url(empty_ledger: str) -> str:
    """An empty database, not migrated (tests/unit/conftest.py: both backends)."""
    return empty_ledger


@pytest.fixture
def store(url):
    upgrade(url)
    s = Store(url)
    yield s
    s.close()


def execute(url: str, sql: str) -> None:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(sql))
    engine.dispose()


def full_job(job_id: int = 42) -> Job:
    """A job with every field away from its default, JSON fields and allocation included."""
    return Job(
        id=job_id,
        name="train-llm",
        user="alice",
        uid=1001,
        gid=1002,
        account="physics",
        partition="gpu",
        qos="high",
        state=JobState.RUNNING,
        reason="Priority",
        priority=12345,
        nice=-5,
        held="user",
        array_job_id=40,
        array_task_id=2,
        array_spec="0-9%2",
        array_max_running=2,
        submit_time=1700000000.25,
        eligible_time=1700000001.5,
        begin_time=1700000002.0,
        start_time=1700000003.125,
        end_time=1700000004.0,
        time_limit=7200,
        time_min=600,
        num_nodes=2,
        num_nodes_max=4,
        num_tasks=16,
        ntasks_per_node=8,
        cpus_per_task=4,
        mem_per_node_mb=64000,
        mem_per_cpu_mb=2000,
        mem_per_gpu_mb=40000,
        gpus=16,
        gpus_per_node=8,
        gpus_per_task=1,
        gpu_type="a100", shards_per_node=2, mps_per_node=50,
        exclusive=True, switches=2, switch_wait=120, segment=2, exclusive_topo=True,
        constraint="nvlink&ib",
        nodelist="node[01-02]",
        exclude="node03",
        reservation="maint",
        dependency="afterok:41",
        requeue=False,
        signal="B:USR1@120",
        open_mode="append",
        stdout="out-%j.log",
        stderr="err-%j.log",
        workdir="/home/alice/run",
        export="NONE",
        comment='it\'s a "quoted" comment\nwith two lines',
        mail_type="END,FAIL",
        mail_user="alice@example.org",
        submit_host="login1",
        command="/home/alice/train.sh",
        script="#!/bin/bash\n#SBATCH -G 16\nsrun python train.py ü\n",
        environment={"PATH": "/usr/bin", "LANG": "C.UTF-8", "EMPTY": ""},
        licenses="matlab:1", interactive=True, script_args=["--lr", "0.1"], wckey="w",
        stdin="/dev/null",
        alloc_sid=4242, restart_cost=300, admin_priority=77, launched_limit=3600,
        stop=StopMark(2, "requeue", "REQUEUED", True, True, 0, (7, 0)),
        preempt=PreemptMark(2, 9, 100.0, 130.0, "requeue", "qos"),
        stats={"samples": 3.0, "rss_max_kb": 2048.0}, expected_start=5.0, sched_nodes="node01",
        forecast_first=[1.0, 2.0], forecast_last=[3.0, 4.0],
        forecast_band=[5.0, 6.0, 1.0, 4.0, 5.0], set_aside="held for a test",
        mail_sent="TIME_LIMIT_50", idle_gpu_s=1234.5, idle_since=99.0,
        node_list="node[01-02]",
        allocation=[
            NodeAllocation("node01", 32, 64000, [0, 1, 2, 3, 4, 5, 6, 7]),
            NodeAllocation("node02", 32, 64000, [0, 1, 2, 3, 4, 5, 6, 7]),
        ],
        batch_host="node01",
        exit_code=3,
        exit_signal=9,
        restart_count=1,
        generation=7,
        cancelled_by=0,
    )


def ev(job_id: int, at: float, state: str, **kw) -> JobEvent:
    return JobEvent(job_id=job_id, time=at, state=state, **kw)


# -- schema and migrations ------------------------------------------------------------------------


def test_upgrade_then_check_schema_passes(url):
    upgrade(url)
    upgrade(url)  # a second upgrade is a no-op
    store = Store(url)
    store.check_schema()
    store.close()
    assert current_revision(url) == head_revision()
    assert head_revision() == sorted(_migration_revisions())[-1]


def test_migration_creates_exactly_the_models(url):
    upgrade(url)
    engine = make_engine(url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, t.Base.metadata) == []
    engine.dispose()


def test_unmigrated_database_names_kiln_db_upgrade(url):
    store = Store(url)
    with pytest.raises(SchemaError) as info:
        store.check_schema()
    store.close()
    assert str(info.value) == f"database {show_url(url)} is not migrated: run `kiln db upgrade`"


def test_database_from_a_newer_kiln_is_refused(url):
    upgrade(url)
    execute(url, "UPDATE alembic_version SET version_num = '9999_future'")
    store = Store(url)
    with pytest.raises(SchemaError) as info:
        store.check_schema()
    store.close()
    expected = (
        f"database {show_url(url)} is newer than this kiln (revision 9999_future); upgrade kiln"
    )
    assert str(info.value) == expected
    with pytest.raises(SchemaError) as info:
        upgrade(url)
    assert str(info.value) == expected


def test_password_is_not_shown():
    url = "postgresql://kiln:s3cret@127.0.0.1:1/kiln"
    store = Store(url)
    with pytest.raises(SchemaError) as info:
        store.check_schema()
    store.close()
    assert "s3cret" not in str(info.value)
    assert str(info.value).startswith("cannot open database postgresql://kiln:***@127.0.0.1:1/kiln")


def test_bad_urls_are_one_line_schema_errors(tmp_path):
    with pytest.raises(SchemaError, match="invalid database URL 'not a url'"):
        Store("not a url")
    with pytest.raises(SchemaError, match="unsupported database URL nosuch://"):
        Store("nosuch://x/y")
    store = Store(f"sqlite:///{tmp_path}/missing/dir/kiln.db")
    with pytest.raises(SchemaError, match="cannot open database .*: unable to open database file"):
        store.check_schema()
    store.close()


def test_sqlite_connection_settings(tmp_path):
    url = f"sqlite:///{tmp_path}/kiln.db"
    upgrade(url)
    store = Store(url)
    with store.engine.connect() as conn:
        pragmas = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
        }
    store.close()
    assert pragmas == {
        "journal_mode": "wal",
        "synchronous": 1,
        "busy_timeout": 5000,
        "foreign_keys": 1,
    }


def test_jobs_table_has_one_column_per_job_field():
    assert list(t.jobs.c.keys()) == list(JOB_FIELDS)


# -- jobs -----------------------------------------------------------------------------------------


def test_full_job_sets_every_field():
    default = Job(id=0)
    same = [f for f in JOB_FIELDS if getattr(full_job(), f) == getattr(default, f)]
    assert same == [], "full_job() must move every field off its default"


def test_job_round_trip_with_every_field(store):
    job = full_job()
    store.insert_jobs([job])
    assert store.load_jobs(active_only=False) == [job]
    assert store.query_jobs(job_ids=[42]) == [job]


def test_job_round_trip_with_unlimited_and_defaults(store):
    job = Job(id=7, time_limit=None, time_min=None, array_job_id=None, cancelled_by=None)
    store.insert_jobs([job])
    [back] = store.load_jobs()
    assert back == job
    assert back.time_limit is None and back.array_task_id is None
    assert isinstance(back.state, JobState)


def test_insert_is_visible_to_another_connection_when_it_returns(store):
    store.insert_jobs([Job(id=1)], [ev(1, 1.0, "PENDING")])
    other = Store(store.url)
    assert [j.id for j in other.load_jobs()] == [1]
    assert other.job_events(1) == [ev(1, 1.0, "PENDING")]
    other.close()


def test_insert_batch_is_atomic(store):
    store.insert_jobs([Job(id=1)])
    with pytest.raises(LedgerError, match="inserting 3 job"):
        store.insert_jobs([Job(id=2), Job(id=3), Job(id=1)], [ev(2, 1.0, "PENDING")])
    assert [j.id for j in store.load_jobs(active_only=False)] == [1]
    assert store.job_events(2) == []


def test_insert_rolls_back_when_an_event_fails(store):
    with pytest.raises(LedgerError):
        store.insert_jobs([Job(id=5)], [ev(999, 1.0, "PENDING")])  # no job 999: foreign key
    assert store.load_jobs(active_only=False) == []


def test_bad_values_fail_the_whole_call(store):
    with pytest.raises(LedgerError):
        store.insert_jobs([Job(id=1), Job(id=2, stats={"not json": object()})])
    with pytest.raises(LedgerError, match="'DONE' is not a job state"):
        store.insert_jobs([Job(id=3), Job(id=4, state="DONE")])
    assert store.load_jobs(active_only=False) == []
    store.insert_jobs([Job(id=5)])
    with pytest.raises(LedgerError, match="'DONE' is not a job state"):
        store.update_jobs([(5, {"nice": 1}), (5, {"state": "DONE"})])
    assert store.load_jobs()[0].nice == 0


def test_wide_integers_round_trip(store):
    """uids are unsigned 32-bit (nfsnobody is 4294967294); Slurm priorities are uint32."""
    job = Job(id=1, uid=4294967294, gid=4294967294, priority=4_000_000_000, cancelled_by=2**32 - 2)
    store.insert_jobs([job], [ev(1, 1.0, "PENDING", actor_uid=2**32 - 2)])
    assert store.load_jobs() == [job]
    assert store.job_events(1)[0].actor_uid == 2**32 - 2


def test_update_jobs_groups_fields_and_converts_types(store):
    store.insert_jobs([Job(id=i) for i in range(1, 4)])
    alloc = [NodeAllocation("n1", 4, 1000, [0, 1])]
    store.update_jobs(
        [
            (1, {"state": JobState.RUNNING, "start_time": 10.0, "allocation": alloc}),
            (2, {"state": "RUNNING", "start_time": 11.0, "allocation": []}),
            (3, {"priority": 99, "time_limit": None, "script_args": ["k"]}),
        ],
        [ev(1, 10.0, "RUNNING", actor_uid=0), ev(2, 11.0, "RUNNING")],
    )
    jobs = {j.id: j for j in store.load_jobs()}
    assert jobs[1].state is JobState.RUNNING and jobs[1].allocation == alloc
    assert jobs[2].start_time == 11.0 and jobs[2].allocation == []
    assert jobs[3].priority == 99 and jobs[3].script_args == ["k"]
    assert jobs[3].state is JobState.PENDING
    assert store.job_events(1) == [ev(1, 10.0, "RUNNING", actor_uid=0)]


def test_update_batch_is_atomic(store):
    store.insert_jobs([Job(id=1), Job(id=2)])
    with pytest.raises(LedgerError, match="job 999 is not in the ledger"):
        store.update_jobs(
            [(1, {"state": "CANCELLED"}), (999, {"state": "CANCELLED"}), (2, {"nice": 5})],
            [ev(1, 5.0, "CANCELLED")],
        )
    assert [(j.state, j.nice) for j in store.load_jobs()] == [(JobState.PENDING, 0)] * 2
    assert store.job_events(1) == []


def test_update_refuses_unknown_fields_and_the_id(store):
    store.insert_jobs([Job(id=1)])
    with pytest.raises(LedgerError, match="cannot update job field"):
        store.update_jobs([(1, {"nice": 3}), (1, {"colour": "red"})])
    with pytest.raises(LedgerError, match="cannot update job field"):
        store.update_jobs([(1, {"id": 2})])
    assert store.load_jobs()[0].nice == 0


def test_load_jobs_active_and_recently_finished(store):
    states = {
        1: (JobState.PENDING, 0.0),
        2: (JobState.RUNNING, 0.0),
        3: (JobState.COMPLETING, 0.0),
        4: (JobState.SUSPENDED, 0.0),
        5: (JobState.COMPLETED, 100.0),
        6: (JobState.FAILED, 200.0),
        7: (JobState.CANCELLED, 300.0),
    }
    store.insert_jobs([Job(id=i, state=s, end_time=end) for i, (s, end) in states.items()])
    assert [j.id for j in store.load_jobs()] == [1, 2, 3, 4]
    assert [j.id for j in store.load_jobs(finished_since=200.0)] == [1, 2, 3, 4, 6, 7]
    assert [j.id for j in store.load_jobs(active_only=False)] == list(range(1, 8))


def test_max_job_id_survives_purge(store):
    assert store.max_job_id() == 0
    store.insert_jobs([Job(id=5, state=JobState.COMPLETED, end_time=10.0), Job(id=3)])
    assert store.max_job_id() == 5
    assert store.purge_jobs(finished_before=20.0) == 1
    assert [j.id for j in store.load_jobs(active_only=False)] == [3]
    assert store.max_job_id() == 5


def test_query_jobs_filters(store):
    array = [
        Job(id=10 + i, array_job_id=10, array_task_id=i, user="bob", account="bio", name="sweep")
        for i in range(3)
    ]
    others = [
        Job(
            id=20,
            user="alice",
            account="phys",
            name="a",
            state=JobState.COMPLETED,
            submit_time=50.0,
            end_time=90.0,
        ),
        Job(
            id=21,
            user="alice",
            account="phys",
            name="b",
            state=JobState.FAILED,
            submit_time=150.0,
            end_time=200.0,
        ),
    ]
    store.insert_jobs(array + others)
    ids = lambda jobs: [j.id for j in jobs]  # noqa: E731
    assert ids(store.query_jobs(job_ids=[10])) == [10, 11, 12]
    assert ids(store.query_jobs(job_ids=[11, 20])) == [11, 20]
    assert ids(store.query_jobs(users=["alice"])) == [20, 21]
    assert ids(store.query_jobs(accounts=["bio"], limit=2)) == [10, 11]
    assert ids(store.query_jobs(states=["FAILED", JobState.COMPLETED])) == [20, 21]
    assert ids(store.query_jobs(names=["b", "sweep"])) == [10, 11, 12, 21]
    assert ids(store.query_jobs(users=["alice"], start=100.0)) == [21]
    assert ids(store.query_jobs(users=["alice"], end=100.0)) == [20]
    assert ids(store.query_jobs(start=100.0, end=120.0)) == [10, 11, 12]


def test_job_events_in_time_order(store):
    store.insert_jobs([Job(id=1), Job(id=2)], [ev(1, 1.0, "PENDING")])
    store.update_jobs(
        [(1, {"state": "RUNNING"})],
        [ev(1, 3.0, "RUNNING", reason="None", detail="node01"), ev(2, 2.0, "PENDING")],
    )
    store.update_jobs([], [ev(1, 2.0, "PENDING", reason="held", actor_uid=1001)])
    assert [e.time for e in store.job_events(1)] == [1.0, 2.0, 3.0]
    assert store.job_events(1)[2] == ev(1, 3.0, "RUNNING", reason="None", detail="node01")
    assert store.job_events(3) == []


# -- nodes, partitions ----------------------------------------------------------------------------


def test_nodes_and_gpus_upsert(store):
    # island 0 near CPUs 0-31, island 1 near 32-63 (gpus.cpus, "0-31"); GPU 7 near none known
    gpus = [GPU(i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", 81559, island=i // 4,
                cpus=list(range(32 * (i // 4), 32 * (i // 4 + 1))) if i < 7 else [])
            for i in range(8)]
    node = Node(
        "node01",
        64,
        512000,
        gpus,
        ["h100", "ib"],
        ["gpu"],
        NodeState.IDLE,
        "",
        "tcp://10.0.0.1:6818",
        100.5,
        50.25,
    )
    store.upsert_node(node)
    store.upsert_node(Node("cpu01", 32, 128000))
    assert store.load_nodes() == [Node("cpu01", 32, 128000), node]

    changed = dataclasses.replace(
        node, gpus=gpus[:2], state=NodeState.DRAIN, reason="bad gpu", last_heartbeat=200.0
    )
    store.upsert_node(changed)
    assert store.load_nodes()[1] == changed

    store.delete_node("cpu01")
    assert [n.name for n in store.load_nodes()] == ["node01"]


def test_partitions(store):
    parts = [Partition("gpu", ["node01"], True, 86400, 3600, 2), Partition("debug")]
    store.save_partitions(parts)
    store.save_partitions([Partition("debug", state="DOWN")])
    assert store.load_partitions() == [Partition("debug", state="DOWN"), parts[0]]


# -- accounts, fair share, audit, meta ------------------------------------------------------------


def test_accounts_users_associations(store):
    store.ensure_user("alice", 1001, "physics")
    store.ensure_user("alice", 1001, "physics")  # idempotent
    store.ensure_account("cms", parent="physics", shares=5)
    store.ensure_user("bob", 1002, "cms")
    assert store.load_accounts() == [
        AccountRecord("cms", "physics", 5),
        AccountRecord("physics", "root"),
        AccountRecord("root", None),
    ]
    assert store.load_users() == [
        UserRecord("alice", 1001, "physics"),
        UserRecord("bob", 1002, "cms"),
    ]
    assert store.load_associations() == [
        AssociationRecord("cms", "bob"),
        AssociationRecord("physics", "alice"),
    ]
    with pytest.raises(LedgerError, match="parent account nowhere does not exist"):
        store.ensure_account("x", parent="nowhere")
    with pytest.raises(LedgerError, match="creating user mallory"):
        store.ensure_user("mallory", 1001, "physics")  # uid taken
    assert [u.name for u in store.load_users()] == ["alice", "bob"]


def test_fairshare_usage(store):
    assert store.load_fairshare() == {}
    store.save_fairshare({("physics", "alice"): 10.5, ("physics", ""): 10.5}, now=100.0)
    store.save_fairshare({("physics", "alice"): 5.25, ("bio", "bob"): 1.0}, now=200.0)
    assert store.load_fairshare() == {
        ("physics", "alice"): 5.25,
        ("physics", ""): 10.5,
        ("bio", "bob"): 1.0,
    }


def test_audit_trail(store):
    store.audit(1001, "cancel", "job 12", "scancel 12", now=5.0)
    store.audit(0, "update", "node node01", "State=DRAIN Reason=x", now=7.0)
    store.audit(0, "hold", "job 13")
    records = store.load_audit(since=6.0)
    assert [(r.actor_uid, r.action, r.target) for r in records][0] == (0, "update", "node node01")
    assert len(records) == 2 and records[1].time > 7.0
    assert len(store.load_audit(limit=1)) == 1


def test_meta(store):
    assert store.get_meta("cluster") is None
    store.set_meta("cluster", "a")
    store.set_meta("cluster", "b")
    assert store.get_meta("cluster") == "b"


# -- kiln db --------------------------------------------------------------------------------------


def test_kiln_db_upgrade_and_current(url):
    runner = CliRunner()
    first = runner.invoke(kiln, ["db", "upgrade", "--url", url])
    assert first.exit_code == 0, first.output
    assert first.output == f"database {show_url(url)} upgraded to revision {head_revision()}\n"
    again = runner.invoke(kiln, ["db", "upgrade", "--url", url])
    assert again.output == f"database {show_url(url)} is already at revision {head_revision()}\n"
    current = runner.invoke(kiln, ["db", "current", "--url", url])
    assert (current.exit_code, current.output) == (
        0,
        f"database {show_url(url)} is at revision {head_revision()}, this kiln's\n",
    )


def test_kiln_db_current_on_unmigrated_database_fails(url):
    result = CliRunner().invoke(kiln, ["db", "current", "--url", url])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: database {show_url(url)} is not migrated: run `kiln db upgrade`\n"
    )


@pytest.mark.parametrize(
    "bad_url, message",
    [
        ("not a url", "invalid database URL 'not a url'"),
        ("nosuch://x/y", "unsupported database URL nosuch://x/y"),
        ("postgresql://postgres@127.0.0.1:1/x", "cannot open database"),
    ],
)
def test_kiln_db_upgrade_bad_url_is_one_line(bad_url, message):
    result = CliRunner().invoke(kiln, ["db", "upgrade", "--url", bad_url])
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: {message}")
    assert result.output.count("\n") == 1


def test_kiln_db_upgrade_defaults_to_the_cluster_database(tmp_path, monkeypatch):
    monkeypatch.delenv("KILN_CONF", raising=False)
    # a system install on the test host (bin/quickstart as root makes one) is not this cluster
    monkeypatch.setattr("kiln.paths.SYSTEM_CONF", str(tmp_path / "no-system" / "kiln.toml"))
    monkeypatch.setenv("KILN_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(kiln, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / "kiln.db").exists()
    with sqlite3.connect(tmp_path / "home" / "kiln.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (head_revision(),)


def _migration_revisions() -> list[str]:
    """Revision ids of the files in migrations/versions (they are numbered in order)."""
    from pathlib import Path

    import migrations

    folder = Path(next(iter(migrations.__path__))) / "versions"
    return [p.name.split("_")[0] for p in folder.glob("[0-9]*_*.py")]


def test_recent_runs_for_the_runtime_history(store):
    """What schedd reads at start-up to predict run times: the last runs that ended as asked,
    oldest first, with the request and the run's start and end."""
    rows = [Job(id=1, state=JobState.COMPLETED, user="ann", gpus_per_node=8, time_limit=600,
                start_time=100.0, end_time=400.0),
            Job(id=2, state=JobState.TIMEOUT, user="ann", start_time=100.0, end_time=700.0),
            Job(id=3, state=JobState.PREEMPTED, user="ann", start_time=100.0, end_time=200.0),
            Job(id=4, state=JobState.CANCELLED, user="bob", start_time=0.0, end_time=50.0),
            Job(id=5, state=JobState.FAILED, user="bob", start_time=10.0, end_time=20.0)]
    store.insert_jobs(rows)
    states = ["COMPLETED", "TIMEOUT", "FAILED", "CANCELLED"]
    got = store.recent_runs(states, 10)
    assert [j.id for j in got] == [5, 1, 2]  # by end; never started (4) and preempted (3) out
    assert (got[1].user, got[1].gpus_per_node, got[1].time_limit) == ("ann", 8, 600)
    assert got[1].end_time - got[1].start_time == 300.0
    assert [j.id for j in store.recent_runs(states, 2)] == [1, 2]  # the most recent two


def test_started_jobs_are_read_newest_first_a_page_at_a_time(store):
    """``kiln stats`` and ``kiln why`` read the newest starts in pages (issue 12: one read of
    5,000 held schedd's loop): ties of start time cut across pages by id, nothing read twice
    or skipped, the limit and the window kept."""
    starts = {i: 1000.0 + (i // 4) for i in range(1, 31)}  # four jobs share each start
    store.insert_jobs([Job(id=i, name="s", user="u", start_time=start,
                           forecast_first=[start - 5, start - 50],
                           forecast_band=[start, start + 60, start - 50, start, start + 60])
                       for i, start in starts.items()]
                      + [Job(id=31, name="pending", user="u")])  # never started
    pages = list(store.iter_started_since(0.0, 100, page=3))
    assert [len(p) for p in pages] == [3] * 10
    read = [j.id for p in pages for j in p]
    assert read == sorted(starts, key=lambda i: (starts[i], i), reverse=True)
    assert pages[0][0].forecast_first == [starts[30] - 5, starts[30] - 50]
    assert pages[0][0].forecast_last is None and pages[0][0].forecast_band[1] == starts[30] + 60
    limited = [j.id for p in store.iter_started_since(0.0, 7, page=3) for j in p]
    assert limited == read[:7]
    window = [j.id for p in store.iter_started_since(1006.0, 100, page=4) for j in p]
    assert window == [i for i in read if starts[i] >= 1006.0]
    assert list(store.iter_started_since(2000.0, 100)) == []
