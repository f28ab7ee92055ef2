"""The daemon's side of preemption (schedd/lifecycle/preemption.py): the notice signal, PreemptMode,
what the snapshot learns (checkpoint ages, grace ends), victim marks per run, sacct -D runs."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest

from cli.core.options import OptionError
from cli.submit import parse_restart_cost
from kiln.config import Config
from kiln.model import Job, JobState, NodeAllocation, PreemptMark
from kiln.slurm.signals import notice_signal
from schedd.domain.accounts import QOS, Accounts, Association
from schedd.handlers.sacct import earlier_runs
from schedd.ledger.records import JobEvent
from schedd.lifecycle import preemption, transitions, victims
from schedd.lifecycle.transitions import RunEnd, Verdict
from schedd.scheduler.snapshot import RunningJob, Snapshot

NOW = 5_000_000.0


def test_notice_signal_is_the_jobs_signal_else_sigterm() -> None:
    assert notice_signal("") == (signal.SIGTERM, False)
    assert notice_signal("B:USR1@120") == (signal.SIGUSR1, True)
    assert notice_signal("USR2@90") == (signal.SIGUSR2, False)
    assert notice_signal("SIGINT") == (signal.SIGINT, False)
    assert notice_signal("10") == (10, False)
    assert notice_signal("NOSUCH") == (signal.SIGTERM, False)


def test_preempt_mode_of_the_victims_qos() -> None:
    cfg = Config(home="/tmp")
    assert victims.mode_of(cfg, "cluster") == "requeue"
    assert victims.mode_of(cfg, "CANCEL") == "cancel"
    assert victims.mode_of(cfg, "suspend") == "requeue"
    cfg.scheduler.preempt_mode = "cancel"
    assert victims.mode_of(cfg, "") == "cancel"


def state_with(jobs: list[Job]) -> SimpleNamespace:
    accounts = Accounts()
    accounts.qos = {"low": QOS("low", grace_time=30), "high": QOS("high", preempt=["low"]),
                    "off": QOS("off", preempt_mode="off")}
    accounts.assocs[("a", "")] = Association("a", parent="root", guarantee={"gres/gpu": 4})
    return SimpleNamespace(accounts=accounts, jobs={j.id: j for j in jobs})


def test_annotate_carries_checkpoints_costs_and_grace_ends() -> None:
    cfg = Config(home="/tmp", kill_wait=10)
    victim = Job(1, qos="low", restart_cost=120)
    other = Job(2, qos="low")
    tracker = victims.Tracker(victims={1: PreemptMark(0, 9, NOW, NOW + 30, "requeue")})
    snap = Snapshot(NOW, [], [RunningJob(1, [NodeAllocation("n", 1, 0, [0])], NOW - 100,
                                         NOW + 3600, qos="low"),
                              RunningJob(2, [], NOW - 50, NOW + 3600, qos="low")])
    victims.annotate(snap, cfg, state_with([victim, other]), {2: NOW - 20}, tracker, NOW)
    policy = snap.preemption
    assert policy.preempts == {"high": frozenset({"low"})} and policy.exempt == {"off"}
    assert policy.guarantees == {"a": {"gres/gpu": 4}} and policy.in_flight == {9}
    first, second = snap.running
    assert (first.preempting, first.restart_cost, first.checkpoint_age) == (True, 120, None)
    assert first.end_time == NOW + 30 + 10  # planned to end with its grace and KillWait
    assert (second.preempting, second.restart_cost, second.checkpoint_age) == (False, None, 20)
    assert second.end_time == NOW + 3600


def test_no_policy_no_preemption() -> None:
    state = state_with([])
    state.accounts.qos = {"normal": QOS("normal")}
    state.accounts.assocs.clear()
    snap = Snapshot(NOW, [])
    victims.annotate(snap, Config(home="/tmp"), state, {}, victims.Tracker(), NOW)
    assert snap.preemption is None


def _judged(job: Job, generation: int, state: str) -> str:
    verdict = Verdict(JobState(state))
    for fn in (transitions.judge_cancelled, preemption.judge_preempted):
        fn(job, RunEnd(generation, state, NOW), verdict)
    return verdict.state.value


def test_marks_hold_for_their_run_only_and_preemptors_settle() -> None:
    job = Job(1, generation=3, preempt=PreemptMark(3, 9, NOW, NOW, "requeue"))
    assert _judged(job, 3, "FAILED") == "PREEMPTED"
    assert _judged(job, 4, "FAILED") == "FAILED"  # a later run's report: not a victim
    job.cancelled_by = 0  # scancel during the grace wins
    assert _judged(job, 3, "CANCELLED") == "CANCELLED"
    tracker = victims.Tracker(victims={1: PreemptMark(3, 9, NOW, NOW, "requeue")})
    preemption.forget(tracker, 1, NOW)
    assert tracker.in_flight(NOW + 1) == {9}
    assert tracker.in_flight(NOW + victims.SETTLE + 1) == frozenset()


def test_sacct_duplicates_rebuild_each_earlier_run() -> None:
    job = Job(7, name="low1", state=JobState.PENDING, restart_count=2)
    events = [JobEvent(7, 1.0, "PENDING"), JobEvent(7, 2.0, "RUNNING", detail="n1"),
              JobEvent(7, 5.0, "PREEMPTED"), JobEvent(7, 5.5, "REQUEUED"),
              JobEvent(7, 6.0, "RUNNING", detail="n2"), JobEvent(7, 9.0, "NODE_FAIL"),
              JobEvent(7, 9.0, "REQUEUED")]
    runs = earlier_runs(job, events)
    assert [(r.state, r.start_time, r.end_time, r.node_list) for r in runs] == [
        (JobState.PREEMPTED, 2.0, 5.0, "n1"), (JobState.NODE_FAIL, 6.0, 9.0, "n2")]
    assert job.state == JobState.PENDING  # the job itself is untouched


def test_sacct_duplicates_show_a_run_ended_by_scontrol_requeue() -> None:
    job = Job(8, state=JobState.RUNNING, restart_count=1)
    events = [JobEvent(8, 2.0, "RUNNING", detail="n1"), JobEvent(8, 4.0, "REQUEUED"),
              JobEvent(8, 4.0, "REQUEUED", detail="scontrol requeue"),
              JobEvent(8, 6.0, "RUNNING", detail="n1")]
    assert [(r.state, r.start_time, r.end_time) for r in earlier_runs(job, events)] == [
        (JobState.REQUEUED, 2.0, 4.0)]


def test_restart_cost_option() -> None:
    assert parse_restart_cost("30") == 1800
    assert parse_restart_cost("1:30:00") == 5400
    assert parse_restart_cost("0") == 0
    with pytest.raises(OptionError, match="^Invalid --restart-cost specification$"):
        parse_restart_cost("soon")
