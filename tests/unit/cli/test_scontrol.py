"""scontrol: show job in Slurm's layout, hostnames, hold/release, update, ping."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cli import scontrol
from cli.core.client import ClientError
from kiln.model import Job, JobState, NodeAllocation

START = time.mktime((2026, 11, 29, 8, 6, 38, 0, 0, -1))

# slurm-reference/h_scontrol_resv.txt, `scontrol show job 83071`
RUNNING_REFERENCE = """\
JobId=83071 JobName=runner
   UserId=schedbench(999) GroupId=schedbench(995) MCS_label=N/A
   Priority=3333 Nice=0 Account=physics QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:00:03 TimeLimit=00:10:00 TimeMin=N/A
   SubmitTime=2026-11-29T08:06:38 EligibleTime=2026-11-29T08:06:38
   AccrueTime=2026-11-29T08:06:38
   StartTime=2026-11-29T08:06:38 EndTime=2026-11-29T08:16:38 Deadline=N/A
   PreemptEligibleTime=2026-11-29T08:06:38 PreemptTime=None
   SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T08:06:38 Scheduler=Main
   Partition=debug AllocNode:Sid=localhost:24504
   ReqNodeList=(null) ExcNodeList=(null)
   NodeList=vm
   BatchHost=vm
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   TRES=cpu=1,node=1,billing=1,gres/gpu=2
   Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*
   MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0
   Features=(null) DelayBoot=00:00:00
   OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)
   Command=(null)
   WorkDir=/home/schedbench/jobs
   StdErr=/dev/null
   StdIn=/dev/null
   StdOut=/dev/null
   Power=
   TresPerNode=gres:gpu:2
