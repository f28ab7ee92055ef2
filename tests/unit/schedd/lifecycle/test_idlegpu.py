"""The idle-GPU rule (schedd/lifecycle/idlegpu.py) and its config ([scheduler.idle_gpu])."""

from __future__ import annotations

import pytest

from agentd.sampler import JobSamples, Sampler, TreeUsage
from kiln.config import from_dict, parse_duration
from kiln.paths import ConfigError
from schedd.lifecycle.idlegpu import all_idle, idle_seconds


def test_each_gpu_below_the_threshold_counts_the_interval() -> None:
    assert idle_seconds([0.0, 4.9, 5.0, 80.0], 5.0, 2.0) == 4.0  # 5.0 is not below 5
    assert idle_seconds([1.0], 5.0, -3.0) == 0.0
    assert idle_seconds([], 5.0, 10.0) == 0.0


def test_a_job_is_idle_only_when_every_gpu_was_read_and_is_below() -> None:
    assert all_idle([1.0, 2.0], 2, 5.0)
    assert not all_idle([1.0, 6.0], 2, 5.0)
    assert not all_idle([1.0], 2, 5.0)  # one GPU not read: not idle
    assert not all_idle([], 0, 5.0)


def test_config_is_off_by_default_and_on_with_the_table() -> None:
    assert not from_dict({}).scheduler.idle_gpu.enabled
    conf = from_dict({"scheduler": {"idle_gpu": {"after": "30m", "action": "requeue"}}})
    idle = conf.scheduler.idle_gpu
    assert (idle.enabled, idle.after, idle.below_util, idle.action) == (True, 1800.0, 5.0,
                                                                        "requeue")
    assert not from_dict({"scheduler": {"idle_gpu": {"enabled": False}}}).scheduler.idle_gpu \
        .enabled


@pytest.mark.parametrize("bad", [{"after": "soon"}, {"after": 0}, {"below_util": 0},
                                 {"below_util": 101}, {"action": "kill"}, {"nope": 1}])
def test_bad_config_is_one_clear_error(bad: dict) -> None:
    with pytest.raises(ConfigError, match=r"\[scheduler.idle_gpu\]"):
        from_dict({"scheduler": {"idle_gpu": bad}})


def test_durations() -> None:
    assert [parse_duration(v, "x") for v in ("3s", "2m", "1h", "1d", "45", 7)] == \
        [3, 120, 3600, 86400, 45, 7]


def test_agent_reports_the_latest_reading_per_gpu() -> None:
    sampler = Sampler(None, 1.0)
    sampler.jobs[(1, 1)] = samples = JobSamples(gpus=[0, 1])
    assert sampler.gpu_now(1, 1) == []
    tree = TreeUsage(1.0, 0.0, 0.0, {1})
    samples.add([(50.0, 1.0), (3.0, 1.0)], tree)
    samples.add([(2.0, 1.0), (1.0, 1.0)], tree)
    assert sampler.gpu_now(1, 1) == [2.0, 1.0]
    samples.add([(2.0, 1.0)], tree)  # one GPU unread: no reading passes for both
    assert sampler.gpu_now(1, 1) == []
