"""The tail and fairness figures of ``kiln sim`` (issue 18): percentiles, Jain's index, the worst
user, per-user CSV and slices, on a trace small enough to work out by hand.

Machine: 4 CPUs, FCFS. Jobs (id: submit, run, procs, user):
  1: 0,  10, 4, user 7  -> starts 0,  wait 0,  bsld 1
  2: 0,  10, 4, user 7  -> starts 10, wait 10, bsld 20/10 = 2
  3: 0,  20, 4, user 8  -> starts 20, wait 20, bsld 40/20 = 2
  4: 0,  5,  4, user 8  -> starts 40, wait 40, bsld 45/10 = 4.5
  5: 100, 10, 2, user 9 -> starts 100, wait 0, bsld 1
Waits sorted: 0, 0, 10, 20, 40. Users' mean bsld: 7 -> 1.5, 8 -> 3.25, 9 -> 1.
"""

from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner

from cli.kiln import main
from simulator.machine import pool
from simulator.metrics import Slice, by_user, jain, nearest_rank, summarize
from simulator.policy import policy_config
from simulator.replay import replay
from simulator.swf import parse_swf

TRACE = """\
; MaxProcs: 4
1 0   -1 10 4 -1 -1 -1 -1 -1 1 7 1 -1 -1 -1 -1 -1
2 0   -1 10 4 -1 -1 -1 -1 -1 1 7 1 -1 -1 -1 -1 -1
3 0   -1 20 4 -1 -1 -1 -1 -1 1 8 1 -1 -1 -1 -1 -1
4 0   -1 5  4 -1 -1 -1 -1 -1 1 8 1 -1 -1 -1 -1 -1
5 100 -1 10 2 -1 -1 -1 -1 -1 1 9 1 -1 -1 -1 -1 -1
"""


@pytest.fixture
def result():
    trace = parse_swf(TRACE.splitlines(), name="tail")
    return replay(trace, pool(trace.max_procs), policy_config("fcfs"))


def test_nearest_rank_is_a_real_job_s_wait():
    waits = [0, 0, 10, 20, 40]
    assert [nearest_rank(waits, p) for p in (1, 20, 40, 50, 60, 80, 95, 100)] == \
        [0, 0, 0, 10, 10, 20, 40, 40]


def test_jain_index():
    assert jain([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([1.5, 3.25, 1.0]) == pytest.approx(5.75 ** 2 / (3 * (2.25 + 10.5625 + 1)))


def test_tail_and_fairness_by_hand(result):
    m = summarize(result, 4)
    assert m.wait_percentiles == {50: 10, 95: 40, 99: 40}
    assert m.max_wait == 40
    assert m.users == 3
    assert m.jain_bsld == pytest.approx(5.75 ** 2 / (3 * (2.25 + 10.5625 + 1)))
    assert (m.worst_user, m.worst_user_wait) == (8, 30)
    assert [(u.user, u.jobs, u.avg_wait, u.max_wait, u.avg_bsld) for u in by_user(result.records)] \
        == [(7, 2, 5, 10, 1.5), (8, 2, 30, 40, 3.25), (9, 1, 0, 0, 1)]


def test_a_slice_of_jobs_and_a_window_of_time(result):
    jobs = summarize(result, 4, Slice("job", 2, 4))
    assert (jobs.jobs, jobs.avg_wait, jobs.max_wait, jobs.users) == (3, 70 / 3, 40, 2)
    # the machine's busy share over the slice's span [0, 45): jobs 2-4 and job 1 too
    assert jobs.utilisation == pytest.approx(4 * 45 / (4 * 45))
    late = summarize(result, 4, Slice("time", 50, None))
    assert (late.jobs, late.avg_wait, late.users, late.worst_user) == (1, 0, 1, 9)
    assert late.utilisation == pytest.approx(2 * 10 / (4 * 10))
    assert summarize(result, 4, Slice("time", 0, 100)).jobs == 4  # [0, 100): job 5 is out
    whole = summarize(result, 4)
    assert whole.utilisation == pytest.approx((40 + 40 + 80 + 20 + 20) / (4 * 110))


def run(*args):
    return CliRunner().invoke(main, ["sim", *map(str, args)])


def test_cli_prints_the_tail_and_writes_the_users(tmp_path):
    path = tmp_path / "tail.swf"
    path.write_text(TRACE)
    users = tmp_path / "users.csv"
    result = run(path, "--policy", "fcfs", "--by-user", users, "--from", 2, "--to", 4)
    assert result.exit_code == 0, result.output
    assert "slice                     jobs 2 to 4" in result.stdout
    assert "wait tail                 p50 20, p95 40, p99 40, max 40 s" in result.stdout
    assert "worst mean wait 30.00 s, user 8" in result.stdout
    rows = list(csv.reader(users.open()))
    assert rows == [["user", "jobs", "avg_wait", "max_wait", "avg_bsld"],
                    ["7", "1", "10.00", "10", "2.0000"], ["8", "2", "30.00", "40", "3.2500"]]


@pytest.mark.parametrize(("args", "message"), [
    (["--from", "2", "--to", "1m"], "both be job numbers or both be times"),
    (["--from", "soon"], "'soon' is neither a job number nor a time"),
    (["--to", "-3"], "must not be negative"),
    (["--from", "4", "--to", "2"], "--to (2) is before --from (4)"),
    (["--from", "1000"], "no replayed job is in the slice (jobs 1,000 to end)"),
    (["--by-user", "/no/such/dir/u.csv"], "cannot write /no/such/dir/u.csv"),
])
def test_bad_slices_are_one_line(tmp_path, args, message):
    path = tmp_path / "tail.swf"
    path.write_text(TRACE)
    result = run(path, *args)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("kiln sim: error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
