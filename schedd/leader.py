"""The leader lease of a highly available schedd pair (``[schedd] ha = true``, PostgreSQL only).

Two (or more) schedd processes share one PostgreSQL ledger. Whoever holds a session-level
advisory lock (``pg_try_advisory_lock``) on a dedicated connection is the leader: only it loads
the state, binds the client and agent sockets, schedules and answers. The others are standbys:
they poll the lock and bind nothing, so a client or agent that tries them finds nobody there and
moves on to the next endpoint.

The lock lives exactly as long as the leader's database session. When the leader dies (even by
``kill -9``) the kernel closes its socket, PostgreSQL ends the session and frees the lock, and the
next standby to poll takes it. The leader checks its lease connection on every health tick: if
the session is gone (the database restarted, the network cut it off) another schedd may already
lead, so it stops at once rather than run two controllers against one ledger.

SQLite is not supported: it has one writer on one host, so there is nothing to fail over to.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable

log = logging.getLogger("schedd.leader")

POLL_INTERVAL = 1.0  # seconds between a standby's attempts at the lock


class LeaseError(Exception):
    """The lease cannot be used: not PostgreSQL, or the database cannot be reached."""


def lock_key(cluster_name: str) -> int:
    """A stable signed 64-bit advisory lock key per cluster, so clusters sharing one PostgreSQL
    server never block each other."""
    digest = hashlib.sha256(f"kiln-leader:{cluster_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def libpq_url(db_url: str) -> str:
    """The ledger's SQLAlchemy URL as a libpq one (``postgresql+psycopg://`` -> ``postgresql://``)."""
    scheme, sep, rest = db_url.partition("://")
    if not sep or not scheme.startswith("postgresql"):
        raise LeaseError(f"high availability needs a PostgreSQL ledger, not {scheme or db_url!r}"
                         " (SQLite has one writer on one host: HA is not supported there)")
    return f"postgresql://{rest}"


class LeaderLease:
    """A leader lock held on its own autocommit connection for the life of the leader."""

    def __init__(self, db_url: str, cluster_name: str, connect_timeout: int = 5):
        self.url = libpq_url(db_url)
        self.key = lock_key(cluster_name)
        self.connect_timeout = connect_timeout
        self._conn = None

    def _connect(self):
        import psycopg

        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(self.url, autocommit=True,
                                             connect_timeout=self.connect_timeout)
            except psycopg.Error as exc:
                raise LeaseError(f"cannot reach the ledger for the leader lease: "
                                 f"{str(exc).strip().splitlines()[0] if str(exc) else exc}"
                                 ) from None
        return self._conn

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True when this process now leads."""
        import psycopg

        try:
            row = self._connect().execute("SELECT pg_try_advisory_lock(%s)",
                                          (self.key,)).fetchone()
        except psycopg.Error as exc:
            log.warning("leader lease: %s", exc)
            self._drop()
            return False
        return bool(row and row[0])

    def wait(self, stopping: Callable[[], bool], poll: float = POLL_INTERVAL) -> bool:
        """Block until this process leads (True) or ``stopping()`` says to give up (False).
        An unreachable database is waited out, not fatal: the standby must outlive it."""
        announced = False
        while not stopping():
            try:
                if self.try_acquire():
                    return True
            except LeaseError as exc:
                log.warning("%s; retrying", exc)
            if not announced:
                log.info("standby: another schedd holds the leader lease; waiting for it")
                announced = True
            time.sleep(poll)
        return False

    def held(self) -> bool:
        """Is our session (and so our lock) still alive? Asked on every health tick."""
        import psycopg

        if self._conn is None or self._conn.closed:
            return False
        try:
            row = self._conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND pid = pg_backend_pid() AND objid = (%s::bigint & 4294967295)::oid",
                (self.key,)).fetchone()
        except psycopg.Error:
            self._drop()
            return False
        return bool(row and row[0])

    def release(self) -> None:
        self._drop()

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # closing a broken connection: nothing more to do
                pass
            self._conn = None
