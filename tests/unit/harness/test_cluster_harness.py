"""The integration harness fails a test on a daemon's error (tests/integration/cluster.py):
a traceback or an ``internal`` error in a daemon log, a crash on its stderr, a daemon dead
before teardown or not stopping cleanly; ``expect_log``/``expect_exit`` allow one on purpose."""

from __future__ import annotations

import subprocess

import pytest

from tests.integration.cluster import Cluster

RECORD = "2026-12-01 09:00:00,123 schedd {level} {message}\n"
TRACEBACK = ("Traceback (most recent call last):\n  File \"/x/schedd/handlers/query.py\", line 9,"
             " in query_jobs\n    raise KeyError(job)\nKeyError: 17\n")


@pytest.fixture
def cluster(tmp_path) -> Cluster:
    (tmp_path / "log").mkdir()
    (tmp_path / "run").mkdir()
    return Cluster(home=tmp_path, db_url="sqlite://")


def _log(cluster: Cluster, name: str, text: str) -> None:
    with open(cluster.home / "log" / name, "a") as f:
        f.write(text)


def test_a_clean_log_is_no_problem(cluster):
    _log(cluster, "schedd.log", RECORD.format(level="INFO", message="cycle: 1 pending")
         + RECORD.format(level="WARNING", message="node1 is late"))
    cluster.check_logs()


def test_a_handler_traceback_fails_with_the_record_and_its_last_line(cluster):
    _log(cluster, "schedd.log", RECORD.format(level="INFO", message="up")
         + RECORD.format(level="ERROR", message="request failed") + TRACEBACK
         + RECORD.format(level="INFO", message="cycle"))
    with pytest.raises(AssertionError) as info:
        cluster.check_logs()
    assert "schedd.log" in str(info.value) and "KeyError: 17" in str(info.value)
    assert "cycle" not in str(info.value)
    cluster.check_logs()  # reported once: the next look starts after it


def test_an_internal_error_and_a_crash_on_stderr_fail(cluster):
    _log(cluster, "agentd-node1.log",
         RECORD.format(level="WARNING", message="schedd said: internal error: KeyError"))
    _log(cluster, "agentd-node1.out", TRACEBACK)
    problems = cluster.log_problems()
    assert [p.split(":")[0] for p in problems] == ["agentd-node1.log", "agentd-node1.out"]


def test_expect_log_allows_what_a_test_provokes_and_nothing_else(cluster):
    cluster.expect_log(r"request failed.*KeyError: 17")
    _log(cluster, "schedd.log", RECORD.format(level="ERROR", message="request failed")
         + TRACEBACK + RECORD.format(level="ERROR", message="request failed")
         + TRACEBACK.replace("KeyError: 17", "ValueError: no"))
    problems = cluster.log_problems()
    assert len(problems) == 1 and "ValueError: no" in problems[0]


def test_a_half_written_record_waits_for_the_next_look(cluster):
    _log(cluster, "schedd.log", RECORD.format(level="ERROR", message="request failed")
         + "Traceback (most recent call last):")
    assert len(cluster.log_problems()) == 0
    _log(cluster, "schedd.log", "\n  File \"x\", line 1\nKeyError: 1\n")
    assert len(cluster.log_problems()) == 1


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_down_fails_on_a_daemon_dead_before_teardown_unless_expected(cluster, monkeypatch):
    monkeypatch.setattr(Cluster, "run", lambda self, *a, **k: None)
    (cluster.home / "run" / "agentd-node1.pid").write_text(f"{_dead_pid()}\n")
    _log(cluster, "agentd-node1.log", RECORD.format(level="INFO", message="agentd node1: 8 GPUs"))
    with pytest.raises(AssertionError, match="agentd-node1 .* had exited before teardown"):
        cluster.down()
    cluster.expect_exit("agentd-node1")
    cluster.down()


def _stand_in_daemon(cluster: Cluster, monkeypatch, clean: bool) -> subprocess.Popen:
    """A process standing for schedd; `kiln down` stops it, logging the clean-stop line when
    ``clean``, as schedd's main does when it returns 0."""
    daemon = subprocess.Popen(["sleep", "60"])

    def run(self, *args, **kw):
        if args == ("kiln", "down"):
            daemon.kill()
            daemon.wait()
            if clean:
                _log(cluster, "schedd.log",
                     RECORD.format(level="INFO", message=f"schedd stopped (pid {daemon.pid})"))

    monkeypatch.setattr(Cluster, "run", run)
    (cluster.home / "run" / "schedd.pid").write_text(f"{daemon.pid}\n")
    _log(cluster, "schedd.log", RECORD.format(level="INFO", message="schedd stopped (pid 1)"))
    return daemon


def test_down_fails_on_a_daemon_without_its_clean_stop_line(cluster, monkeypatch):
    _stand_in_daemon(cluster, monkeypatch, clean=False)
    with pytest.raises(AssertionError, match="schedd .* did not stop cleanly"):
        cluster.down()


def test_down_passes_a_daemon_that_stops_cleanly(cluster, monkeypatch):
    _stand_in_daemon(cluster, monkeypatch, clean=True)
    cluster.down()
