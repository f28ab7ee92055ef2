"""``kiln db``: bring the ledger's schema up to date (``upgrade``) or say where it stands
(``current``). schedd refuses to start on a database that is not at this kiln's revision, and
its message names ``kiln db upgrade``.

The database is the cluster's ``db_url`` from kiln.toml (default ``$KILN_HOME/kiln.db``) unless
``--url`` names another. Errors are one line on stderr and exit status 1.
"""

from __future__ import annotations

import click

URL_HELP = "database URL (default: db_url from kiln.toml, else sqlite:///$KILN_HOME/kiln.db)"


def _resolve_url(url: str | None) -> str:
    if url:
        return url
    from kiln.config import ConfigError, load

    try:
        return load().db_url
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def db() -> None:
    """Manage kiln's ledger database (schema migrations)."""


@db.command()
@click.option("--url", help=URL_HELP)
def upgrade(url: str | None) -> None:
    """Create or migrate the ledger to this kiln's schema."""
    from cli.progress import progress
    from schedd.ledger.engine import show_url
    from schedd.ledger.migrate import current_revision, head_revision
    from schedd.ledger.migrate import upgrade as upgrade_ledger
    from schedd.ledger.records import SchemaError

    url = _resolve_url(url)
    try:
        before = current_revision(url)
        with progress(f"upgrading {show_url(url)}", None):
            upgrade_ledger(url)
        head = head_revision()
    except SchemaError as exc:
        raise click.ClickException(str(exc)) from None
    if before == head:
        click.echo(f"database {show_url(url)} is already at revision {head}")
    else:
        click.echo(f"database {show_url(url)} upgraded to revision {head}")


@db.command()
@click.option("--url", help=URL_HELP)
def current(url: str | None) -> None:
    """Print the ledger's schema revision; exit 1 unless schedd could start on it."""
    from schedd.ledger.engine import show_url
    from schedd.ledger.migrate import current_revision, head_revision
    from schedd.ledger.records import SchemaError
    from schedd.ledger.store import Store

    url = _resolve_url(url)
    try:
        rev = current_revision(url)
        if rev is None:
            raise SchemaError(f"database {show_url(url)} is not migrated: run `kiln db upgrade`")
        if rev != head_revision():
            store = Store(url)
            try:
                store.check_schema()  # raises the newer-than-kiln or older-than-kiln sentence
            finally:
                store.close()
    except SchemaError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"database {show_url(url)} is at revision {rev}, this kiln's")
