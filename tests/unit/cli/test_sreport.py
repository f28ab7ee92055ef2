"""sreport: report layouts against Slurm 22.05's (slurm-reference/f2_sreport.txt), period and
option parsing, kiln's AccountCost, and the command end to end against a canned schedd."""

from __future__ import annotations

import time
from typing import Any

import pytest

from cli import sreport
from kiln.model import GPU, Job, JobState, Node, NodeAllocation
from schedd.reports import accounting

START = time.mktime((2026, 11, 29, 0, 0, 0, 0, 0, -1))
END = START + 8 * 3600


def data(**kw: Any) -> dict[str, Any]:
    base = {
        "start": START, "end": END, "cluster": "anchor", "currency": "",
        "capacity": {"cpu": 46440.0, "gres/gpu": 8 * 28800.0, "mem": 0.0, "node": 28800.0},
        "allocated": {"cpu": 540.0, "gres/gpu": 1080.0},
        "planned": {"cpu": 480.0},
        "assoc": [
            {"account": "bio", "user": "schedbench", "tres": {"cpu": 60.0, "gres/gpu": 60.0}},
            {"account": "physics", "user": "schedbench",
             "tres": {"cpu": 480.0, "gres/gpu": 1020.0}},
        ],
        "accounts": [{"name": "root", "parent": None}, {"name": "bio", "parent": "root"},
                     {"name": "physics", "parent": "root"}],
        "cost": [],
    }
    base.update(kw)
    return base


def settings(*args: str, **values: str | None) -> sreport.Settings:
    s = sreport.settings_from(values, list(args), END + 16)
    s.start, s.end = START, END
    return s


def test_cluster_utilization_layout() -> None:
    assert sreport.utilization(data(), settings()) == [
        sreport.RULE, "Cluster Utilization 2026-11-29T00:00:00 - 2026-11-29T07:59:59",
        "Usage reported in CPU Minutes", sreport.RULE,
        "  Cluster Allocate     Down PLND Dow     Idle  Planned Reported ",
        "--------- -------- -------- -------- -------- -------- -------- ",
        "   anchor        9        0        0      757        8      774 "]


def test_cluster_utilization_hours_and_parsable_percent() -> None:
    assert sreport.utilization(data(), settings(**{"time-format": "hours"}))[-1] == \
        "   anchor        0        0        0       13        0       13 "
    lines = sreport.utilization(data(), settings(**{"time-format": "percent", "parsable2": None}))
    assert lines[2] == "Usage reported in Percentage of Total"
    assert lines[4:] == ["Cluster|Allocated|Down|PLND Down|Idle|Planned|Reported",
                         "anchor|1.16%|0.00%|0.00%|97.80%|1.03%|100.00%"]


def test_account_utilization_by_user_cpu_and_gpu() -> None:
    lines = sreport.account_utilization(data(), settings(**{"time-format": "hours"}))
    assert lines[1] == ("Cluster/Account/User Utilization 2026-11-29T00:00:00 - "
                        "2026-11-29T07:59:59 (28800 secs)")
    assert lines[4:] == [
        "  Cluster         Account     Login     Proper Name     Used   Energy ",
        "--------- --------------- --------- --------------- -------- -------- ",
        "   anchor            root                                  0        0 ",
        "   anchor             bio                                  0        0 ",
        "   anchor             bio schedben+                        0        0 ",
        "   anchor         physics                                  0        0 ",
        "   anchor         physics schedben+                        0        0 "]
    lines = sreport.account_utilization(data(), settings(tres="cpu,gres/gpu"))
    assert lines[2] == "Usage reported in TRES Minutes"
    assert lines[4:] == [
        "  Cluster         Account     Login     Proper Name      TRES Name     Used ",
        "--------- --------------- --------- --------------- -------------- -------- ",
        "   anchor            root                                      cpu        9 ",
        "   anchor            root                                 gres/gpu       18 ",
        "   anchor             bio                                      cpu        1 ",
        "   anchor             bio                                 gres/gpu        1 ",
        "   anchor             bio schedben+                            cpu        1 ",
        "   anchor             bio schedben+                       gres/gpu        1 ",
        "   anchor         physics                                      cpu        8 ",
        "   anchor         physics                                 gres/gpu       17 ",
        "   anchor         physics schedben+                            cpu        8 ",
        "   anchor         physics schedben+                       gres/gpu       17 "]


def test_empty_period_prints_only_the_headers() -> None:
    lines = sreport.account_utilization(data(assoc=[]), settings())
    assert lines[-2:] == [
        "  Cluster         Account     Login     Proper Name     Used   Energy ",
        "--------- --------------- --------- --------------- -------- -------- "]


def test_top_usage_orders_users_and_accounts_by_usage() -> None:
    lines = sreport.user_usage(data(), settings(), 10)
    assert lines[1].startswith("Top 10 Users 2026-11-29T00:00:00 - 2026-11-29T07:59:59")
    assert lines[4:] == [
        "  Cluster     Login     Proper Name         Account     Used   Energy ",
        "--------- --------- --------------- --------------- -------- -------- ",
        "   anchor schedben+                         physics        8        0 ",
        "   anchor schedben+                             bio        1        0 "]