""" + "   \n\n"  # Slurm ends a record with "   " and a blank line


def runner() -> dict[str, Any]:
    return Job(
        id=83071, name="runner", user="schedbench", uid=999, gid=995, account="physics",
        partition="debug", state=JobState.RUNNING, priority=3333, submit_time=START,
        eligible_time=START, start_time=START, time_limit=600, gpus_per_node=2,
        node_list="vm", batch_host="vm", submit_host="localhost", command="(wrap)",
        allocation=[NodeAllocation("vm", 1, 0, [0, 1])], stdout="/dev/null",
        stderr="/dev/null", workdir="/home/schedbench/jobs", alloc_sid=24504,
    ).to_wire()


@pytest.fixture
def jobs_schedd(fake_schedd, monkeypatch):
    class Group:
        gr_name = "schedbench"

    monkeypatch.setattr("grp.getgrgid", lambda gid: Group())

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        if op == "query_jobs":
            wanted = body.get("job_ids")
            jobs = [runner()] if not wanted or "83071" in wanted else []
            return {"jobs": jobs, "now": START + 3}
        if op in ("hold", "release", "requeue", "update_job"):
            bad = [{"job_id": j, "message": "Invalid job id specified"}
                   for j in body["job_ids"] if j != "83071"]
            return {"errors": bad}
        if op == "ping":
            return {}
        if op == "show_config":
            return {"config": {"MinJobAge": "300 sec", "MaxArraySize": 1001,
                               "AccountingStorageBackupHost": None}}
        raise ClientError("unknown_op", op)
    return fake_schedd(handler)


def test_show_job_matches_slurm(jobs_schedd, capsys) -> None:
    assert scontrol.main(["show", "job", "83071"]) == 0
    assert capsys.readouterr().out == RUNNING_REFERENCE


def test_show_job_oneliner(jobs_schedd, capsys) -> None:
    assert scontrol.main(["-o", "show", "job", "83071"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("JobId=83071 JobName=runner UserId=schedbench(999) ")
    assert out.endswith(" TresPerNode=gres:gpu:2 \n") and out.count("\n") == 1


def test_unknown_job(jobs_schedd, capsys) -> None:
    assert scontrol.main(["show", "job", "999999"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == "slurm_load_jobs error: Invalid job id specified\n"


def test_pending_job_spellings() -> None:
    job = Job(id=5, state=JobState.PENDING, reason="ReqNodeNotAvail, May be reserved for other job",
              time_limit=1800, submit_time=START, reservation="biores",
              expected_start=START + 600, sched_nodes="vm").to_wire()
    lines = scontrol.job_lines(job, START)
    assert "JobState=PENDING Reason=ReqNodeNotAvail,_May_be_reserved_for_other_job " \
           "Dependency=(null)" in lines
    assert "StartTime=2026-11-29T08:16:38 EndTime=2026-11-29T08:46:38 Deadline=N/A" in lines
    assert "NodeList= SchedNodeList=vm" in lines and "Reservation=biores" in lines
    assert not any(line.startswith("PreemptEligibleTime") for line in lines)


def test_stdout_default_is_expanded(tmp_path: Path) -> None:
    job = Job(id=9, name="x", workdir="/w").to_wire()
    assert "StdOut=/w/slurm-9.out" in scontrol.job_lines(job, 0)
    task = Job(id=12, array_job_id=10, array_task_id=2, workdir="/w", stdout="o-%A_%a-%x.log",
               name="n").to_wire()
    assert "StdOut=/w/o-10_2-n.log" in scontrol.job_lines(task, 0)


def test_hostnames_is_pure(monkeypatch, capsys) -> None:
    monkeypatch.setenv("KILN_CONF", "/nonexistent/kiln.toml")
    assert scontrol.main(["show", "hostnames", "gpu[01-03],login"]) == 0
    assert capsys.readouterr().out == "gpu01\ngpu02\ngpu03\nlogin\n"
    monkeypatch.setenv("SLURM_JOB_NODELIST", "a[1-2]")
    assert scontrol.main(["show", "hostnames"]) == 0
    assert capsys.readouterr().out == "a1\na2\n"
    assert scontrol.main(["show", "hostlist", "n1,n2,n3,x"]) == 0
    assert capsys.readouterr().out == "n[1-3],x\n"
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    assert scontrol.main(["show", "hostnames"]) == 1
    assert capsys.readouterr().err == "scontrol: error: host list is empty\n"


def test_hold_release_and_errors(jobs_schedd, capsys) -> None:
    assert scontrol.main(["hold", "83071"]) == 0
    assert scontrol.main(["release", "83071,42"]) == 1
    assert capsys.readouterr().err == "Invalid job id specified for job 42\n"
    assert jobs_schedd.ops("release") == [{"job_ids": ["83071", "42"]}]
    assert scontrol.main(["requeuehold", "83071"]) == 0
    assert jobs_schedd.ops("requeue") == [{"job_ids": ["83071"], "hold": True}]


def test_update_job(jobs_schedd, capsys) -> None:
    assert scontrol.main(["update", "JobId=83071", "TimeLimit=1:00:00", "Nice=10",
                          "Partition=gpu"]) == 0
    assert jobs_schedd.ops("update_job") == [
        {"job_ids": ["83071"], "changes": {"time_limit": 3600, "nice": 10, "partition": "gpu"}}]
    assert scontrol.main(["update", "JobId=83071", "Colour=blue"]) == 1
    assert "not supported: Colour=blue" in capsys.readouterr().err


def test_show_config_and_ping(jobs_schedd, capsys) -> None:
    assert scontrol.main(["show", "config"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Configuration data as of ")
    assert lines[1:] == ["MinJobAge               = 300 sec",
                         "MaxArraySize            = 1001",
                         "AccountingStorageBackupHost = (null)"]
    assert scontrol.main(["ping"]) == 0
    assert capsys.readouterr().out.endswith(" is UP\n")


def test_bad_keywords(capsys) -> None:
    assert scontrol.main(["frobnicate"]) == 1
    assert capsys.readouterr().err == "invalid keyword: frobnicate\n"  # Slurm's, unprefixed
    assert scontrol.main(["show", "spaceships"]) == 1
    assert capsys.readouterr().err == "invalid entity:spaceships for keyword:show \n"


def test_show_node_and_partition(fake_schedd, capsys) -> None:
    node = {"name": "gpu01", "cpus": 64, "memory_mb": 512000, "features": ["h100"],
            "partitions": ["gpu"], "state": "IDLE", "reason": "", "address": "10.0.0.1",
            "gpus": [{"index": i, "uuid": f"u{i}", "model": "NVIDIA H100 80GB HBM3",
                      "memory_mb": 81559, "island": 0} for i in range(8)],
            "state_display": "MIXED", "alloc_cpus": 4, "alloc_mem_mb": 2048, "alloc_gpus": 2}
    part = {"name": "gpu", "nodes": [], "default": True, "max_time": 86400,
            "default_time": None, "state": "UP"}

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        if op == "query_nodes":
            return {"nodes": [node], "now": 0.0}
        return {"partitions": [part]}

    fake_schedd(handler)
    assert scontrol.main(["show", "node", "gpu01"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("NodeName=gpu01 Arch=")
    assert "   CPUAlloc=4 CPUEfctv=64 CPUTot=64 CPULoad=N/A" in lines
    assert "   Gres=gpu:h100:8" in lines and "   State=MIXED ThreadsPerCore=1 TmpDisk=0 " \
        "Weight=1 Owner=N/A MCS_label=N/A" in lines
    assert "   CfgTRES=cpu=64,mem=500G,billing=64,gres/gpu=8" in lines
    assert "   AllocTRES=cpu=4,mem=2G,gres/gpu=2" in lines
    assert scontrol.main(["show", "node", "nope"]) == 1
    assert capsys.readouterr().err == "Node nope not found\n"
    assert scontrol.main(["show", "partition"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PartitionName=gpu\n   AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL\n")
    assert "   AllocNodes=ALL Default=YES QoS=N/A\n" in out
    assert "   MaxNodes=UNLIMITED MaxTime=1-00:00:00 MinNodes=0 LLN=NO " in out
    assert "   Nodes=gpu01\n" in out and "TRES=cpu=64,mem=500G,node=1,billing=64,gres/gpu=8\n" in out
    # Slurm's abbreviations, which web portals use (`scontrol show part -o`), and show job=ID
    for word in ("part", "PA", "partitions", "partitionname"):
        assert scontrol.main(["show", word]) == 0
        assert capsys.readouterr().out == out
    assert scontrol.main(["show", "no", "gpu01"]) == 0
    assert capsys.readouterr().out.startswith("NodeName=gpu01 ")
    assert scontrol.main(["show", "nodename=gpu01"]) == 0
    assert capsys.readouterr().out.startswith("NodeName=gpu01 ")


@pytest.mark.parametrize(("word", "entity"), [
    ("j", "job"), ("jobid", "job"), ("n", "node"), ("no", "node"), ("pa", "partition"),
    ("part", "partition"), ("r", "reservation"), ("res", "reservation"), ("c", "config"),
    ("conf", "config"), ("li", "license"), ("lic", "license"), ("hostn", "hostnames"),
    ("hostname", "hostnames"), ("hostl", "hostlist"), ("hostlists", "hostlistsorted"),
    ("t", "topology"), ("topo", "topology"),
    # too short, too long, or an entity of Slurm's that kiln does not show (Slurm's order:
    # "ca" is its cache, "st" its steps, "s" nothing)
    ("p", None), ("l", None), ("host", None), ("jobsx", None), ("ca", None), ("st", None),
    ("s", None),
])
def test_show_takes_slurms_abbreviations(word: str, entity: str | None) -> None:
    assert scontrol.show_entity(word) == entity


def test_show_node_gres_names_the_sockets_near_its_gpus() -> None:
    """Slurm's Gres=gpu:TYPE:N(S:...) where the GPUs' CPU affinity is known: kiln shows each
    CPU as a socket (Sockets=CPUs, CoresPerSocket=1), so the sockets are the near CPU ids,
    all GPUs of the type together; ids past the node's CPUs are not its sockets."""
    def node(*near: list[int]) -> dict[str, Any]:
        return {"name": "gpu01", "cpus": 64, "memory_mb": 1024, "state": "IDLE",
                "gpus": [{"index": i, "uuid": f"u{i}", "model": "NVIDIA A100-SXM4-80GB",
                          "memory_mb": 81920, "island": i, "cpus": cpus}
                         for i, cpus in enumerate(near)]}

    def gres(n: dict[str, Any]) -> str:
        return next(line.strip() for line in scontrol.node_lines(n, 0.0) if "Gres=" in line)

    assert gres(node(list(range(32)), list(range(32, 64)))) == "Gres=gpu:a100:2(S:0-63)"
    assert gres(node([0, 1, 2, 3], [8, 70])) == "Gres=gpu:a100:2(S:0-3,8)"
    assert gres(node([0, 1], [])) == "Gres=gpu:a100:2(S:0-1)"
    assert gres(node([], [])) == "Gres=gpu:a100:2"


