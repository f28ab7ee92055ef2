"""The processes kiln starts run kiln's own modules, whatever directory they start in: `kiln up`
run inside another kiln checkout started that checkout's schedd (a ledger "older than this
kiln's" revision), and srun's allocation holder, started in the job's directory, would import a
project's own ``cli/`` package. Each is started with ``python -P`` (the working directory off
``sys.path``); here both run from a directory holding decoys that leave a mark."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from cli.srun import HOLD_SCRIPT
from cli.up import daemon_command

DECOY = "open({mark!r}, 'w').write('decoy ran')\n"


def _decoys(where: Path, *modules: str) -> Path:
    """A package tree in ``where`` whose ``modules`` (dotted) write ``where/mark`` when imported."""
    mark = where / "mark"
    for module in modules:
        parts = module.split(".")
        for depth in range(1, len(parts)):
            package = where.joinpath(*parts[:depth])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").write_text(DECOY.format(mark=str(mark)))
        where.joinpath(*parts[:-1], parts[-1] + ".py").write_text(DECOY.format(mark=str(mark)))
    return mark


def test_kiln_up_starts_its_own_daemons_from_a_directory_with_decoys(tmp_path: Path) -> None:
    mark = _decoys(tmp_path, "schedd.daemon", "agentd.daemon")
    for module in ("schedd.daemon", "agentd.daemon"):
        res = subprocess.run([*daemon_command(module), "--help"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "--config" in res.stdout
        assert not mark.exists(), f"{module}: the decoy in the working directory ran"


def test_srun_holder_runs_kiln_s_own_from_a_job_directory_with_its_own_cli(tmp_path: Path
                                                                           ) -> None:
    mark = _decoys(tmp_path, "cli.srun_hold")
    script = tmp_path / "hold.sh"
    script.write_text(HOLD_SCRIPT.format(python=shlex.quote(sys.executable)))
    env = {k: v for k, v in os.environ.items() if k != "SLURM_JOB_ID"}
    res = subprocess.run(["sh", str(script)], cwd=tmp_path, capture_output=True, text=True,
                         env=env, timeout=60)
    assert not mark.exists(), "the project's own cli/ ran instead of kiln's"
    # kiln's holder, outside a job, says so and fails
    assert (res.returncode, res.stderr) == (1, "srun: error: not inside a job (no SLURM_JOB_ID)\n")
