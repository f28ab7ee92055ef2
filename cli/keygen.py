"""``kiln keygen``: CURVE key pairs for schedd and agents, and schedd's list of accepted agents."""

from __future__ import annotations

from pathlib import Path

import click

from kiln import config as kconfig
from kiln import keys, tokens


@click.command()
@click.option("--node", "nodes", multiple=True, help="make (and authorise) a key pair for this node")
@click.option("--dir", "keys_dir", type=click.Path(file_okay=False, path_type=Path),
              help="keys folder (default: keys_dir of the cluster's kiln.toml)")
@click.option("--force", is_flag=True, help="replace existing pairs")
def keygen(nodes: tuple[str, ...], keys_dir: Path | None, force: bool) -> None:
    """Create schedd's key pair and the auth/jwt key (once) and one pair per --node, authorising each node."""
    if keys_dir is None:
        keys_dir = kconfig.load().keys_path
    public, _ = keys.generate(keys_dir, "schedd", overwrite=force)
    click.echo(f"schedd public key: {public}")
    click.echo(f"auth/jwt key: {tokens.generate_key(keys_dir, overwrite=force)}")
    for node in nodes:
        if not node or "/" in node or node.startswith("."):
            raise click.BadParameter(f"not a node name: {node!r}", param_hint="--node")
        node_public, node_secret = keys.generate(keys_dir / "agents", node, overwrite=force)
        keys.authorize(keys_dir, node_public)
        click.echo(f"node {node}: secret key {node_secret} (copy it to the node), authorised")
