"""--mail-user is checked as recipients before it is stored (kiln/slurm/mailuser.py), with one
line naming the option, at submit (admission.check_text); and MailProg is called with ``--``
before the recipient, so a value read as an option could not reach mail(1) even from an older row.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kiln.config import Config
from kiln.model import Job, JobState
from kiln.slurm import mailuser
from schedd.lifecycle.admission import check_text
from schedd.lifecycle.context import RequestError
from schedd.lifecycle.mail import Outbox


@pytest.mark.parametrize("value", ["", "alice", "a.b+c@example.org", "a@b,c@mail.d-e.org",
                                   "first_last%x@host"])
def test_recipients_are_taken(value: str) -> None:
    assert mailuser.problem(value) is None
    check_text({"mail_user": value})


@pytest.mark.parametrize("value", ["-x@y", "-fexec", "x@-y", "x@y.", "garbage address",
                                   "a@@b", "<a@b>", "a;rm -rf", "@b", "a,,b", "a@b c",
                                   "$(id)", "a\"b@c", "x" * 300,
                                   ",".join(["u"] * (mailuser.MAX_RECIPIENTS + 1))])
def test_garbage_is_refused_in_one_line(value: str) -> None:
    assert mailuser.problem(value)
    with pytest.raises(RequestError) as err:
        check_text({"mail_user": value})
    text = str(err.value)
    assert text.startswith("Invalid --mail-user value: ") and "\n" not in text


def test_mail_prog_gets_double_dash_before_the_recipient(tmp_path: Path) -> None:
    record = tmp_path / "argv"
    prog = tmp_path / "mail"
    prog.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > {record}\n')
    prog.chmod(0o755)
    cfg = Config(home=tmp_path)
    cfg.mail.mail_prog = str(prog)
    job = Job(id=7, name="train", user="alice", mail_user="-x@y", mail_type="END",
              state=JobState.COMPLETED)
    Outbox(cfg).send(job, "Slurm Job_id=7 Name=train Ended")
    deadline = time.monotonic() + 10
    while not record.exists() or not record.read_text().endswith("\n"):
        assert time.monotonic() < deadline, "MailProg did not run"
        time.sleep(0.02)
    assert record.read_text().splitlines() == ["-s", "Slurm Job_id=7 Name=train Ended", "--",
                                               "-x@y"]
