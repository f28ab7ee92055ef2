"""What a newcomer hits in the first hour (issue 17), as they would type it: the command, what it
prints, its exit code. Two nodes with four fake A100s each, as the README's tour."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from tests.integration.cluster import Cluster

NODE_CONFIG = "sbatch: error: Batch job submission failed: Requested node configuration is not available\n"


def _node(cluster: Cluster, name: str) -> dict[str, str]:
    res = cluster.run("scontrol", "show", "node", name)
    assert res.returncode == 0, res.stderr
    return dict(re.findall(r"(\w[\w/:]*)=(\S*)", res.stdout))


# --- which resource does not fit (item 6) ---------------------------------------------------


def test_too_much_memory_names_the_largest_node(two_nodes: Cluster) -> None:
    mem = int(_node(two_nodes, "node1")["RealMemory"])
    res = two_nodes.run("sbatch", "--mem", f"{mem + 1}", "--wrap", "true")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == NODE_CONFIG + (f"sbatch: error: no node has {mem + 1} MB of memory "
                                        f"(largest: {mem} MB, node1)\n")


def test_absent_gpu_type_names_the_types_there_are(two_nodes: Cluster) -> None:
    res = two_nodes.run("sbatch", "--gres=gpu:v100:1", "--wrap", "true")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == NODE_CONFIG + ("sbatch: error: no node has GPUs of type v100 "
                                        "(types here: a100)\n")


@pytest.mark.parametrize("gres", ["--gres=gpu:5", "--gpus-per-node=5"])
def test_too_many_gpus_per_node(two_nodes: Cluster, gres: str) -> None:
    res = two_nodes.run("sbatch", gres, "--wrap", "true")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == NODE_CONFIG + "sbatch: error: no node has 5 GPUs (largest: 4, node1)\n"


def test_too_many_gpus_of_a_type(two_nodes: Cluster) -> None:
    res = two_nodes.run("sbatch", "--gres=gpu:a100:6", "--wrap", "true")
    assert res.stderr == NODE_CONFIG + ("sbatch: error: no node has 6 a100 GPUs "
                                        "(largest: 4, node1)\n")


def test_too_many_nodes(two_nodes: Cluster) -> None:
    res = two_nodes.run("sbatch", "-N", "3", "--wrap", "true")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == NODE_CONFIG + ("sbatch: error: 3 nodes requested, partition gpu has 2 "
                                        "(node[1-2])\n")


def test_too_many_cpus(two_nodes: Cluster) -> None:
    cpus = int(_node(two_nodes, "node1")["CPUTot"])
    res = two_nodes.run("sbatch", "-c", str(cpus + 1), "--wrap", "true")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == NODE_CONFIG + (f"sbatch: error: no node has {cpus + 1} CPUs "
                                        f"(largest: {cpus}, node1)\n")


def test_a_shape_that_fits_is_still_accepted(two_nodes: Cluster) -> None:
    res = two_nodes.run("sbatch", "--test-only", "-N", "2", "--gres=gpu:a100:4", "--wrap", "true")
    assert res.returncode == 0, res.stderr


def test_scontrol_update_to_a_shape_no_node_holds(two_nodes: Cluster) -> None:
    job_id = two_nodes.sbatch("-H", "--wrap", "true")
    res = two_nodes.run("scontrol", "update", f"JobId={job_id}", "NumNodes=3")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == (f"Requested node configuration is not available for job {job_id}\n"
                          "3 nodes requested, partition gpu has 2 (node[1-2])\n")
    two_nodes.run("scancel", str(job_id))


def test_srun_outside_an_allocation_says_the_same(two_nodes: Cluster) -> None:
    res = two_nodes.run("srun", "--gres=gpu:v100:1", "true")
    assert res.returncode == 1
    assert res.stderr == ("srun: error: Unable to allocate resources: Requested node "
                          "configuration is not available\n"
                          "srun: error: no node has GPUs of type v100 (types here: a100)\n")


# --- smaller items (item 9) -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["squeue", "sacct"])
def test_unknown_user_is_an_error(two_nodes: Cluster, command: str) -> None:
    res = two_nodes.run(command, "-u", "nosuchuser")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == f"{command}: error: Invalid user: nosuchuser\n"


@pytest.mark.parametrize("command", ["squeue", "sacct"])
def test_known_users_still_list(two_nodes: Cluster, command: str) -> None:
    res = two_nodes.run(command, "-u", "root,0")
    assert res.returncode == 0, res.stderr
    assert res.stderr == ""


def test_schedd_log_starts_without_alembic_lines(two_nodes: Cluster) -> None:
    text = (two_nodes.home / "log" / "schedd.log").read_text()
    assert text, "schedd wrote no log"
    assert [line for line in text.splitlines() if " alembic" in line] == []


def test_first_real_account_becomes_the_default(two_nodes: Cluster, other_user: str,
                                                workdir) -> None:
    """A user who submitted before any account existed got an automatic root association;
    added to a real account, that account becomes their default, as a new user's would."""
    first = two_nodes.sbatch("-H", "--wrap", "true", user=other_user, cwd=workdir)
    show = ("sacctmgr", "-n", "-P", "show", "user", other_user, "format=User,DefaultAccount")
    assert two_nodes.run(*show).stdout == f"{other_user}|root\n"
    two_nodes.run("scancel", str(first))
    for args in (("add", "account", "physics"), ("add", "user", other_user, "Account=physics")):
        res = two_nodes.run("sacctmgr", "-i", *args)
        assert res.returncode == 0, res.stdout + res.stderr
    assert two_nodes.run(*show).stdout == f"{other_user}|physics\n"
    job_id = two_nodes.sbatch("-H", "--wrap", "true", user=other_user, cwd=workdir)
    res = two_nodes.run("squeue", "-h", "-j", str(job_id), "-o", "%a")
    assert res.stdout.strip() == "physics"
    two_nodes.run("scancel", str(job_id))
    # user root (the fresh ledger's root/root, not an automatic one) keeps root, as in Slurm
    assert two_nodes.run("sacctmgr", "-i", "add", "user", "root", "Account=physics").returncode == 0
    assert two_nodes.run("sacctmgr", "-n", "-P", "show", "user", "root",
                         "format=User,DefaultAccount").stdout == "root|root\n"


