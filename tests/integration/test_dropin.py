"""Drop-in round 2 (issue 16): each test runs the commands as a user or a submit library does
and compares with what Slurm 22.05 prints (/work/shared/slurm-reference, the man pages)."""

from __future__ import annotations

import pytest

from tests.integration.cluster import Cluster


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
