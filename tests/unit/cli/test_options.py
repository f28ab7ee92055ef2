"""sbatch's option table, getopt work-alike and value parsers (COMPAT.md §2-3 spellings)."""

from __future__ import annotations

import time

import pytest

from cli.core.options import (
    OptionError,
    parse_argv,
    parse_array,
    parse_begin,
    parse_dependency,
    parse_gpu_count,
    parse_gres,
    parse_memory_mb,
    parse_node_count,
    parse_signal_spec,
    parse_states,
    parse_time_limit,
)
from cli.submit import SBATCH_TABLE, apply_options, build_environment, directive_tokens


def settings_of(argv: list[str]) -> dict:
    found, positional = parse_argv(argv, SBATCH_TABLE, stop_at_positional=True)
    settings: dict = {}
    apply_options(settings, found)
    return settings


@pytest.mark.parametrize("text, seconds", [
    ("5", 300), ("0:3:0", 180), ("00:03:00", 180), ("1:30", 90), ("2:00:00", 7200),
    ("1-02:03:04", 93784), ("1-2", 93600), ("1-2:30", 95400), ("3-0", 259200),
    ("UNLIMITED", None), ("infinite", None), ("-1", None), ("0", None), ("0:30", 30),
    ("0:03", 3),
])
def test_time_formats(text: str, seconds: int | None) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["abc", "1:2:3:4", "1-", "-5", "1h", ""])
def test_bad_time_is_slurms_error(text: str) -> None:
    with pytest.raises(OptionError, match=r"^Invalid --time specification$"):
        parse_time_limit(text)


@pytest.mark.parametrize("text, mb", [
    ("512MB", 512), ("1G", 1024), ("954M", 954), ("1024K", 1), ("1500K", 2), ("2g", 2048),
    ("4000", 4000), ("1T", 1048576), ("16gb", 16384),
])
def test_memory_formats(text: str, mb: int) -> None:
    assert parse_memory_mb(text) == mb


@pytest.mark.parametrize("text", ["1.5G", "G", "12X", "-1", ""])
def test_bad_memory(text: str) -> None:
    with pytest.raises(OptionError, match="Invalid --mem specification"):
        parse_memory_mb(text)


def test_gres_and_gpus() -> None:
    assert parse_gres("gpu:2") == (2, "", [])
    assert parse_gres("gpu:a100:4") == (4, "a100", [])
    assert parse_gres("gpu") == (1, "", [])
    assert parse_gres("gpu:h100") == (1, "h100", [])
    assert parse_gres("gres:gpu:3,mps:100") == (3, "", ["mps:100"])
    assert parse_gres("none") == (0, "", [])
    assert parse_gpu_count("4", "--gpus") == (4, "")
    assert parse_gpu_count("a100:2", "--gpus") == (2, "a100")
    with pytest.raises(OptionError, match="Invalid --gres specification"):
        parse_gres("gpu:a:b:c")
    with pytest.raises(OptionError, match="Invalid --gpus specification"):
        parse_gpu_count("x", "--gpus")


def test_arrays() -> None:
    assert parse_array("1-10") == ("1-10", 0, list(range(1, 11)))
    assert parse_array("1,3,5") == ("1,3,5", 0, [1, 3, 5])
    assert parse_array("0-15:4") == ("0-15:4", 0, [0, 4, 8, 12])
    assert parse_array("0-99%10")[1] == 10
    assert parse_array("0-1000")[2][-1] == 1000
    for bad in ("0-1001", "5-1", "a", "1-10:0", "1%x", ""):
        with pytest.raises(OptionError, match="Invalid job array specification"):
            parse_array(bad)


def test_dependencies() -> None:
    for ok in ("afterok:12", "afterok:12:13", "after:5+10", "afterany:1,afternotok:2",
               "afterok:1?afterany:2", "singleton", "afterok:123_4"):
        assert parse_dependency(ok) == ok
    for bad in ("afterok", "whenever:1", "afterok:x", "afterok:1,afterany:2?after:3", ""):
        with pytest.raises(OptionError, match="Job dependency problem"):
            parse_dependency(bad)


