"""Suite-wide set-up: the throwaway PostgreSQL's lifetime (tests/pgutil.py) and hypothesis's
profiles."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from tests import pgutil

# "ci": reproducible. The same examples every run (derandomize: a failure on CI fails again on
# a laptop), no per-example deadline (a loaded CI machine is slow by nature, and a deadline
# there fails on load, not on a bug), and a failure prints the blob that reproduces it
# (@reproduce_failure). bin/test and CI (CI=true) select it; HYPOTHESIS_PROFILE overrides.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI", "").lower() in ("1", "true") else "dev"))


def pytest_report_header(config) -> str:
    return f"hypothesis profile: {settings._current_profile}"


def pytest_terminal_summary(terminalreporter) -> None:
    if pgutil._throwaway is not None:
        terminalreporter.write_line(pgutil.describe())


def pytest_unconfigure(config) -> None:
    pgutil.stop_throwaway()  # every exit path of a run; atexit and PDEATHSIG back it up
