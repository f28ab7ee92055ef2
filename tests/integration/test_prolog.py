"""Prolog and Epilog (Slurm's, run by the agent as root around each job; agentd/prolog.py):
what they see, and what a failing or hung one does to the node and the job.

One node; one program serves as both prolog and epilog (``SLURM_SCRIPT_CONTEXT`` says
which). It writes its environment to ``<context>.<job id>.env`` and, while a flag file is
there, fails (``prolog-exit`` / ``epilog-exit`` hold the exit status) or hangs
(``prolog-hang``), so each test switches on the failure it looks at.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import (
    Cluster,
    cleanup,
    node_state,
    pid_exists,
    until,
    world_tempdir,
)
from tests.integration.conftest import _cluster

PROGRAM = """#!/bin/sh
d={dir}
ctx=${{SLURM_SCRIPT_CONTEXT%_slurmd}}
env > "$d/$ctx.$SLURM_JOB_ID.env"
env > "$d/$ctx.$SLURM_JOB_ID.$SLURMD_NODENAME.env"
if [ "$ctx" = epilog ] && [ -e "$d/left.$SLURM_JOB_ID" ]; then
    left=/proc/$(cat "$d/left.$SLURM_JOB_ID")
    if [ ! -e "$left" ] || grep -q "^State:[[:space:]]*Z" "$left/status"; then
        touch "$d/epilog-saw-none-left.$SLURM_JOB_ID"  # gone, or dead and not yet reaped
    fi
fi
if [ -e "$d/$ctx-hang" ]; then
    sleep 300 &
    echo $! > "$d/$ctx.sleep.pid"
    wait
fi
for flag in "$d/$ctx-exit" "$d/$ctx-exit.$SLURMD_NODENAME"; do
    if [ -e "$flag" ]; then
        echo "$ctx says no"
        exit "$(cat "$flag")"
    fi
done
exit 0
"""


# the site's TaskProlog ([agent] task_prolog), and srun --task-prolog / --task-epilog's
SITE_TASK_PROLOG = """#!/bin/sh
echo "export SITE_VAR=from-site"
echo "export SHARED=site"
echo "unset UNSET_ME"
echo "print hello from task $SLURM_PROCID"
echo "this line is neither and is ignored"
"""
USER_TASK_PROLOG = """#!/bin/sh
echo "export USER_VAR=$SITE_VAR-seen"
echo "export SHARED=user"
"""
USER_TASK_EPILOG = """#!/bin/sh
echo "$USER_VAR" > {dir}/task-epilog.$SLURM_JOB_ID.$SLURM_PROCID
"""


@pytest.fixture(scope="module")
def scripts() -> Iterator[Path]:
    yield from _scripts()


@pytest.fixture(scope="module")
def pair_scripts() -> Iterator[Path]:
    """The two-node cluster's own (its job ids are the other cluster's too)."""
    yield from _scripts()


def _scripts() -> Iterator[Path]:
    path = world_tempdir("kiln-prolog-")
    os.chmod(path, 0o777)
    for name, text in (("prolog.sh", PROGRAM), ("site-task-prolog.sh", SITE_TASK_PROLOG),
                       ("user-task-prolog.sh", USER_TASK_PROLOG),
                       ("user-task-epilog.sh", USER_TASK_EPILOG)):
        (path / name).write_text(text.format(dir=path) if "{dir}" in text else text)
        (path / name).chmod(0o755)
    yield path
    cleanup(path)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, scripts: Path) -> Iterator[Cluster]:
    extra = (f'prolog = "{scripts}/prolog.sh"\nepilog = "{scripts}/prolog.sh"\n'
             f'prolog_timeout = 3\ntask_prolog = "{scripts}/site-task-prolog.sh"\n')
    yield from _cluster(request, "sqlite", nodes=1, fake_gpus="4xA100", kill_wait=3,
                        agent_extra=extra)


@pytest.fixture
def flags(scripts: Path, cluster: Cluster) -> Iterator[Path]:
    """The flag files are removed and the node resumed after each test."""
    yield scripts
    for name in ("prolog-exit", "prolog-hang", "epilog-exit"):
        (scripts / name).unlink(missing_ok=True)
    cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME")
    until(lambda: node_state(cluster, "node1") in ("idle", "mixed", "allocated"), "resumed")


def _env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def _sinfo_reason(cluster: Cluster) -> tuple[str, str, str]:
    """(REASON, USER, NODELIST) of sinfo -R's first row."""
    lines = cluster.run("sinfo", "-R").stdout.splitlines()
    assert lines[0].startswith("REASON"), lines
    assert len(lines) == 2, lines
    reason, user, _stamp, nodes = lines[1][:20].strip(), *lines[1][20:].split()
    return reason, user, nodes


