"""schedd's state directory is its own: what it writes is readable by root (its user) only.

The ledger holds every job's environment (``--export`` secrets) and script, the logs name users,
paths and refused keys, ``keys/`` holds CURVE secrets. At start schedd (and ``kiln up``):

- runs with umask 077, so whatever it creates is 0600/0700 (the client socket, which every user
  must reach, is chmod-ed 0777 on purpose: identity comes from the kernel, not from the mode);
- makes its home, when the SQLite ledger lives there (``kiln up``), traversable but not
  listable by others (0711: users reach ``kiln.toml``, the socket and their scripts in the
  agents' spool by path), and ``log/``, ``run/``, ``keys/`` (and ``log_dir``, ``keys_dir``)
  0700 with their files 0600 — only what exists and schedd's user owns is touched;
- refuses to start when ``kiln.toml`` gives a database password (``db_url``) and other users may
  read it: the password goes in ``db_url_file`` (0600) or libpq's ``~/.pgpass`` instead.

The SQLite file itself and its ``-wal``/``-shm`` are made 0600 where the engine is opened
(``ledger/engine.secure_sqlite``), so ``kiln db`` and migrations get the same.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kiln.config import Config, ConfigError

PRIVATE_UMASK = 0o077
HOME_MODE = 0o711  # others may traverse (kiln.toml, the socket, spool/) but not list
PRIVATE_DIRS = ("log", "run", "keys")


def _ours(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid()


def _tighten(path: Path, mode: int) -> None:
    """chmod ``path`` to ``mode`` when it is ours and a real file or directory (no symlink)."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if _ours(st) and (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)) \
            and stat.S_IMODE(st.st_mode) & ~mode:
        os.chmod(path, stat.S_IMODE(st.st_mode) & mode)


def private_dir(path: Path) -> None:
    """An existing directory of schedd's own: 0700, its entries 0600 (files) / 0700 (dirs)."""
    if not path.is_dir() or path.is_symlink():
        return
    _tighten(path, 0o700)
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        _tighten(Path(entry.path), 0o600 if entry.is_file(follow_symlinks=False) else 0o700)


def secure(cfg: Config) -> None:
    """Tighten schedd's state directory (see the module's doc); idempotent. Only what exists
    and is ours is touched, and the home only when it holds the SQLite ledger (``kiln up``'s
    layout), so a shared directory such as /etc/kiln keeps its mode."""
    from schedd.ledger.engine import sqlite_path

    os.umask(PRIVATE_UMASK)
    try:
        ledger = sqlite_path(cfg.db_url)
    except Exception:
        ledger = None  # the engine will say what is wrong with the URL
    if ledger is not None and ledger.parent.resolve() == cfg.home.resolve():
        _tighten(cfg.home, HOME_MODE)
    dirs = {cfg.home / name for name in PRIVATE_DIRS} | {Path(cfg.log_dir), cfg.keys_path}
    for path in sorted(dirs):
        private_dir(path)
    if cfg.path is not None:  # the TOML's parsed copy: no more readable than the TOML
        from kiln import paths

        try:
            toml_mode = stat.S_IMODE(os.stat(cfg.path).st_mode)
        except OSError:
            toml_mode = 0o600
        _tighten(Path(paths.cache_path(str(cfg.path))), toml_mode & 0o644)
    check_secrets(cfg)


def has_password(url: str) -> bool:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return bool(make_url(url).password)
    except ArgumentError:
        return False


def check_secrets(cfg: Config) -> None:
    """A password in a kiln.toml that other users may read: refuse, with a one-line error.

    (0640 with a group is allowed: the site chose who shares it.)"""
    if cfg.path is None:
        return
    from kiln import paths

    written = paths.schedd_setting(paths.read_raw(str(cfg.path))[1], "db_url")
    if not isinstance(written, str) or not has_password(written):
        return
    try:
        mode = stat.S_IMODE(os.stat(cfg.path).st_mode)
    except OSError:
        return
    if mode & 0o007:
        raise ConfigError(
            f"{cfg.path} gives db_url with a password and every user may read it (mode "
            f"{mode:04o}): chmod 0600 it, or put the URL in db_url_file (0600) or the password "
            "in ~/.pgpass")
