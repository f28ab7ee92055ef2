"""Issue 30 item 6, on a real cluster: ``scontrol reboot`` with ``[agent] reboot_program``
(Slurm's RebootProgram) and ``scontrol reconfigure``.

The reboot program here is a fake: it records that it ran (as whom, for which node) and exits,
as a site's script that reboots nothing would; the agent then registers again and the node
returns in the state asked. ``reconfigure`` rewrites kiln.toml under the running daemons: a
live key takes effect (schedd's MinJobAge, an agent's prolog), a key that needs a restart is
named in scontrol's output."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import (
    Cluster,
    cleanup,
    make_user,
    node_state,
    pid_exists,
    release_file,
    sqlite_cluster,
    until,
    world_tempdir,
)

REBOOT = """#!/bin/sh
echo "$SLURMD_NODENAME $(id -u)" >> {home}/rebooted
"""

PROLOG = """#!/bin/sh
echo "$SLURM_JOB_ID" >> {home}/prolog-ran
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    home = world_tempdir("kiln-it-")
    try:
        for name, text in (("reboot.sh", REBOOT), ("prolog.sh", PROLOG)):
            script = Path(home) / name
            script.write_text(text.format(home=home))
            script.chmod(0o755)
        with sqlite_cluster(home, nodes=1, fake_gpus="2",
                            agent_extra=f'reboot_program = "{home}/reboot.sh"\n') as c:
            yield c
    finally:
        cleanup(home)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def _reboots(cluster: Cluster) -> list[str]:
    path = Path(cluster.home) / "rebooted"
    return path.read_text().splitlines() if path.exists() else []


def _show_node(cluster: Cluster) -> str:
    res = cluster.run("scontrol", "show", "node", "node1")
    assert res.returncode == 0, res.stderr
    return res.stdout


def _blocker(cluster: Cluster, name: str) -> int:
    job = cluster.sbatch("-o", "/dev/null", "--wrap", release_file(Path(cluster.home), name))
    cluster.wait(job, {"RUNNING"})
    return job


def test_reboot_of_an_idle_node_runs_the_program_and_resumes(cluster: Cluster) -> None:
    before = len(_reboots(cluster))
    res = cluster.run("scontrol", "reboot", "node1")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "" and res.stderr == ""
    until(lambda: len(_reboots(cluster)) > before, "the reboot program ran")
    assert _reboots(cluster)[-1] == "node1 0"  # SLURMD_NODENAME, run as root
    until(lambda: node_state(cluster, "node1") == "idle", "back in service")
    assert "REBOOT" not in _show_node(cluster)
    job = cluster.sbatch("-o", "/dev/null", "--wrap", "true")
    cluster.wait(job, {"COMPLETED"})


def test_reboot_asap_waits_for_the_running_job_then_goes_down(cluster: Cluster) -> None:
    before = len(_reboots(cluster))
    job = _blocker(cluster, "release-asap")
    res = cluster.run("scontrol", "reboot", "ASAP", "nextstate=DOWN", "reason=firmware 1.2",
                      "node1")
    assert res.returncode == 0, res.stderr
    assert node_state(cluster, "node1") == "draining@"
    assert "+REBOOT_REQUESTED" in _show_node(cluster)
    assert "Reason=firmware 1.2" in _show_node(cluster)
    waiting = cluster.sbatch("-o", "/dev/null", "--wrap", "true")  # drained: not placed
    time.sleep(1.5)
    assert cluster.job(waiting)["state"] == "PENDING"
    assert len(_reboots(cluster)) == before  # not while the job runs
    (Path(cluster.home) / "release-asap").touch()
    cluster.wait(job, {"COMPLETED"})
    until(lambda: len(_reboots(cluster)) > before, "rebooted once the job ended")
    until(lambda: node_state(cluster, "node1") == "down", "down, as nextstate asked")
    reasons = cluster.run("sinfo", "-R", "-h", "-o", "%n|%E").stdout
    assert "node1|firmware 1.2" in reasons
    assert cluster.job(waiting)["state"] == "PENDING"
    assert cluster.run("scontrol", "update", "nodename=node1", "state=resume").returncode == 0
    until(lambda: node_state(cluster, "node1") == "idle", "resumed by the admin")
    cluster.wait(waiting, {"COMPLETED"})


def test_cancel_reboot_before_it_is_issued(cluster: Cluster) -> None:
    before = len(_reboots(cluster))
    job = _blocker(cluster, "release-cancel")
    assert cluster.run("scontrol", "reboot", "asap", "node1").returncode == 0
    assert node_state(cluster, "node1") == "draining@"
    assert "Reason=Reboot ASAP" in _show_node(cluster)
    res = cluster.run("scontrol", "cancel_reboot", "node1")
    assert res.returncode == 0, res.stderr
    assert node_state(cluster, "node1") in ("mixed", "allocated")  # undrained
    assert "REBOOT" not in _show_node(cluster) and "Reason=" not in _show_node(cluster)
    (Path(cluster.home) / "release-cancel").touch()
    cluster.wait(job, {"COMPLETED"})
    time.sleep(2.5)  # the reboot timer runs every second: a cancelled reboot stays undone
    assert len(_reboots(cluster)) == before
    assert node_state(cluster, "node1") == "idle"


