"""sacct: rows built by schedd.accounting, printed by cli.sacct, against Slurm 22.05's output
(slurm-reference/e_sacct.txt), and the command end to end against a canned schedd."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cli import sacct
from kiln.model import Job, JobState
from kiln.slurm import stats as keys
from schedd.reports import accounting
from tests import builders
from tests.builders import SCHEDBENCH

T0 = 1_795_938_899.0
SLURM_BILLING = accounting.BillingPolicy({"cpu": 1.0})  # Slurm without TRESBillingWeights


def ran(job_id: int, name: str, state: str, secs: int, gpus: int = 0, **kw: Any) -> Job:
    fields: dict[str, Any] = dict(
        name=name, partition="debug", submit_time=T0 - 1, eligible_time=T0 - 1,
        start_time=T0, end_time=T0 + secs, time_limit=300, mem_per_node_mb=16000,
        gpus_per_node=gpus, **SCHEDBENCH)
    return builders.job(job_id, state, node="vm", gpu_ids=range(gpus), **(fields | kw))


def step(job_id: int, step_id: str, name: str, state: str, code: int = 0,
         secs: int = 0) -> dict[str, Any]:
    return {"job_id": job_id, "step_id": step_id, "name": name, "node_list": "vm",
            "num_nodes": 1, "num_tasks": 1, "cpus": 1, "state": state, "exit_code": code,
            "exit_signal": 0, "start_time": T0, "end_time": T0 + secs, "stats": {}}


def reference_jobs() -> list[tuple[Job, list[dict[str, Any]]]]:
    return [
        (ran(83043, "ok", "COMPLETED", 4, gpus=1),
         [step(83043, "0", "hostname", "COMPLETED"), step(83043, "1", "sleep", "COMPLETED", 0, 1)]),
        (ran(83044, "fail", "FAILED", 0, exit_code=3), []),
        (ran(83045, "stepfail", "COMPLETED", 3),
         [step(83045, "0", "false", "FAILED", 1), step(83045, "1", "sh", "FAILED", 7)]),
        (ran(83046, "sig", "FAILED", 0, exit_signal=9), []),
        (ran(83047, "cancelme", "CANCELLED", 3, gpus=2, cancelled_by=999, exit_signal=15), []),
        (Job(id=83048, name="heldcancel", user="schedbench", uid=999, account="physics",
             partition="debug", state=JobState.CANCELLED, cancelled_by=999, submit_time=T0,
             end_time=T0, time_limit=300, mem_per_node_mb=16000, held="user"), []),
        (ran(83050, "arr", "COMPLETED", 2, array_job_id=83049, array_task_id=0), []),
        (ran(83051, "arr", "FAILED", 2, exit_code=1, array_job_id=83049, array_task_id=1), []),
        (ran(83049, "arr", "FAILED", 2, exit_code=2, array_job_id=83049, array_task_id=2), []),
        (ran(83052, "rootcancel", "CANCELLED", 0, cancelled_by=0), []),
    ]


def rows(policy: accounting.BillingPolicy = SLURM_BILLING, with_steps: bool = True,
         now: float = T0 + 100) -> list[dict[str, Any]]:
    rc = accounting.RowContext(now, policy, {"vm": "h100"}, "anchor")
    out: list[dict[str, Any]] = []
    for job, steps in reference_jobs():
        out.extend(accounting.sacct_rows(job, steps, rc, with_steps))
    return out


def printed(fmt: str, data: list[dict[str, Any]], mode: str = "fixed", header: bool = True,
            ) -> list[str]:
    delimiter = None if mode == "fixed" else "|"
    return sacct.render(data, sacct.parse_format(fmt), sacct.Options(T0 + 100), header=header,
                        delimiter=delimiter, trailing=mode == "parsable")


DEFAULT_REFERENCE = """\
JobID           JobName  Partition    Account  AllocCPUS      State ExitCode
------------ ---------- ---------- ---------- ---------- ---------- --------
83043                ok      debug    physics          1  COMPLETED      0:0
83043.batch       batch               physics          1  COMPLETED      0:0
83043.extern     extern               physics          1  COMPLETED      0:0
83043.0        hostname               physics          1  COMPLETED      0:0
83043.1           sleep               physics          1  COMPLETED      0:0
83044              fail      debug    physics          1     FAILED      3:0
83044.batch       batch               physics          1     FAILED      3:0
83044.extern     extern               physics          1  COMPLETED      0:0
83045          stepfail      debug    physics          1  COMPLETED      0:0
83045.batch       batch               physics          1  COMPLETED      0:0
83045.extern     extern               physics          1  COMPLETED      0:0
83045.0           false               physics          1     FAILED      1:0
83045.1              sh               physics          1     FAILED      7:0
83046               sig      debug    physics          1     FAILED      0:9
83046.batch       batch               physics          1  CANCELLED      0:9
83046.extern     extern               physics          1  COMPLETED      0:0
83047          cancelme      debug    physics          1 CANCELLED+      0:0
83047.batch       batch               physics          1  CANCELLED     0:15
83047.extern     extern               physics          1  COMPLETED      0:0
83048        heldcancel      debug    physics          1 CANCELLED+      0:0
83049_0             arr      debug    physics          1  COMPLETED      0:0
83049_0.bat+      batch               physics          1  COMPLETED      0:0
83049_0.ext+     extern               physics          1  COMPLETED      0:0
83049_1             arr      debug    physics          1     FAILED      1:0
83049_1.bat+      batch               physics          1     FAILED      1:0
83049_1.ext+     extern               physics          1  COMPLETED      0:0
83049_2             arr      debug    physics          1     FAILED      2:0
83049_2.bat+      batch               physics          1     FAILED      2:0
83049_2.ext+     extern               physics          1  COMPLETED      0:0
83052        rootcancel      debug    physics          1 CANCELLED+      0:0
83052.batch       batch               physics          1  CANCELLED     0:15
83052.extern     extern               physics          1  COMPLETED      0:0
"""


def reference_lines() -> list[str]:
    """The transcript's lines; each ends in one space there (kept out of the source)."""
    return [line + " " for line in DEFAULT_REFERENCE.splitlines()]


