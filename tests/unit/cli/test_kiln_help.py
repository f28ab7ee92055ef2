"""``kiln --help`` and every subcommand's ``--help`` read as plain text: no reST markup."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from cli.kiln import SUBCOMMANDS, main

KILN = Path(sys.executable).parent / "kiln"
MARKUP = re.compile(r"``|`[^`\s][^`]*`|:\w+:`|\*\*")


def _commands() -> list[list[str]]:
    out = [[]]
    for name in sorted(SUBCOMMANDS):
        cmd = main.get_command(click.Context(main), name)
        out.append([name])
        if isinstance(cmd, click.Group):
            out += [[name, sub] for sub in cmd.list_commands(click.Context(cmd))]
    return out


@pytest.mark.parametrize("args", _commands(), ids=lambda a: " ".join(a) or "kiln")
def test_help_has_no_rst_markup(args: list[str]) -> None:
    res = subprocess.run([str(KILN), *args, "--help"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: kiln")
    assert not MARKUP.search(res.stdout), res.stdout
