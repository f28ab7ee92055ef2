"""Issue 12: what one unprivileged user sends must not raise their priority over others', stall
schedd for everyone, or grow its state without bound. Each test plays the attack against the
handlers and State as a second user (uid 4242) and asserts behaviour or counted work, never
wall-clock time."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from schedd import identity
from schedd.config import Config
from schedd.context import RequestError
from schedd.handlers import admission, control, selection, submit
from schedd.identity import Caller
from schedd.ledger.migrate import upgrade
from schedd.ledger.store import Store
from schedd.model import Job, JobState, Node
from schedd.state import State

NOW = 2_000_000.0
ATTACKER = Caller(4242, 4242)
OPERATOR = Caller(4343, 4343)  # AdminLevel Operator
SCRIPT = "#!/bin/sh\ntrue\n"


@pytest.fixture
def ctx(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/kiln.db"
    upgrade(url)
    identity.set_admin_lookup(lambda uid: "Operator" if uid == OPERATOR.uid else "None")
    state = State(Config(home=tmp_path, db_url=url), Store(url))
    state.load_accounts(NOW)
    for name in ("node1", "node2"):
        state.nodes[name] = Node(name, 8, 1000, last_heartbeat=NOW, partitions=["gpu"])
    c = SimpleNamespace(state=state, cfg=state.cfg, now=lambda: NOW,
                        wake_scheduler=lambda: None)
    yield c
    identity.set_admin_lookup(None)
    state.store.close()


def _spec(**fields) -> dict:
    return {"script": SCRIPT, "workdir": "/tmp", **fields}


def _submit(ctx, caller: Caller = ATTACKER, **fields) -> int:
    return submit.submit(ctx, caller, {"job": _spec(**fields)})["job_id"]


# --- 5: a negative nice is for operators ------------------------------------------------------


def test_a_user_cannot_submit_with_a_negative_nice(ctx) -> None:
    with pytest.raises(RequestError) as err:
        _submit(ctx, nice=-10000)
    assert err.value.message == "Invalid --nice value"
    assert not ctx.state.jobs
    assert ctx.state.jobs[_submit(ctx, nice=10)].nice == 10  # a positive nice is anyone's
    assert ctx.state.jobs[_submit(ctx, OPERATOR, nice=-10000)].nice == -10000