def test_default_layout_matches_slurm() -> None:
    assert printed(sacct.DEFAULT_FORMAT, rows()) == reference_lines()


def test_parsable2_tres_and_exit_codes_match_slurm() -> None:
    lines = printed("JobID,JobIDRaw,JobName,Account,State,ExitCode,Elapsed,AllocTRES,ReqTRES",
                    rows(), mode="parsable2")
    assert lines[0] == "JobID|JobIDRaw|JobName|Account|State|ExitCode|Elapsed|AllocTRES|ReqTRES"
    assert lines[1] == ("83043|83043|ok|physics|COMPLETED|0:0|00:00:04|"
                        "billing=1,cpu=1,gres/gpu=1,node=1|"
                        "billing=1,cpu=1,gres/gpu=1,mem=16000M,node=1")
    assert lines[2] == "83043.batch|83043.batch|batch|physics|COMPLETED|0:0|00:00:04|" \
                       "cpu=1,gres/gpu=1,mem=0,node=1|"
    assert lines[3] == "83043.extern|83043.extern|extern|physics|COMPLETED|0:0|00:00:04|" \
                       "billing=1,cpu=1,gres/gpu=1,node=1|"
    assert "83047|83047|cancelme|physics|CANCELLED by 999|0:0|00:00:03|" \
           "billing=1,cpu=1,gres/gpu=2,node=1|billing=1,cpu=1,gres/gpu=2,mem=16000M,node=1" in lines
    assert "83048|83048|heldcancel|physics|CANCELLED by 999|0:0|00:00:00||" \
           "billing=1,cpu=1,mem=16000M,node=1" in lines
    assert "83049_2.batch|83049.batch|batch|physics|FAILED|2:0|00:00:02|cpu=1,mem=0,node=1|" \
        in lines
    assert "83052|83052|rootcancel|physics|CANCELLED by 0|0:0|00:00:00|" \
           "billing=1,cpu=1,node=1|billing=1,cpu=1,mem=16000M,node=1" in lines


