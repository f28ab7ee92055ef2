"""sstat from a canned schedd: which step it picks, Slurm's field widths and unit spellings,
the TRES strings, and its errors (the figures themselves: tests/integration/test_live.py)."""

from __future__ import annotations

import pytest

from cli import sstat
from kiln.slurm.stats import merge_usage, summarize_tasks

TASKS = {0: {"cpu": 65.5, "mem": 204800.0, "vmem": 409600.0, "pages": 3.0, "read": 2048.0,
             "write": 100.0},
         1: {"cpu": 5.0, "mem": 1000.0, "vmem": 2000.0, "pages": 0.0, "read": 10.0,
             "write": 0.0}}
BATCH = {**summarize_tasks({0: TASKS[0]}), "gpu_util": 71.5, "gpu_mem_mb": 4096,
         "gpu_simulated": 1}
STEP0 = summarize_tasks(TASKS)


def answer(ident: str) -> dict:
    if ident == "7":
        return {"id": "7", "jobs": [{"job_id": 7, "steps": [
            {"step": "batch", "nodes": ["node1"], "usage": merge_usage({"node1": BATCH})},
            {"step": "0", "nodes": ["node1"], "usage": merge_usage({"node1": STEP0})}]}]}
    if ident == "8":
        return {"id": "8", "jobs": [{"job_id": 8, "steps": []}]}
    if ident == "9":
        return {"id": "9", "jobs": [{"job_id": 9, "steps": [], "denied": True}]}
    return {"id": ident, "jobs": []}


@pytest.fixture
def schedd(fake_schedd):
    return fake_schedd(lambda op, body: {"answers": [answer(i) for i in body["job_ids"]]})


def run(capsys, *argv: str) -> tuple[int, list[str], str]:
    code = sstat.main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_which_step(schedd, capsys) -> None:
    fields = "JobID,NTasks,MaxRSS,MaxRSSTask,MinCPU,MinCPUTask,AveRSS,AveCPU,MaxDiskRead"
    assert run(capsys, "-n", "-P", "-o", fields, "-j", "7") == (
        0, ["7.batch|1|200M|0|00:01:05|0|200M|00:01:05|2.00K"], "")
    code, lines, _ = run(capsys, "-n", "-P", "-o", fields, "-j", "7.0")
    assert lines == ["7.0|2|200M|0|00:00:05|1|102900K|00:00:35|2.00K"]
    assert run(capsys, "-a", "-n", "-p", "-o", "JobID", "7")[1] == ["7.batch|", "7.0|"]
    assert run(capsys, "-n", "-o", "JobID", "-j", "7.3,7.extern")[1] == []


def test_widths_tres_and_noconvert(schedd, capsys) -> None:
    code, lines, err = run(capsys, "-o", "JobID,MaxRSS,MaxVMSizeNode", "-j", "7.batch")
    assert lines == ["JobID            MaxRSS  MaxVMSizeNode ",
                     "------------ ---------- -------------- ",
                     "7.batch            200M          node1 "]
    assert run(capsys, "--noconvert", "-n", "-P", "-o", "maxrss", "-j", "7")[1] == ["204800K"]
    code, lines, err = run(capsys, "-n", "-P", "-o", "TRESUsageInMax,tresusageinmaxn,"
                           "TRESUsageOutTot", "-j", "7")
    assert lines == ["cpu=00:01:05,energy=0,fs/disk=2048,gres/gpumem=4096M,gres/gpuutil=72,"
                     "mem=200M,pages=3,vmem=400M|cpu=node1,energy=node1,fs/disk=node1,"
                     "mem=node1,pages=node1,vmem=node1|energy=0,fs/disk=100"]
    assert err == ("sstat: note: gres/gpuutil and gres/gpumem of 7.batch are simulated "
                   "(--fake-gpus nodes)\n")
    default = run(capsys, "-j", "7")[1][0].split()
    assert default[:6] == ["JobID", "MaxVMSize", "MaxVMSizeNode", "MaxVMSizeTask", "AveVMSize",
                           "MaxRSS"]
    assert default[-1] == "TRESUsageOutTot" and len(default) == 47


def test_errors(schedd, capsys) -> None:
    assert run(capsys, "-n", "-j", "8") == (0, [], "sstat: error: no steps running for job 8\n")
    assert run(capsys, "-n", "-j", "5") == (0, [], "sstat: error: couldn't get steps for job 5\n")
    assert run(capsys, "-n", "-j", "5.batch")[2] == "sstat: error: couldn't get info for job 5\n"
    assert run(capsys, "-n", "-j", "9")[2] == (
        "sstat: error: problem getting step_layout for 9.batch: Access/permission denied\n")
    assert run(capsys, "-o", "Bogus", "-j", "7") == (
        1, [], 'sstat: error: Invalid field requested: "Bogus"\n')
    assert run(capsys) == (1, [], "sstat: error: You didn't give me any jobs to stat.\n")
    assert run(capsys, "-j", "7.x")[2] == "sstat: error: Invalid job id: 7.x\n"
    assert run(capsys, "-i", "-j", "7")[0] == 1
