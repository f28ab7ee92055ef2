"""``kiln``: the umbrella command (up/down/status, db, sim, bench, keygen, why, stats, top,
fake-gpu, events, restd).

Each subcommand lives in its own module and is imported only when it runs, so ``kiln status``
does not pay for SQLAlchemy and ``kiln db upgrade`` does not pay for the simulator.
"""

from __future__ import annotations

import importlib

import click

# subcommand name -> (module, attribute): the module defines a click command or group
SUBCOMMANDS = {
    "up": ("cli.up", "up"),
    "down": ("cli.up", "down"),
    "status": ("cli.up", "status"),
    "db": ("cli.db", "db"),
    "sim": ("cli.sim", "sim"),
    "bench": ("cli.bench", "bench"),
    "keygen": ("cli.keygen", "keygen"),
    "why": ("cli.why", "why"),
    "stats": ("cli.stats", "stats"),
    "top": ("cli.top", "top"),
    "fake-gpu": ("cli.gpus", "fake_gpu"),
    "events": ("cli.gpus", "events"),
    # a tier of its own (restd/, the rest extra): found by name, as the others are
    "restd": ("restd.main", "restd"),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module, attr = SUBCOMMANDS[name]
        return getattr(importlib.import_module(module), attr)


@click.group(cls=LazyGroup)
def main() -> None:
    """kiln: a batch scheduler for GPU clusters that speaks Slurm."""