def test_allocations_only_with_raw_ids_and_derived_exit_codes() -> None:
    lines = printed("JobId,JobIdRaw,State,ExitCode,DerivedExitCode", rows(with_steps=False),
                    mode="parsable2", header=False)
    assert lines == [
        "83043|83043|COMPLETED|0:0|0:0", "83044|83044|FAILED|3:0|0:0",
        "83045|83045|COMPLETED|0:0|7:0", "83046|83046|FAILED|0:9|0:0",
        "83047|83047|CANCELLED by 999|0:0|0:0", "83048|83048|CANCELLED by 999|0:0|0:0",
        "83049_0|83050|COMPLETED|0:0|0:0", "83049_1|83051|FAILED|1:0|0:0",
        "83049_2|83049|FAILED|2:0|0:0", "83052|83052|CANCELLED by 0|0:0|0:0"]


def test_parsable_adds_a_trailing_bar_and_widths_right_align() -> None:
    data = [r for r in rows() if r["job_id"].startswith("83043")]
    assert printed("JobID,State,NodeList", data, mode="parsable")[:2] == [
        "JobID|State|NodeList|", "83043|COMPLETED|vm|"]
    arr = [r for r in rows(with_steps=False) if r["job_id"].startswith("83049")]
    assert printed("JobID%20,JobIDRaw,State", arr) == [
        "               JobID JobIDRaw          State ",
        "-------------------- ------------ ---------- ",
        "             83049_0 83050         COMPLETED ",
        "             83049_1 83051            FAILED ",
        "             83049_2 83049            FAILED "]


def test_timeout_job_and_its_batch_step() -> None:
    job = ran(83042, "tmo", "TIMEOUT", 76, time_limit=60, exit_signal=15)
    rc = accounting.RowContext(T0 + 100, SLURM_BILLING, {}, "anchor")
    data = accounting.sacct_rows(job, [], rc)
    assert printed("JobID,JobName,State,ExitCode,Elapsed,Timelimit,TimelimitRaw", data,
                   mode="parsable2") == [
        "JobID|JobName|State|ExitCode|Elapsed|Timelimit|TimelimitRaw",
        "83042|tmo|TIMEOUT|0:0|00:01:16|00:01:00|1",
        "83042.batch|batch|CANCELLED|0:15|00:01:16||",
        "83042.extern|extern|COMPLETED|0:0|00:01:16||"]


def test_kiln_fields_gpu_hours_billing_and_samples() -> None:
    stats = {keys.STAT_GPU_UTIL_MEAN: 62.5, keys.STAT_GPU_MEM_MAX: 20480,
             keys.STAT_RSS_MAX: 5000}
    job = ran(7, "train", "COMPLETED", 1800, gpus=2, stats=stats)
    policy = accounting.BillingPolicy({"cpu": 1.0, "gres/gpu": 4.0, "gres/gpu:h100": 10.0})
    rc = accounting.RowContext(T0 + 4000, policy, {"vm": "h100"}, "kiln")
    data = accounting.sacct_rows(job, [], rc, with_steps=False)
    assert printed("GPUHours,GPUUtil,GPUMemMax,MaxRSS,Billing", data, mode="parsable2",
                   header=False) == ["1.0000|62.5%|20G|5000K|21"]
    rc = accounting.RowContext(T0 + 4000, accounting.BillingPolicy(policy.weights, True),
                               {"vm": "h100"}, "kiln")
    assert accounting.sacct_rows(job, [], rc)[0]["billing"] == 20


def test_running_and_pending_jobs() -> None:
    running = ran(9, "run", "RUNNING", 0, end_time=0)
    pending = Job(id=10, name="wait", user="u", account="a", state=JobState.PENDING,
                  submit_time=T0, reason="Priority")
    rc = accounting.RowContext(T0 + 65, SLURM_BILLING, {}, "kiln")
    data = accounting.sacct_rows(running, [], rc) + accounting.sacct_rows(pending, [], rc)
    assert printed("JobID,State,Elapsed,End,NodeList,Reason", data, mode="parsable2",
                   header=False) == [
        "9|RUNNING|00:01:05|Unknown|vm|None", "9.batch|RUNNING|00:01:05|Unknown|vm|",
        "9.extern|RUNNING|00:01:05|Unknown|vm|", "10|PENDING|00:00:00|Unknown|None assigned|Priority"]


