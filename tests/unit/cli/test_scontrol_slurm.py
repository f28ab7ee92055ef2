"""scontrol's keywords, abbreviations and their errors, against what real Slurm 22.05 printed
for the same lines (tests/fixtures/slurm-22.05/scontrol_show.txt, recorded with
../shared/bench's Slurm). Every case here fails before scontrol asks schedd anything, so each
runs in-process; the fixture's other cases need a cluster's state."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from cli import scontrol

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "slurm-22.05" / "scontrol_show.txt"


def recorded(path: Path) -> dict[str, tuple[str, str, int]]:
    """``command line -> (stdout, stderr, exit status)`` of a fixture file (its README says
    the format: ``root# LINE``, stdout, ``[stderr]`` and stderr, ``[exit N]``)."""
    out: dict[str, tuple[str, str, int]] = {}
    line, stdout, stderr, into = "", [], [], None
    for text in path.read_text().splitlines():
        if text.startswith("root# "):
            line, stdout, stderr, into = text[6:], [], [], None
            into = stdout
        elif text == "[stderr]":
            into = stderr
        elif text.startswith("[exit ") and text.endswith("]"):
            out[line] = ("".join(s + "\n" for s in stdout), "".join(s + "\n" for s in stderr),
                         int(text[6:-1]))
        elif into is not None:
            into.append(text)
    return out


SLURM = recorded(FIXTURE)
CLIENT_ONLY = [line for line, (_out, err, _rc) in SLURM.items()
               if line.startswith("scontrol ") and err.startswith(("invalid ", "too few "))]


def test_the_fixture_holds_the_cases() -> None:
    assert {"scontrol show p", "scontrol sh part -o", "scontrol s part", "scontrol show",
            "scontrol foo", "scontrol show stepss", "scontrol show jobsx"} <= set(CLIENT_ONLY)


@pytest.mark.parametrize("line", CLIENT_ONLY)
def test_errors_as_slurm_prints_them(line: str, capsys: pytest.CaptureFixture[str]) -> None:
    stdout, stderr, status = SLURM[line]
    assert scontrol.main(shlex.split(line)[1:]) == status
    assert capsys.readouterr() == (stdout, stderr)


@pytest.mark.parametrize(("word", "command"), [
    ("sho", "show"), ("SHOW", "show"), ("rec", "reconfigure"), ("reconfig", "reconfigure"),
    ("u", "update"), ("d", None), ("del", "delete"), ("holdu", "uhold"), ("hold", "hold"),
    ("rel", "release"), ("re", None), ("reboot", "reboot"), ("reboot_nodes", "reboot"),
    ("s", None), ("sh", None), ("ver", None), ("vers", "version"), ("tok", "token"),
])
def test_keyword_abbreviations(word: str, command: str | None) -> None:
    assert scontrol.keyword(word) == command