def test_begin_times() -> None:
    now = time.mktime((2026, 11, 29, 8, 0, 0, 0, 0, -1))
    assert parse_begin("now", now) == now
    assert parse_begin("now+60", now) == now + 60
    assert parse_begin("now+1hour", now) == now + 3600
    assert parse_begin("now+2days", now) == now + 2 * 86400
    assert parse_begin("09:30", now) == now + 5400
    assert parse_begin("07:00", now) == now + 23 * 3600  # passed today: tomorrow
    assert parse_begin("2026-12-01", now) == time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1))
    assert parse_begin("2026-12-01T10:20:30", now) == time.mktime(
        (2026, 12, 1, 10, 20, 30, 0, 0, -1))
    assert parse_begin("noon", now) == now + 4 * 3600
    for bad in ("later", "now+5parsecs", "25:00", "2026-13-01"):
        with pytest.raises(OptionError, match="Invalid --begin specification"):
            parse_begin(bad, now)


def test_signals_and_nodes() -> None:
    assert parse_signal_spec("USR2@90") == "USR2@90"
    assert parse_signal_spec("B:SIGUSR1@120") == "B:USR1@120"
    assert parse_signal_spec("10") == "USR1@60"
    with pytest.raises(OptionError, match="Invalid --signal specification"):
        parse_signal_spec("NOPE")
    assert parse_node_count("2") == (2, 0)
    assert parse_node_count("2-4") == (2, 4)
    with pytest.raises(OptionError, match="is not a valid node count"):
        parse_node_count("x")


def test_export_spellings() -> None:
    env = {"PATH": "/bin", "HOME": "/h", "SLURM_CONF": "/c"}
    assert build_environment("ALL", env) == env
    assert build_environment("NONE", env) == {}
    assert build_environment("ALL,FOO=bar", env) == {**env, "FOO": "bar"}
    assert build_environment("PATH,FOO=1", env) == {"SLURM_CONF": "/c", "PATH": "/bin", "FOO": "1"}


def test_states() -> None:
    assert parse_states("PD,R") == (["PENDING", "RUNNING"], False)
    assert parse_states("pending,cd") == (["PENDING", "COMPLETED"], True)
    assert parse_states("all") == ([], True)
    with pytest.raises(OptionError, match="Invalid job state specified: XX"):
        parse_states("XX")


def test_long_short_and_attached_spellings() -> None:
    s = settings_of(["--time=10", "-J", "x", "-n4", "-N", "2", "-c", "3", "--partition", "p",
                     "-A", "acct", "--mem", "1G", "--part=q", "-Hv", "script.sh", "-t", "5"])
    assert s["time_limit"] == 600 and s["name"] == "x" and s["num_tasks"] == 4
    assert s["num_nodes"] == 2 and s["cpus_per_task"] == 3 and s["account"] == "acct"
    assert s["partition"] == "q" and s["mem_per_node_mb"] == 1024 and s["held"] == "user"


def test_script_arguments_stop_option_parsing() -> None:
    found, positional = parse_argv(["-J", "a", "job.sh", "-t", "5", "--x"], SBATCH_TABLE,
                                   stop_at_positional=True)
    assert [o.long for o, _ in found] == ["job-name"]
    assert positional == ["job.sh", "-t", "5", "--x"]


@pytest.mark.parametrize("argv, message", [
    (["--foo"], "unrecognized option '--foo'"),
    (["-Z"], "invalid option -- 'Z'"),
    (["--time"], "option '--time' requires an argument"),
    (["-t"], "option requires an argument -- 't'"),
    (["--hold=yes"], "option '--hold' doesn't allow an argument"),
])
def test_getopt_errors(argv: list[str], message: str) -> None:
    with pytest.raises(OptionError) as exc:
        parse_argv(argv, SBATCH_TABLE, stop_at_positional=True)
    assert exc.value.message == message and not exc.value.prefixed


def test_ambiguous_prefix_names_the_candidates() -> None:
    with pytest.raises(OptionError, match="option '--mem-per' is ambiguous"):
        parse_argv(["--mem-per=1"], SBATCH_TABLE, stop_at_positional=True)