def test_fixed_width_cuts_text_with_plus_not_numbers() -> None:
    assert sacct.fit("CANCELLED by 999", 10, True) == "CANCELLED+"
    assert sacct.fit("83049_0.batch", -12, True) == "83049_0.bat+"
    assert sacct.fit("12345678901", 10, False) == "12345678901"
    assert sacct.fit("vm", 15, True) == "             vm"
    assert sacct.fit("billing=1,cpu=1,node=1", 10, True) == "billing=1+"


@pytest.mark.parametrize("bad", ["abc", "12a", "1_x", "1.foo", "_1"])
def test_bad_job_ids_are_fatal_like_slurm(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["-j", bad]) == 1
    assert capsys.readouterr().err == f"sacct: fatal: Bad job/step specified: {bad}\n"


def test_invalid_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["-o", "JobID,Restarts"]) == 1
    assert capsys.readouterr().err == 'sacct: error: Invalid field requested: "Restarts"\n'


def test_unknown_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["-X", "--no-such-option"]) == 1
    assert capsys.readouterr().err == "sacct: unrecognized option '--no-such-option'\n"


def test_refused_filters_say_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert sacct.main(["--reason", "Priority"]) == 1
    err = capsys.readouterr().err
    assert err == "sacct: error: --reason is not supported by kiln: filtering by reason is " \
                  "not supported\n"


def test_job_id_lists_keep_array_ranges() -> None:
    specs = sacct.parse_job_specs(["1,2_[0-3,7]", "3.batch", "4_5.0"])
    assert specs == [sacct.JobSpec("1", None), sacct.JobSpec("2_[0-3,7]", None),
                     sacct.JobSpec("3", "batch"), sacct.JobSpec("4_5", "0")]


def test_time_arguments() -> None:
    now = 1_800_000_000.0
    assert sacct.parse_time_arg("now", now, "-S") == now
    assert sacct.parse_time_arg("now-1hour", now, "-S") == now - 3600
    assert sacct.parse_time_arg("now+30", now, "-S") == now + 30
    assert sacct.parse_time_arg("today", now, "-S") == sacct.midnight(now)
    assert sacct.parse_time_arg("00:00", now, "-S") == sacct.midnight(now)
    assert sacct.parse_time_arg("2026-11-29T00:00:00", now, "-S") > 0
    with pytest.raises(sacct.CommandError):
        sacct.parse_time_arg("yesterday-ish", now, "-S")


def test_window_defaults_follow_slurm() -> None:
    now = 1_800_000_000.0
    query, start, end = sacct.build_query({}, [], now)
    assert (start, end) == (sacct.midnight(now), now)
    query, start, end = sacct.build_query({}, sacct.parse_job_specs(["5"]), now)
    assert (start, end) == (None, None) and query["job_ids"] == ["5"]
    query, start, end = sacct.build_query({"state": ["CA,TO"]}, [], now)
    assert (start, end) == (now, now) and query["states"] == ["CANCELLED", "TIMEOUT"]
    query, _, _ = sacct.build_query({"allocations": [None], "allusers": [None]}, [], now)
    assert query["steps"] is False and "users" not in query


