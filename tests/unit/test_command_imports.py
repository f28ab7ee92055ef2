"""What a command's start loads, module by module, beyond what the interpreter loaded itself
(docs/benchmarks.md, issue 13). Run with ``-S`` and the checkout on ``PYTHONPATH``, so that no
``.pth`` file (an editable install's finder imports ``re`` and ``pathlib``) loads them first
and hides an import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("module,absent", [
    # --test-only's lines (cli.outlook, with cli.formats: ~2 ms a start) only for --test-only
    ("cli.sbatch", {"cli.outlook", "cli.formats", "collections", "re", "json", "typing"}),
    # cpulist's Iterable is for checkers: collections cost sinfo ~2 ms
    ("cli.sinfo", {"collections", "re", "json", "typing"}),
])
def test_a_command_does_not_load_what_it_does_not_use(module: str, absent: set[str]) -> None:
    code = (f"import sys; before = set(sys.modules); import {module}; "
            f"print(sorted(set({sorted(absent)!r}) & (set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}).stdout
    assert out.strip() == "[]"
