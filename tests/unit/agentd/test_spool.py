"""The agent's per-job private directory and the checkpoint file preemption trusts
(agentd/spool.py): 0700 and the job's user's, a symlink or another user's file is never read,
gone with the job."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agentd.spool import Spool


def test_private_dir_is_the_users_and_refuses_links(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    assert stat.S_IMODE((tmp_path / "spool" / "jobs-tmp").stat().st_mode) == 0o711
    uid, gid = os.getuid(), os.getgid()
    path = spool.make_private_dir(7, 2, uid, gid)
    assert stat.S_IMODE(path.stat().st_mode) == 0o700 and path.stat().st_uid == uid
    ckpt = spool.checkpoint_path(7, 2)
    assert ckpt.parent == path and spool.checkpoint_mtime(7, 2, uid) is None
    ckpt.touch()
    assert spool.checkpoint_mtime(7, 2, uid) == ckpt.stat().st_mtime
    assert spool.checkpoint_mtime(7, 2, uid + 1) is None  # not the job's user's file
    ckpt.unlink()
    fresh = tmp_path / "fresh"
    fresh.touch()
    ckpt.symlink_to(fresh)
    assert spool.checkpoint_mtime(7, 2, uid) is None  # a link is not followed
    ckpt.unlink()
    ckpt.touch()
    path.chmod(0o777)  # a directory others may write: nothing in it is trusted
    assert spool.checkpoint_mtime(7, 2, uid) is None
    path.chmod(0o700)
    spool.remove_private_dir(7, 2)
    assert not path.exists() and fresh.exists()


def test_a_planted_directory_link_is_replaced_and_not_followed(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "checkpoint").touch()
    spool.private_dir(3, 1).symlink_to(elsewhere)
    assert spool.checkpoint_mtime(3, 1, os.getuid()) is None
    spool.make_private_dir(3, 1, os.getuid(), os.getgid())
    assert not spool.private_dir(3, 1).is_symlink()
    assert (elsewhere / "checkpoint").exists()
    spool.forget(3, 1)
    assert not spool.private_dir(3, 1).exists()