def test_command_against_canned_schedd(fake_schedd,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    data = rows()
    fake = fake_schedd(lambda op, body: {"rows": data, "now": T0 + 100, "cluster": "anchor"})
    assert sacct.main(["-j", "83043.0,83043.1", "-P", "-o", "JobID,JobName,State"]) == 0
    assert capsys.readouterr().out == ("JobID|JobName|State\n83043.0|hostname|COMPLETED\n"
                                       "83043.1|sleep|COMPLETED\n")
    assert fake.ops("acct_jobs")[-1]["job_ids"] == ["83043"]
    assert sacct.main(["--json", "-j", "83044", "-X"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["jobs"][0]["job_id"] == 83043 and doc["jobs"][0]["exit_code"]["status"] == \
        "SUCCESS"
    assert fake.ops("acct_jobs")[-1]["steps"] is False


def test_command_with_nothing_found_prints_the_header(fake_schedd,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    fake_schedd(lambda op, body: {"rows": [], "now": T0, "cluster": "anchor"})
    assert sacct.main(["-j", "999999"]) == 0
    assert capsys.readouterr().out.splitlines() == reference_lines()[:2]


def test_stored_steps_are_closed_with_the_job_and_batch_follows_slurm() -> None:
    job = ran(11, "sig", "FAILED", 5, exit_signal=9, stats={"rss_max_kb": 4096})
    stored = [
        {**step(11, "batch", "batch", "RUNNING"), "end_time": 0},
        {**step(11, "0", "train", "RUNNING"), "end_time": 0},
        step(11, "1", "eval", "COMPLETED", 0, 2),
    ]
    rc = accounting.RowContext(T0 + 100, SLURM_BILLING, {}, "kiln")
    data = accounting.sacct_rows(job, stored, rc)
    assert printed("JobID,JobName,State,ExitCode,Elapsed,MaxRSS", data, mode="parsable2",
                   header=False) == [
        "11|sig|FAILED|0:9|00:00:05|4M", "11.batch|batch|CANCELLED|0:9|00:00:05|4M",
        "11.extern|extern|COMPLETED|0:0|00:00:05|", "11.0|train|CANCELLED|0:0|00:00:05|",
        "11.1|eval|COMPLETED|0:0|00:00:02|"]


def test_usage_is_counted_in_whole_seconds_like_elapsed() -> None:
    job = ran(12, "frac", "COMPLETED", 0, start_time=T0 + 0.9, end_time=T0 + 10.2, gpus=3)
    assert accounting.elapsed(job, T0 + 100) == 10
    assert accounting.gpu_hours(job, T0 + 100) == 3 * 10 / 3600
    window = accounting.Window(T0 + 5, T0 + 100)
    assert accounting.job_seconds_in(job, window, T0 + 100) == 5


def test_each_field_reads_only_the_keys_it_declares() -> None:
    """schedd sends only the declared keys: a field must print the same from those alone."""
    every = rows() + rows(with_steps=False)
    for field in sacct.FIELDS:
        keep = {"kind", "job_id", "job_id_raw", "step", *field.keys}
        for row in every:
            pruned = {k: v for k, v in row.items() if k in keep}
            opts = sacct.Options(T0 + 100)
            assert field.get(pruned, opts) == field.get(row, opts), (field.name, row["job_id"])


def test_cpu_times_are_spelt_as_slurms_sacct_spells_them() -> None:
    """Slurm's _elapsed_time: milliseconds truncated, shown only under an hour."""
    from cli.core.formats import fmt_cpu_time

    cases = {None: "", 0: "00:00:00", 0.004: "00:00.004", 1.2345: "00:01.234",
             59.9996: "00:59.999", 75: "00:01:15", 3600.5: "01:00:00", 90061: "1-01:01:01"}
    assert {s: fmt_cpu_time(s) for s in cases} == cases


def test_control_characters_in_stored_rows_are_shown_as_question_marks() -> None:
    """Issue 12: a ledger row written before schedd refused control characters (a job name
    with a newline and escape sequences) must not reach an administrator's terminal raw."""
    evil = "x\x1b[2J\n83043 ok debug physics 1 COMPLETED 0:0\x9b"
    data = [dict(r, name=evil) for r in rows()]
    for mode in ("fixed", "parsable", "parsable2"):
        lines = printed("JobID,JobName%60,State", [dict(r) for r in data], mode=mode)
        text = "\n".join(lines)
        assert "\x1b" not in text and "\x9b" not in text, mode
        assert len(text.splitlines()) == len(data) + (2 if mode == "fixed" else 1), mode
        assert "x?[2J?83043 ok debug" in text, mode
