"""``[agent]`` prolog, epilog, task_prolog, task_epilog and their timeouts, as the config
loader types and checks them (kiln/config.py)."""

from __future__ import annotations

import pytest

from kiln.config import ConfigError, from_dict


def test_paths_and_timeouts_are_read() -> None:
    cfg = from_dict({"agent": {"prolog": "/etc/kiln/prolog", "epilog": "/etc/kiln/epilog",
                               "prolog_timeout": 30, "epilog_timeout": 2.5,
                               "task_prolog": "/etc/kiln/tp", "task_epilog": ""}})
    a = cfg.agent
    assert (a.prolog, a.epilog, a.task_prolog, a.task_epilog) == (
        "/etc/kiln/prolog", "/etc/kiln/epilog", "/etc/kiln/tp", "")
    assert (a.prolog_timeout, a.epilog_timeout) == (30.0, 2.5)
    assert isinstance(a.prolog_timeout, float)


def test_defaults_are_none_and_no_limit() -> None:
    a = from_dict({}).agent
    assert (a.prolog, a.epilog, a.prolog_timeout, a.epilog_timeout) == ("", "", 0.0, 0.0)


@pytest.mark.parametrize(("key", "value", "says"), [
    ("prolog", "prolog.sh", "an absolute path"),
    ("epilog", 5, "an absolute path"),
    ("task_prolog", "./tp", "an absolute path"),
    ("task_epilog", ["/a"], "an absolute path"),
    ("prolog_timeout", -1, "seconds >= 0"),
    ("epilog_timeout", "10", "seconds >= 0"),
    ("prolog_timeout", True, "seconds >= 0"),
])
def test_bad_values_are_one_clear_error(key: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError, match=rf"\[agent\] {key}: {says}"):
        from_dict({"agent": {key: value}})
