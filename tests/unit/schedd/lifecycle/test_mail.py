"""--mail-type TIME_LIMIT_50/80/90: which notices a run was sent is kept in the ledger
(``jobs.mail_sent``), on SQLite and PostgreSQL, so a schedd that restarts neither sends one
again nor forgets one still due; a new run (a requeue) gets its notices anew."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln.config import Config
from kiln.model import Job, JobState
from schedd.domain.steps import placed
from schedd.ledger.store import Store
from schedd.lifecycle.mail import Outbox
from schedd.state import State

START = 1_800_000_000.0
LIMIT = 100  # seconds


@pytest.fixture
def url(ledger_url: str) -> str:
    return ledger_url


class Recorded(Outbox):
    """An outbox that keeps each subject instead of calling MailProg."""

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg)
        self.subjects: list[str] = []

    def send(self, job: Job, subject: str) -> None:
        self.subjects.append(subject)


def schedd(url: str, home: Path) -> tuple[State, Recorded, Store]:
    """A schedd's state and outbox as it starts: everything it knows read from the ledger."""
    cfg = Config(home=home)
    store = Store(url)
    state = State(cfg, store)
    state.load(START)
    return state, Recorded(cfg), store


def test_time_limit_notices_survive_a_restart_of_schedd(url: str, tmp_path: Path) -> None:
    state, outbox, store = schedd(url, tmp_path)
    job = Job(id=5, name="long", user="alice", uid=1000, gid=1000, state=JobState.RUNNING,
              start_time=START, time_limit=LIMIT, generation=1,
              mail_type="TIME_LIMIT_50,TIME_LIMIT_80,TIME_LIMIT_90")
    state.add_jobs([job], [])
    outbox.tick(state, START + 10)
    assert outbox.subjects == []
    outbox.tick(state, START + 60)
    outbox.tick(state, START + 61)
    assert outbox.subjects == ["Slurm Job_id=5 Name=long Reached 50% of time limit, "
                               "Run time 00:01:00"]
    store.close()

    state, outbox, store = schedd(url, tmp_path)  # schedd restarted
    assert state.jobs[5].mail_sent == "TIME_LIMIT_50"
    outbox.tick(state, START + 62)
    assert outbox.subjects == []  # not sent again
    outbox.tick(state, START + 95)  # both late ones at once, in the order reached
    assert outbox.subjects == [
        "Slurm Job_id=5 Name=long Reached 80% of time limit, Run time 00:01:35",
        "Slurm Job_id=5 Name=long Reached 90% of time limit, Run time 00:01:35"]
    store.close()

    state, outbox, store = schedd(url, tmp_path)
    assert state.jobs[5].mail_sent == "TIME_LIMIT_50,TIME_LIMIT_80,TIME_LIMIT_90"
    outbox.tick(state, START + 99)
    assert outbox.subjects == []
    store.close()


def test_a_new_run_gets_its_notices_again(url: str, tmp_path: Path) -> None:
    """start_runs clears the record with the new generation (lifecycle/transitions.py)."""
    from types import SimpleNamespace

    from kiln.model import NodeAllocation
    from schedd.lifecycle import transitions
    from tests.builders import HandlerContext

    state, outbox, store = schedd(url, tmp_path)
    job = Job(id=6, name="again", user="alice", uid=1000, gid=1000, state=JobState.PENDING,
              time_limit=LIMIT, mail_type="TIME_LIMIT_50", mail_sent="TIME_LIMIT_50")
    state.add_jobs([job], [])
    ctx = HandlerContext(state, state.cfg, [START], agents=SimpleNamespace(launch=lambda *a: None),
                         mail=outbox)
    transitions.start_runs(ctx, [(job, *placed([NodeAllocation("node1", 1, 0, [])]))], START)
    assert state.jobs[6].mail_sent == ""
    outbox.tick(state, START + 50)
    assert outbox.subjects == ["Slurm Job_id=6 Name=again Reached 50% of time limit, "
                               "Run time 00:00:50"]
    store.close()