def test_account_cost_prices_gpu_hours_per_type() -> None:
    jobs = [Job(id=i, user="u", account=acct, state=JobState.COMPLETED, start_time=START,
                end_time=START + 3600, allocation=[NodeAllocation(node, 1, 0, [0, 1])])
            for i, (acct, node) in enumerate([("bio", "n1"), ("bio", "n2"), ("phys", "n2")])]
    nodes = [Node("n1", 8, 1000, gpus=[]), Node("n2", 8, 1000, gpus=[])]
    report = accounting.usage_report(jobs, nodes, accounting.Window(START, END), END,
                                     accounting.BillingPolicy(), {"n1": "h100", "n2": "a100"})
    wire = report.to_wire({"h100": 2.5, "a100": 1.2}, 0.0)
    lines = sreport.account_cost(data(cost=wire["cost"], currency="USD"), settings())
    assert lines[2] == "Usage reported in GPU Hours, cost in USD ([accounting] gpu_price per GPU hour)"
    assert lines[4:] == [
        "  Cluster         Account   GPU Type  GPU Hours    Price       Cost ",
        "--------- --------------- ---------- ---------- -------- ---------- ",
        "   anchor            root       a100     4.0000     1.20       4.80 ",
        "   anchor            root       h100     2.0000     2.50       5.00 ",
        "   anchor             bio       a100     2.0000     1.20       2.40 ",
        "   anchor             bio       h100     2.0000     2.50       5.00 ",
        "   anchor            phys       a100     2.0000     1.20       2.40 "]


def test_default_period_is_yesterday_and_now_is_not_rounded() -> None:
    now = END + 16
    s = sreport.settings_from({}, [], now)
    assert (s.start, s.end) == (START - 86400, START)
    s = sreport.settings_from({}, ["start=2026-11-29T00:00:00", "end=now"], now)
    assert (s.start, s.end) == (START, now)


@pytest.mark.parametrize("args, err", [
    (["cluster", "foo"], "Not valid report foo\nValid cluster reports are, \"AccountCost\", "
     "\"AccountUtilizationByUser\", \"UserUtilizationByAccount\", and \"Utilization\"\n"),
    (["bogus", "x"], "invalid keyword: bogus\n"),
    (["cluster", "utilization", "when=now"], "sreport: error: Unknown condition: when=now\n"),
    (["-t", "fortnights", "cluster", "utilization"],
     "sreport: error: unknown time format fortnights\n"),
])
def test_bad_reports_and_parameters(args: list[str], err: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert sreport.main(args) == 1
    assert capsys.readouterr().err == err


def test_command_against_canned_schedd(fake_schedd,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    fake = fake_schedd(lambda op, body: {**data(), "start": body["start"], "end": body["end"]})
    assert sreport.main(["-T", "gres/gpu", "-t", "seconds", "-P", "-n", "cluster",
                         "AccountUtilizationByUser", "start=2026-11-29T00:00:00",
                         "end=2026-11-29T08:00:00"]) == 0
    assert capsys.readouterr().out == ("anchor|root|||gres/gpu|1080\nanchor|bio|||gres/gpu|60\n"
                                       "anchor|bio|schedbench||gres/gpu|60\n"
                                       "anchor|physics|||gres/gpu|1020\n"
                                       "anchor|physics|schedbench||gres/gpu|1020\n")
    assert fake.ops("acct_report")[-1] == {"start": START, "end": END}
    assert sreport.main(["-T", "foo", "user", "top"]) == 1
    assert capsys.readouterr().err == "sreport: error: Invalid TRES: foo\n"


def test_usage_report_clips_to_the_window_and_counts_waiting_time() -> None:
    n1 = Node("n1", 8, 1000, gpus=[])
    node_gpus = Node("n1", 8, 1000, gpus=[GPU(i, f"GPU-{i}", "NVIDIA H100-80GB", 81920)
                                          for i in range(4)])
    window = accounting.Window(START, START + 1000)
    now = START + 2000
    before = Job(id=1, user="a", account="x", state=JobState.COMPLETED, submit_time=START - 600,
                 start_time=START - 500, end_time=START + 100,
                 allocation=[NodeAllocation("n1", 2, 0, [0, 1])])
    running = Job(id=2, user="b", account="y", state=JobState.RUNNING, submit_time=START + 700,
                  start_time=START + 900, allocation=[NodeAllocation("n1", 1, 0, [2])])
    waiting = Job(id=3, user="b", account="y", state=JobState.PENDING, submit_time=START + 400,
                  num_tasks=4)
    held = Job(id=4, user="b", account="y", state=JobState.PENDING, submit_time=START,
               held="user")
    report = accounting.usage_report([before, running, waiting, held], [node_gpus], window, now,
                                     accounting.BillingPolicy(), {"n1": "h100"})
    assert report.assoc[("x", "a")]["cpu"] == 2 * 100
    assert report.assoc[("x", "a")]["gres/gpu"] == 2 * 100
    assert report.assoc[("x", "a")]["gres/gpu:h100"] == 2 * 100
    assert report.assoc[("y", "b")]["gres/gpu"] == 100
    assert report.allocated["cpu"] == 300 and report.capacity["cpu"] == 8 * 1000
    assert report.capacity["gres/gpu"] == 4000 and report.capacity["gres/gpu:h100"] == 4000
    assert report.planned["cpu"] == 200 + 4 * 600  # job 2 waited 200 s, job 3 600 s x 4 CPUs
    assert report.gpu_seconds == {("x", "h100"): 200.0, ("y", "h100"): 100.0}
    assert accounting.capacity_tres([n1], {})["gres/gpu"] == 0


@pytest.mark.parametrize("fmt, most, width", [
    ("minutes", 0, 8), ("minutes", 99_999_999, 8), ("minutes", 100_000_000, 9),
    ("hours", 12_345_678_901, 11), ("percent", 5e9, 10), ("minper", 10, 17)])
def test_usage_columns_widen_like_slurm(fmt: str, most: float, width: int) -> None:
    assert sreport.usage_width(settings(**{"time-format": fmt}), most) == width
