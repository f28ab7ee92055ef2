"""The pure pieces of accounts and limits: TRES strings, schedule-time limit checks with
Slurm's reasons, inheritance down the association tree, budget periods."""

from __future__ import annotations

import time

import pytest

from kiln.config import SchedulerConfig
from kiln.model import NodeAllocation
from kiln.slurm import tres
from schedd.domain.accounts import Accounts, AccountsError, Association, User
from schedd.domain.usage import period_start
from schedd.scheduler.limits import Enforcer
from schedd.scheduler.snapshot import (
    AssocLimits,
    Limits,
    LimitTable,
    NodeView,
    PendingJob,
    QOSLimits,
    RunningJob,
)


def test_tres_parse_and_format() -> None:
    parsed = tres.parse("gres/gpu=2,cpu=8,mem=4G,gres/gpu:a100=1,billing=3,node=1")
    assert parsed == {"gres/gpu": 2, "cpu": 8, "mem": 4096, "gres/gpu:a100": 1, "billing": 3,
                      "node": 1}
    assert tres.to_string(parsed) == "cpu=8,mem=4G,node=1,billing=3,gres/gpu=2,gres/gpu:a100=1"
    assert tres.merge_limit({"gres/gpu": 2, "cpu": 1}, tres.parse("gres/gpu=-1")) == {"cpu": 1}
    for bad in ("foo=1", "cpu", "cpu=x", "cpu=2G", "gres/gpu=-2"):
        with pytest.raises(tres.TresError):
            tres.parse(bad)


def _table(**account_limits: Limits) -> LimitTable:
    table = LimitTable()
    table.assocs[("root", "")] = AssocLimits("root", limits=account_limits.get("root", Limits()))
    table.assocs[("physics", "")] = AssocLimits("physics", parent=("root", ""),
                                                limits=account_limits.get("physics", Limits()))
    table.assocs[("physics", "ann")] = AssocLimits("physics", "ann", ("physics", ""),
                                                   account_limits.get("ann", Limits()))
    table.qos["normal"] = QOSLimits("normal", account_limits.get("normal", Limits()))
    return table


NODES = [NodeView("n1", 64, 512000, gpu_type="h100")]


def _job(job_id: int, gpus: int = 1, limit: int = 600, user: str = "ann") -> PendingJob:
    return PendingJob(job_id, user=user, account="physics", gpus_per_node=gpus,
                      time_limit=limit)


def _running(job_id: int, gpus: int, end: float, user: str = "ann") -> RunningJob:
    return RunningJob(job_id, [NodeAllocation("n1", 1, 0, list(range(gpus)))], 0.0, end,
                      user, "physics")


def test_grp_tres_counts_every_job_below_the_account_and_charges_starts() -> None:
    enforcer = Enforcer(_table(physics=Limits(grp_tres={"gres/gpu": 2})), [], NODES, 0.0)
    assert enforcer.blocked(_job(1)) == ""
    enforcer.charge(_job(1))
    assert enforcer.blocked(_job(2, user="bob")) == ""  # bob has no association: account's
    enforcer.charge(_job(2, user="bob"))
    assert enforcer.blocked(_job(3)) == "AssocGrpGRES"
    cpu = Enforcer(_table(ann=Limits(grp_tres={"cpu": 1})), [_running(9, 0, 60)], NODES, 0.0)
    assert cpu.blocked(_job(3, gpus=0)) == "AssocGrpCpuLimit"


def test_max_limits_inherit_down_the_tree() -> None:
    table = _table(physics=Limits(max_wall=3600, max_jobs=1, max_tres_per_job={"gres/gpu": 1}))
    enforcer = Enforcer(table, [], NODES, 0.0)
    assert enforcer.blocked(_job(1, limit=7200)) == "AssocMaxWallDurationPerJobLimit"
    assert enforcer.blocked(_job(1, gpus=2)) == "AssocMaxGRESPerJob"
    enforcer.charge(_job(1))
    assert enforcer.blocked(_job(2)) == "AssocMaxJobsLimit"
    own = _table(physics=Limits(max_wall=3600), ann=Limits(max_wall=10800))
    assert Enforcer(own, [], NODES, 0.0).blocked(_job(1, limit=7200)) == ""


def test_grp_jobs_and_qos_limits() -> None:
    table = _table(physics=Limits(grp_jobs=1), normal=Limits(max_wall=1800))
    enforcer = Enforcer(table, [_running(9, 1, 600)], NODES, 0.0)
    assert enforcer.blocked(_job(1, limit=3600)) == "QOSMaxWallDurationPerJobLimit"
    assert enforcer.blocked(_job(1)) == "AssocGrpJobsLimit"
    per_user = _table(normal=Limits(max_jobs_per_user=1))
    assert Enforcer(per_user, [_running(9, 1, 600)], NODES, 0.0).blocked(
        _job(1)) == "QOSMaxJobsPerUserLimit"


