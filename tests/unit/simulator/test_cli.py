"""``kiln sim`` end to end through click: the summary, the CSV, and one-line errors."""

from __future__ import annotations

import gzip

import pytest
from click.testing import CliRunner

from cli.kiln import main
from tests.unit.simulator.test_replay import EXPECTED, HAND_TRACE


@pytest.fixture
def trace_gz(tmp_path):
    path = tmp_path / "hand.swf.gz"
    path.write_bytes(gzip.compress(HAND_TRACE.encode()))
    return path


def run(*args):
    return CliRunner().invoke(main, ["sim", *map(str, args)])


def test_fcfs_summary_and_csv(trace_gz, tmp_path):
    out = tmp_path / "schedule.csv"
    result = run(trace_gz, "--policy", "fcfs", "--out", out)
    assert result.exit_code == 0, result.output
    text = result.stdout
    for expected in ("jobs                      5", "average wait              4.40 s",
                     "average bounded slowdown  1.20", "utilisation               0.4393",
                     "makespan                  70 s", "reservation violations    0",
                     "1 node x 4 CPUs (MaxProcs)", "dropped 1 run time <= 0", "jobs/s"):
        assert expected in text
    rows = out.read_text().splitlines()
    assert rows[0] == "id,submit,start,end,procs"
    assert rows[1:] == [",".join(map(str, row)) for row in EXPECTED]


def test_gpu_model_option(trace_gz):
    result = run(trace_gz, "--policy", "fcfs", "--nodes", 2, "--gpus-per-node", 2)
    assert result.exit_code == 0, result.output
    assert "2 nodes x 2 GPUs" in result.stdout
    assert "makespan                  80 s" in result.stdout


def test_gpu_placement_option(trace_gz):
    """The daemon's placement in the GPU model: the hand trace leaves no choice that matters,
    so the schedule is best fit's."""
    result = run(trace_gz, "--policy", "fcfs", "--nodes", 2, "--gpus-per-node", 2,
                 "--gpu-placement", "frag")
    assert result.exit_code == 0, result.output
    assert "makespan                  80 s" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}"], "no such file"),
        (["{garbled}"], "line 1: 'hello' is not a number"),
        (["{trace}", "--policy", "sjf"], "'sjf' is not one of"),
        (["{trace}", "--nodes", "0"], "--nodes must be at least 1, not 0"),
        (["{trace}", "--gpus-per-node", "x"], "'x' is not a valid integer"),
        (["{trace}", "--bogus"], "No such option '--bogus'"),
        (["{trace}", "--gpu-placement", "worst"], "'worst' is not one of 'bestfit', 'frag'"),
        (["{trace}", "--policy", "fcfs", "--config", "{missing}"], "--config only applies"),
        (["{trace}", "--config", "{missing}"], "No such file or directory"),
        (["{trace}", "--out", "{tmp}/no/such/dir.csv"], "cannot write"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(tmp_path, trace_gz, args, message):
    garbled = tmp_path / "garbled.swf"
    garbled.write_text("hello world this is not an swf trace at all\n")
    names = {"missing": tmp_path / "absent.swf", "garbled": garbled, "trace": trace_gz,
             "tmp": tmp_path}
    result = run(*[a.format(**names) for a in args])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("kiln sim: error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_a_cluster_too_small_for_every_job(tmp_path):
    path = tmp_path / "wide.swf"
    path.write_text("; MaxProcs: 16\n1 0 -1 10 4 -1 -1 -1 -1 -1 1 -1 -1 -1 -1 -1 -1 -1\n")
    result = run(path, "--nodes", 1, "--gpus-per-node", 2)
    assert result.exit_code == 1
    assert result.stderr == f"kiln sim: error: no job of {path} fits on 1 node(s) of 2 GPUs\n"


def test_forecasts_report_their_calibration(trace_gz):
    """Jobs 2 and 3 wait. Without backfill the plan reaches only the blocked head (job 2,
    when it arrives; job 3 comes behind it); with exact estimates the plan at its arrival is
    exactly when it starts."""
    result = run(trace_gz, "--policy", "fcfs", "--forecasts")
    assert result.exit_code == 0, result.output
    assert ("forecasts                 1 waiting jobs: 100.0% started by their p90; median "
            "|err| p50 0 s, p90 0 s") in result.stdout
    assert "\nforecasts " not in run(trace_gz, "--policy", "fcfs").stdout
