"""schedd/slurm's vocabulary: signal names, --signal values, job-state names, agent stats."""

import math
import signal

import pytest

from kiln.slurm import signals, stats
from kiln.slurm.signals import (
    SignalError,
    SignalSpec,
    normalize_signal_option,
    notice_signal,
    parse_signal,
    parse_signal_option,
    signal_name,
)
from kiln.slurm.states import JobState, StateError, parse_state, parse_states

# --- signal names ----------------------------------------------------------------------------


@pytest.mark.parametrize("text,number", [
    ("USR1", signal.SIGUSR1), ("SIGUSR1", signal.SIGUSR1), ("usr1", signal.SIGUSR1),
    ("sigusr1", signal.SIGUSR1), ("SigUsr2", signal.SIGUSR2), ("10", 10), ("9", 9),
    ("1", 1), ("64", 64), ("34", 34), ("35", 35), (" INT ", signal.SIGINT),
    ("\tTERM\n", signal.SIGTERM), ("KILL", signal.SIGKILL), ("IOT", signal.SIGABRT),
    ("RTMIN", signal.SIGRTMIN), ("sigrtmax", signal.SIGRTMAX), ("CONT", signal.SIGCONT),
    ("010", 10),  # decimal, as strtol(..., 10)
])
def test_parse_signal_accepts(text, number):
    assert parse_signal(text) == number


@pytest.mark.parametrize("text", [
    "", "   ", "0", "00", "65", "999", "99999999999999999999", "-9", "+9", "-1", "9.0",
    "NOPE", "SIG", "sig", "SIGSIGUSR1", "U SR1", "USR1@60", "B:USR1", "SIG_DFL", "_DFL",
    "SIG_IGN", "NSIG", "SIGRTMIN+1", "١٠", "²", "32", "33",
])
def test_parse_signal_refuses(text):
    with pytest.raises(SignalError) as info:
        parse_signal(text)
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


def test_signal_error_is_one_short_line_even_for_hostile_text():
    with pytest.raises(SignalError) as info:
        parse_signal("X\nY" * 1000)
    message = str(info.value)
    assert "\n" not in message and len(message) < 120


@pytest.mark.parametrize("number,name", [
    (signal.SIGUSR1, "USR1"), (signal.SIGTERM, "TERM"), (signal.SIGABRT, "ABRT"), (35, "35"),
])
def test_signal_name(number, name):
    assert signal_name(number) == name


# --- --signal values -------------------------------------------------------------------------


@pytest.mark.parametrize("text,spec", [
    ("USR1", SignalSpec(signal.SIGUSR1, 60, False)),
    ("SIGUSR1", SignalSpec(signal.SIGUSR1, 60, False)),
    ("10", SignalSpec(10, 60, False)),
    ("B:USR1@120", SignalSpec(signal.SIGUSR1, 120, True)),
    ("b:usr1@120", SignalSpec(signal.SIGUSR1, 120, True)),
    ("USR2@90", SignalSpec(signal.SIGUSR2, 90, False)),
    ("R:10@5", SignalSpec(10, 5, False)),
    ("r:TERM", SignalSpec(signal.SIGTERM, 60, False)),
    ("RB:TERM@0", SignalSpec(signal.SIGTERM, 0, True)),
    ("BR:TERM@0", SignalSpec(signal.SIGTERM, 0, True)),
    ("bR:INT@65535", SignalSpec(signal.SIGINT, 0xFFFF, True)),
    (" B:USR1@ 30 ", SignalSpec(signal.SIGUSR1, 30, True)),
    ("B: USR1", SignalSpec(signal.SIGUSR1, 60, True)),
    ("USR1@007", SignalSpec(signal.SIGUSR1, 7, False)),
])
def test_parse_signal_option(text, spec):
    assert parse_signal_option(text) == spec
    assert SignalSpec.parse(text) == spec


@pytest.mark.parametrize("text", [
    "", "@60", "X:USR1", ":USR1", "BB:USR1", "BRB:USR1", "RR:USR1", "B :USR1",
    "USR1@", "USR1@x", "USR1@-1", "USR1@+5", "USR1@1.5", "USR1@70000", "USR1@65536",
    "USR1@²", "B:@5", "B:", "NOPE@60", "0@60", "USR1@60@60", "B:R:USR1", "U SR1@60",
])
def test_parse_signal_option_refuses(text):
    with pytest.raises(SignalError) as info:
        parse_signal_option(text)
    assert "\n" not in str(info.value)


def test_signal_spec_is_frozen_with_slurm_defaults():
    spec = SignalSpec(signal.SIGUSR1)
    assert (spec.seconds, spec.batch_only) == (60, False)
    assert (signals.DEFAULT_SIGNAL_SECONDS, signals.MAX_SIGNAL_SECONDS) == (60, 0xFFFF)
    with pytest.raises(AttributeError):
        spec.seconds = 5  # type: ignore[misc]


@pytest.mark.parametrize("text,normal", [
    ("USR2@90", "USR2@90"), ("B:SIGUSR1@120", "B:USR1@120"), ("10", "USR1@60"),
    ("r:term", "R:TERM@60"), ("RB:INT@0", "BR:INT@0"), ("br:35@5", "BR:35@5"),
    ("IOT", "ABRT@60"),
])
def test_normalize_signal_option(text, normal):
    assert normalize_signal_option(text) == normal
    assert parse_signal_option(normal) == parse_signal_option(text)


