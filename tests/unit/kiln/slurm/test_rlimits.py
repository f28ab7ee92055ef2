"""Slurm's PropagateResourceLimits (kiln/slurm/rlimits.py): what a command sends, which
limits a site propagates, what the agent takes out of the environment, and a limit above the
node's hard limit left alone with Slurm's line."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from kiln.config import AgentConfig, ConfigError, propagated_limits
from kiln.slurm import rlimits


def test_a_command_sends_its_umask_and_every_soft_limit() -> None:
    env = rlimits.submitted()
    old = os.umask(0)
    os.umask(old)
    assert env["SLURM_UMASK"] == f"{old:04o}"
    assert {k for k in env if k.startswith("SLURM_RLIMIT_")} == {
        f"SLURM_RLIMIT_{n}" for n in rlimits.NAMES}
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert env["SLURM_RLIMIT_NOFILE"] == str(soft)


def test_unlimited_is_written_as_slurm_does() -> None:
    code = ("import resource; from kiln.slurm import rlimits; "
            "resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY,) * 2); "
            "print(rlimits.submitted()['SLURM_RLIMIT_CORE'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "18446744073709551615"


@pytest.mark.parametrize("names,excepted,expected", [
    ("ALL", "", set(rlimits.NAMES)),
    ("", "", set(rlimits.NAMES)),
    ("NONE", "", set()),
    ("nofile, core", "", {"NOFILE", "CORE"}),
    ("ALL", "NOFILE,STACK", set(rlimits.NAMES) - {"NOFILE", "STACK"}),
])
def test_which_limits_a_site_propagates(names: str, excepted: str, expected: set[str]) -> None:
    assert rlimits.propagated(names, excepted) == expected


def test_an_unknown_limit_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"propagate_resource_limits: unknown resource limit "
                                          r"'FILES'"):
        propagated_limits(AgentConfig(propagate_resource_limits="FILES"))
    with pytest.raises(ConfigError, match="a comma list"):
        propagated_limits(AgentConfig(propagate_resource_limits_except=3))  # type: ignore


def test_the_agent_takes_them_out_of_the_environment() -> None:
    env = {"PATH": "/bin", "SLURM_RLIMIT_NOFILE": "512", "SLURM_RLIMIT_CORE": "U0",
           "SLURM_RLIMIT_BOGUS": "1", "SLURM_RLIMIT_STACK": "lots", "SLURM_UMASK": "0022"}
    kept, limits = rlimits.take(env)
    assert kept == {"PATH": "/bin", "SLURM_UMASK": "0022"}
    assert limits == {"NOFILE": 512, "CORE": 0}


def test_a_limit_above_the_hard_one_is_left_with_slurms_line() -> None:
    code = ("import resource; from kiln.slurm import rlimits; "
            "resource.setrlimit(resource.RLIMIT_NOFILE, (100, 200)); "
            "lines = rlimits.apply({'NOFILE': 5000, 'CORE': 0}); "
            "print(repr(lines), resource.getrlimit(resource.RLIMIT_NOFILE), "
            "resource.getrlimit(resource.RLIMIT_CORE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == (
        "[\"slurmstepd: error: Can't propagate RLIMIT_NOFILE of 5000 from submit host: "
        "Operation not permitted\\n\"] (100, 200) 0")