def test_prolog_and_epilog_run_around_the_job_with_slurms_environment(
        cluster: Cluster, flags: Path) -> None:
    marker = flags / "ran"
    job = cluster.sbatch(
        "-J", "envcheck", "--gres=gpu:2", "-o", "/dev/null", "--wrap",
        # the prolog has run before the job's first process; a process the job leaves
        # behind is gone (killed with the job) before the epilog runs
        f'test -e {flags}/prolog.$SLURM_JOB_ID.env && touch {marker}.$SLURM_JOB_ID; '
        f'setsid sleep 300 & echo $! > {flags}/left.$SLURM_JOB_ID; exit 0')
    cluster.wait(job, {"COMPLETED"})
    assert (flags / f"ran.{job}").exists(), "the job ran before its prolog"
    assert (flags / f"epilog-saw-none-left.{job}").exists(), \
        "the epilog ran before the job's last process ended"
    prolog = _env(flags / f"prolog.{job}.env")
    epilog = _env(flags / f"epilog.{job}.env")
    for env, context in ((prolog, "prolog_slurmd"), (epilog, "epilog_slurmd")):
        assert env["SLURM_SCRIPT_CONTEXT"] == context
        assert env["SLURM_JOB_ID"] == str(job)
        assert env["SLURM_JOB_USER"] == "root"
        assert (env["SLURM_JOB_UID"], env["SLURM_JOB_GID"]) == ("0", "0")
        assert env["SLURM_JOB_PARTITION"] == "gpu"
        assert env["SLURMD_NODENAME"] == "node1"
        assert env["SLURM_JOB_NAME"] == "envcheck"
        gpus = env["SLURM_JOB_GPUS"].split(",")
        assert len(gpus) == 2 and all(g.isdigit() for g in gpus), env["SLURM_JOB_GPUS"]
        assert env["CUDA_VISIBLE_DEVICES"] == env["SLURM_JOB_GPUS"]
    assert epilog["SLURM_JOB_EXIT_CODE2"] == "0:0"
    assert node_state(cluster, "node1") == "idle"


def test_salloc_allocations_get_the_prolog(cluster: Cluster, flags: Path) -> None:
    res = cluster.run("salloc", "--gres=gpu:1", "true", cwd=flags)
    assert res.returncode == 0, res.stderr
    job = re.search(r"salloc: Granted job allocation (\d+)", res.stderr).group(1)
    assert _env(flags / f"prolog.{job}.env")["SLURM_JOB_ID"] == job
    until(lambda: (flags / f"epilog.{job}.env").exists(), "the allocation's epilog")


def _requeued_held(cluster: Cluster, job: int) -> None:
    until(lambda: (j := cluster.job(job))["state"] == "PENDING" and j["restart_count"] == 1,
          "job requeued")
    assert cluster.job(job)["reason"] == "launch failed requeued held"
    squeue = cluster.run("squeue", "-h", "-j", str(job), "-o", "%T %R")
    assert squeue.stdout.strip() == "PENDING (launch failed requeued held)", squeue.stdout
    shown = cluster.scontrol_show_job(job)
    assert shown["Reason"] == "launch_failed_requeued_held", shown
    assert shown["Restarts"] == "1"
    why = cluster.run("kiln", "why", str(job))
    assert "the prolog failed on the node" in why.stdout, why.stdout + why.stderr


def test_a_failing_prolog_drains_the_node_and_requeues_the_job_held(
        cluster: Cluster, flags: Path) -> None:
    cluster.expect_log(r"prolog .* failed: exit status 3")
    cluster.expect_log(r"node node1 drained: Prolog error")
    (flags / "prolog-exit").write_text("3\n")
    job = cluster.sbatch("-o", "/dev/null", "--wrap", f"touch {flags}/ran.$SLURM_JOB_ID")
    _requeued_held(cluster, job)
    assert not (flags / f"ran.{job}").exists(), "a process of the job ran"
    assert _sinfo_reason(cluster) == ("Prolog error", "root", "node1")
    assert node_state(cluster, "node1") == "drained"
    # the admin mends the prolog and resumes the node; the job, released, runs
    (flags / "prolog-exit").unlink()
    assert cluster.run("scontrol", "update", "NodeName=node1", "State=RESUME").returncode == 0
    res = cluster.run("scontrol", "release", str(job))
    assert res.returncode == 0, res.stderr
    cluster.wait(job, {"COMPLETED"})
    assert (flags / f"ran.{job}").exists()