def test_reboot_errors(cluster: Cluster) -> None:
    before = len(_reboots(cluster))
    res = cluster.run("scontrol", "reboot", "nosuchnode")
    assert res.returncode == 1
    assert res.stderr.strip() == "scontrol_reboot_nodes error: Invalid node name specified"
    res = cluster.run("scontrol", "reboot", "nextstate=sideways", "node1")
    assert res.returncode == 1 and "nextstate" in res.stderr
    user = make_user()
    for args, prefix in ((("reboot", "node1"), "scontrol_reboot_nodes error"),
                         (("cancel_reboot", "node1"), "slurm_update error"),
                         (("reconfigure",), "slurm_reconfigure error")):
        res = cluster.run("scontrol", *args, user=user)
        assert res.returncode == 1, args
        assert res.stderr.strip() == f"{prefix}: Access/permission denied", res.stderr
    time.sleep(1.5)  # a reboot they had asked for would be issued within a second
    assert len(_reboots(cluster)) == before
    assert node_state(cluster, "node1") == "idle"


def test_reconfigure_takes_live_keys_and_names_the_others(cluster: Cluster) -> None:
    conf = Path(cluster.home) / "kiln.toml"
    text = conf.read_text()
    assert "min_job_age = 300" in text
    text = text.replace("min_job_age = 300", "min_job_age = 123")
    text = text.replace("[scheduler]\n", "[scheduler]\nforecast_interval = 7\n")
    text = text.replace("[agent]\n", f'[agent]\nprolog = "{cluster.home}/prolog.sh"\n')
    conf.write_text(text + "\n[cgroup]\npids_max = 100\n")
    res = cluster.run("scontrol", "reconfigure")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        "[scheduler] forecast_interval cannot change without a restart",
        "[cgroup] pids_max cannot change without a restart",
    ]
    shown = cluster.run("scontrol", "show", "config").stdout
    assert "MinJobAge               = 123 sec" in shown
    job = cluster.sbatch("-o", "/dev/null", "--wrap", "true")  # the agent's new prolog runs
    cluster.wait(job, {"COMPLETED"})
    assert (Path(cluster.home) / "prolog-ran").read_text().split() == [str(job)]
    # a file that does not load changes nothing, and says why
    conf.write_text(text.replace("min_job_age = 123", "min_job_age = 5\nno_such_key = 1"))
    res = cluster.run("scontrol", "reconfigure")
    assert res.returncode == 1
    assert res.stderr.startswith("slurm_reconfigure error: ") and "no_such_key" in res.stderr
    conf.write_text(text)  # kiln down reads it too
    assert "MinJobAge               = 123 sec" in cluster.run("scontrol", "show",
                                                              "config").stdout


def test_a_reconfigured_reboot_program_that_fails_drains_the_node(cluster: Cluster) -> None:
    failing = Path(cluster.home) / "failing-reboot.sh"
    failing.write_text("#!/bin/sh\necho 'BMC unreachable' >&2\nexit 3\n")
    failing.chmod(0o755)
    conf = Path(cluster.home) / "kiln.toml"
    conf.write_text(conf.read_text().replace(f"{cluster.home}/reboot.sh", str(failing)))
    res = cluster.run("scontrol", "reconfigure")
    assert res.returncode == 0, res.stderr
    assert "reboot_program" not in res.stdout  # live, in schedd and in the agent
    before = len(_reboots(cluster))
    assert cluster.run("scontrol", "reboot", "node1").returncode == 0
    until(lambda: node_state(cluster, "node1") == "drained", "drained by the failed reboot")
    reasons = cluster.run("sinfo", "-R", "-h", "-o", "%n|%E").stdout
    assert "node1|reboot program failed (exit 3): BMC unreachable" in reasons
    assert len(_reboots(cluster)) == before  # the old program did not run
    assert "REBOOT" not in _show_node(cluster)
    assert cluster.run("scontrol", "update", "nodename=node1", "state=resume").returncode == 0
    until(lambda: node_state(cluster, "node1") == "idle", "resumed by the admin")


def test_a_reboot_that_ends_the_agent_returns_when_the_new_agent_registers(
        cluster: Cluster) -> None:
    """A real RebootProgram ends the machine, and the agent with it: here the program stops
    the agent (its parent); the node is REBOOT_ISSUED (sinfo boot^) until an agent starts
    again and registers, and is then DOWN as nextstate asked."""
    real = Path(cluster.home) / "real-reboot.sh"
    real.write_text(f'#!/bin/sh\necho "$SLURMD_NODENAME ended" >> {cluster.home}/rebooted\n'
                    "kill -TERM $PPID\n")
    real.chmod(0o755)
    conf = Path(cluster.home) / "kiln.toml"
    conf.write_text(conf.read_text().replace(f"{cluster.home}/failing-reboot.sh", str(real)))
    assert cluster.run("scontrol", "reconfigure").returncode == 0
    pid_file = Path(cluster.home) / "run" / "agentd-node1.pid"
    old = int(pid_file.read_text())
    res = cluster.run("scontrol", "reboot", "nextstate=down", "reason=after reboot", "node1")
    assert res.returncode == 0, res.stderr
    until(lambda: "node1 ended" in _reboots(cluster), "the reboot program ran")
    until(lambda: not pid_exists(old) or _zombie(old), "the agent ended with the 'machine'")
    assert node_state(cluster, "node1") == "rebooting^"
    assert "State=IDLE+REBOOT_ISSUED" in _show_node(cluster)
    job = cluster.sbatch("-o", "/dev/null", "--wrap", "true")  # no job on a rebooting node
    time.sleep(1.5)
    assert cluster.job(job)["state"] == "PENDING"
    res = cluster.run("kiln", "up")  # the machine is back: its agent starts
    assert res.returncode == 0 and "started agentd node1" in res.stdout, res.stdout
    until(lambda: node_state(cluster, "node1") == "down", "down after its reboot")
    assert "REBOOT" not in _show_node(cluster)
    assert "Reason=after reboot" in _show_node(cluster)
    assert cluster.run("scontrol", "update", "nodename=node1", "state=resume").returncode == 0
    cluster.wait(job, {"COMPLETED"})
