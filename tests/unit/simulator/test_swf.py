"""SWF reading: header machine size, the archive's job filter, estimates, gzip, bad input."""

from __future__ import annotations

import gzip

import pytest

from simulator.swf import SwfError, parse_swf, read_swf


def line(job, submit, run, alloc, req=-1, estimate=-1, user=-1, group=-1):
    fields = [job, submit, -1, run, alloc, -1, -1, req, estimate, -1, 1, user, group,
              -1, -1, -1, -1, -1]
    return " ".join(str(f) for f in fields)


def test_maxprocs_header_wins_over_maxnodes():
    trace = parse_swf(["; MaxNodes: 64", "; MaxProcs: 128", line(1, 0, 10, 100)])
    assert (trace.max_procs, trace.max_procs_source) == (128, "MaxProcs")
    assert [j.procs for j in trace.jobs] == [100]


def test_maxnodes_is_the_fallback_then_the_largest_job():
    assert parse_swf(["; MaxNodes: 256", line(1, 0, 10, 4)]).max_procs == 256
    trace = parse_swf([line(1, 0, 10, 4), line(2, 0, 10, 12)])
    assert (trace.max_procs, trace.max_procs_source) == (12, "largest job")


def test_requested_procs_win_over_allocated():
    trace = parse_swf(["; MaxProcs: 8", line(1, 0, 10, alloc=1, req=3), line(2, 0, 10, 5)])
    assert [j.procs for j in trace.jobs] == [3, 5]


def test_filter_drops_and_counts_each_reason():
    trace = parse_swf([
        "; MaxProcs: 4",
        line(1, 0, 0, 2),  # run 0
        line(2, 0, -1, 2),  # run unknown
        line(3, 0, 10, -1),  # no processor count
        line(4, 0, 10, 8),  # bigger than the machine
        line(5, -5, 10, 2),  # negative submit
        line(6, 3, 10, 4),  # kept
    ])
    assert [j.job_id for j in trace.jobs] == [6]
    assert trace.dropped == {
        "run time <= 0": 2,
        "no processor count": 1,
        "more processors than the machine": 1,
        "submit time < 0": 1,
    }
    assert trace.total_dropped == 5


def test_estimate_is_requested_time_else_run_and_overruns_are_cut():
    trace = parse_swf([
        "; MaxProcs: 4",
        line(1, 0, 100, 1, estimate=300),
        line(2, 0, 100, 1),
        line(3, 0, 100, 1, estimate=60),
    ])
    assert [(j.run, j.estimate) for j in trace.jobs] == [(100, 300), (100, 100), (60, 60)]


def test_jobs_come_in_submit_order_then_job_number():
    trace = parse_swf(["; MaxProcs: 4", line(3, 50, 1, 1), line(2, 10, 1, 1), line(1, 50, 1, 1)])
    assert [j.job_id for j in trace.jobs] == [2, 1, 3]


def test_user_and_group_are_kept():
    job = parse_swf(["; MaxProcs: 4", line(1, 0, 5, 1, user=7, group=2)]).jobs[0]
    assert (job.user, job.group) == (7, 2)


def test_reads_gzip_and_plain_files(tmp_path):
    text = "; MaxProcs: 16\n" + line(1, 0, 10, 4) + "\n\n" + line(2, 5, 20, 16) + "\n"
    plain = tmp_path / "t.swf"
    plain.write_text(text)
    packed = tmp_path / "t.swf.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    for path in (plain, packed):
        trace = read_swf(path)
        assert (trace.max_procs, [j.job_id for j in trace.jobs]) == (16, [1, 2])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"; MaxProcs: 4\n1 0 -1 x 1 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1\n",
         "line 2: 'x' is not a number"),
        (b"; MaxProcs: 4\n1 2 3\n", "line 2: 3 fields"),
        (b"; MaxProcs: four\n" + line(1, 0, 1, 1).encode(), "MaxProcs: 'four' is not a number"),
        (b"; MaxProcs: 4\n" + line(1, 0, 1, 1).encode() + b"\n" + line(1, 5, 1, 1).encode(),
         "job number 1 appears twice"),
        (b"; MaxProcs: 4\n" + line(1, 0, 0, 1).encode(), "no usable jobs (1 dropped"),
        (b"", "no MaxProcs/MaxNodes header and no job"),
        (b"\x00\x01\x02garbage", "binary data"),
        (b"\x1f\x8bnot really gzip", "broken gzip data"),
    ],
)
def test_bad_traces_raise_one_line_errors(tmp_path, content, message):
    path = tmp_path / "bad.swf"
    path.write_bytes(content)
    with pytest.raises(SwfError) as err:
        read_swf(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SwfError, match="no such file"):
        read_swf(tmp_path / "absent.swf")
    with pytest.raises(SwfError, match="is a directory"):
        read_swf(tmp_path)
