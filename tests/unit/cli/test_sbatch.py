"""sbatch end to end against a canned schedd: what it sends, prints and exits with."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import pytest

from cli import sbatch
from cli.core.client import ClientError
from kiln.slurm import rlimits


def accept(job_id: int = 42):
    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        if op == "submit":
            if body.get("test_only"):
                return {"job_id": job_id, "start_time": 1.0e9, "nodes": "gpu01",
                        "partition": "gpu", "cpus": 4}
            return {"job_id": job_id, "array_task_ids": []}
        raise ClientError("unknown_op", op)
    return handler


@pytest.fixture
def submitted(fake_schedd):
    fake = fake_schedd(accept())

    def job() -> dict[str, Any]:
        return fake.ops("submit")[-1]["job"]
    job.fake = fake  # type: ignore[attr-defined]
    return job


def write_script(tmp_path: Path, text: str, name: str = "job.sh") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_wrap_prints_submitted_batch_job(submitted, capsys) -> None:
    assert sbatch.main(["--wrap", "true"]) == 0
    out, err = capsys.readouterr()
    assert out == "Submitted batch job 42\n" and err == ""
    job = submitted()
    assert job["name"] == "wrap" and job["command"] == "(wrap)"
    assert job["script"] == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n"
    assert job["workdir"] == os.getcwd() and job["submit_host"] == os.uname().nodename
    assert job["environment"]["PATH"] == os.environ["PATH"]
    assert not {"user", "uid", "gid"} & set(job)


def test_parsable_as_directive(submitted, tmp_path, capsys) -> None:
    path = write_script(tmp_path, "#!/bin/sh\n#SBATCH --parsable\n#SBATCH -J named\ntrue\n")
    assert sbatch.main([path]) == 0
    assert capsys.readouterr().out == "42\n"
    job = submitted()
    assert job["name"] == "named" and job["command"] == path


def test_command_line_overrides_directives_and_env(submitted, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SBATCH_PARTITION", "from-env")
    monkeypatch.setenv("SBATCH_TIMELIMIT", "7")
    path = write_script(tmp_path, "#!/bin/sh\n#SBATCH -p from-script -t 5 -A acct\n"
                        "#SBATCH --gres=gpu:a100:2\ntrue\n")
    assert sbatch.main(["-t", "9", path, "arg1"]) == 0
    job = submitted()
    assert job["partition"] == "from-env" and job["time_limit"] == 540
    assert job["account"] == "acct" and job["gpus_per_node"] == 2 and job["gpu_type"] == "a100"
    assert job["name"] == "job.sh" and job["script_args"] == ["arg1"]


def test_script_from_stdin(submitted, monkeypatch, capsys) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(b"#!/bin/bash\n#SBATCH --mem=2g\necho hi\n"))
    monkeypatch.setattr("sys.stdin", stdin)
    assert sbatch.main(["--parsable"]) == 0
    assert capsys.readouterr().out == "42\n"
    job = submitted()
    assert job["name"] == "sbatch" and job["command"] == "(stdin)"
    assert job["mem_per_node_mb"] == 2048 and job["script"].startswith("#!/bin/bash")


def test_options_become_job_fields(submitted) -> None:
    argv = ["-N", "2-3", "-n", "8", "--ntasks-per-node=4", "-c", "2", "--mem-per-cpu=1G",
            "-G", "h100:4", "--gpus-per-task=1", "--array=0-15:4%2", "-d", "afterok:7",
            "--begin=now+60", "-H", "--signal=B:USR1@90", "--no-requeue", "--open-mode=append",
            "-o", "out-%j", "-e", "err-%A_%a", "--exclusive", "-C", "a100", "-w", "n[1-2]",
            "-x", "n3", "--nice=5", "--comment=hi", "--mail-type=END,FAIL",
            "--mail-user=a@b", "--reservation=r", "-q", "high", "--time-min=30",
            "-D", "/tmp", "--export=NONE", "--wckey=w", "--wrap", "true"]
    assert sbatch.main(argv) == 0
    job = submitted()
    expected = {
        "num_nodes": 2, "num_nodes_max": 3, "num_tasks": 8, "ntasks_per_node": 4,
        "cpus_per_task": 2, "mem_per_cpu_mb": 1024, "gpus": 4, "gpu_type": "h100",
        "gpus_per_task": 1, "array_spec": "0-15:4%2", "array_max_running": 2,
        "dependency": "afterok:7", "held": "user", "signal": "B:USR1@90", "requeue": False,
        "open_mode": "append", "stdout": "out-%j", "stderr": "err-%A_%a", "exclusive": True,
        "constraint": "a100", "nodelist": "n[1-2]", "exclude": "n3", "nice": 5,
        "comment": "hi", "mail_type": "END,FAIL", "mail_user": "a@b", "reservation": "r",
        "qos": "high", "time_min": 1800, "workdir": "/tmp", "export": "NONE",
        # --export=NONE: only the umask and soft limits (PropagateResourceLimits)
        "environment": rlimits.submitted(),
    }
    assert {k: job[k] for k in expected} == expected
    assert job["wckey"] == "w" and job["begin_time"] > 0


def test_test_only_prints_the_plan_on_stderr(submitted, capsys) -> None:
    assert sbatch.main(["--test-only", "--wrap", "true"]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("sbatch: Job 42 to start at ")
    assert err.endswith(" using 4 processors on nodes gpu01 in partition gpu\n")
    assert submitted.fake.ops("submit")[-1]["test_only"] is True


def test_not_a_batch_script(submitted, tmp_path, capsys) -> None:
    path = write_script(tmp_path, "echo no shebang\n")
    assert sbatch.main([path]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("sbatch: error: This does not look like a batch script.  The first\n"
                   "sbatch: error: line must start with #! followed by the path to an "
                   "interpreter.\n"
                   "sbatch: error: For instance: #!/bin/sh\n")
    assert submitted.fake.ops("submit") == []


@pytest.mark.parametrize("argv, line", [
    (["--foo", "--wrap", "x"], "sbatch: unrecognized option '--foo'"),
    (["-t", "abc", "--wrap", "x"], "sbatch: error: Invalid --time specification"),
    (["--array=0-5000", "--wrap", "x"],
     "sbatch: error: Batch job submission failed: Invalid job array specification"),
    (["/nonexistent/job.sh"], "sbatch: error: Unable to open file /nonexistent/job.sh"),
    (["--wrap", "x", "extra"], "sbatch: error: Script arguments not permitted with --wrap option"),
])
def test_bad_input_is_one_line_and_exit_1(submitted, capsys, argv, line) -> None:
    assert sbatch.main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == line + "\n"


def test_invalid_directive(submitted, tmp_path, capsys) -> None:
    path = write_script(tmp_path, "#!/bin/sh\n#SBATCH stray\ntrue\n")
    assert sbatch.main([path]) == 1
    assert capsys.readouterr().err == (
        "sbatch: error: Invalid directive found in batch script: stray\n")


def test_dos_line_breaks(submitted, tmp_path, capsys) -> None:
    path = write_script(tmp_path, "#!/bin/sh\r\ntrue\r\n")
    assert sbatch.main([path]) == 1
    assert "DOS line breaks" in capsys.readouterr().err


def test_schedd_refusal(fake_schedd, capsys) -> None:
    def refuse(op: str, body: dict[str, Any]) -> dict[str, Any]:
        raise ClientError("invalid", "Invalid qos specification")

    fake_schedd(refuse)
    assert sbatch.main(["-q", "nope", "--wrap", "true"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "sbatch: error: Batch job submission failed: Invalid qos specification\n"


def test_unreachable_schedd(tmp_path, monkeypatch, capsys) -> None:
    conf = tmp_path / "kiln.toml"
    conf.write_text(f'client_endpoint = "ipc://{tmp_path}/nobody.sock"\n')
    monkeypatch.setenv("KILN_CONF", str(conf))
    assert sbatch.main(["--wrap", "true"]) == 1
    assert capsys.readouterr().err == ("sbatch: error: Batch job submission failed: Unable to "
                                       "contact slurm controller (connect failure)\n")


def test_wait_returns_the_jobs_exit_code(fake_schedd, capsys) -> None:
    polls = []

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        if op == "submit":
            return {"job_id": 7, "array_task_ids": []}
        polls.append(body)
        state = "RUNNING" if len(polls) < 2 else "FAILED"
        return {"jobs": [{"id": 7, "state": state, "exit_code": 3, "exit_signal": 0}],
                "now": 0.0}

    fake_schedd(handler)
    assert sbatch.main(["-W", "--wrap", "exit 3"]) == 3
    assert capsys.readouterr().out == "Submitted batch job 7\n"
    assert polls[0] == {"job_ids": ["7"], "all_states": True}


def test_help_and_version(capsys) -> None:
    assert sbatch.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("slurm 22.05")
    assert sbatch.main(["--help"]) == 0
    assert "--wrap" in capsys.readouterr().out


def test_limit_name_line_comes_first(fake_schedd, capsys) -> None:
    def refuse(op: str, body: dict[str, Any]) -> dict[str, Any]:
        raise ClientError("invalid", "AssocMaxSubmitJobLimit\nJob violates accounting/QOS "
                          "policy (job submit limit, user's size and/or time limits)")

    fake_schedd(refuse)
    assert sbatch.main(["--wrap", "true"]) == 1
    assert capsys.readouterr().err == (
        "sbatch: error: AssocMaxSubmitJobLimit\n"
        "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy "
        "(job submit limit, user's size and/or time limits)\n")


def test_broken_config_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    conf = tmp_path / "kiln.toml"
    conf.write_text("client_endpoint = [unclosed\n")
    monkeypatch.setenv("KILN_CONF", str(conf))
    assert sbatch.main(["--wrap", "true"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sbatch: error: {conf}: ") and err.count("\n") == 1


def test_real_process_reads_a_here_doc_from_dev_stdin(submitted, tmp_path) -> None:
    import subprocess
    import sys

    script = b"#!/bin/bash\n#SBATCH --job-name   heredoc\n#SBATCH -t 0:3:0\nhostname\n"
    for argv in ([], ["/dev/stdin"]):
        proc = subprocess.run([sys.executable, "-m", "cli.sbatch", "--parsable", *argv],
                              input=script, capture_output=True, env=dict(os.environ),
                              timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"42\n", b"")
        job = submitted()
        assert job["name"] == ("heredoc") and job["time_limit"] == 180
    proc = subprocess.run([sys.executable, "-m", "cli.sbatch", "--bogus"], capture_output=True,
                          env=dict(os.environ), timeout=60)
    assert (proc.returncode, proc.stdout) == (1, b"")
    assert proc.stderr == b"sbatch: unrecognized option '--bogus'\n"


def test_a_script_over_the_cap_fails_at_once_without_a_request(submitted, tmp_path,
                                                                 capsys) -> None:
    """Issue 12: a 5 MB script made sbatch wait 60 s, then say it could not contact schedd
    (schedd's socket drops an oversize message without a word)."""
    path = write_script(tmp_path, "#!/bin/sh\n" + "#" * (5 * 1024 * 1024))
    assert sbatch.main([path]) == 1
    assert capsys.readouterr().err == (f"sbatch: error: Script {path} is too big, read "
                                       f"{5 * 1024 * 1024 + 10} > 4194304 bytes.\n")
    assert submitted.fake.requests == []


def test_an_environment_over_the_cap_fails_at_once(submitted, monkeypatch, capsys) -> None:
    for i in range(11):
        monkeypatch.setenv(f"KILN_BIG_{i}", "x" * 100_000)
    assert sbatch.main(["--wrap", "true"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sbatch: error: Batch job submission failed: environment of ")
    assert err.endswith(" bytes is over the limit of 1048576 bytes (use --export to send "
                        "less)\n")
    assert submitted.fake.requests == []
    assert sbatch.main(["--export=NONE", "--wrap", "true"]) == 0


def test_a_request_over_the_message_cap_is_refused_by_the_client(fake_schedd) -> None:
    from cli.core.client import Client

    fake = fake_schedd(accept())
    with Client(endpoint=fake.endpoint, timeout=5) as client, \
            pytest.raises(ClientError, match="is over the limit of 16777216 bytes"):
        client.call("ping", {"pad": "x" * (17 * 1024 * 1024)})
    assert fake.requests == []


def test_max_job_count_is_retried_as_slurm_does(fake_schedd, monkeypatch, capsys) -> None:
    answers = iter([ClientError("again", "Resource temporarily unavailable")] * 3)

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = next(answers, None)
        if answer is not None:
            raise answer
        return {"job_id": 7, "array_task_ids": []}

    fake_schedd(handler)
    naps: list[float] = []
    monkeypatch.setattr(sbatch.time, "sleep", naps.append)
    assert sbatch.main(["--wrap", "true"]) == 0
    out, err = capsys.readouterr()
    assert (out, naps) == ("Submitted batch job 7\n", [1, 2, 3])
    assert err == "sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying\n"
    answers = iter([ClientError("again", "Resource temporarily unavailable")] * 99)
    assert sbatch.main(["--wrap", "true"]) == 1
    assert capsys.readouterr().err.endswith(
        "sbatch: error: Batch job submission failed: Resource temporarily unavailable\n")
    assert naps[3:] == list(range(1, 16))


def test_shape_refusal_keeps_slurms_line_first(fake_schedd, capsys) -> None:
    def refuse(op: str, body: dict[str, Any]) -> dict[str, Any]:
        raise ClientError("invalid", "Requested node configuration is not available\n"
                                     "no node has 32768 MB of memory (largest: 24105 MB, node1)")

    fake_schedd(refuse)
    assert sbatch.main(["--mem", "32G", "--wrap", "true"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == ("sbatch: error: Batch job submission failed: Requested node configuration "
                   "is not available\n"
                   "sbatch: error: no node has 32768 MB of memory (largest: 24105 MB, node1)\n")


def test_test_only_adds_kilns_lines_after_slurms(fake_schedd, capsys) -> None:
    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"job_id": 42, "start_time": 1.0e9 + 3 * 3600, "nodes": "gpu01",
                "partition": "gpu", "cpus": 4, "now": 1.0e9,
                "forecast": {"p50": 1.0e9 + 3 * 3600, "p90": 1.0e9 + 4 * 3600},
                "advice": [{"change": "--gres=gpu:4 instead of 8", "start": 1.0e9 + 1500}]}
    fake_schedd(handler)
    assert sbatch.main(["--test-only", "--wrap", "true"]) == 0
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 3
    assert lines[0].startswith("sbatch: Job 42 to start at ")  # Slurm's, first
    assert lines[1].startswith("sbatch: forecast from recent run times: p50 start ")
    assert lines[1].endswith("(in ~3.0 h), p90 start "
                             f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(1.0e9 + 4 * 3600))}"
                             " (in ~4.0 h)")
    assert lines[2] == "sbatch: with --gres=gpu:4 instead of 8: starts in ~25 min, not in ~3.0 h"
