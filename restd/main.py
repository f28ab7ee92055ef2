"""``kiln restd``: serve Slurm's REST API until SIGTERM/SIGINT (docs/rest.md).

Found by the umbrella command by name (cli/kiln.py's SUBCOMMANDS), as every subcommand is; the
HTTP stack (aiohttp, the ``rest`` extra) is imported only here, so the base install stays
without it."""

from __future__ import annotations

import asyncio
import signal

import click

from kiln import config as kconfig
from kiln.config import Config, ConfigError


@click.command()
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="also serve HTTP on TCP (tokens only); default [restd] listen")
@click.option("--socket", "unix_path", default=None, metavar="PATH",
              help="the unix socket (local users, or tokens); default [restd] socket")
@click.option("--no-socket", is_flag=True, help="serve TCP only")
def restd(listen: str | None, unix_path: str | None, no_socket: bool) -> None:
    """Slurm's REST API (slurmrestd's v0.0.40 and v0.0.41 paths) in front of schedd."""
    try:
        cfg = kconfig.load()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    listen = cfg.restd.listen if listen is None else listen
    unix_path = "" if no_socket else (unix_path or cfg.restd.socket)
    if listen:
        host, _, port = listen.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise click.ClickException(f"--listen {listen}: expected HOST:PORT")
    if not listen and not unix_path:
        raise click.ClickException("nothing to listen on: give --listen or a socket")
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise click.ClickException("kiln restd needs its HTTP stack: pip install "
                                   "'kiln[rest]'") from None
    try:
        run(cfg, listen, unix_path)
    except OSError as exc:
        raise click.ClickException(f"cannot listen: {exc.strerror or exc}") from None


def run(cfg: Config, listen: str, unix_path: str) -> None:
    from restd.server import serve

    async def main() -> None:
        runner = await serve(cfg, listen, unix_path)
        where = ", ".join(filter(None, [f"unix:{unix_path}" if unix_path else "",
                                        f"http://{listen}" if listen else ""]))
        click.echo(f"kiln restd: listening on {where}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()
        click.echo("kiln restd: stopped")

    asyncio.run(main())
