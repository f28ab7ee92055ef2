"""agentd/jobtmp.py: a job's private /tmp and /dev/shm (Slurm's job_container/tmpfs): the
directories, their removal, and the mount namespace a job's child enters."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentd import jobtmp
from agentd.jobtmp import JobTmp, JobTmpError

needs_ns = pytest.mark.skipif(jobtmp.probe() != "", reason=f"mount namespaces: "
                              f"{jobtmp.probe() or 'available'} (the agent turns job_tmp off)")


def test_directories_are_private_to_root_and_their_tmp_is_sticky(tmp_path: Path) -> None:
    tmp = JobTmp(tmp_path / "base")
    paths = tmp.ensure(42)
    assert paths == {"tmp": str(tmp_path / "base/42/tmp"), "shm": str(tmp_path / "base/42/shm")}
    assert stat.S_IMODE(os.stat(tmp_path / "base").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "base/42").st_mode) == 0o700
    for name in ("tmp", "shm"):
        assert stat.S_IMODE(os.stat(paths[name]).st_mode) == 0o1777
    Path(paths["tmp"], "kept").write_text("x")
    assert tmp.ensure(42) == paths  # a second step: the same directories, as they were
    assert Path(paths["tmp"], "kept").exists()


def test_sweep_removes_the_jobs_not_kept_and_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("x")
    tmp = JobTmp(tmp_path / "base")
    for job in (1, 2, 3):
        tmp.ensure(job)
    os.symlink(outside, tmp_path / "base/2/tmp/link")
    assert tmp.sweep({3}) == [1, 2]
    assert tmp.job_ids() == {3}
    assert (outside / "precious").exists()


def test_a_job_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir(mode=0o700)
    os.symlink(tmp_path, tmp_path / "base/7")
    with pytest.raises(JobTmpError, match="not a directory"):
        JobTmp(tmp_path / "base").ensure(7)


def _in_child(paths: dict[str, str], script: str) -> int:
    """Run ``script`` (sh) in a forked child that entered the job's namespace."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's exit code is the result
        try:
            jobtmp.enter(paths)
            os.execv("/bin/sh", ["sh", "-c", script])
        finally:
            os._exit(99)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@needs_ns
def test_a_jobs_processes_share_its_tmp_and_shm_and_nothing_leaks_out(tmp_path: Path) -> None:
    tmp = JobTmp(tmp_path / "base")
    mine, other = tmp.ensure(1), tmp.ensure(2)
    name = f"kiln-jobtmp-test-{os.getpid()}"
    assert _in_child(mine, f"echo one > /tmp/{name} && echo two > /dev/shm/{name}") == 0
    assert not os.path.exists(f"/tmp/{name}") and not os.path.exists(f"/dev/shm/{name}")
    assert Path(mine["tmp"], name).read_text() == "one\n"
    # a second step of the same job sees them; another job's does not
    assert _in_child(mine, f"grep -q one /tmp/{name} && grep -q two /dev/shm/{name}") == 0
    assert _in_child(other, f"test ! -e /tmp/{name} && test ! -e /dev/shm/{name}") == 0
    # the host's own /tmp is not visible inside
    with open(f"/tmp/{name}-host", "w"):
        pass
    try:
        assert _in_child(mine, f"test ! -e /tmp/{name}-host") == 0
    finally:
        os.unlink(f"/tmp/{name}-host")
