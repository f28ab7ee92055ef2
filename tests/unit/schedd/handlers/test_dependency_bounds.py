"""Issue 31 item 1: a --dependency is bounded by what it expands to (a whole array counts its
tasks, a repeat once), per job and for all of one user's pending jobs, and it is judged again
edge by edge: a state change costs the dependents that name what changed, never the queue nor
the size of their expressions. Work is counted, never timed."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.config import Config, ConfigError
from kiln.identity import Caller
from kiln.model import JobState
from kiln.slurm import dependency
from schedd import snapshots
from schedd.handlers import jobcontrol, submit
from schedd.ledger.store import Store
from schedd.lifecycle.context import RequestError
from schedd.state import State
from tests.builders import HandlerContext, handler_context

NOW = 2_000_000.0
USER = Caller(4242, 4242)
OTHER = Caller(4343, 4343)


def _context(tmp_path: Path, **cfg) -> HandlerContext:
    return handler_context(tmp_path, NOW, nodes=("node1", "node2"), **cfg)


@pytest.fixture
def ctx(tmp_path: Path):
    c = _context(tmp_path, max_dependency_jobs=150, max_dependency_edges_per_user=400)
    yield c
    c.close()


def _submit(ctx, caller: Caller = USER, **fields) -> int:
    spec = {"script": "#!/bin/sh\ntrue\n", "workdir": "/tmp", **fields}
    return submit.submit(ctx, caller, {"job": spec})["job_id"]


def _tasks(ctx, array: int) -> dict[int, object]:
    return {j.array_task_id: j for j in ctx.state.jobs.values() if j.array_job_id == array}


def _stored(ctx) -> int:
    return len(ctx.state.store.query_jobs())


def test_a_whole_array_counts_its_tasks_against_the_job_bound(ctx) -> None:
    array = _submit(ctx, array_spec="0-199", held="user")
    before = (len(ctx.state.jobs), _stored(ctx))
    with pytest.raises(RequestError) as err:
        _submit(ctx, dependency=f"afterok:{array}")
    assert err.value.message == ("Job dependency problem: it waits on 200 jobs (array tasks "
                                 "counted), over the limit of 150 (max_dependency_jobs)")
    assert (len(ctx.state.jobs), _stored(ctx)) == before  # nothing stored
    # one task, or a job and a few tasks, are well within it
    assert _submit(ctx, dependency=f"afterok:{array}_7:{array}_8")
    assert ctx.state.user_edges["4242"] == 2


def test_repeats_are_merged_and_count_once(ctx) -> None:
    first = _submit(ctx, held="user")
    # 5,000 times the same job: one job to wait on (today's parse refused past 1,000 ids)
    job = _submit(ctx, dependency="afterok:" + ":".join([str(first)] * 5000))
    assert dependency.parse(ctx.state.jobs[job].dependency).terms[0].job_ids == ((first, None),)
    assert ctx.state.user_edges["4242"] == 1


def test_the_users_pending_edges_are_bounded_and_freed_as_jobs_leave(ctx) -> None:
    array = _submit(ctx, array_spec="0-99", held="user")
    a = _submit(ctx, dependency=f"afterok:{array}")
    b = _submit(ctx, dependency=f"afterany:{array}")
    _submit(ctx, array_spec="0-99", dependency=f"after:{array}_3")  # 100 tasks, 1 edge each
    assert ctx.state.user_edges["4242"] == 300
    stored = _stored(ctx)
    with pytest.raises(RequestError) as err:
        _submit(ctx, array_spec="0-1", dependency=f"afterok:{array}")
    assert err.value.message == (
        "Job dependency problem: your pending jobs would wait on 500 jobs in all (array tasks "
        "counted), over the limit of 400 (max_dependency_edges_per_user)")
    assert _stored(ctx) == stored
    assert _submit(ctx, OTHER, dependency=f"afterok:{array}")  # another user's own bound
    ctx.state.commit([(ctx.state.jobs[a], {"state": JobState.CANCELLED})])  # no longer waits
    assert ctx.state.user_edges["4242"] == 200
    assert _submit(ctx, array_spec="0-1", dependency=f"afterok:{array}_1")
    # scontrol update Dependency= is bounded the same way, all its jobs together
    with pytest.raises(RequestError, match="max_dependency_edges_per_user"):
        jobcontrol.update_job(ctx, USER, {"job_ids": [str(b)] + [str(a + k) for k in (10, 11, 12)],
                                          "changes": {"dependency": f"afterok:{array}"}})
    assert ctx.state.jobs[b].dependency == f"afterany:{array}"
    jobcontrol.update_job(ctx, USER, {"job_ids": [str(b)],
                                      "changes": {"dependency": f"afterok:{array}_1"}})
    assert ctx.state.user_edges["4242"] == 100 + 1 + 2


def test_a_state_change_judges_only_the_references_that_cover_it(tmp_path: Path) -> None:
    ctx = _context(tmp_path, max_dependency_edges_per_user=1_000_000)
    state = ctx.state
    array = _submit(ctx, array_spec="0-199", held="user")
    tasks = _tasks(ctx, array)
    whole = [_submit(ctx, dependency=f"afterok:{array}") for _ in range(200)]
    one = [_submit(ctx, dependency=f"afterok:{array}_5") for _ in range(200)]
    _, blocked = snapshots.build(state, NOW)
    assert all(blocked[j] == "Dependency" for j in whole + one)
    state.dependency_terms_evaluated = 0
    judged = state.dependents.refs_judged
    state.commit([(tasks[7], {"state": JobState.COMPLETED})])
    _, blocked = snapshots.build(state, NOW)
    # the whole array is looked up once (its summary) and judged once for all 200 that name it
    # (they share the expression); the 200 that name task 5 are not judged at all (today: each
    # of the 400 looked its references up again, the whole array's 200 states each)
    assert state.dependency_terms_evaluated == 1
    assert state.dependents.refs_judged - judged == 1
    state.commit([(tasks[5], {"state": JobState.FAILED})])
    _, blocked = snapshots.build(state, NOW)
    assert all(blocked[j] == "DependencyNeverSatisfied" for j in one)
    assert all(blocked[j] == "Dependency" for j in whole)  # the others have not finished
    # the array's 200 tasks finishing in one cycle: one pass, not one per task
    judged = state.dependents.refs_judged
    state.commit([(t, {"state": JobState.COMPLETED}) for t in tasks.values() if t.array_task_id != 5])
    _, blocked = snapshots.build(state, NOW)
    assert all(blocked[j] == "DependencyNeverSatisfied" for j in whole)
    assert state.dependents.refs_judged - judged <= 2  # the whole array, task 5's again


def test_index_verdicts_keep_slurms_meaning(ctx) -> None:
    state = ctx.state
    array = _submit(ctx, array_spec="0-2")
    tasks = _tasks(ctx, array)
    solo = _submit(ctx)
    either = _submit(ctx, dependency=f"afterok:{array}_0?afternotok:{solo}")
    rival = _submit(ctx, name="s")  # waits ahead of ``both``, of the same user and name
    both = _submit(ctx, name="s", dependency=f"afterany:{solo},singleton")

    def reasons() -> dict[int, str]:
        blocked = snapshots.build(state, NOW)[1]
        return {j: blocked.get(j, "") for j in (either, both)}

    assert reasons() == {either: "Dependency", both: "Dependency"}
    state.commit([(state.jobs[solo], {"state": JobState.COMPLETED})])
    # afternotok of a completed job can never be met; afterok of task 0 still may
    assert reasons() == {either: "Dependency", both: "Dependency"}  # both: rival waits ahead
    state.commit([(tasks[0], {"state": JobState.FAILED})])
    assert reasons()[either] == "DependencyNeverSatisfied"
    state.commit([(state.jobs[rival], {"state": JobState.CANCELLED})])
    assert reasons()[both] == ""
    state.commit([(tasks[0], {"state": JobState.PENDING})])  # requeued: may yet complete
    assert reasons()[either] == "Dependency"
    state.commit([(tasks[0], {"state": JobState.COMPLETED})])
    assert reasons()[either] == ""


def test_the_index_and_the_edges_are_rebuilt_from_the_ledger_at_start(ctx) -> None:
    array = _submit(ctx, array_spec="0-9", held="user")
    dependents = {_submit(ctx, dependency=f"afterok:{array}") for _ in range(3)}
    task = _submit(ctx, dependency=f"afterany:{array}_4")
    fresh = State(ctx.cfg, Store(ctx.cfg.db_url))
    fresh.load(NOW)
    try:
        assert fresh.dependents.dependents_of((array, None)) == dependents
        assert fresh.dependents.dependents_of((array, 4)) == {task}
        assert fresh.user_edges["4242"] == 31
        tasks = {j.array_task_id: j for j in fresh.jobs.values() if j.array_job_id == array}
        fresh.commit([(tasks[4], {"state": JobState.COMPLETED})])
        assert snapshots.build(fresh, NOW)[1].get(task, "") == ""
    finally:
        fresh.store.close()


@pytest.mark.parametrize("key", ["max_dependency_jobs", "max_dependency_edges_per_user"])
def test_the_bounds_are_whole_numbers(tmp_path: Path, key: str) -> None:
    with pytest.raises(ConfigError, match=f"^\\[schedd\\] {key}: a whole number >= 1, not 0$"):
        Config(home=tmp_path, **{key: 0})


def test_an_arrays_tasks_share_one_judgement_but_each_counts(tmp_path: Path) -> None:
    ctx = _context(tmp_path, max_dependency_edges_per_user=1_000_000)
    state = ctx.state
    array = _submit(ctx, array_spec="0-199", held="user")
    names = ":".join(f"{array}_{i}" for i in range(100))
    dependents = _submit(ctx, array_spec="0-99", dependency=f"afterok:{names}")
    assert state.user_edges["4242"] == 100 * 100  # what it expands to, task by task
    judged = state.dependents.refs_judged
    _, blocked = snapshots.build(state, NOW)
    assert state.dependents.refs_judged - judged == 100  # the expression once, not 100 times
    waiting = [j.id for j in state.jobs.values() if j.array_job_id == dependents]
    assert len(waiting) == 100 and all(blocked[j] == "Dependency" for j in waiting)
    judged = state.dependents.refs_judged
    state.commit([(t, {"state": JobState.COMPLETED}) for t in _tasks(ctx, array).values()
                  if t.array_task_id < 100])
    _, blocked = snapshots.build(state, NOW)
    assert state.dependents.refs_judged - judged == 100  # each named task once
    assert not any(j in blocked for j in waiting)
