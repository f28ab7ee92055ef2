"""The walltime arithmetic on a made-up clock: --signal parsing, warning, limit, KillWait."""

import signal

import pytest

from agentd.walltime import Ending, SignalSpec, SignalSpecError, Walltime, parse_signal


@pytest.mark.parametrize("text,number", [
    ("USR1", signal.SIGUSR1), ("SIGUSR1", signal.SIGUSR1), ("usr2", signal.SIGUSR2),
    ("9", 9), ("TERM", signal.SIGTERM), (" INT ", signal.SIGINT),
])
def test_parse_signal(text, number):
    assert parse_signal(text) == number


@pytest.mark.parametrize("text", ["", "0", "999", "NOPE", "SIG", "-9", "U SR1"])
def test_parse_signal_refuses(text):
    with pytest.raises(SignalSpecError):
        parse_signal(text)


@pytest.mark.parametrize("text,spec", [
    ("USR1", SignalSpec(signal.SIGUSR1, 60, False)),
    ("B:USR1@120", SignalSpec(signal.SIGUSR1, 120, True)),
    ("USR2@90", SignalSpec(signal.SIGUSR2, 90, False)),
    ("R:10@5", SignalSpec(10, 5, False)),
    ("RB:TERM@0", SignalSpec(signal.SIGTERM, 0, True)),
])
def test_signal_spec_parse(text, spec):
    assert SignalSpec.parse(text) == spec


@pytest.mark.parametrize("text", ["X:USR1", ":USR1", "USR1@", "USR1@x", "USR1@70000", "B:@5"])
def test_signal_spec_refuses(text):
    with pytest.raises(SignalSpecError) as info:
        SignalSpec.parse(text)
    assert "\n" not in str(info.value)


def test_warning_fires_once_before_the_limit():
    clock = Walltime(start=1000.0, time_limit=300, warning=SignalSpec(signal.SIGUSR1, 120))
    assert clock.deadline == 1300.0 and clock.warn_at == 1180.0
    assert not clock.warning_due(1179.9)
    assert clock.warning_due(1180.0)
    assert not clock.warning_due(1181.0)
    assert not clock.expired(1299.9)
    assert clock.expired(1300.0)


def test_unlimited_never_expires_nor_warns():
    clock = Walltime(start=0.0, time_limit=None, warning=SignalSpec(signal.SIGUSR1, 60))
    assert clock.deadline is None and clock.warn_at is None
    assert not clock.warning_due(1e12)
    assert not clock.expired(1e12)


def test_ending_kill_due_after_kill_wait():
    ending = Ending.start("TIMEOUT", now=50.0, kill_wait=30)
    assert not ending.kill_due(79.0)
    assert ending.kill_due(80.0)
    ending.killed = True
    assert not ending.kill_due(100.0)
    assert Ending.start("CANCELLED", now=5.0, kill_wait=-1).kill_at == 5.0