def test_srun_outside_an_allocation_whose_prolog_fails_says_so_and_ends(
        cluster: Cluster, flags: Path) -> None:
    cluster.expect_log(r"prolog .* failed: exit status 3")
    cluster.expect_log(r"node node1 drained: Prolog error")
    (flags / "prolog-exit").write_text("3\n")
    res = cluster.run("srun", "touch", str(flags / "srun-ran"), cwd=flags)
    assert res.returncode != 0
    assert "has been revoked" in res.stderr, res.stderr
    assert not (flags / "srun-ran").exists()
    job = re.search(r"Job allocation (\d+) has been revoked", res.stderr).group(1)
    assert cluster.job(job)["reason"] == "launch failed requeued held"
    cluster.run("scancel", job)


def test_a_prolog_past_its_timeout_is_killed_and_counts_as_failed(
        cluster: Cluster, flags: Path) -> None:
    cluster.expect_log(r"prolog .* failed: timed out after 3 s")
    cluster.expect_log(r"node node1 drained: Prolog error")
    (flags / "prolog-hang").touch()
    job = cluster.sbatch("-o", "/dev/null", "--wrap", f"touch {flags}/ran.$SLURM_JOB_ID")
    until(lambda: (flags / "prolog.sleep.pid").exists(), "the prolog hangs")
    sleeper = int((flags / "prolog.sleep.pid").read_text())
    _requeued_held(cluster, job)
    assert not (flags / f"ran.{job}").exists(), "a process of the job ran"
    assert _sinfo_reason(cluster) == ("Prolog error", "root", "node1")
    until(lambda: not pid_exists(sleeper), "the prolog's process group killed")
    (flags / "prolog.sleep.pid").unlink()
    cluster.run("scancel", str(job))


def test_a_failing_epilog_drains_the_node(cluster: Cluster, flags: Path) -> None:
    cluster.expect_log(r"epilog .* failed: exit status 4")
    cluster.expect_log(r"node node1 drained: Epilog error")
    (flags / "epilog-exit").write_text("4\n")
    job = cluster.sbatch("-o", "/dev/null", "--wrap", "exit 0")
    cluster.wait(job, {"COMPLETED"})  # the job's own end stands
    assert _sinfo_reason(cluster) == ("Epilog error", "root", "node1")
    assert node_state(cluster, "node1") == "drained"
    waiting = cluster.sbatch("-o", "/dev/null", "--wrap", "exit 0")
    until(lambda: cluster.job(waiting)["reason"] in ("ReqNodeNotAvail", "Resources"),
          "no new job on the drained node")
    assert cluster.job(waiting)["state"] == "PENDING"
    cluster.run("scancel", str(waiting))


def test_a_job_cancelled_in_its_prolog_never_runs(cluster: Cluster, flags: Path) -> None:
    (flags / "prolog-hang").write_text("")
    job = cluster.sbatch("-o", "/dev/null", "--wrap", f"touch {flags}/ran.$SLURM_JOB_ID")
    until(lambda: (flags / "prolog.sleep.pid").exists(), "the prolog hangs")
    sleeper = int((flags / "prolog.sleep.pid").read_text())
    (flags / "prolog-hang").unlink()
    assert cluster.run("scancel", str(job)).returncode == 0
    cluster.wait(job, {"CANCELLED"})
    until(lambda: not pid_exists(sleeper), "the prolog killed")
    (flags / "prolog.sleep.pid").unlink()
    assert not (flags / f"ran.{job}").exists()
    assert node_state(cluster, "node1") == "idle"


def test_task_prologs_export_into_each_task_and_task_epilogs_run_after_it(
        cluster: Cluster, flags: Path) -> None:
    """The site's TaskProlog first, then srun --task-prolog (which sees what the first
    exported), each as the task; their export/unset/print lines; --task-epilog after."""
    res = cluster.run(
        "srun", "-n2", f"--task-prolog={flags}/user-task-prolog.sh",
        f"--task-epilog={flags}/user-task-epilog.sh", "sh", "-c",
        'echo "task $SLURM_PROCID: $SITE_VAR $USER_VAR $SHARED ${UNSET_ME-gone}"',
        cwd=flags, env={"UNSET_ME": "still-here"})
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.splitlines())
    assert lines == ["hello from task 0", "hello from task 1",
                     "task 0: from-site from-site-seen user gone",
                     "task 1: from-site from-site-seen user gone"], res.stdout
    epilogs = sorted(flags.glob("task-epilog.*"))
    assert [p.read_text() for p in epilogs] == ["from-site-seen\n"] * 2, epilogs
    job = epilogs[0].name.split(".")[1]
    assert {p.name for p in epilogs} == {f"task-epilog.{job}.0", f"task-epilog.{job}.1"}


