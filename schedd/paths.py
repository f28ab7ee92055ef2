"""Where a cluster's config is, and the two settings a command needs before it can ask schedd.

The fast path of ``sbatch``/``squeue``/``scancel`` reads the TOML here and builds nothing else
(``schedd.config`` builds the whole typed Config, which costs more than a submission should).
Lookup order: ``$KILN_CONF``, ``$KILN_HOME/kiln.toml`` (default ``~/.kiln``), ``/etc/kiln/kiln.toml``.
"""

from __future__ import annotations

import os

SYSTEM_CONF = "/etc/kiln/kiln.toml"
DEFAULT_MAX_ARRAY_SIZE = 1001


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and the key."""


def kiln_home() -> str:
    return os.environ.get("KILN_HOME") or os.path.join(os.path.expanduser("~"), ".kiln")


def find_config_path() -> str | None:
    explicit = os.environ.get("KILN_CONF")
    if explicit:
        return explicit
    local = os.path.join(kiln_home(), "kiln.toml")
    if os.path.exists(local):
        return local
    if os.path.exists(SYSTEM_CONF):
        return SYSTEM_CONF
    return None


def read_raw(path: str | None = None) -> tuple[str | None, dict]:
    """(path, the TOML as a dict) — ``{}`` when there is no config file at all."""
    path = path or find_config_path()
    if path is None:
        return None, {}
    import tomllib

    try:
        with open(path, "rb") as fh:
            return path, tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except PermissionError:
        raise ConfigError(f"config file {path} is not readable") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def home_of(path: str | None, raw: dict) -> str:
    if raw.get("home"):
        return str(raw["home"])
    return os.path.dirname(os.path.abspath(path)) if path else kiln_home()


def schedd_setting(raw: dict, key: str, default=None):
    """A key of the [schedd] table (also accepted at the top level)."""
    return raw.get("schedd", {}).get(key, raw.get(key, default))


def client_endpoint(path: str | None = None) -> str:
    path, raw = read_raw(path)
    endpoint = schedd_setting(raw, "client_endpoint")
    return endpoint or f"ipc://{os.path.join(home_of(path, raw), 'schedd.sock')}"


def max_array_size(path: str | None = None) -> int:
    return int(schedd_setting(read_raw(path)[1], "max_array_size", DEFAULT_MAX_ARRAY_SIZE))
