"""GRES words: the GPU type users write in ``--gres=gpu:TYPE:N``.

Its own module (not ``kiln.model``) so that the commands that show GPUs (sinfo, scontrol)
need not import the domain's dataclasses: ``dataclasses`` pulls in ``inspect`` and ``ast``,
more than a command's whole run costs otherwise.
"""

from __future__ import annotations


def gres_type(model: str) -> str:
    """'NVIDIA A100-SXM4-80GB' or 'A100-80GB' -> 'a100': the word users write in --gres=gpu:a100:2."""
    word = model.replace("NVIDIA", "").strip().split("-")[0].split(" ")[0]
    return word.lower()
