"""fence_timeout and on_isolation in kiln.toml: the defaults, and one clear line for a value
that could let a requeued job run twice at once (or fence a node at every quiet moment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kiln import config
from kiln.paths import ConfigError


def _load(tmp_path: Path, text: str) -> config.Config:
    path = tmp_path / "kiln.toml"
    path.write_text(text)
    return config.load(path)


def test_defaults_fence_before_schedd_requeues(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "[schedd]\nnode_timeout = 12\n[[partition]]\nname = \"gpu\"\n")
    assert cfg.fence_timeout == 8.0  # two thirds of node_timeout
    assert [p.on_isolation for p in cfg.partitions] == ["kill"]


def test_a_fenced_job_is_killed_before_node_timeout_whatever_kill_wait(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "[schedd]\nnode_timeout = 30\nkill_wait = 30\n")
    # SIGTERM at 20 s of silence, SIGKILL by 20 + 1 (the check) + 7 < 30 - 2 (a heartbeat)
    assert (cfg.fence_timeout, cfg.fence_kill_wait) == (20.0, 7)
    cfg = _load(tmp_path, "[schedd]\nnode_timeout = 30\nkill_wait = 3\n")
    assert cfg.fence_kill_wait == 3  # never longer than KillWait


def test_fence_timeout_and_keep_partitions_are_read(tmp_path: Path) -> None:
    cfg = _load(tmp_path, "[schedd]\nnode_timeout = 30\nfence_timeout = 10\n"
                          "[[partition]]\nname = \"gpu\"\n"
                          "[[partition]]\nname = \"long\"\non_isolation = \"keep\"\n")
    assert cfg.fence_timeout == 10.0
    assert [(p.name, p.on_isolation) for p in cfg.partitions] == [("gpu", "kill"),
                                                                   ("long", "keep")]


@pytest.mark.parametrize("text,message", [
    ("[schedd]\nnode_timeout = 12\nfence_timeout = 12\n",
     "[schedd] fence_timeout (12 s) must be shorter than node_timeout (12 s): a cut-off node "
     "stops its jobs before schedd requeues them elsewhere"),
    ("[schedd]\nnode_timeout = 12\nfence_timeout = 20\n",
     "[schedd] fence_timeout (20 s) must be shorter than node_timeout (12 s)"),
    ("[schedd]\nheartbeat_interval = 2\nfence_timeout = 1.5\n",
     "[schedd] fence_timeout (1.5 s) must be longer than heartbeat_interval (2 s)"),
    ("[[partition]]\nname = \"gpu\"\non_isolation = \"pause\"\n",
     "[[partition]] gpu: on_isolation must be \"kill\" or \"keep\", not 'pause'"),
])
def test_unsafe_fencing_is_a_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, text)
    assert message in str(info.value) and "\n" not in str(info.value)
