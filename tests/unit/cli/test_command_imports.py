"""What a command's start loads, module by module, beyond what the interpreter loaded itself
(docs/benchmarks.md, issue 13). Run with ``-S`` and the checkout on ``PYTHONPATH``, so that no
``.pth`` file loads them first and hides an import (setuptools' editable-install finder, before
pyproject.toml's ``package-dir``, imported ``re`` and ``pathlib`` at every start)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize("module,absent", [
    # --test-only's lines (cli.outlook, with cli.core.formats: ~2 ms a start) only for --test-only;
    # the op schemas (kiln.wire.operations: ~2.5M instructions to build) only in the daemons;
    # __future__ (annotations are strings), struct and itertools (cli.core.client): ~0.5M each
    ("cli.sbatch", {"cli.outlook", "cli.core.formats", "collections", "re", "json", "typing",
                    "kiln.wire.operations", "__future__", "struct", "itertools"}),
    # cpulist's Iterable is for checkers: collections cost sinfo ~2 ms
    ("cli.sinfo", {"collections", "re", "json", "typing"}),
    # the bystander's squeue (issue 31): cli.arrays' Any is for checkers; typing, with the re,
    # enum, collections and contextlib it loads, was ~9 ms of CPU of every squeue's ~23
    ("cli.squeue", {"collections", "re", "json", "typing", "enum", "contextlib",
                    "kiln.wire.operations"}),
])
def test_a_command_does_not_load_what_it_does_not_use(module: str, absent: set[str]) -> None:
    assert _loaded(module) & absent == set()


def test_sbatch_loads_these_modules_of_kiln_and_no_more() -> None:
    """Each module costs every sbatch ~0.3M instructions to find and load before its code runs
    (8 parallel sbatch loops are bound by the commands' CPU: docs/benchmarks.md, issue 13): one
    more on this path should be a decision, not an accident."""
    kiln = {m for m in _loaded("cli.sbatch") if m.split(".")[0] in ("cli", "kiln", "schedd", "agentd")}
    assert kiln == {"cli", "cli.sbatch", "cli.submit", "cli.core", "cli.core.client",
                    "cli.core.options", "kiln", "kiln.paths", "kiln.wire", "kiln.wire.protocol",
                    "kiln.wire.wirejson",
                    # the submitter's umask and soft limits (PropagateResourceLimits)
                    "kiln.slurm", "kiln.slurm.rlimits"}


def _loaded(module: str) -> set[str]:
    """The modules ``import module`` adds to a bare interpreter's."""
    code = (f"import sys; before = set(sys.modules); import {module}; "
            f"print(' '.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}).stdout
    return set(out.split())