@pytest.mark.parametrize("spec,notice", [
    ("", (signal.SIGTERM, False)), (None, (signal.SIGTERM, False)),
    ("B:USR1@120", (signal.SIGUSR1, True)), ("USR2@90", (signal.SIGUSR2, False)),
    ("SIGINT", (signal.SIGINT, False)), ("10", (10, False)), ("R:USR1", (signal.SIGUSR1, False)),
    ("NOSUCH", (signal.SIGTERM, False)), ("B:NOSUCH", (signal.SIGTERM, False)),
    ("B:USR1@x", (signal.SIGTERM, False)), ("X:USR1", (signal.SIGTERM, False)),
])
def test_notice_signal_falls_back_to_sigterm(spec, notice):
    assert notice_signal(spec) == notice


# --- job-state names -------------------------------------------------------------------------


@pytest.mark.parametrize("name,state", [
    ("PENDING", JobState.PENDING), ("pending", JobState.PENDING), ("PD", JobState.PENDING),
    ("pd", JobState.PENDING), (" Running ", JobState.RUNNING), ("R", JobState.RUNNING),
    ("S", JobState.SUSPENDED), ("CG", JobState.COMPLETING), ("cd", JobState.COMPLETED),
    ("F", JobState.FAILED), ("CA", JobState.CANCELLED), ("CANCELLED", JobState.CANCELLED),
    ("canceled", JobState.CANCELLED), ("TO", JobState.TIMEOUT), ("NF", JobState.NODE_FAIL),
    ("node_fail", JobState.NODE_FAIL), ("OOM", JobState.OUT_OF_MEMORY),
    ("out_of_memory", JobState.OUT_OF_MEMORY), ("PR", JobState.PREEMPTED),
    ("RQ", JobState.REQUEUED), ("requeued", JobState.REQUEUED), (JobState.FAILED, JobState.FAILED),
])
def test_parse_state_accepts(name, state):
    assert parse_state(name) is state


def test_every_state_and_compact_spelling_parses():
    for state in JobState:
        assert parse_state(str(state)) is state
        assert parse_state(state.compact.lower()) is state


@pytest.mark.parametrize("name", ["", " ", "XX", "ZZ", "ALL", "PEND", "P", "NODEFAIL", "OOMKILLED",
                                  "PD,R", 7, None])
def test_parse_state_refuses(name):
    with pytest.raises(StateError, match=r"^Invalid job state specified: ") as info:
        parse_state(name)
    assert isinstance(info.value, ValueError)


def test_parse_state_error_names_the_word_as_written_on_one_line():
    with pytest.raises(StateError) as info:
        parse_state("XX")
    assert str(info.value) == "Invalid job state specified: XX"
    with pytest.raises(StateError) as info:
        parse_state("X\nX" * 100)
    assert "\n" not in str(info.value) and len(str(info.value)) < 120


def test_parse_states():
    assert parse_states(["PD", "r"]) == {JobState.PENDING, JobState.RUNNING}
    assert parse_states(["pending", "PD", "cd"]) == {JobState.PENDING, JobState.COMPLETED}
    assert parse_states([]) == set()
    assert parse_states(["all"]) is None
    assert parse_states(["R", " All "]) is None
    assert parse_states(["all", "XX"]) is None  # 'all' wins, as before
    with pytest.raises(StateError, match="Invalid job state specified: XX"):
        parse_states(["R", "XX"])


# --- agent stats -----------------------------------------------------------------------------


def test_stat_keys_are_the_contract():
    assert stats.STAT_KEYS == ("samples", "gpu_util_mean", "gpu_util_max", "gpu_mem_max_mb",
                               "rss_max_kb", "rss_mean_kb", "cpu_user_s", "cpu_system_s",
                               "gpu_simulated")  # 1 when the GPU figures came from fake GPUs


def test_clean_stats_keeps_known_finite_non_negative_numbers():
    sent = {stats.STAT_SAMPLES: 3, stats.STAT_GPU_UTIL_MEAN: 62.5, stats.STAT_GPU_UTIL_MAX: 100,
            stats.STAT_GPU_MEM_MAX: 20480, stats.STAT_RSS_MAX: 0, stats.STAT_RSS_MEAN: 1.5,
            stats.STAT_CPU_USER: 0.0, stats.STAT_CPU_SYSTEM: 1e9}
    assert stats.clean_stats(sent) == sent
    assert type(stats.clean_stats(sent)[stats.STAT_SAMPLES]) is int


@pytest.mark.parametrize("value", [
    -1, -0.5, math.inf, -math.inf, math.nan, True, False, "5", b"5", None, [1], {"a": 1},
    10 ** 400, complex(1, 0),
])
def test_clean_stats_drops_bad_values(value):
    assert stats.clean_stats({stats.STAT_RSS_MAX: value, stats.STAT_SAMPLES: 2}) == {
        stats.STAT_SAMPLES: 2}


def test_clean_stats_drops_unknown_keys_and_non_dicts():
    assert stats.clean_stats({"evil": 1, "samples ": 2, "SAMPLES": 3, 4: 5}) == {}
    for value in (None, [], "samples", 5, [("samples", 1)]):
        assert stats.clean_stats(value) == {}
    assert stats.clean_stats({stats.STAT_CPU_USER: -0.0}) == {stats.STAT_CPU_USER: 0.0}
    assert math.copysign(1, stats.clean_stats({stats.STAT_CPU_USER: -0.0})[stats.STAT_CPU_USER]) == 1


def test_clean_stats_is_bounded_by_the_known_keys():
    flood = {f"k{i}": i for i in range(10_000)} | {k: 1 for k in stats.STAT_KEYS}
    cleaned = stats.clean_stats(flood)
    assert set(cleaned) == set(stats.STAT_KEYS) and len(cleaned) == len(stats.STAT_KEYS)


def test_vocabulary_is_standard_library_only():
    import ast
    import pathlib
    import sys

    folder = pathlib.Path(signals.__file__).parent
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or name.startswith("kiln.slurm"), (
                    path.name, name)
