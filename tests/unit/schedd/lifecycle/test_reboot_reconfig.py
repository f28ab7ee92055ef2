"""scontrol reboot's and reconfigure's pure parts: the argument parsing (cli/scontrol.py),
the state words (cli/nodeview.py), which kiln.toml keys a running daemon takes
(kiln/reconfig.py), and a reboot's course on a node (schedd/lifecycle/reboot.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.core import CommandError
from cli.nodeview import node_state
from cli.scontrol import parse_reboot
from kiln import reconfig
from kiln.config import ConfigError, from_dict
from kiln.model import Node, NodeState
from schedd.lifecycle import reboot


def test_reboot_arguments() -> None:
    assert parse_reboot(["node[1-2]"]) == {"asap": False, "next_state": "", "reason": "",
                                           "names": ["node1", "node2"]}
    assert parse_reboot(["ASAP", "nextstate=DOWN", "reason=new firmware", "ALL"]) == {
        "asap": True, "next_state": "down", "reason": "new firmware", "names": ["ALL"]}
    assert parse_reboot(["reason=x", "asap", "NextState=resume", "n1"])["next_state"] == \
        "resume"


@pytest.mark.parametrize(("args", "says"), [
    ([], "too few arguments for keyword:reboot"),
    (["asap"], "too few arguments for keyword:reboot"),
    (["nextstate=sideways", "n1"], "Invalid nextstate: sideways"),
    (["n1", "asap"], "invalid keyword: n1"),
    (["n[1-"], "invalid hostlist: n[1-"),
])
def test_bad_reboot_arguments(args: list[str], says: str) -> None:
    with pytest.raises(CommandError) as err:
        parse_reboot(args)
    assert says in err.value.lines[0]


@pytest.mark.parametrize(("display", "short", "long"), [
    ("IDLE+REBOOT_REQUESTED", "idle@", "idle@"),
    ("DRAINING+REBOOT_REQUESTED", "drng@", "draining@"),
    ("DRAINED+REBOOT_REQUESTED", "drain@", "drained@"),
    ("DOWN+REBOOT_ISSUED", "boot^", "rebooting^"),
    ("MIXED", "mix", "mixed"),
])
def test_reboot_state_words(display: str, short: str, long: str) -> None:
    node = {"state_display": display}
    assert (node_state(node), node_state(node, long=True)) == (short, long)


def test_reboot_program_is_an_absolute_path() -> None:
    assert from_dict({"agent": {"reboot_program": "/sbin/reboot"}}).agent.reboot_program == \
        "/sbin/reboot"
    assert from_dict({}).agent.reboot_program == ""
    with pytest.raises(ConfigError, match=r"\[agent\] reboot_program: an absolute path"):
        from_dict({"agent": {"reboot_program": "reboot"}})


def test_reconfigure_takes_live_keys_and_names_the_rest(tmp_path: Path) -> None:
    old = from_dict({"home": str(tmp_path)})
    scheduler = old.scheduler  # what the planner holds: changed in place
    new = from_dict({"home": str(tmp_path),
                     "schedd": {"min_job_age": 5, "agent_endpoint": "tcp://10.0.0.1:1"},
                     "scheduler": {"weight_age": 7, "forecast_interval": 3},
                     "agent": {"prolog": "/p", "fake_gpus": "2"},
                     "cgroup": {"pids_max": 9}, "mail": {"smtp_host": "mx"}})
    applied, restart = reconfig.apply_schedd(old, new)
    assert old.min_job_age == 5 and scheduler.weight_age == 7 and old.scheduler is scheduler
    assert old.agent.prolog == "/p" and old.mail.smtp_host == "mx"
    assert "min_job_age" in applied and "[agent] prolog" in applied
    assert restart == [
        "agent_endpoint cannot change without a restart",
        "[scheduler] forecast_interval cannot change without a restart",
        "[cgroup] pids_max cannot change without a restart",
        "[agent] schedd cannot change without a restart",  # it follows agent_endpoint
        "[agent] fake_gpus cannot change without a restart",
    ]
    # what needs a restart is left as it was
    assert old.agent_endpoint == "tcp://127.0.0.1:6817" and old.scheduler.forecast_interval == 10
    assert old.cgroup.pids_max == 4096 and old.agent.fake_gpus == ""
    assert reconfig.apply_schedd(old, from_dict({"home": str(tmp_path)}))[0]  # back again


def test_an_unchanged_file_changes_nothing(tmp_path: Path) -> None:
    cfg = from_dict({"home": str(tmp_path)})
    assert reconfig.apply_schedd(cfg, from_dict({"home": str(tmp_path)})) == ([], [])


def _issued(node: Node, **kw: object) -> Node:
    node.reboot = reboot.ISSUED
    for key, value in kw.items():
        setattr(node, key, value)
    return node


def test_a_returned_node_is_in_its_next_state() -> None:
    base = Node("n1", 4, 1000, state=NodeState.DRAIN, reason="Reboot ASAP : reboot issued")
    back = reboot.returned(_issued(base, reboot_asap=True, reboot_next="resume"), 10.0)
    assert (back.state, back.reason, back.reboot) == (NodeState.IDLE, "", "")
    down = reboot.returned(_issued(Node("n1", 4, 1000), reboot_next="down",
                                   reboot_reason="fw"), 10.0)
    assert (down.state, down.reason, down.reboot) == (NodeState.DOWN, "fw", "")
    plain = reboot.returned(_issued(Node("n1", 4, 1000), reboot_next="down"), 10.0)
    assert plain.reason == reboot.COMPLETE_REASON
    asked = Node("n1", 4, 1000, reboot=reboot.REQUESTED)  # not issued: a registration is not
    assert reboot.returned(asked, 10.0) is asked  # its return