def test_show_job_prints_control_characters_as_question_marks(fake_schedd, monkeypatch,
                                                              capsys) -> None:
    """Issue 12: a name or comment stored before schedd refused control characters."""
    class Group:
        gr_name = "schedbench"

    monkeypatch.setattr("grp.getgrgid", lambda gid: Group())
    evil = dict(runner(), name="x\x1b[2J\nJobId=1 UserId=root", comment="\x9b31m")
    fake_schedd(lambda op, body: {"jobs": [evil], "now": START + 3})
    for argv in (["show", "job", "83071"], ["-o", "show", "job", "83071"]):
        assert scontrol.main(argv) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x9b" not in out
        assert "JobName=x?[2J?JobId=1 UserId=root" in out


def test_show_job_details_give_each_nodes_cpu_ids_memory_and_gpus() -> None:
    """-d: Slurm 22.05's per-node line under Socks/Node, from the scheduler's CPU ids."""
    job = Job(id=7, state=JobState.RUNNING, start_time=START, gpu_type="a100",
              allocation=[NodeAllocation("node1", 4, 8192, [0, 1], cpu_ids=[0, 1, 2, 3]),
                          NodeAllocation("node2", 2, 4096, [], cpu_ids=[5, 7])]).to_wire()
    lines = scontrol.job_lines(job, START, details=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("Socks/Node="))
    assert lines[at + 1:at + 3] == [
        "  Nodes=node1 CPU_IDs=0-3 Mem=8192 GRES=gpu:a100:2(IDX:0-1)",
        "  Nodes=node2 CPU_IDs=5,7 Mem=4096 GRES="]
    assert lines[at + 3].startswith("MinCPUsNode=")
    assert not any("CPU_IDs" in line for line in scontrol.job_lines(job, START))


