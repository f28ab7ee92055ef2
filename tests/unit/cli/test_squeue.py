"""squeue: the format engine and the default layout against Slurm 22.05's own output."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cli import squeue
from cli.core.client import ClientError
from cli.core.formats import (
    JOB_FIELDS,
    JOB_LETTERS,
    Ctx,
    fmt_duration,
    fmt_secs,
    parse_long_format,
    parse_percent_format,
    render,
)
from kiln.model import Job
from schedd.handlers.query import column_reply, row_columns
from tests import builders
from tests.builders import SCHEDBENCH

NOW = 1_800_000_000.0


def job(job_id: int, name: str, state: str = "RUNNING", **kw: Any) -> dict[str, Any]:
    placed = {"node": "vm", "start_time": NOW - 3} if state == "RUNNING" else {}
    fields = {"name": name, "partition": "debug", "submit_time": NOW - 60, **SCHEDBENCH}
    return builders.job(job_id, state, **(fields | placed | kw)).to_wire()


# From slurm-reference/e_sacct.txt
REFERENCE_JOBS = [
    job(83048, "heldcancel", "PENDING", reason="JobHeldUser"),
    job(83042, "tmo"), job(83043, "ok"), job(83045, "stepfail"), job(83047, "cancelme"),
]
REFERENCE_OUTPUT = """\
             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
             83048     debug heldcanc schedben PD       0:00      1 (JobHeldUser)
             83042     debug      tmo schedben  R       0:03      1 vm
             83043     debug       ok schedben  R       0:03      1 vm
             83045     debug stepfail schedben  R       0:03      1 vm
             83047     debug cancelme schedben  R       0:03      1 vm