def test_grp_tres_mins_counts_usage_held_time_and_the_request() -> None:
    table = _table(physics=Limits(grp_tres_mins={"gres/gpu": 60}))
    # a running 2-GPU job with 20 minutes left holds 40 GPU-minutes
    enforcer = Enforcer(table, [_running(9, 2, 1200.0)], NODES, 0.0)
    assert enforcer.blocked(_job(1, gpus=1, limit=1200)) == ""  # 40 + 20 = 60
    assert enforcer.blocked(_job(1, gpus=1, limit=1260)) == "AssocGrpGRESMinutes"
    table.assocs[("physics", "ann")].tres_mins_used = {"gres/gpu": 30.0}
    used = Enforcer(table, [], NODES, 0.0)
    assert used.blocked(_job(1, gpus=1, limit=1800)) == ""
    assert used.blocked(_job(1, gpus=1, limit=1860)) == "AssocGrpGRESMinutes"
    assert used.blocked(_job(1, gpus=0, limit=86400)) == ""  # CPU-only jobs still run


def test_settle_drops_starts_over_a_limit() -> None:
    enforcer = Enforcer(_table(physics=Limits(grp_tres={"gres/gpu": 1})), [], NODES, 0.0)
    jobs = [_job(1), _job(2)]
    reasons: dict[int, str] = {}
    screened = list(enforcer.screen(jobs, [], reasons))  # nothing started while screening
    assert [j.job_id for j in screened] == [1, 2]
    kept = enforcer.settle([(1, []), (2, [])], reasons)
    assert [k[0] for k in kept] == [1]
    assert reasons == {2: "AssocGrpGRES"}


def _accounts() -> Accounts:
    accounts = Accounts()
    accounts.missing_defaults()
    accounts.assocs[("physics", "")] = Association("physics", parent="root", shares=40)
    accounts.assocs[("physics", "ann")] = Association("physics", "ann")
    accounts.users["ann"] = User("ann", 1000, "physics")
    return accounts


def test_submit_resolution_and_out_of_the_box_mode() -> None:
    fresh = Accounts()
    fresh.missing_defaults()
    account, qos, change = fresh.resolve("ann", "", "")
    assert (account, qos) == ("root", "normal")
    assert change is not None and change.associations[0]["user"] == "ann"
    accounts = _accounts()
    assert accounts.resolve("ann", "", "")[:2] == ("physics", "normal")
    for user, account, qos in (("ann", "bio", ""), ("bob", "", ""), ("ann", "physics", "x")):
        with pytest.raises(AccountsError):
            accounts.resolve(user, account, qos)


def test_submit_count_limits() -> None:
    accounts = _accounts()
    accounts.assocs[("physics", "")].limits.max_submit_jobs = 2
    counts = accounts.count_jobs([("physics", "ann", "normal")] * 2)
    assert accounts.submit_violation("physics", "ann", "normal", 1, counts) == (
        "AssocMaxSubmitJobLimit")
    assert accounts.submit_violation("physics", "ann", "normal", 1,
                                     accounts.count_jobs([])) == ""


def test_budget_periods_start_at_local_midnight() -> None:
    now = time.mktime((2026, 11, 26, 15, 30, 0, 0, 0, -1))  # a Thursday
    assert period_start(now, "none") == 0.0
    assert time.localtime(period_start(now, "daily"))[:5] == (2026, 11, 26, 0, 0)
    assert time.localtime(period_start(now, "weekly"))[:5] == (2026, 11, 23, 0, 0)
    assert time.localtime(period_start(now, "monthly"))[:5] == (2026, 11, 1, 0, 0)
    assert SchedulerConfig().usage_reset == "none"


def test_spent_budget_names_the_running_jobs_holding_its_tres() -> None:
    from schedd.scheduler.limits import spent_budgets

    table = _table(physics=Limits(grp_tres_mins={"gres/gpu": 60}))
    running = [_running(1, 2, 9e9), _running(2, 0, 9e9, user="bob")]  # bob holds no GPU
    table.assocs[("physics", "ann")].tres_mins_used = {"gres/gpu": 59.9}
    assert spent_budgets(table, running, {"n1": "h100"}) == {}
    table.assocs[("physics", "ann")].tres_mins_used = {"gres/gpu": 60.0}
    assert spent_budgets(table, running, {"n1": "h100"}) == {
        1: "association physics reached its GrpTRESMins gres/gpu=60 minutes"}