# --- launch failures are said where the user looks (item 4) ---------------------------------


def _failed(cluster: Cluster, job_id: int) -> dict[str, str]:
    """What the user sees of a job that could not start: scontrol's Reason, sacct's row,
    kiln why's lines."""
    job = cluster.wait(job_id, {"FAILED", "COMPLETED", "CANCELLED"})
    assert job["state"] == "FAILED"
    acct = cluster.run("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "JobID,State,Reason")
    why = cluster.run("kiln", "why", str(job_id))
    assert acct.returncode == 0 and why.returncode == 0, acct.stderr + why.stderr
    return {"scontrol": cluster.scontrol_show_job(job_id)["Reason"], "sacct": acct.stdout,
            "why": why.stdout}


def test_missing_output_directory(two_nodes: Cluster, other_user: str, workdir) -> None:
    job_id = two_nodes.sbatch("-o", "nodir/out.txt", "-e", "err-%j.txt", "--wrap", "true",
                              user=other_user, cwd=workdir)
    seen = _failed(two_nodes, job_id)
    why = f"could not open output file {workdir}/nodir/out.txt: No such file or directory"
    assert seen["scontrol"] == ("launch failed: " + why).replace(" ", "_")
    assert seen["sacct"] == f"{job_id}|FAILED|launch failed: {why}\n"
    assert seen["why"].splitlines()[1] == f"  Reason: launch failed: {why}"
    # the job's stderr file, which could be opened, says it too
    assert (workdir / f"err-{job_id}.txt").read_text() == f"slurmstepd: error: {why}\n"


def test_unwritable_working_directory(two_nodes: Cluster, other_user: str, workdir) -> None:
    locked = workdir / "locked"
    locked.mkdir(mode=0o755)  # root's: the user can enter it, not write in it
    job_id = two_nodes.sbatch("-D", str(locked), "--wrap", "true", user=other_user, cwd=workdir)
    seen = _failed(two_nodes, job_id)
    why = f"could not open output file {locked}/slurm-{job_id}.out: Permission denied"
    assert seen["sacct"] == f"{job_id}|FAILED|launch failed: {why}\n"
    assert seen["scontrol"] == ("launch failed: " + why).replace(" ", "_")
    assert f"  Reason: launch failed: {why}" in seen["why"].splitlines()


def test_script_whose_interpreter_cannot_run(two_nodes: Cluster, other_user: str,
                                             workdir) -> None:
    script = workdir / "job.sh"
    script.write_text("#!/nonexistent/python3\nprint('hi')\n")
    job_id = two_nodes.sbatch("-o", "job-%j.txt", str(script), user=other_user, cwd=workdir)
    seen = _failed(two_nodes, job_id)
    said = "execve(): bad interpreter(/nonexistent/python3): No such file or directory"
    assert (workdir / f"job-{job_id}.txt").read_text() == f"slurmstepd: error: {said}\n"
    assert seen["sacct"] == f"{job_id}|FAILED|launch failed: {said}\n"
    assert f"  Reason: launch failed: {said}" in seen["why"].splitlines()
    # slurmstepd exits with execve's errno (ENOENT): ExitCode 2:0, on the .batch row too
    rows = two_nodes.run("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State,ExitCode")
    assert rows.stdout.splitlines()[:2] == [f"{job_id}|FAILED|2:0",
                                            f"{job_id}.batch|FAILED|2:0"], rows.stdout


def test_sinfo_long_starts_with_the_date_line(two_nodes: Cluster) -> None:
    res = two_nodes.run("sinfo", "-l")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert re.fullmatch(r"[A-Z][a-z]{2} [A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \d{4}", lines[0])
    assert lines[1].split()[:3] == ["PARTITION", "AVAIL", "TIMELIMIT"]


def test_slurmd_start_time_is_the_agents_start_not_the_hosts_boot(two_nodes: Cluster) -> None:
    import psutil

    from cli.core.formats import fmt_time

    node = _node(two_nodes, "node1")
    agent = next(p for p in psutil.process_iter(["cmdline"])
                 if "agentd.daemon" in " ".join(p.info["cmdline"] or [])
                 and "node1" in (p.info["cmdline"] or []) and
                 str(two_nodes.home) in " ".join(p.info["cmdline"] or []))
    assert node["BootTime"] == fmt_time(psutil.boot_time())
    started = agent.create_time()
    assert node["SlurmdStartTime"] == fmt_time(started), (node["SlurmdStartTime"],
                                                           fmt_time(started))


def test_requeued_rows_of_sacct_d_have_their_end(two_nodes: Cluster, workdir) -> None:
    job_id = two_nodes.sbatch("-t", "5", "--wrap", "sleep 300", cwd=workdir)
    two_nodes.wait(job_id, {"RUNNING"})
    assert two_nodes.run("scontrol", "requeue", str(job_id)).returncode == 0
    two_nodes.wait(job_id, {"RUNNING", "PENDING"})
    res = two_nodes.run("sacct", "-D", "-X", "-n", "-P", "-j", str(job_id), "-o",
                        "State,Start,End,Elapsed")
    first = res.stdout.splitlines()[0].split("|")
    assert first[0] == "REQUEUED"
    assert first[2] != "Unknown" and first[2] >= first[1], first
    two_nodes.run("scancel", str(job_id))


def test_kiln_up_does_not_reshape_running_nodes(two_nodes: Cluster) -> None:
    res = two_nodes.run("kiln", "up", "--fake-gpus", "8xH100")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == (
        "Error: the cluster runs as 2 node(s), 4xA100, 64 CPUs each (nodes node1, node2); "
        "kiln up does not reshape running nodes to 2 node(s), 8xH100, 64 CPUs each: "
        "`kiln down` first, then `kiln up` with the new shape\n")
    assert _node(two_nodes, "node1")["Gres"] == "gpu:a100:4"
    again = two_nodes.run("kiln", "up")  # the shape it has, unchanged
    assert again.returncode == 0, again.stderr
    assert "all already running" in again.stdout and again.stderr == ""


def test_sinfo_r_says_who_set_the_reason_and_when(two_nodes: Cluster, other_user: str) -> None:
    from cli.core.formats import fmt_time

    before = int(time.time())
    res = two_nodes.run("scontrol", "update", "NodeName=node2", "State=DRAIN",
                        "Reason=fan broken")
    assert res.returncode == 0, res.stderr
    try:
        lines = two_nodes.run("sinfo", "-R").stdout.splitlines()
        assert lines[0] == "REASON               USER      TIMESTAMP           NODELIST"
        reason, user, stamp, nodes = lines[1][:20].strip(), *lines[1][20:].split()
        assert (reason, user, nodes) == ("fan broken", "root", "node2")
        assert fmt_time(before) <= stamp <= fmt_time(time.time()), stamp
        # a schedd restart keeps them (the audit trail of scontrol update)
        pid = int((two_nodes.home / "run" / "schedd.pid").read_text())
        two_nodes.expect_exit("schedd")
        os.kill(pid, signal.SIGKILL)
        assert two_nodes.run("kiln", "up").returncode == 0
        again = two_nodes.run("sinfo", "-R").stdout.splitlines()
        assert again[1] == lines[1]
    finally:
        two_nodes.run("scontrol", "update", "NodeName=node2", "State=RESUME")
