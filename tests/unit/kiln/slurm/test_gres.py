"""GRES words: the GPU type users write in --gres=gpu:TYPE:N, a MIG instance's its profile."""

import pytest

from kiln.slurm.gres import gres_type


@pytest.mark.parametrize("model,word", [
    ("NVIDIA A100-SXM4-80GB", "a100"),
    ("A100-80GB", "a100"),
    ("NVIDIA H100 80GB HBM3", "h100"),
    # NVML's names of MIG devices: the profile is the type
    ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", "1g.10gb"),
    ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb"),
    ("NVIDIA H100 80GB HBM3 MIG 7g.80gb", "7g.80gb"),
    ("NVIDIA A100 MIG 2G.20GB", "2g.20gb"),
])
def test_gres_type(model: str, word: str) -> None:
    assert gres_type(model) == word
