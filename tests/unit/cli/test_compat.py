"""Option coverage against a canned schedd: ignored options warn, refused ones fail, filters
schedd has no field for are applied by the command (sbatch, squeue, scancel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cli import sbatch, scancel, squeue

JOBS = [
    {"id": 1, "state": "RUNNING", "reservation": "maint", "partition": "gpu", "name": "a",
     "user": "u", "wckey": "w1", "array_job_id": None, "array_task_id": None},
    {"id": 2, "state": "PENDING", "reservation": "", "partition": "gpu", "name": "b",
     "user": "u", "licenses": "matlab:1", "array_job_id": 2, "array_task_id": 3},
]


@pytest.fixture
def schedd(fake_schedd):
    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        if op == "submit":
            return {"job_id": 7}
        if op == "query_jobs":
            return {"jobs": [dict(j) for j in JOBS], "now": 0.0}
        if op == "cancel":
            return {"cancelled": body.get("job_ids", []), "errors": []}
        raise AssertionError(op)
    return fake_schedd(handler)


def test_sbatch_warns_once_per_ignored_option_and_quiet_silences(schedd, capsys) -> None:
    argv = ["--mail-type=END", "--hint=compute_bound", "--cpu-freq=high",
            "--hint=nomultithread", "--wrap", "true"]
    assert sbatch.main(argv) == 0
    out, err = capsys.readouterr()
    assert out == "Submitted batch job 7\n"
    assert err.splitlines() == [
        "sbatch: warning: --hint is ignored: kiln allocates CPUs, not sockets or cores",
        "sbatch: warning: --cpu-freq is ignored: no CPU frequency control"]
    assert schedd.ops("submit")[-1]["job"]["mail_type"] == "END"
    assert sbatch.main(["-Q", "--hint=compute_bound", "--wrap", "true"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("option", ["--uid=1000", "--gid=10", "--container=/c"])
def test_sbatch_refuses_options_that_change_who_or_what_runs(schedd, capsys, option) -> None:
    assert sbatch.main([option, "--wrap", "true"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"sbatch: error: {option.split('=')[0]} is not supported")
    assert schedd.ops("submit") == []


def test_sbatch_tres_per_task(schedd, capsys) -> None:
    assert sbatch.main(["-n1", "--tres-per-task=cpu:4,gres/gpu:a100:2", "--wrap", "true"]) == 0
    job = schedd.ops("submit")[-1]["job"]
    assert (job["cpus_per_task"], job["gpus_per_task"], job["gpu_type"]) == (4, 2, "a100")
    assert sbatch.main(["--tres-per-task=license/x:1", "--wrap", "true"]) == 1
    assert "Invalid --tres-per-task specification" in capsys.readouterr().err


def test_squeue_filters_by_reservation_and_license_itself(schedd, capsys) -> None:
    assert squeue.main(["-h", "-o", "%i", "-R", "maint"]) == 0
    assert capsys.readouterr().out == "1\n"
    assert squeue.main(["-h", "-o", "%i", "-L", "matlab"]) == 0
    assert capsys.readouterr().out == "2_3\n"


@pytest.mark.parametrize("argv,line", [
    (["--steps"], "squeue: error: --steps is not supported: list a job's steps with sacct -j"),
    (["--yaml"], "squeue: error: --yaml is not supported: use --json"),
    (["-i", "x"], "squeue: error: invalid --iterate argument: x"),
])
def test_squeue_refusals(schedd, capsys, argv, line) -> None:
    assert squeue.main(argv) == 1
    assert capsys.readouterr().err.startswith(line)


def test_squeue_federation_options_warn(schedd, capsys) -> None:
    assert squeue.main(["-h", "-o", "%i", "--federation", "-M", "all"]) == 0
    out, err = capsys.readouterr()
    assert out == "2_3\n1\n"  # default sort P,t,-p: pending first
    assert err.splitlines() == [
        "squeue: warning: --clusters is ignored: kiln schedules one cluster",
        "squeue: warning: --federation is ignored: kiln has no federation"]


def test_scancel_reservation_and_wckey_select_then_cancel_by_id(schedd) -> None:
    assert scancel.main(["-R", "maint", "-s", "USR1"]) == 0
    assert schedd.ops("cancel")[-1] == {"signal": "USR1", "job_ids": ["1"]}
    assert scancel.main(["--wckey", "nope"]) == 0
    assert len(schedd.ops("cancel")) == 1  # nothing matched: nothing cancelled


def test_scancel_interactive_asks_for_each_job(schedd, monkeypatch, capsys) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("n\ny\n"))
    assert scancel.main(["-i", "-u", "u"]) == 0
    assert schedd.ops("cancel")[-1] == {"job_ids": ["2_3"]}
    assert capsys.readouterr().out == ("Cancel job_id=1 name=a partition=gpu [y/n]? "
                                       "Cancel job_id=2_3 name=b partition=gpu [y/n]? ")


@pytest.mark.parametrize("argv,cpus", [
    (["--cpus-per-gpu=8", "--gpus-per-node=2"], 16),
    (["--cpus-per-gpu=8", "--gres=gpu:4", "--ntasks-per-node=4"], 8),
    (["--cpus-per-gpu=6", "-G", "4", "-N", "2", "-n", "2"], 12),
    (["--cpus-per-gpu=8", "--gpus-per-node=2", "-c", "3"], 3),
])
def test_sbatch_cpus_per_gpu_becomes_cpus_per_task(schedd, argv, cpus) -> None:
    assert sbatch.main([*argv, "--wrap", "true"]) == 0
    assert schedd.ops("submit")[-1]["job"]["cpus_per_task"] == cpus


def test_sbatch_gpus_per_socket_is_refused(schedd, capsys) -> None:
    assert sbatch.main(["--gpus-per-socket=1", "--wrap", "true"]) == 1
    assert "use --gpus-per-node" in capsys.readouterr().err


def test_compatibility_page_lists_every_sbatch_and_srun_option() -> None:
    from pathlib import Path

    from cli.srun import SRUN_OPTION_NAMES
    from cli.submit import SBATCH_OPTION_NAMES

    page = (Path(__file__).parents[3] / "docs" / "compatibility.md").read_text()
    sbatch_part, _, srun_part = page.partition("## srun")
    for names, text in ((SBATCH_OPTION_NAMES, sbatch_part), (SRUN_OPTION_NAMES, srun_part)):
        missing = [e.split(":")[0] for e in names.split()
                   if f"| `--{e.split(':')[0]}`" not in text]
        assert missing == []


def test_a_short_command_ends_with_its_output_flushed_and_its_status(tmp_path) -> None:
    """The scripts of the short commands end through ``exit_now`` (os._exit, no interpreter
    teardown): what was printed but still buffered comes out, the status is main's."""
    import subprocess
    import sys

    code = ("import sys\nfrom cli.core import exit_now\n"
            "sys.stdout.write('out'); sys.stderr.write('err')\nexit_now(3)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out", "err")
    for script in ("sbatch", "squeue", "scancel", "sinfo", "scontrol", "sacct"):
        text = (Path(__file__).parents[3] / "scripts" / script).read_text()
        assert text.rstrip().endswith("exit_now(main())"), script
