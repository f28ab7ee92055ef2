"""Advance reservations through the real commands (scontrol create|show|delete reservation,
sinfo -T, sbatch --reservation, squeue reasons), as Slurm 22.05 answers in
shared/slurm-reference/h_scontrol_resv.txt."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster

CREATE_8_GPUS = ("scontrol", "create", "reservation", "ReservationName=chemres",
                 "StartTime=now+10minutes", "Duration=60", "Accounts=chem", "TRES=gres/gpu=8")


@pytest.fixture(scope="module")
def accounts(cluster: Cluster, other_user: str) -> str:
    """chem (the reservation's account) with root; phys with other_user."""
    for args in (("add", "account", "chem"), ("add", "account", "phys"),
                 ("add", "user", "root", "Account=chem"),
                 ("add", "user", other_user, "Account=phys", "DefaultAccount=phys")):
        res = cluster.run("sacctmgr", "-i", *args)
        assert res.returncode == 0, res.stderr
    return other_user


def reason_of(cluster: Cluster, job_id: int, reason: str, timeout: float = 30) -> dict:
    deadline = time.time() + timeout
    job: dict = {}
    while time.time() < deadline:
        job = cluster.job(job_id)
        if job["state"] == "PENDING" and job["reason"] == reason:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} is {job.get('state')} ({job.get('reason')}), "
                         f"not PENDING ({reason})")


def _reservation(cluster: Cluster, name: str) -> dict:
    """The reservation as schedd's wire reports it (the data behind scontrol show)."""
    from cli.core.client import Client

    with Client(endpoint=f"ipc://{cluster.home}/schedd.sock", timeout=10) as client:
        (resv,) = client.call("query_reservations", {"names": [name]})["reservations"]
    return resv


def cancel_everything(cluster: Cluster, *users: str) -> None:
    for user in users:
        cluster.run("scancel", "-u", user)
    deadline = time.time() + 30
    while time.time() < deadline and cluster.run("squeue", "-h", "-o", "%i").stdout.split():
        time.sleep(0.2)


def test_reservation_blocks_overlapping_jobs_of_others(cluster: Cluster, accounts: str,
                                                       workdir: Path) -> None:
    other = accounts
    res = cluster.run(*CREATE_8_GPUS)
    assert (res.returncode, res.stdout, res.stderr) == (0, "Reservation created: chemres\n", "")
    try:
        show = cluster.run("scontrol", "show", "reservation").stdout
        assert show.startswith("ReservationName=chemres StartTime=")
        assert "Duration=01:00:00\n   Nodes=node1 NodeCnt=1 " in show
        assert "   TRES=cpu=" in show and ",gres/gpu=8\n" in show
        assert ("   Users=(null) Groups=(null) Accounts=chem Licenses=(null) State=INACTIVE "
                "BurstBuffer=(null) Watts=n/a\n   MaxStartDelay=(null)\n\n") in show
        one = cluster.run("scontrol", "show", "reservation", "-o").stdout
        assert one.count("\n") == 1 and "MaxStartDelay=(null)" in one
        table = cluster.run("sinfo", "-T").stdout.splitlines()
        assert table[0] == ("RESV_NAME     STATE           START_TIME             END_TIME     "
                            "DURATION  NODELIST")
        assert re.match(r"^chemres    INACTIVE  \S{19}  \S{19}     01:00:00  node1$", table[1])

        overlap = cluster.sbatch("-A", "phys", "-J", "overlap", "-t", "20", "--gres=gpu:1",
                                 "-o", "/dev/null", "--wrap", "sleep 600", user=other,
                                 cwd=workdir)
        short = cluster.sbatch("-A", "phys", "-J", "short", "-t", "5", "--gres=gpu:1",
                               "-o", "/dev/null", "--wrap", "sleep 600", user=other, cwd=workdir)
        cluster.wait(short, {"RUNNING"})
        reason_of(cluster, overlap, "ReqNodeNotAvail, May be reserved for other job")
        squeue = cluster.run("squeue", "-h", "-j", str(overlap), "-o", "%i %T %r").stdout
        assert squeue == f"{overlap} PENDING ReqNodeNotAvail, May be reserved for other job\n"

        denied = cluster.run("sbatch", "-A", "phys", "--reservation=chemres", "-t", "5",
                             "--wrap", "true", user=other, cwd=workdir)
        assert (denied.returncode, denied.stderr) == (1, "sbatch: error: Batch job submission "
                                                         "failed: Access denied to requested "
                                                         "reservation\n")
        unknown = cluster.run("sbatch", "--reservation=nosuch", "--wrap", "true", cwd=workdir)
        assert unknown.returncode == 1
        assert unknown.stderr.endswith("Requested reservation is invalid\n")

        member = cluster.sbatch("-A", "chem", "-J", "member", "-t", "5", "--gres=gpu:8",
                                "--reservation=chemres", "-o", "/dev/null", "--wrap", "sleep 1",
                                cwd=workdir)
        reason_of(cluster, member, "Reservation")
        resv = cluster.run("squeue", "-h", "-j", str(member), "-o", "%v").stdout
        assert resv == "chemres\n"
    finally:
        cancel_everything(cluster, "root", other)
    gone = cluster.run("scontrol", "delete", "reservation=chemres")
    assert (gone.returncode, gone.stderr) == (0, "")
    again = cluster.run("scontrol", "delete", "ReservationName=chemres")
    assert (again.returncode, again.stderr) == (
        1, "delete_reservation ReservationName=chemres: Requested reservation is invalid\n")
    assert cluster.run("scontrol", "show", "reservation").stdout == "No reservations in the system\n"


