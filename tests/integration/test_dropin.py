"""Drop-in round 2 (issue 16): each test runs the commands as a user or a submit library does
and compares with what Slurm 22.05 prints (/work/shared/slurm-reference, the man pages)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, release_file, until
from tests.integration.conftest import _cluster


def acct(cluster: Cluster, *args: str, user: str | None = None):
    return cluster.run("sacctmgr", *args, user=user)


@pytest.fixture(scope="module")
def people(cluster: Cluster, other_user: str) -> str:
    """Accounts bio and physics with other_user in both (g_qos_preempt.txt's schedbench)."""
    for name in ("bio", "physics"):
        assert acct(cluster, "-i", "add", "account", name).returncode == 0
    res = acct(cluster, "-i", "add", "user", other_user, "Account=bio,physics",
               "DefaultAccount=bio")
    assert res.returncode == 0, res.stderr
    return other_user


# --- 1. sacctmgr += and -= on list fields ---------------------------------------------------


def test_sacctmgr_adds_and_removes_list_items(cluster: Cluster, people: str) -> None:
    """g_qos_preempt.txt: ``modify user U set QOS+=low,high`` adds to the inherited normal."""
    for qos in ("low", "high"):
        assert acct(cluster, "-i", "add", "qos", qos).returncode == 0
    res = acct(cluster, "-i", "modify", "user", people, "set", "QOS+=low,high")
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == (" Modified user associations...\n"
                          f"  C = kiln       A = bio                  U = {people:<9}\n"
                          f"  C = kiln       A = physics              U = {people:<9}\n")
    show = ["-n", "-P", "show", "assoc", "where", f"user={people}",
            "format=Account,User,QOS,DefaultQOS"]
    assert acct(cluster, *show).stdout == (f"bio|{people}|high,low,normal|\n"
                                           f"physics|{people}|high,low,normal|\n")
    assert acct(cluster, "-i", "modify", "user", people, "where", "account=physics", "set",
                "QOS-=low").returncode == 0
    assert acct(cluster, *show).stdout == (f"bio|{people}|high,low,normal|\n"
                                           f"physics|{people}|high,normal|\n")
    # Slurm's other spelling of the same change, on an account, and on a QOS's lists
    assert acct(cluster, "-i", "modify", "account", "bio", "set", "QOS=+low").returncode == 0
    assert acct(cluster, "-i", "modify", "qos", "high", "set", "Preempt+=low").returncode == 0
    assert acct(cluster, "-i", "modify", "qos", "high", "set",
                "Flags+=DenyOnLimit").returncode == 0
    qos = acct(cluster, "-n", "-P", "show", "qos", "high", "format=Name,Preempt,Flags")
    assert qos.stdout == "high|low|DenyOnLimit\n"
    assert acct(cluster, "-i", "modify", "qos", "high", "set", "Preempt-=low").returncode == 0
    assert acct(cluster, "-n", "-P", "show", "qos", "high",
                "format=Preempt").stdout == "\n"
    # a setting that is not a list has no +=
    bad = acct(cluster, "-i", "modify", "user", people, "set", "MaxJobs+=3")
    assert bad.returncode == 1 and "Unknown option: MaxJobs+=3" in bad.stderr


# --- 2. an output directory made just after sbatch returns ----------------------------------


def test_output_directory_made_after_sbatch_returns(cluster: Cluster, workdir: Path) -> None:
    """submitit and parsl make ``logs/<jobid>/`` once sbatch printed the id: the job waits for
    it ([agent] output_dir_wait) instead of failing at once."""
    job_id = cluster.sbatch("-o", f"{workdir}/logs/%j/out.txt", "--wrap", "echo landed",
                            cwd=workdir)
    (workdir / "logs" / str(job_id)).mkdir(parents=True)
    assert cluster.wait(job_id, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    assert (workdir / "logs" / str(job_id) / "out.txt").read_text() == "landed\n"


def test_output_directory_that_never_appears_says_why(cluster: Cluster, workdir: Path) -> None:
    job_id = cluster.sbatch("-o", f"{workdir}/nowhere/out.txt", "--wrap", "true", cwd=workdir)
    assert cluster.wait(job_id, {"COMPLETED", "FAILED"})["state"] == "FAILED"
    why = f"launch_failed:_could_not_open_output_file_{workdir}/nowhere/out.txt:" \
          "_No_such_file_or_directory"
    shown = cluster.scontrol_show_job(job_id)
    assert (shown["JobState"], shown["Reason"]) == ("FAILED", why)
    res = cluster.run("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "JobID,State,Reason")
    assert res.stdout.split("|")[:2] == [str(job_id), "FAILED"]
    assert "could not open output file" in res.stdout and "No such file" in res.stdout


# --- 3. squeue -O and sinfo -O: every name Slurm knows -------------------------------------


def test_squeue_long_format_fills_every_slurm_field(cluster: Cluster, workdir: Path) -> None:
    node = cluster.run("sinfo", "-h", "-p", "gpu", "-o", "%N").stdout.strip()
    job_id = cluster.sbatch("-H", "-n", "2", "--mem-per-cpu=100", "--gres=gpu:1", "-x", node,
                            "-J", "fmt", "--wrap", "true", cwd=workdir)
    names = ("JobID,MinCpus,MinTmpDisk,Sockets,Cores,Threads,Contiguous,ExcNodes,CoreSpec,"
             "tres-alloc,tres-per-node,Name")
    res = cluster.run("squeue", "-h", "-j", str(job_id), "-O",
                      ",".join(f"{n}:|" for n in names.split(",")))
    assert (res.returncode, res.stderr) == (0, "")
    assert res.stdout == (f"{job_id}|1|0|*|*|*|0|{node}|N/A|"
                          "cpu=2,mem=200M,node=1,billing=2,gres/gpu=1|gres:gpu:1|fmt|\n")
    # Slurm's :width and :.width (right-justified), default width 20, headers
    wide = cluster.run("squeue", "-j", str(job_id), "-O", "JobID:8,MinTmpDisk:.14,Sockets")
    assert wide.stdout.splitlines() == ["JOBID     MIN_TMP_DISKSOCKETS_PER_NODE    ",
                                        f"{job_id:<8}{'0':>14}*                   "]
    # a name Slurm does not know: one error line, nothing printed, exit 1
    bad = cluster.run("squeue", "-O", "JobID,NoSuchField,Name")
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        1, "", "squeue: error: Invalid job format specification: NoSuchField\n")
    cluster.run("scancel", str(job_id))


def test_sinfo_long_format_knows_nodehost(cluster: Cluster) -> None:
    node = cluster.run("sinfo", "-h", "-p", "gpu", "-o", "%N").stdout.strip()
    res = cluster.run("sinfo", "-h", "-p", "gpu", "-O", "NodeHost:|,Sockets:|,Cores:|,Threads:|,"
                      "PartitionName:|")
    assert (res.returncode, res.stderr) == (0, "")
    cpus = cluster.run("sinfo", "-h", "-p", "gpu", "-o", "%c").stdout.strip()
    assert res.stdout == f"{node}|{cpus}|1|1|gpu|\n"
    bad = cluster.run("sinfo", "-O", "NodeHost,Bogus")
    assert (bad.returncode, bad.stdout, bad.stderr) == (
        1, "", "sinfo: error: Invalid node format specification: Bogus\n")


# --- 6. submit-time validation, with Slurm's messages ---------------------------------------

GRES = "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification\n"


@pytest.mark.parametrize("args, stderr", [
    (["--gres=shard:2"], GRES),
    (["--gres=mps:50"], GRES),  # no node of the partition offers MPS
    (["--gres=gpu:1,mps:100"], GRES),
    (["--mem-per-gpu=1G"], GRES),
    (["--gpus-per-task=1", "-N1"],
     "sbatch: error: Failed to validate job spec. --gpus-per-task used without either --gpus or "
     "-n/--ntasks is not allowed.\n" + GRES),
    (["-w", "nosuchnode"], "sbatch: error: Batch job submission failed: Invalid node name "
                           "specified\n"),
    (["--exclude=nosuch[1-2]"], "sbatch: error: Batch job submission failed: Invalid node name "
                                "specified\n"),
    (["-M", "elsewhere"], "sbatch: error: 'elsewhere' can't be reached now, or it is an invalid "
                          "entry for --cluster.  Use 'sacctmgr list clusters' to see available "
                          "clusters.\n"),
])
def test_submit_refuses_what_slurm_refuses(cluster: Cluster, workdir: Path, args: list[str],
                                           stderr: str) -> None:
    before = cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout
    res = cluster.run("sbatch", *args, "--wrap", "true", cwd=workdir)
    assert (res.returncode, res.stdout, res.stderr) == (1, "", stderr)
    assert cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout == before  # nothing made


def test_submit_accepts_what_slurm_accepts(cluster: Cluster, workdir: Path) -> None:
    """This cluster's own name in -M; --mem-per-gpu and --gpus-per-task with GPUs and tasks."""
    for args in (["-M", "kiln"], ["--clusters=kiln"], ["--mem-per-gpu=1G", "--gpus=1"],
                 ["--gpus-per-task=1", "-n", "1"], ["--gpus-per-task=1", "--gpus=2"],
                 ["--gpus-per-task=1", "--ntasks-per-node=1"]):
        res = cluster.run("sbatch", "-H", *args, "--wrap", "true", cwd=workdir)
        assert (res.returncode, res.stderr) == (0, ""), args
        cluster.run("scancel", res.stdout.split()[-1])


# --- 10. small parity items -------------------------------------------------------------------


def test_parsable_comment_name_filters_and_script_arguments(cluster: Cluster, workdir: Path
                                                            ) -> None:
    res = cluster.run("sbatch", "--parsable", "--comment=run 7 of 9", "-J", "parity", "-H",
                      "--wrap", "true", cwd=workdir)
    assert res.returncode == 0 and res.stdout.strip().isdigit(), res.stderr
    held = res.stdout.strip()
    shown = cluster.run("squeue", "-h", "--name", "parity", "-o", "%A|%k")
    assert shown.stdout == f"{held}|run 7 of 9\n"
    assert cluster.run("scancel", "--name", "parity").returncode == 0
    until(lambda: cluster.job(held)["state"] == "CANCELLED", "scancel --name cancels it")
    script = workdir / "args.sh"
    script.write_text('#!/bin/bash\necho "$#:$1:$2"\n')
    job_id = cluster.sbatch("-o", "args.out", str(script), "first arg", "second", cwd=workdir)
    cluster.wait(job_id, {"COMPLETED"})
    assert (workdir / "args.out").read_text() == "2:first arg:second\n"


def test_wait_parsable_exits_with_the_job(cluster: Cluster, workdir: Path) -> None:
    res = cluster.run("sbatch", "--wait", "--parsable", "-o", "/dev/null", "--wrap", "exit 3",
                      cwd=workdir)
    assert res.returncode == 3 and res.stdout.strip().isdigit(), (res.stdout, res.stderr)
    ok = cluster.run("sbatch", "-W", "--parsable", "-o", "/dev/null", "--wrap", "true",
                     cwd=workdir)
    assert ok.returncode == 0 and ok.stdout.strip().isdigit()


def test_priority_is_for_operators_and_nice_for_everyone(cluster: Cluster, workdir: Path,
                                                         other_user: str) -> None:
    # pending on Resources behind a job holding every GPU (a held job shows Priority=0)
    blocker = cluster.sbatch("--gres=gpu:8", "-o", "/dev/null", "--wrap", "sleep 300",
                             cwd=workdir)
    cluster.wait(blocker, {"RUNNING"})
    job_id = cluster.sbatch("--gres=gpu:1", "--priority=4242", "--wrap", "true", cwd=workdir)
    until(lambda: cluster.scontrol_show_job(job_id)["Priority"] == "4242",
          "the operator's --priority is the job's priority")
    res = cluster.run("sbatch", "-H", "--priority=9", "--wrap", "true", user=other_user,
                      cwd=workdir)
    assert (res.returncode, res.stderr) == (
        1, "sbatch: error: Batch job submission failed: Access/permission denied\n")
    nice = cluster.sbatch("-H", "--nice=100", "--wrap", "true", user=other_user, cwd=workdir)
    assert cluster.scontrol_show_job(nice)["Nice"] == "100"
    cluster.run("scancel", str(job_id), str(nice), str(blocker))


def test_gpus_and_gres_gpu_give_the_same_job(cluster: Cluster, workdir: Path) -> None:
    envs = []
    for flag in ("--gpus=2", "--gres=gpu:2"):
        job_id = cluster.sbatch(flag, "-o", "gpu-%j.txt", "--wrap",
                                "env | grep -E '^(SLURM_GPUS_ON_NODE|SLURM_JOB_GPUS|CUDA|GPU_)'"
                                " | sort", cwd=workdir)
        cluster.wait(job_id, {"COMPLETED"})
        text = (workdir / f"gpu-{job_id}.txt").read_text()
        envs.append(dict(line.split("=", 1) for line in text.splitlines()))
        tres = cluster.run("sacct", "-X", "-n", "-P", "-j", str(job_id), "-o", "AllocTRES")
        assert "gres/gpu=2" in tres.stdout
    for env in envs:
        assert env["SLURM_GPUS_ON_NODE"] == "2"
        assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    assert set(envs[0]) == set(envs[1])


WAREHOUSE = ("jobid,jobidraw,cluster,partition,account,group,gid,user,uid,submit,eligible,start,"
             "end,elapsed,exitcode,state,nnodes,ncpus,reqcpus,reqmem,reqgres,reqtres,timelimit,"
             "nodelist,jobname")


def test_metrics_warehouse_accounting_query(cluster: Cluster, workdir: Path) -> None:
    """The query a job-metrics warehouse runs: every field of a finished job is filled."""
    job_id = cluster.sbatch("-J", "wh", "-n", "2", "--mem=100", "--gres=gpu:1", "-t", "5",
                            "-o", "/dev/null", "--wrap", "true", cwd=workdir)
    cluster.wait(job_id, {"COMPLETED"})
    res = cluster.run("sacct", "--allusers", "--parsable", "--noheader", "--allocations",
                      "--duplicates", "--format", WAREHOUSE, "--starttime", "now-1hour",
                      "--endtime", "now")
    assert res.returncode == 0, res.stderr
    rows = [line.split("|") for line in res.stdout.splitlines()]
    row = next(r for r in rows if r[0] == str(job_id))
    assert len(row) == len(WAREHOUSE.split(",")) + 1 and row[-1] == ""  # --parsable: ends in |
    values = dict(zip(WAREHOUSE.split(","), row, strict=False))
    empty = [k for k, v in values.items() if v == ""]
    assert empty == [], values
    assert (values["jobidraw"], values["cluster"], values["state"], values["exitcode"],
            values["nnodes"], values["ncpus"], values["reqcpus"], values["reqmem"],
            values["timelimit"], values["jobname"]) == (
        str(job_id), "kiln", "COMPLETED", "0:0", "1", "2", "2", "100M", "00:05:00", "wh")
    assert values["reqgres"] == "gpu:1" and "gres/gpu=1" in values["reqtres"]


# --- 9. input environment variables -------------------------------------------------------


def test_sbatch_environment_sits_between_directives_and_command_line(cluster: Cluster,
                                                                     workdir: Path) -> None:
    """sbatch(1): "environment variables will override any options set in a batch script, and
    command line options will override any environment variables"."""
    script = workdir / "envopts.sh"
    script.write_text("#!/bin/bash\n#SBATCH -J fromscript\n#SBATCH -t 30\ntrue\n")
    env = {"SBATCH_JOB_NAME": "fromenv", "SBATCH_PARTITION": "short", "SBATCH_TIMELIMIT": "7",
           "SBATCH_OUTPUT": "/dev/null", "SBATCH_WAIT": "1"}
    res = cluster.run("sbatch", "--parsable", str(script), cwd=workdir, env=env)
    assert res.returncode == 0, res.stderr  # SBATCH_WAIT: returned once the job ended
    job = cluster.job(res.stdout.strip())
    assert (job["name"], job["partition"], job["time_limit"], job["state"]) == (
        "fromenv", "short", 420, "COMPLETED")
    res = cluster.run("sbatch", "--parsable", "-J", "fromcli", "-H", str(script), cwd=workdir,
                      env={"SBATCH_JOB_NAME": "fromenv"})
    assert cluster.job(res.stdout.strip())["name"] == "fromcli"
    cluster.run("scancel", res.stdout.strip())


def test_salloc_and_srun_read_their_input_environment(cluster: Cluster, workdir: Path) -> None:
    """salloc(1): SALLOC_* set options, the command line overrides them; srun(1) reads its
    SLURM_* inputs the same way (SBATCH_* are sbatch's only)."""
    env = {"SALLOC_PARTITION": "short", "SALLOC_TIMELIMIT": "7", "SBATCH_PARTITION": "gpu"}
    res = cluster.run("salloc", "-N1", "true", cwd=workdir, env=env)
    assert res.returncode == 0, res.stderr
    job_id = re.search(r"salloc: Granted job allocation (\d+)", res.stderr).group(1)
    job = cluster.wait(job_id, {"COMPLETED"})
    assert (job["partition"], job["time_limit"]) == ("short", 420)
    res = cluster.run("salloc", "-N1", "-p", "gpu", "true", cwd=workdir, env=env)
    job_id = re.search(r"salloc: Granted job allocation (\d+)", res.stderr).group(1)
    assert cluster.wait(job_id, {"COMPLETED"})["partition"] == "gpu"
    env = {"SLURM_PARTITION": "short", "SLURM_TIMELIMIT": "7", "SLURM_LABELIO": "1"}
    res = cluster.run("srun", "sh", "-c", "echo $SLURM_JOB_ID", cwd=workdir, env=env)
    assert res.returncode == 0, res.stderr
    label, job_id = res.stdout.split()  # SLURM_LABELIO: "0: " before the task's line
    job = cluster.job(job_id)
    assert (label, job["partition"], job["time_limit"]) == ("0:", "short", 420)
    res = cluster.run("srun", "-p", "gpu", "sh", "-c", "echo $SLURM_JOB_ID", cwd=workdir,
                      env=env)
    assert res.returncode == 0, res.stderr
    assert cluster.job(res.stdout.split()[1])["partition"] == "gpu"


def test_reporting_commands_read_their_environment(cluster: Cluster, workdir: Path) -> None:
    first = cluster.sbatch("-H", "-J", "envb", "--wrap", "true", cwd=workdir)
    second = cluster.sbatch("-H", "-J", "enva", "--wrap", "true", cwd=workdir)
    ids = {"SQUEUE_STATES": "PD", "SQUEUE_USERS": "root"}
    shown = cluster.run("squeue", "-h", env={**ids, "SQUEUE_FORMAT": "%i %j",
                                             "SQUEUE_SORT": "j"})
    lines = [line for line in shown.stdout.splitlines() if line.split()[0] in
             (str(first), str(second))]
    assert lines == [f"{second} enva", f"{first} envb"]
    long = cluster.run("squeue", "-h", "-j", str(first), env={"SQUEUE_FORMAT2": "JobID:|,Name:|",
                                                               "SQUEUE_FORMAT": "%i"})
    assert long.stdout == f"{first}|envb|\n"
    cli_wins = cluster.run("squeue", "-h", "-j", str(first), "-o", "%j",
                           env={"SQUEUE_FORMAT2": "JobID"})
    assert cli_wins.stdout == "envb\n"
    epoch = cluster.run("squeue", "-h", "-j", str(first), "-o", "%V",
                        env={"SLURM_TIME_FORMAT": "%s"})
    assert abs(int(epoch.stdout) - int(cluster.job(first)["submit_time"])) <= 1
    cluster.run("scancel", str(first), str(second))
    until(lambda: cluster.job(first)["state"] == "CANCELLED", "the job is cancelled")
    acct = cluster.run("sacct", "-X", "-n", "-P", "-j", str(first),
                       env={"SACCT_FORMAT": "JobName,State"})
    assert acct.stdout == "envb|CANCELLED by 0\n"
    info = cluster.run("sinfo", "-h", "-p", "gpu", env={"SINFO_FORMAT": "%P|%a"})
    assert info.stdout == "gpu*|up\n"
    info = cluster.run("sinfo", "-h", env={"SINFO_PARTITION": "short", "SINFO_FORMAT": "%R"})
    assert info.stdout == "short\n"


# --- 7. licenses ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def licensed(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A cluster with two matlab licenses ([[license]] in kiln.toml)."""
    yield from _cluster(request, "sqlite", nodes=1, fake_gpus="8xH100-80GB", kill_wait=3,
                        schedd_extra='[[license]]\nname = "matlab"\ncount = 2\n')


def test_licenses_are_scheduled_and_shown(licensed: Cluster, workdir: Path) -> None:
    shown = licensed.run("scontrol", "show", "lic")
    assert shown.stdout == "LicenseName=matlab\n    Total=2 Used=0 Free=2 Reserved=0 Remote=no\n"
    holder = licensed.sbatch("-L", "matlab:2", "-o", "/dev/null", "--wrap",
                             release_file(workdir), cwd=workdir)
    licensed.wait(holder, {"RUNNING"})
    waiter = licensed.sbatch("--licenses=matlab", "-o", "/dev/null", "--wrap", "true",
                             cwd=workdir)
    until(lambda: licensed.job(waiter)["reason"] == "Licenses", "the job waits for a license")
    row = licensed.run("squeue", "-h", "-j", str(waiter), "-o", "%T|%r|%W")
    assert row.stdout == "PENDING|Licenses|matlab:1\n"
    assert licensed.run("scontrol", "-o", "show", "licenses", "matlab").stdout == (
        "LicenseName=matlab Total=2 Used=2 Free=0 Reserved=0 Remote=no\n")
    (workdir / "release").touch()
    assert licensed.wait(waiter, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
    for bad in ("nosuch", "matlab:3", "matlab:x"):
        res = licensed.run("sbatch", "-L", bad, "--wrap", "true", cwd=workdir)
        assert (res.returncode, res.stdout, res.stderr) == (
            1, "", "sbatch: error: Batch job submission failed: Invalid license specification\n")


# --- 4. --json data_parser versions ------------------------------------------------------


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41"])
def test_json_data_parser_versions_follow_the_published_schemas(
        cluster: Cluster, workdir: Path, version: str) -> None:
    """squeue, sinfo and sacct (a job with its batch, extern and srun step) of a real cluster,
    each whole output held to the published schema (tests/openapi_schema.py)."""
    import json

    from cli.data_parser import schema
    from tests.openapi_schema import schema_errors

    job_id = cluster.sbatch("-J", "jsonjob", "--gres=gpu:1", "-t", "10", "-o", "/dev/null",
                            "--mail-type=END", "--wrap",
                            f"srun -J hello true; {release_file(workdir, f'rel-{version}')}",
                            cwd=workdir)
    cluster.wait(job_id, {"RUNNING"})
    doc = json.loads(cluster.run("squeue", f"--json={version}").stdout)
    assert schema_errors(schema(version, "squeue"), doc) == []
    assert doc["meta"]["plugin"]["data_parser"] == f"data_parser/{version}"
    job = next(j for j in doc["jobs"] if j["job_id"] == job_id)
    assert job["job_state"] == ["RUNNING"] and job["name"] == "jsonjob"
    assert job["mail_type"] == ["END"] and job["tres_per_node"].startswith("gres/gpu:")
    assert job["het_job_id"] == {"set": True, "infinite": False, "number": 0}  # not het: 0
    assert job["time_limit"] == {"set": True, "infinite": False, "number": 10}
    assert job["start_time"]["set"] is True and job["start_time"]["number"] > 0
    nodes = job["job_resources"]["nodes"]
    assert (nodes if version == "v0.0.40" else nodes["list"]) == job["nodes"] != ""
    info = json.loads(cluster.run("sinfo", f"--json={version}").stdout)
    assert schema_errors(schema(version, "sinfo"), info) == []
    busy = next(g for g in info["sinfo"] if job["nodes"] in g["nodes"]["nodes"])
    assert busy["node"]["state"][0] in ("MIXED", "ALLOCATED")
    assert busy["cpus"]["allocated"] >= 1
    (workdir / f"rel-{version}").touch()
    cluster.wait(job_id, {"COMPLETED"})
    acct = json.loads(cluster.run("sacct", "-j", str(job_id), f"--json={version}").stdout)
    assert schema_errors(schema(version, "sacct"), acct) == []
    row = acct["jobs"][0]
    assert (row["job_id"], row["state"]["current"], row["exit_code"]["return_code"]) == (
        job_id, ["COMPLETED"], {"set": True, "infinite": False, "number": 0})
    steps = {s["step"]["id"]: s for s in row["steps"]}
    assert {f"{job_id}.batch", f"{job_id}.extern", f"{job_id}.0"} <= set(steps)
    assert steps[f"{job_id}.0"]["step"]["name"] == "hello"
    assert steps[f"{job_id}.0"]["state"] == ["COMPLETED"]
    assert steps[f"{job_id}.0"]["nodes"]["list"] == [job["nodes"]]
    bad = cluster.run("squeue", "--json=v0.0.99")
    assert (bad.returncode, bad.stdout) == (1, "")
    plain = json.loads(cluster.run("squeue", "--json").stdout)  # v0.0.38 stays the default
    assert plain["meta"]["plugin"]["type"] == "openapi/v0.0.38"


# --- 8. mail ----------------------------------------------------------------------------------

RECORDER = """#!/bin/sh
# a MailProg that records how it was called: $1=-s $2=subject $3=-- $4=user, and its environment
printf '%s|%s|%s|%s|%s|%s\\n' "$1" "$2" "$4" "$SLURM_JOB_ID" "$SLURM_JOB_MAIL_TYPE" "$3" >> {log}
"""


@pytest.fixture(scope="module")
def mailbox(request: pytest.FixtureRequest) -> Iterator[tuple[Cluster, Path]]:
    """A cluster whose MailProg is a recorder writing one line per mail."""
    from tests.integration.cluster import cleanup, world_tempdir

    where = world_tempdir("kiln-mail-")
    prog, log = where / "mailprog", where / "mail.log"
    prog.write_text(RECORDER.format(log=log))
    prog.chmod(0o755)
    try:
        for cluster in _cluster(request, "sqlite", nodes=1, fake_gpus="8xH100-80GB",
                                kill_wait=3, schedd_extra=f'[mail]\nmail_prog = "{prog}"\n'):
            yield cluster, log
    finally:
        cleanup(where)


def mails(log: Path) -> list[list[str]]:
    return [line.split("|") for line in log.read_text().splitlines()] if log.exists() else []


def mails_of(log: Path, job_id: int, count: int) -> list[list[str]]:
    def found() -> list[list[str]] | None:
        got = [m for m in mails(log) if m[3] == str(job_id)]
        return got if len(got) >= count else None
    return until(found, f"{count} mails of job {job_id}")


def test_mail_prog_gets_slurms_call_and_subjects(mailbox: tuple[Cluster, Path],
                                                  workdir: Path) -> None:
    import re

    cluster, log = mailbox
    quiet = cluster.sbatch("--mail-type=NONE", "-o", "/dev/null", "--wrap", "true", cwd=workdir)
    job_id = cluster.sbatch("--mail-type=BEGIN,END", "-J", "mailjob", "-o", "/dev/null",
                            f"--dependency=afterany:{quiet}", "--wrap", "true", cwd=workdir)
    began, ended = mails_of(log, job_id, 2)
    assert began[0] == "-s" and began[2] == "root" and began[4] == "BEGIN,END"
    assert began[5] == "--"  # no recipient can be read as an option
    assert re.fullmatch(rf"Slurm Job_id={job_id} Name=mailjob Began, Queued time "
                        r"\d\d:\d\d:\d\d", began[1])
    assert re.fullmatch(rf"Slurm Job_id={job_id} Name=mailjob Ended, Run time "
                        r"\d\d:\d\d:\d\d, COMPLETED, ExitCode 0", ended[1])
    assert [m for m in mails(log) if m[3] == str(quiet)] == []  # NONE: no mail
    failed = cluster.sbatch("--mail-type=END,FAIL", "--mail-user=alice@example.org",
                            "-J", "bad", "-o", "/dev/null", "--wrap", "exit 3", cwd=workdir)
    (mail,) = mails_of(log, failed, 1)
    assert mail[2] == "alice@example.org"
    for bad in ("-x@y", "garbage here"):
        res = cluster.run("sbatch", f"--mail-user={bad}", "--wrap", "true", cwd=workdir)
        assert res.returncode != 0
        assert res.stderr.strip().splitlines() == [
            "sbatch: error: Batch job submission failed: Invalid --mail-user value: "
            f"{bad!r} is not a user name or mail address"], res.stderr
    assert re.fullmatch(rf"Slurm Job_id={failed} Name=bad Failed, Run time \d\d:\d\d:\d\d, "
                        r"FAILED, ExitCode 3", mail[1])


def test_mail_time_limit_shares_and_array_summary(mailbox: tuple[Cluster, Path],
                                                  workdir: Path) -> None:
    import re

    cluster, log = mailbox
    job_id = cluster.sbatch("--mail-type=TIME_LIMIT_50", "-t", "0:06", "-J", "half",
                            "-o", "/dev/null", "--wrap", release_file(workdir, "half"),
                            cwd=workdir)
    (mail,) = mails_of(log, job_id, 1)
    assert re.fullmatch(rf"Slurm Job_id={job_id} Name=half Reached 50% of time limit, "
                        r"Run time \d\d:\d\d:\d\d", mail[1])
    (workdir / "half").touch()
    array = cluster.sbatch("--array=0-2", "--mail-type=END", "-J", "arr", "-o", "/dev/null",
                           "--wrap", "true", cwd=workdir)
    until(lambda: all(cluster.job(f"{array}_{t}")["state"] == "COMPLETED" for t in range(3)),
          "the array has finished")
    summary = until(lambda: [m for m in mails(log) if "Array Summary" in m[1]
                             and f"Job_id={array}_*" in m[1]], "the array's summary mail")
    assert len(summary) == 1
    assert summary[0][1] == (f"Slurm Array Summary Job_id={array}_* ({array}) Name=arr Ended, "
                             "COMPLETED, ExitCode 0")


def test_time_limit_notices_are_sent_once_across_a_schedd_restart(
        mailbox: tuple[Cluster, Path], workdir: Path) -> None:
    """Which TIME_LIMIT_N notices a run was sent is in the ledger: schedd stopped and started
    between the 50% and the 80% mail sends the 50% one no second time and the 80% one still."""
    import os
    import signal

    from tests.integration.cluster import _alive

    cluster, log = mailbox
    job_id = cluster.sbatch("--mail-type=TIME_LIMIT_50,TIME_LIMIT_80", "-t", "0:30",
                            "-J", "restart", "-o", "/dev/null",
                            "--wrap", release_file(workdir, "restart"), cwd=workdir)
    (half,) = mails_of(log, job_id, 1)
    assert "Reached 50% of time limit" in half[1]
    pid = int((cluster.home / "run" / "schedd.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    until(lambda: not _alive(pid), "schedd has stopped")
    res = cluster.run("kiln", "up")
    assert res.returncode == 0, res.stderr
    half_again, late = mails_of(log, job_id, 2)
    assert half_again == half and "Reached 80% of time limit" in late[1]
    (workdir / "restart").touch()
    cluster.wait(job_id, {"COMPLETED", "TIMEOUT"})  # TIMEOUT: a slow restart, not a fault
    assert [m[1].split(" Reached ")[1].split(",")[0] for m in mails(log)
            if m[3] == str(job_id)] == ["50% of time limit", "80% of time limit"]


class _SmtpSink:
    """A local SMTP server that keeps each message it is given (enough of RFC 5321)."""

    def __init__(self) -> None:
        import socket
        import threading

        self.messages: list[str] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rwb") as f:
                f.write(b"220 sink\r\n")
                f.flush()
                data = None
                for raw in f:
                    line = raw.decode(errors="replace").rstrip("\r\n")
                    if data is not None:
                        if line == ".":
                            self.messages.append("\n".join(data))
                            data = None
                            f.write(b"250 ok\r\n")
                        else:
                            data.append(line)
                        f.flush()
                        continue
                    verb = line.split(" ", 1)[0].upper()
                    if verb == "DATA":
                        data = []
                        f.write(b"354 go\r\n")
                    elif verb == "QUIT":
                        f.write(b"221 bye\r\n")
                        f.flush()
                        break
                    else:
                        f.write(b"250 ok\r\n")
                    f.flush()


def test_mail_over_smtp(request: pytest.FixtureRequest, workdir: Path) -> None:
    sink = _SmtpSink()
    extra = f'[mail]\nsmtp_host = "127.0.0.1"\nsmtp_port = {sink.port}\ndomain = "example.org"\n'
    for cluster in _cluster(request, "sqlite", nodes=1, fake_gpus="2xH100-80GB", kill_wait=3,
                            schedd_extra=extra):
        job_id = cluster.sbatch("--mail-type=END", "-J", "smtpjob", "-o", "/dev/null",
                                "--wrap", "true", cwd=workdir)
        import email
        import email.policy

        (message,) = until(lambda: sink.messages, "a message at the SMTP sink")
        parsed = email.message_from_string(message, policy=email.policy.default)
        assert parsed["To"] == "root@example.org"
        assert parsed["Subject"].startswith(f"Slurm Job_id={job_id} Name=smtpjob Ended, "
                                            "Run time ")
        assert parsed["Subject"].endswith(", COMPLETED, ExitCode 0")
    sink.sock.close()