def test_directive_spellings() -> None:
    script = "\n".join([
        "#!/bin/bash",
        "#SBATCH --time                1-02:03:04",
        '#SBATCH --partition="q"',
        "#SBATCH -J name   # a comment",
        "#SBATCH --exclusive   ",
        "#SBATCH --output=out-%j.txt --open-mode=append",
        "# just a comment",
        "",
        "#SBATCH -n 4",
        "echo hello",
        "#SBATCH --qos=ignored-after-first-command",
    ])
    tokens = directive_tokens(script)
    assert tokens == ["--time", "1-02:03:04", "--partition=q", "-J", "name", "--exclusive",
                      "--output=out-%j.txt", "--open-mode=append", "-n", "4"]
    s = settings_of(tokens)
    assert s["time_limit"] == 93784 and s["partition"] == "q" and s["exclusive"] is True
    assert s["stdout"] == "out-%j.txt" and s["open_mode"] == "append" and "qos" not in s


def test_directive_quotes_and_escapes() -> None:
    assert directive_tokens("#!/bin/sh\n#SBATCH --comment='two words' -J a\\ b\n") == [
        "--comment=two words", "-J", "a b"]
    with pytest.raises(OptionError, match="Unmatched `\"`"):
        directive_tokens('#!/bin/sh\n#SBATCH --comment="open\n')


def test_unknown_option_is_kept_in_settings_when_sbatch_knows_it() -> None:
    s = settings_of(["--wckey=w", "--reboot", "--gpu-bind=closest"])
    assert s == {"wckey": "w", "reboot": True, "gpu_bind": "closest"}


# --- issue 16 item 9: salloc's SALLOC_* and srun's SLURM_* input environment variables ---------


def test_salloc_reads_salloc_variables_and_its_command_line_wins(monkeypatch) -> None:
    from cli import salloc

    for var, value in {"SALLOC_PARTITION": "gpu", "SALLOC_ACCOUNT": "a1", "SALLOC_TIMELIMIT": "5",
                       "SALLOC_QOS": "q1", "SALLOC_GPUS": "2", "SBATCH_PARTITION": "no",
                       "SALLOC_IMMEDIATE": "7"}.items():
        monkeypatch.setenv(var, value)
    request = salloc.parse_request(["-A", "a2", "-q", "q2", "true"])
    job = request.job
    assert (job["partition"], job["account"], job["qos"]) == ("gpu", "a2", "q2")
    assert (job["time_limit"], job["gpus"], request.immediate) == (300, 2, 7.0)


def test_srun_reads_its_slurm_variables_but_not_an_allocations_own(monkeypatch) -> None:
    from cli import srun

    for var, value in {"SLURM_PARTITION": "gpu", "SLURM_ACCOUNT": "a1", "SLURM_TIMELIMIT": "5",
                       "SLURM_QOS": "q1", "SLURM_LABELIO": "1",
                       # what an allocation exports to its shell: not srun options
                       "SLURM_JOB_ID": "9", "SLURM_NTASKS": "4", "SLURM_NNODES": "2",
                       "SLURM_CPUS_PER_TASK": "3", "SLURM_JOB_NAME": "job",
                       "SLURM_JOB_PARTITION": "other", "SLURM_DISTRIBUTION": "cyclic",
                       "SLURM_MEM_PER_NODE": "100"}.items():
        monkeypatch.setenv(var, value)
    settings, command = srun.parse(["-q", "q2", "true"])
    assert command == ["true"]
    assert (settings["partition"], settings["account"], settings["qos"]) == ("gpu", "a1", "q2")
    assert settings["time_limit"] == 300 and settings["label"] is True
    for key in ("num_tasks", "num_nodes", "cpus_per_task", "name", "mem_per_node_mb",
                "distribution", "_jobid"):
        assert key not in settings, key


def test_every_input_variable_names_an_option_of_its_command() -> None:
    from cli import salloc, srun

    assert set(salloc.SALLOC_ENV_VARS.values()) <= set(salloc.SALLOC_TABLE.by_long)
    assert set(srun.SRUN_ENV_VARS.values()) <= set(srun.SRUN_TABLE.by_long)