def test_a_failing_task_prolog_stops_the_task(cluster: Cluster, flags: Path) -> None:
    failing = flags / "failing-task-prolog.sh"
    failing.write_text("#!/bin/sh\nexit 7\n")
    failing.chmod(0o755)
    res = cluster.run("srun", f"--task-prolog={failing}", "touch", str(flags / "task-ran"),
                      cwd=flags)
    assert res.returncode == 7, (res.returncode, res.stderr)
    assert "TaskProlog failed status=7" in res.stderr
    assert not (flags / "task-ran").exists()


@pytest.fixture(scope="module")
def pair(request: pytest.FixtureRequest, pair_scripts: Path) -> Iterator[Cluster]:
    """Two nodes with the same prolog and epilog."""
    extra = f'prolog = "{pair_scripts}/prolog.sh"\nepilog = "{pair_scripts}/prolog.sh"\n'
    yield from _cluster(request, "sqlite", nodes=2, fake_gpus="2xA100", kill_wait=3,
                        agent_extra=extra)


def test_a_multi_node_jobs_script_starts_after_every_nodes_prolog(
        pair: Cluster, pair_scripts: Path) -> None:
    job = pair.sbatch("-N2", "--gres=gpu:1", "-o", "/dev/null", "--wrap",
                      f"test -e {pair_scripts}/prolog.$SLURM_JOB_ID.node2.env && "
                      f"touch {pair_scripts}/ran.$SLURM_JOB_ID")
    pair.wait(job, {"COMPLETED"})
    assert (pair_scripts / f"ran.{job}").exists(), "the script started before node2's prolog"
    for node in ("node1", "node2"):
        env = _env(pair_scripts / f"prolog.{job}.{node}.env")
        assert (env["SLURMD_NODENAME"], env["SLURM_JOB_ID"]) == (node, str(job))
        assert env["SLURM_JOB_NODELIST"] == "node[1-2]"
        assert len(env["SLURM_JOB_GPUS"].split(",")) == 1


def test_a_prolog_failing_on_another_node_requeues_before_the_script_runs(
        pair: Cluster, pair_scripts: Path) -> None:
    pair.expect_log(r"prolog .* failed: exit status 5")
    pair.expect_log(r"node node2 drained: Prolog error")
    (pair_scripts / "prolog-exit.node2").write_text("5\n")
    try:
        job = pair.sbatch("-N2", "-o", "/dev/null", "--wrap",
                          f"touch {pair_scripts}/ran.$SLURM_JOB_ID")
        _requeued_held(pair, job)
        assert not (pair_scripts / f"ran.{job}").exists(), "a process of the job ran"
        # the batch host was never sent the script, so its prolog never ran either
        assert not (pair_scripts / f"prolog.{job}.node1.env").exists()
        assert _sinfo_reason(pair) == ("Prolog error", "root", "node2")
        assert node_state(pair, "node1") == "idle"
        pair.run("scancel", str(job))
    finally:
        (pair_scripts / "prolog-exit.node2").unlink()
        pair.run("scontrol", "update", "NodeName=node2", "State=RESUME")


def test_a_multi_node_jobs_epilog_runs_on_its_other_nodes_and_a_failing_one_drains(
        pair: Cluster, pair_scripts: Path) -> None:
    pair.expect_log(r"epilog .* failed: exit status 6")
    pair.expect_log(r"node node2 drained: Epilog error")
    job = pair.sbatch("-N2", "-o", "/dev/null", "--wrap", "srun -N2 true")
    pair.wait(job, {"COMPLETED"})
    until(lambda: (pair_scripts / f"epilog.{job}.node2.env").exists(), "node2's epilog")
    env = _env(pair_scripts / f"epilog.{job}.node2.env")
    assert (env["SLURMD_NODENAME"], env["SLURM_JOB_ID"], env["SLURM_JOB_EXIT_CODE2"]) == (
        "node2", str(job), "0:0")
    assert (pair_scripts / f"epilog.{job}.node1.env").exists()
    (pair_scripts / "epilog-exit.node2").write_text("6\n")
    try:
        job = pair.sbatch("-N2", "-o", "/dev/null", "--wrap", "exit 0")
        pair.wait(job, {"COMPLETED"})
        until(lambda: node_state(pair, "node2") == "drained", "node2 drained")
        assert _sinfo_reason(pair) == ("Epilog error", "root", "node2")
        assert node_state(pair, "node1") == "idle"
    finally:
        (pair_scripts / "epilog-exit.node2").unlink()
        pair.run("scontrol", "update", "NodeName=node2", "State=RESUME")
