"""``kiln fake-gpu`` (inject a fault into a fake GPU) and ``kiln events`` (the nodes' history).

``kiln fake-gpu NODE GPU --xid 79`` goes to schedd (operators only, by the socket's peer
credentials), which relays it to NODE's agent: its fake NVML then reports the fault through
the same watch real NVML feeds (agentd/gpuhealth.py), so a test or a demo exercises the
production path. ``--util PCT`` sets what the fake sampler reports for the GPU; ``--clear``
makes it healthy again (the GPU returns to service only by ``scontrol update NodeName=NODE
State=RESUME``). A node with real GPUs refuses.
"""

from __future__ import annotations

import click

from cli.core.client import Client, ClientError
from cli.core.formats import fmt_time


@click.command("fake-gpu")
@click.argument("node")
@click.argument("gpu", type=click.IntRange(0, 4096))
@click.option("--xid", type=click.IntRange(1, 1000), help="an Xid event (79: fallen off the bus)")
@click.option("--ecc", is_flag=True, help="a volatile double-bit ECC error")
@click.option("--lost", is_flag=True, help="the GPU is lost (NVML_ERROR_GPU_IS_LOST)")
@click.option("--retired", is_flag=True, help="retired pages pending")
@click.option("--remap", is_flag=True, help="a row-remap failure")
@click.option("--util", type=click.IntRange(0, 100), help="utilisation the sampler reports")
@click.option("--clear", is_flag=True, help="a healthy GPU again (faults and --util)")
def fake_gpu(node: str, gpu: int, xid: int | None, ecc: bool, lost: bool, retired: bool,
             remap: bool, util: int | None, clear: bool) -> None:
    """Inject a fault into GPU (its index) of NODE's fake GPUs (operators only)."""
    chosen = [(name, value) for name, value in (
        ("xid", xid), ("ecc", ecc or None), ("lost", lost or None),
        ("retired", retired or None), ("remap", remap or None), ("util", util),
        ("clear", clear or None)) if value is not None]
    if len(chosen) != 1:
        raise click.UsageError("give exactly one of --xid N, --ecc, --lost, --retired, "
                               "--remap, --util PCT, --clear")
    action, value = chosen[0]
    body = {"node": node, "gpu": gpu, "action": action}
    if action in ("xid", "util"):
        body["value"] = int(value)
    try:
        with Client() as client:
            client.call("fake_gpu", body)
    except ClientError as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"{node} GPU {gpu}: {action}" + (f" {value}" if action in ("xid", "util")
                                                 else "") + " injected")


@click.command("events")
@click.argument("nodes", nargs=-1)
@click.option("-n", "--limit", type=click.IntRange(1, 10_000), default=100, show_default=True,
              help="the newest this many")
def events(nodes: tuple[str, ...], limit: int) -> None:
    """The nodes' history: GPU faults, drains, resumes, injections (all nodes if none named)."""
    try:
        with Client() as client:
            reply = client.call("node_events", {"names": list(nodes), "limit": limit})
    except ClientError as exc:
        raise click.ClickException(exc.message) from None
    rows = reply.get("events") or []
    if not rows:
        click.echo("no events")
        return
    click.echo(f"{'TIME':<19} {'NODE':<12} {'USER':<9} {'EVENT':<12} DETAIL")
    for r in rows:
        click.echo(f"{fmt_time(r['time']):<19} {r['node']:<12} {r['user']:<9} "
                   f"{r['action']:<12} {r['detail']}")