"""


def serve(fake_schedd, jobs: list[dict[str, Any]]):
    """A schedd answering query_jobs as the real one does: columns when fields are asked for."""
    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        assert op == "query_jobs"
        if body.get("fields") is None:
            return {"jobs": [dict(j) for j in jobs], "now": NOW}
        reply = column_reply([Job.from_wire(j) for j in jobs], row_columns(body["fields"]))
        return json.loads(json.dumps({**reply, "now": NOW}))
    return fake_schedd(handler)


def without_fields(body: dict[str, Any]) -> dict[str, Any]:
    assert body["fields"][:3] == ["id", "array_job_id", "array_task_id"]
    return {k: v for k, v in body.items() if k != "fields"}


@pytest.mark.parametrize("secs, text", [
    (0, "0:00"), (3, "0:03"), (65, "1:05"), (3600, "1:00:00"), (7200, "2:00:00"),
    (86400 + 3723, "1-01:02:03"), (None, "UNLIMITED"), (-5, "INVALID"),
])
def test_squeue_durations(secs, text) -> None:
    assert fmt_secs(secs) == text


def test_scontrol_durations() -> None:
    assert fmt_duration(3) == "00:00:03" and fmt_duration(600) == "00:10:00"
    assert fmt_duration(90061) == "1-01:01:01" and fmt_duration(None) == "UNLIMITED"


def test_percent_format_widths_alignment_and_suffixes() -> None:
    prefix, cols, unknown = parse_percent_format('"%i","%.5j",%10T|', JOB_LETTERS)
    assert prefix == '"' and unknown == []
    assert [(c.key, c.width, c.right, c.suffix) for c in cols] == [
        ("jobid", 0, False, '","'), ("name", 5, True, '",'), ("state", 10, False, "|")]
    lines = render([job(5, "abcdefgh")], prefix, cols, JOB_FIELDS, Ctx(NOW), header=True)
    assert lines == ['"JOBID"," NAME",STATE     |', '"5","abcde",RUNNING   |']


def test_unknown_letter_is_reported() -> None:
    _, cols, unknown = parse_percent_format("%i %!", JOB_LETTERS)
    assert unknown == ["!"] and len(cols) == 1


def test_long_format_defaults_to_20_columns() -> None:
    cols, unknown = parse_long_format("JobArrayID,StateCompact:.4,Reason:", squeue.JOB_LONG_NAMES)
    lines = render([job(9, "x", "PENDING", reason="Priority")], "", cols, JOB_FIELDS, Ctx(NOW),
                   header=True)
    assert lines == ["JOBID                 STREASON", "9                     PDPriority"]
    assert parse_long_format("NoSuchField", squeue.JOB_LONG_NAMES)[1] == ["NoSuchField"]


def test_numtask_names_match_by_prefix_as_slurm(fake_schedd, capsys) -> None:
    """Slurm 22.05 (src/squeue/opts.c) matches -O names whole and case-insensitively, except
    NumTasks: any name whose first seven letters are ``numtask``."""
    serve(fake_schedd, [job(7, "multi", num_tasks=4)])
    assert squeue.main(["-h", "-O", "JobID:6,NumTasks:4"]) == 0
    want = capsys.readouterr().out
    assert want == "7     4   \n"
    for spelling in ("numtask:4", "NUMTASK:4", "numtasksX:4", "NumTasks:4"):
        assert squeue.main(["-h", "-O", f"jobid:6,{spelling}"]) == 0
        assert capsys.readouterr().out == want, spelling
    for near in ("numtas", "tasks", "numnode"):  # whole names only, for every other field
        assert squeue.main(["-h", "-O", f"JobID,{near}"]) == 1
        assert f"Invalid job format specification: {near}" in capsys.readouterr().err


def test_default_layout_matches_slurm(fake_schedd, capsys) -> None:
    serve(fake_schedd, REFERENCE_JOBS)
    assert squeue.main([]) == 0
    assert capsys.readouterr().out == REFERENCE_OUTPUT


def test_reference_custom_formats(fake_schedd, capsys) -> None:
    jobs = [job(83017, "wrap", "PENDING", reason="AssocGrpGRES", gpus_per_node=1),
            job(83015, "wrap", gpus_per_node=1)]
    serve(fake_schedd, jobs)
    assert squeue.main(["-o", "%.18i %.9P %.8j %.8u %.8a %.2t %.10M %.6D %b %R"]) == 0
    assert capsys.readouterr().out == (
        "             JOBID PARTITION     NAME     USER  ACCOUNT ST       TIME  NODES "
        "TRES_PER_NODE NODELIST(REASON)\n"
        "             83017     debug     wrap schedben  physics PD       0:00      1 "
        "gres:gpu:1 (AssocGrpGRES)\n"
        "             83015     debug     wrap schedben  physics  R       0:03      1 "
        "gres:gpu:1 vm\n")
    assert squeue.main(["-h", "--format=%i|%T|%r"]) == 0
    assert capsys.readouterr().out == "83017|PENDING|AssocGrpGRES\n83015|RUNNING|None\n"


def test_filters_become_the_query(fake_schedd, capsys) -> None:
    fake = serve(fake_schedd, REFERENCE_JOBS)
    assert squeue.main(["-u", "root,1", "-t", "PD,r", "-p", "debug", "-A", "x", "-q", "normal",
                        "-n", "n1", "-w", "vm[1-2]", "--job", "1,2_3", "-h"]) == 0
    assert without_fields(fake.ops("query_jobs")[-1]) == {
        "users": ["root", "1"], "states": ["PENDING", "RUNNING"], "partitions": ["debug"],
        "accounts": ["x"], "qos": ["normal"], "names": ["n1"], "nodes": ["vm1", "vm2"],
        "job_ids": ["1", "2_3"]}
    assert squeue.main(["-t", "all", "-j", "5", "-h"]) == 0
    assert without_fields(fake.ops("query_jobs")[-1]) == {"all_states": True, "job_ids": ["5"]}
    capsys.readouterr()


def test_unknown_user_is_slurms_error(fake_schedd, capsys) -> None:
    fake = serve(fake_schedd, REFERENCE_JOBS)
    assert squeue.main(["-u", "root,nosuchuser"]) == 1
    assert capsys.readouterr() == ("", "squeue: error: Invalid user: nosuchuser\n")
    assert fake.ops("query_jobs") == []


def test_single_unknown_job_is_slurms_error(fake_schedd, capsys) -> None:
    serve(fake_schedd, [])
    assert squeue.main(["-j", "99999"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "slurm_load_jobs error: Invalid job id specified\n"


def test_schedd_down(fake_schedd, capsys) -> None:
    def refuse(op, body):
        raise ClientError("unreachable", "Unable to contact slurm controller (connect failure)")

    fake_schedd(refuse)
    assert squeue.main([]) == 1
    assert capsys.readouterr().err == (
        "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")


def test_bad_state_and_option(fake_schedd, capsys) -> None:
    serve(fake_schedd, [])
    assert squeue.main(["-t", "XX"]) == 1
    assert capsys.readouterr().err == "squeue: error: Invalid job state specified: XX\n"
    assert squeue.main(["--bogus"]) == 1
    assert capsys.readouterr().err == "squeue: unrecognized option '--bogus'\n"


def test_pending_array_tasks_fold_unless_r(fake_schedd, capsys) -> None:
    tasks = [job(100 + i, "arr", "PENDING", reason="Priority", array_job_id=100,
                 array_task_id=i) for i in range(4)]
    tasks.append(job(200, "arr", array_job_id=100, array_task_id=7))
    serve(fake_schedd, tasks)
    assert squeue.main(["-h", "-o", "%i %t"]) == 0
    assert capsys.readouterr().out == "100_[0-3] PD\n100_7 R\n"
    assert squeue.main(["-h", "-r", "-o", "%i"]) == 0
    assert capsys.readouterr().out == "100_0\n100_1\n100_2\n100_3\n100_7\n"


def test_sort_and_start(fake_schedd, capsys) -> None:
    jobs = [job(1, "a", "PENDING", priority=5, reason="Priority",
                expected_start=NOW + 600, sched_nodes="vm"),
            job(2, "b", "PENDING", priority=9, reason="Resources")]
    fake = serve(fake_schedd, jobs)
    assert squeue.main(["-h", "-o", "%i", "-S", "-Q"]) == 0
    assert capsys.readouterr().out == "2\n1\n"
    assert squeue.main(["--start"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("             JOBID PARTITION     NAME     USER ST          START_TIME  "
                      "NODES SCHEDNODES           NODELIST(REASON)")
    assert out[1].endswith("      1 (null)               (Resources)")
    assert out[2].endswith("      1 vm                   (Priority)")
    assert without_fields(fake.ops("query_jobs")[-1]) == {"states": ["PENDING"],
                                                          "start_estimates": True}


def test_long_listing_and_json(fake_schedd, capsys) -> None:
    serve(fake_schedd, [job(7, "longname-job", time_limit=7200)])
    assert squeue.main(["-l"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == ("             JOBID PARTITION     NAME     USER    STATE       TIME "
                        "TIME_LIMI  NODES NODELIST(REASON)")
    assert lines[2] == ("                 7     debug longname schedben  RUNNING       0:03 "
                        "  2:00:00      1 vm")
    assert squeue.main(["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["jobs"][0]["job_id"] == 7 and doc["jobs"][0]["job_state"] == "RUNNING"
    assert doc["jobs"][0]["time_limit"] == 120
    # the document around the jobs as Slurm 22.05.8's `squeue --json` (../shared/bench's Slurm,
    # 2026-12-07): these keys, this meta
    assert set(doc) == {"meta", "errors", "jobs"} and doc["errors"] == []
    assert doc["meta"] == {"plugin": {"type": "openapi/v0.0.38",
                                      "name": "Slurm OpenAPI v0.0.38"},
                           "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5},
                                     "release": "22.05.8"}}


EVIL = "x\x1b]0;pwned\x07\x1b[2J\n  99999 debug FORGED root R 0:01 1 vm\x9b31m"


def test_control_characters_of_other_users_never_reach_the_terminal(fake_schedd,
                                                                    capsys) -> None:
    """Issue 12: a job name (or comment) written before schedd refused control characters
    would forge a row, clear the screen or set the title of whoever runs squeue."""
    serve(fake_schedd, [job(1, EVIL, comment=EVIL), job(2, "tab\there")])
    for argv in ([], ["-o", "%i %j %k"], ["-o", "%all"], ["-O", "JobID,Name:80,Comment:80"]):
        assert squeue.main(argv) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out, argv
        assert "FORGED" not in out or len(out.splitlines()) == 3, argv  # header + 2 rows
    assert squeue.main(["-h", "-o", "%j"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "x?]0;pwned??[2J?  99999 debug FORGED root R 0:01 1 vm?31m", "tab\there"]
    rows = render([job(1, EVIL)], "", parse_percent_format("%j", JOB_LETTERS)[1], JOB_FIELDS,
                  Ctx(NOW), header=False)
    assert rows == ["x?]0;pwned??[2J?  99999 debug FORGED root R 0:01 1 vm?31m"]
