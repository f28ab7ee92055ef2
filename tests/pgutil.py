"""Throwaway PostgreSQL databases for tests, so parallel runs (engineers, CI) never collide.

``fresh_database()`` creates ``kiln_test_<random>`` through the maintenance database and drops
it afterwards; ``fresh_schema(url)`` gives one test its own schema inside such a database (much
cheaper than a database per test). The server is ``$KILN_TEST_PG`` (a libpq URL to a database
we may CREATE DATABASE from), by default the local trust-auth server on 127.0.0.1:5432.

When no server answers there, the first test that needs one starts a throwaway server
(``Throwaway``: the distribution's ``initdb`` and ``postgres`` binaries, as an unprivileged user,
in a temp dir, on a free port, trust auth) and points ``KILN_TEST_PG`` at it for the rest of the
run; it is stopped when the run ends (tests/conftest.py), and dies with the test process if
that is killed (PR_SET_PDEATHSIG). The PostgreSQL tests never skip: with neither a server nor
the binaries (bin/test installs them) they fail, saying so.
"""

from __future__ import annotations

import atexit
import ctypes
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


class PostgresUnavailable(RuntimeError):
    """The test PostgreSQL server cannot be reached or will not create a database."""


def configured_url() -> str:
    return os.environ.get("KILN_TEST_PG") or DEFAULT_ADMIN_URL


def admin_url() -> str:
    """The server the tests use: ``$KILN_TEST_PG`` (or the default) when it answers, else a
    throwaway server started now, once per run."""
    global _checked
    if _throwaway is None and not _checked:
        failure = probe(configured_url())
        if failure is not None:
            start_throwaway(reason=failure)
        _checked = True
    return configured_url()


def probe(url: str) -> str | None:
    """None if a connection to ``url`` opens, else why not (one line)."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5):
            return None
    except psycopg.OperationalError as exc:
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__


def postgres_bindir() -> Path | None:
    """The newest of the distribution's server binaries (Debian: /usr/lib/postgresql/N/bin)."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    found.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the server's child, after its uid is set (which clears the setting): SIGQUIT (an
    immediate shutdown) when the test process dies, however it dies."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGQUIT)


class Throwaway:
    """A PostgreSQL server of our own: initdb'd in a temp dir, trust auth, TCP on 127.0.0.1."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.user: str | None = None
        if os.getuid() == 0:  # initdb and postgres refuse root
            self.user = "postgres" if _user_exists("postgres") else "nobody"
        self.dir = Path(tempfile.mkdtemp(prefix="kiln-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start(self, timeout: float = 60) -> None:
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        as_user = {"user": self.user} if self.user else {}
        init = subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
             "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
            capture_output=True, text=True, cwd=self.dir, **as_user)
        if init.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {(init.stderr or init.stdout)[-500:]}")
        for _attempt in range(3):  # a free port can be taken between our look and its bind
            self.port = _free_port()
            with open(self.log, "ab") as log:
                if self.user is not None:
                    os.chown(self.log, pwd.getpwnam(self.user).pw_uid, -1)
                self.proc = subprocess.Popen(
                    [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
                     "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
                     "-c", "fsync=off", "-c", "synchronous_commit=off",
                     "-c", "full_page_writes=off", "-c", "max_connections=200"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=self.dir,
                    preexec_fn=_die_with_parent, **as_user)
            deadline = time.monotonic() + timeout  # bounds a hang; ready is the condition
            while self.proc.poll() is None and time.monotonic() < deadline:
                if probe(self.url) is None:
                    return
                time.sleep(0.1)
            self.stop(remove=False)
        raise PostgresUnavailable(f"the throwaway PostgreSQL did not start: "
                                  f"{self.log.read_text(errors='replace')[-800:]}")

    def stop(self, remove: bool = True) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # a fast shutdown: clients disconnected
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


_throwaway: Throwaway | None = None
_checked = False
_throwaway_reason = ""


def start_throwaway(reason: str = "") -> Throwaway:
    """Start the run's throwaway server and point ``KILN_TEST_PG`` at it (for daemons and
    subprocesses too)."""
    global _throwaway, _throwaway_reason
    bindir = postgres_bindir()
    if bindir is None:
        raise PostgresUnavailable(
            f"PostgreSQL is needed for the ledger tests, {configured_url()} does not answer "
            f"({reason}) and there are no server binaries to start one (initdb): install "
            "PostgreSQL's server package (bin/test does, with apt-get) or point KILN_TEST_PG "
            "at a server")
    server = Throwaway(bindir)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    _throwaway, _throwaway_reason = server, reason
    atexit.register(stop_throwaway)
    os.environ["KILN_TEST_PG"] = server.url
    return server


def stop_throwaway() -> None:
    global _throwaway
    if _throwaway is not None:
        _throwaway.stop()
        _throwaway = None


def describe() -> str:
    """One line for pytest's header or summary: which server the run used."""
    if _throwaway is not None:
        return (f"postgresql: a throwaway server at {_throwaway.url} "
                f"({_throwaway_reason or 'KILN_TEST_PG did not answer'})")
    return f"postgresql: {configured_url()}"


def _admin_connection() -> psycopg.Connection:
    url = admin_url()
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PostgresUnavailable(
            f"PostgreSQL is needed for the ledger tests and {url} is not reachable ({first}); "
            "start it or point KILN_TEST_PG at one"
        ) from None


@contextmanager
def fresh_database() -> Iterator[str]:
    """Yield the SQLAlchemy URL of a new, empty database; drop it on exit."""
    name = f"kiln_test_{secrets.token_hex(6)}"
    with _admin_connection() as admin:
        try:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.Error as exc:
            raise PostgresUnavailable(f"cannot create test database {name}: {exc}") from None
    try:
        yield (
            make_url(admin_url())
            .set(drivername="postgresql+psycopg", database=name)
            .render_as_string(hide_password=False)
        )
    finally:
        with _admin_connection() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def fresh_schema(database_url: str) -> Iterator[str]:
    """Yield a URL whose connections live in a new schema of ``database_url`` (their
    ``search_path``); drop the schema and everything in it on exit."""
    name = f"kiln_s_{secrets.token_hex(6)}"
    url = make_url(database_url)
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield url.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