# Slurm 22.05.8 (../shared/bench, 2026-12-07): `sbatch --array=0-7%2 --wrap 'sleep 30'`, two
# tasks running, `scontrol show job 3`; the first line of each record (and `--hold
# --array=0-7` then `scontrol show job 2` and `show job 2_3`, no throttle):
#   JobId=3 ArrayJobId=3 ArrayTaskId=2-7%2 ArrayTaskThrottle=2 JobName=wrap
#   JobId=5 ArrayJobId=3 ArrayTaskId=1 ArrayTaskThrottle=2 JobName=wrap
#   JobId=4 ArrayJobId=3 ArrayTaskId=0 ArrayTaskThrottle=2 JobName=wrap
#   JobId=2 ArrayJobId=2 ArrayTaskId=0-7 JobName=wrap
#   JobId=2 ArrayJobId=2 ArrayTaskId=3 JobName=wrap
def _task(job_id: int, task: int, state: JobState, throttle: int = 0) -> dict[str, Any]:
    return Job(id=job_id, name="wrap", user="u", uid=1, gid=1, account="a", partition="p",
               state=state, array_job_id=3, array_task_id=task, array_max_running=throttle,
               submit_time=START, start_time=START if state == JobState.RUNNING else 0,
               reason="JobArrayTaskLimit" if state == JobState.PENDING else "",
               ).to_wire()


def test_an_arrays_pending_tasks_are_one_record_as_slurms(fake_schedd, capsys) -> None:
    tasks = [_task(3, 7, JobState.PENDING, 2), _task(4, 0, JobState.RUNNING, 2),
             _task(5, 1, JobState.RUNNING, 2)] + \
        [_task(5 + t, t, JobState.PENDING, 2) for t in range(2, 7)]
    asked: list[Any] = []

    def handler(op: str, body: dict[str, Any]) -> dict[str, Any]:
        asked.append(body.get("job_ids"))
        wanted = body.get("job_ids") or []
        if wanted == ["3_3"]:
            return {"jobs": [tasks[4]], "now": START}
        return {"jobs": [t for t in tasks if t["array_task_id"] >= 0], "now": START}

    fake_schedd(handler)
    assert scontrol.main(["show", "job", "3"]) == 0
    heads = [line for line in capsys.readouterr().out.splitlines() if line.startswith("JobId")]
    assert heads == [
        "JobId=3 ArrayJobId=3 ArrayTaskId=2-7%2 ArrayTaskThrottle=2 JobName=wrap",
        "JobId=4 ArrayJobId=3 ArrayTaskId=0 ArrayTaskThrottle=2 JobName=wrap",
        "JobId=5 ArrayJobId=3 ArrayTaskId=1 ArrayTaskThrottle=2 JobName=wrap"]
    assert scontrol.main(["show", "job", "3_3"]) == 0
    out = capsys.readouterr().out  # one task not started yet: under the array's id
    assert out.startswith("JobId=3 ArrayJobId=3 ArrayTaskId=3 ArrayTaskThrottle=2 ")
