"""TRES strings: one module for sacctmgr's and sacct's spellings."""

from __future__ import annotations

import pytest

from kiln.slurm import tres


def test_sacctmgr_order_and_units() -> None:
    assert tres.to_string({"gres/gpu": 2, "cpu": 1, "mem": 4096}) == "cpu=1,mem=4G,gres/gpu=2"
    assert tres.to_string({"mem": 0}) == "mem=0M"


def test_sacct_order_and_units() -> None:
    text = tres.to_string({"node": 1, "mem": 16000, "gres/gpu": 1, "cpu": 1, "billing": 1},
                          by_name=True)
    assert text == "billing=1,cpu=1,gres/gpu=1,mem=16000M,node=1"
    assert tres.to_string({"mem": 0}, by_name=True) == "mem=0"
    assert tres.unit_text(16384) == "16G" and tres.unit_text(1024, "KMGTP") == "1M"


def test_parse() -> None:
    assert tres.parse("cpu=4,mem=2G,gres/gpu=2") == {"cpu": 4, "mem": 2048, "gres/gpu": 2}
    with pytest.raises(tres.TresError):
        tres.parse("cpu=x")