def test_only_operators_create_reservations(cluster: Cluster, accounts: str) -> None:
    res = cluster.run("scontrol", "create", "reservation", "ReservationName=evil",
                      "StartTime=now", "Duration=10", f"Users={accounts}", "NodeCnt=1",
                      user=accounts)
    assert (res.returncode, res.stdout, res.stderr) == (
        1, "", "Error creating the reservation: Invalid user id\n")
    assert cluster.run("scontrol", "show", "reservation").stdout == "No reservations in the system\n"


def test_member_job_starts_when_the_window_opens(cluster: Cluster, accounts: str,
                                                 workdir: Path) -> None:
    res = cluster.run("scontrol", "create", "reservation", "ReservationName=soon",
                      "StartTime=now+8", "Duration=3", "Accounts=chem", "TRES=gres/gpu=4")
    assert res.returncode == 0, res.stderr
    window = _reservation(cluster, "soon")
    assert window["state"] == "INACTIVE"  # the job cannot start at once
    try:
        job_id = cluster.sbatch("-A", "chem", "--reservation=soon", "-t", "1", "--gres=gpu:4",
                                "-o", "/dev/null", "--wrap", "sleep 1", cwd=workdir)
        reason_of(cluster, job_id, "Reservation")
        job = cluster.wait(job_id, {"COMPLETED"}, timeout=60)
        assert job["start_time"] >= window["start_time"]  # not before the window opened
        assert len(job["allocation"][0]["gpus"]) == 4
    finally:
        cancel_everything(cluster, "root")
        cluster.run("scontrol", "delete", "reservation=soon")


def test_refusals_name_the_problem(cluster: Cluster, accounts: str) -> None:
    nodes = cluster.run("scontrol", "create", "reservation", "ReservationName=big",
                        "StartTime=now+1hour", "Duration=10", "Accounts=chem", "NodeCnt=2")
    assert (nodes.returncode, nodes.stderr) == (
        1, "Error creating the reservation: Requested node configuration is not available\n")
    cpu = cluster.run("scontrol", "create", "reservation", "StartTime=now", "Duration=10",
                      "Accounts=chem", "TRES=cpu=4")
    assert (cpu.returncode, cpu.stderr) == (
        1, "scontrol: error: TRES type 'cpu' not supported with reservations\n")
    account = cluster.run("scontrol", "create", "reservation", "StartTime=now", "Duration=10",
                          "Accounts=nosuch", "NodeCnt=1")
    assert account.returncode == 1 and "Invalid account" in account.stderr
    ok = cluster.run("scontrol", "create", "reservation", "StartTime=now+1hour", "Duration=10",
                     "Accounts=chem", "Nodes=node1", "Flags=MAINT")
    assert ok.returncode == 0 and ok.stdout == "Reservation created: root_1\n"
    try:
        busy = cluster.run("scontrol", "create", "reservation", "StartTime=now+1hour",
                           "Duration=5", "Accounts=chem", "TRES=gres/gpu=1")
        assert (busy.returncode, busy.stderr) == (
            1, "Error creating the reservation: Requested nodes are busy\n")
        upd = cluster.run("scontrol", "update", "ReservationName=root_1", "Duration=20")
        assert (upd.returncode, upd.stdout) == (0, "Reservation updated.\n")
        shown = cluster.run("scontrol", "show", "res", "root_1").stdout
        assert "Duration=00:20:00" in shown and "Flags=MAINT" in shown
    finally:
        cluster.run("scontrol", "delete", "reservation=root_1")


def test_users_and_accounts_added_and_taken_out(cluster: Cluster, accounts: str) -> None:
    """scontrol update reservation Users+=/Users-=/Accounts+=/Accounts-=, as Slurm's."""
    made = cluster.run("scontrol", "create", "reservation", "ReservationName=team",
                       "StartTime=now+2hours", "Duration=10", "Accounts=chem", "NodeCnt=1")
    assert made.returncode == 0, made.stderr
    try:
        def members() -> tuple[str, str]:
            shown = cluster.run("scontrol", "show", "res", "team").stdout
            return (re.search(r"Users=(\S+)", shown).group(1),
                    re.search(r"Accounts=(\S+)", shown).group(1))

        for args, expect in (
                (("Users+=root",), ("root", "chem")),
                ((f"Users+={accounts},root", "Accounts+=phys"), (f"root,{accounts}", "chem,phys")),
                (("Users-=root", "Accounts-=chem"), (accounts, "phys")),
                (("Accounts-=phys",), (accounts, "(null)"))):
            res = cluster.run("scontrol", "update", "ReservationName=team", *args)
            assert (res.returncode, res.stdout, res.stderr) == (0, "Reservation updated.\n", ""), args
            assert members() == expect, args
        absent = cluster.run("scontrol", "update", "ReservationName=team", "Users-=root")
        assert (absent.returncode, absent.stderr) == (
            1, "Error updating the reservation: User root is not in reservation team\n")
        empty = cluster.run("scontrol", "update", "ReservationName=team", f"Users-={accounts}")
        assert empty.returncode == 1 and empty.stderr.startswith("Error updating the reservation:")
        assert members() == (accounts, "(null)")  # a refused update changes nothing
        create = cluster.run("scontrol", "create", "reservation", "StartTime=now+3hours",
                             "Duration=10", "Users+=root", "NodeCnt=1")
        assert (create.returncode, create.stderr) == (
            1, "scontrol: error: Users+= and Accounts+= (or -=) change a reservation; to create "
               "one use Users= or Accounts=\nscontrol: error: Request aborted\n")
    finally:
        cluster.run("scontrol", "delete", "reservation=team")
