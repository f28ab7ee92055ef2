"""schedd's state directory and config secrets (schedd/statedir.py, ledger/engine.py, config's
private_data and db_url_file): root's files stay root's whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kiln import config as kconfig
from kiln import paths
from schedd import statedir
from schedd.ledger.engine import make_engine


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_sqlite_ledger_and_siblings_are_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        db = tmp_path / "kiln.db"
        engine = make_engine(f"sqlite:///{db}")
        with engine.begin() as conn:
            conn.exec_driver_sql("create table t (x)")
            conn.exec_driver_sql("insert into t values (1)")
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert mode(path) == 0o600, path
        engine.dispose()
        Path(f"{db}-wal").touch()
        os.chmod(db, 0o644)
        make_engine(f"sqlite:///{db}").dispose()  # an existing world-readable ledger is fixed
        assert mode(db) == 0o600
    finally:
        os.umask(old)


def test_secure_tightens_kiln_ups_layout(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "log").mkdir(parents=True)
    (home / "log" / "schedd.log").write_text("x")
    os.chmod(home / "log" / "schedd.log", 0o644)
    os.chmod(home, 0o755)
    conf = home / "kiln.toml"
    conf.write_text("[schedd]\nkill_wait = 3\n")
    old = os.umask(0o022)
    try:
        cfg = kconfig.load(conf)
        statedir.secure(cfg)
        assert os.umask(0o022) == 0o077
    finally:
        os.umask(old)
    assert mode(home) == 0o711 and mode(home / "log") == 0o700
    assert mode(home / "log" / "schedd.log") == 0o600
    # a shared config directory without the ledger keeps its mode
    shared = tmp_path / "etc"
    shared.mkdir()
    os.chmod(shared, 0o755)
    (shared / "kiln.toml").write_text(f'[schedd]\ndb_url = "sqlite:///{home}/kiln.db"\n')
    old = os.umask(0o022)
    try:
        statedir.secure(kconfig.load(shared / "kiln.toml"))
    finally:
        os.umask(old)
    assert mode(shared) == 0o755


def test_a_password_in_a_readable_kiln_toml_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "kiln.toml"
    conf.write_text('[schedd]\ndb_url = "postgresql://kiln:pw@db/kiln"\n')
    os.chmod(conf, 0o644)
    with pytest.raises(kconfig.ConfigError, match="password") as err:
        statedir.check_secrets(kconfig.load(conf))
    assert "pw@" not in str(err.value)
    os.chmod(conf, 0o600)
    statedir.check_secrets(kconfig.load(conf))
    cache = Path(paths.cache_path(str(conf)))
    assert not cache.exists() or mode(cache) & 0o077 == 0  # the copy is no wider than the TOML
    # db_url_file: the TOML stays readable, the URL is in a root-only file
    secret = tmp_path / "db_url"
    secret.write_text("postgresql://kiln:pw@db/kiln\n")
    conf.write_text(f'[schedd]\ndb_url_file = "{secret}"\n')
    os.chmod(conf, 0o644)
    cfg = kconfig.load(conf)
    assert cfg.db_url == "postgresql://kiln:pw@db/kiln"
    statedir.check_secrets(cfg)


def test_private_data_values() -> None:
    cfg = kconfig.from_dict({"schedd": {"private_data": ["Jobs", "usage"]}})
    assert cfg.private("jobs") and cfg.private("usage") and not cfg.private("users")
    with pytest.raises(kconfig.ConfigError, match="private_data"):
        kconfig.from_dict({"schedd": {"private_data": ["nodes"]}})
    with pytest.raises(kconfig.ConfigError, match="private_data"):
        kconfig.from_dict({"schedd": {"private_data": "jobs"}})
