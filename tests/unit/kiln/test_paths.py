"""kiln.paths: the fast path's config reading and its parsed copy beside the TOML."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from kiln import paths


def _conf(tmp_path: Path, text: str) -> str:
    conf = tmp_path / "kiln.toml"
    conf.write_text(text)
    return str(conf)


def _tampered_copy(conf: str, **raw: object) -> Path:
    """Read ``conf`` once (which writes its copy), then change values in the copy only."""
    paths.max_array_size(conf)
    copy = Path(paths.cache_path(conf))
    doc = json.loads(copy.read_text())
    doc["raw"].update(raw)
    copy.write_text(json.dumps(doc))
    return copy


def test_the_parsed_copy_is_used_while_the_toml_is_unchanged(tmp_path: Path) -> None:
    conf = _conf(tmp_path, '[schedd]\nclient_endpoint = "ipc:///a.sock"\n')
    assert paths.client_endpoint(conf) == "ipc:///a.sock"
    copy = Path(paths.cache_path(conf))
    assert copy.name == ".kiln.toml.json" and oct(copy.stat().st_mode & 0o777) == "0o644"
    doc = json.loads(copy.read_text())
    doc["raw"]["schedd"]["client_endpoint"] = "ipc:///from-the-copy.sock"
    copy.write_text(json.dumps(doc))
    sys.modules.pop("tomllib", None)
    assert paths.client_endpoint(conf) == "ipc:///from-the-copy.sock"
    assert "tomllib" not in sys.modules  # the copy spared the parse


def test_a_changed_toml_is_parsed_again_and_the_copy_rewritten(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "max_array_size = 10\n")
    assert paths.max_array_size(conf) == 10
    Path(conf).write_text("max_array_size = 200\n")  # other size
    assert paths.max_array_size(conf) == 200
    assert json.loads(Path(paths.cache_path(conf)).read_text())["raw"] == {"max_array_size": 200}


@pytest.mark.parametrize("mode", [0o666, 0o646])
def test_a_copy_others_may_write_is_ignored(tmp_path: Path, mode: int) -> None:
    conf = _conf(tmp_path, "max_array_size = 10\n")
    copy = _tampered_copy(conf, max_array_size=99)
    os.chmod(copy, mode)
    assert paths.max_array_size(conf) == 10


def test_broken_copy_and_bad_toml(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "max_array_size = 10\n")
    Path(paths.cache_path(conf)).write_text("{not json")
    assert paths.max_array_size(conf) == 10
    Path(conf).write_text("max_array_size = \n")
    with pytest.raises(paths.ConfigError, match="kiln.toml"):
        paths.read_raw(conf)
    with pytest.raises(paths.ConfigError, match="not found"):
        paths.read_raw(str(tmp_path / "nope.toml"))


def test_a_copy_owned_by_someone_else_is_ignored_and_not_overwritten(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "max_array_size = 10\n")
    copy = _tampered_copy(conf, max_array_size=99)
    os.chown(conf, 65534, 65534)  # the TOML is nobody's now, the copy still root's: trusted
    assert paths.max_array_size(conf) == 99
    os.chown(conf, 0, 0)
    os.chown(copy, 65534, 65534)  # a copy by neither root nor the TOML's owner
    assert paths.max_array_size(conf) == 10


def test_lookup_order_conf_then_home_then_system(tmp_path: Path, monkeypatch) -> None:
    """$KILN_CONF, then $KILN_HOME/kiln.toml (default ~/.kiln), then /etc/kiln/kiln.toml; the
    first that exists wins (docs/user-guide.md, "Which cluster your commands reach")."""
    system = tmp_path / "etc" / "kiln.toml"
    home = tmp_path / "home"
    explicit = tmp_path / "explicit.toml"
    monkeypatch.setattr(paths, "SYSTEM_CONF", str(system))
    monkeypatch.delenv("KILN_CONF", raising=False)
    monkeypatch.setenv("KILN_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert paths.find_config_path() is None  # nothing anywhere
    system.parent.mkdir()
    system.write_text("")
    assert paths.find_config_path() == str(system)
    home.mkdir()
    (home / "kiln.toml").write_text("")
    assert paths.find_config_path() == str(home / "kiln.toml")
    monkeypatch.setenv("KILN_CONF", str(explicit))  # named: used even before it exists
    assert paths.find_config_path() == str(explicit)
    monkeypatch.delenv("KILN_CONF")
    monkeypatch.delenv("KILN_HOME")  # the default home, ~/.kiln
    assert paths.find_config_path() == str(system)
    (tmp_path / "user" / ".kiln").mkdir(parents=True)
    (tmp_path / "user" / ".kiln" / "kiln.toml").write_text("")
    assert paths.find_config_path() == str(tmp_path / "user" / ".kiln" / "kiln.toml")
