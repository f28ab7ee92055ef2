"""Where a cluster's config is, and the two settings a command needs before it can ask schedd.

The fast path of ``sbatch``/``squeue``/``scancel`` reads the TOML here and builds nothing else
(``kiln.config`` builds the whole typed Config, which costs more than a submission should).
Lookup order: ``$KILN_CONF``, ``$KILN_HOME/kiln.toml`` (default ``~/.kiln``), ``/etc/kiln/kiln.toml``.

Even ``tomllib`` costs a short command about 5 ms (a tenth of an ``sbatch``), so the parsed
TOML is also kept as JSON beside the file (``.kiln.toml.json``), tagged with the TOML's inode,
size and mtime: a command reads that instead while it still matches, and parses (and rewrites
it, where it may) when the TOML changed. The copy is trusted only when its owner is root or the
TOML's owner and nobody else may write it, so a planted file in a shared directory is ignored;
it is never readable by more users than the TOML (whose ``db_url`` may hold a password).
"""

import os

from kiln.wire import wirejson

SYSTEM_CONF = "/etc/kiln/kiln.toml"
DEFAULT_MAX_ARRAY_SIZE = 1001


class ConfigError(Exception):
    """A config file that cannot be used; the message names the file and the key."""


def kiln_home() -> str:
    return os.environ.get("KILN_HOME") or os.path.join(os.path.expanduser("~"), ".kiln")


def find_config_path() -> "str | None":
    explicit = os.environ.get("KILN_CONF")
    if explicit:
        return explicit
    local = os.path.join(kiln_home(), "kiln.toml")
    if os.path.exists(local):
        return local
    if os.path.exists(SYSTEM_CONF):
        return SYSTEM_CONF
    return None


def read_raw(path: "str | None" = None) -> "tuple[str | None, dict]":
    """(path, the TOML as a dict) — ``{}`` when there is no config file at all."""
    path = path or find_config_path()
    if path is None:
        return None, {}
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    raw = _cached(path, st)
    if raw is None:
        raw = _parse(path)
        _save_cache(path, st, raw)
    return path, raw


def _parse(path: str) -> dict:
    import tomllib

    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except PermissionError:
        raise ConfigError(f"config file {path} is not readable") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def cache_path(path: str) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.json")


def _tag(st: "os.stat_result") -> "list[int]":
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _cached(path: str, st: "os.stat_result") -> "dict | None":
    """The TOML's parsed copy, if there is one that matches the file and can be trusted."""
    try:
        with open(cache_path(path), "rb") as fh:
            own = os.fstat(fh.fileno())
            if own.st_uid not in (0, st.st_uid) or own.st_mode & 0o022:
                return None
            if own.st_mode & 0o044 & ~st.st_mode:  # readable by more than the TOML (chmod-ed
                return None  # since): parsed afresh, and rewritten with the TOML's mode
            doc = wirejson.loads(fh.read())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("tag") != _tag(st) or not isinstance(
            doc.get("raw"), dict):
        return None
    return doc["raw"]


def _save_cache(path: str, st: "os.stat_result", raw: dict) -> None:
    """Best effort, by the TOML's owner or root only; never fails the command."""
    if os.geteuid() not in (0, st.st_uid):
        return
    target = cache_path(path)
    temp = f"{target}.{os.getpid()}"
    try:
        text = wirejson.dumps({"tag": _tag(st), "raw": raw})
    except (TypeError, ValueError):
        return  # a value JSON cannot hold (a TOML date): no copy, parse each time
    try:
        # never readable by more users than the TOML itself (it may hold a database password)
        mode = st.st_mode & 0o644
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(temp, target)
    except OSError:
        try:
            os.unlink(temp)
        except OSError:
            pass


def home_of(path: "str | None", raw: dict) -> str:
    if raw.get("home"):
        return str(raw["home"])
    return os.path.dirname(os.path.abspath(path)) if path else kiln_home()


def schedd_setting(raw: dict, key: str, default=None):
    """A key of the [schedd] table (also accepted at the top level)."""
    return raw.get("schedd", {}).get(key, raw.get(key, default))


def client_endpoint(path: "str | None" = None) -> str:
    return endpoint_of(*read_raw(path))


def endpoint_of(path: "str | None", raw: dict) -> str:
    """schedd's endpoint for the commands, from a config already read (``read_raw``)."""
    endpoint = schedd_setting(raw, "client_endpoint")
    return endpoint or f"ipc://{os.path.join(home_of(path, raw), 'schedd.sock')}"


def max_array_size(path: "str | None" = None) -> int:
    return int(schedd_setting(read_raw(path)[1], "max_array_size", DEFAULT_MAX_ARRAY_SIZE))
