"""CURVE keys: schedd accepts only agents whose public key is in its authorised list.

Layout of ``keys_dir`` (default ``$KILN_HOME/keys``)::

    schedd.key, schedd.key_secret          the controller's key pair
    agents/<node>.key, <node>.key_secret   each agent's pair (the secret stays on its node)
    authorized/<node>.key                  public keys schedd accepts (copy agents' .key here)

This is munge's role in Slurm, without munge: ZeroMQ's CURVE encrypts the agent channel and
authenticates both ends. Standard library and zmq only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import zmq
import zmq.auth

from kiln.logs import RepeatLimiter


class KeyFileError(Exception):
    """A key file that is missing or unreadable; the message says which and what to run."""


def _pair(directory: Path, name: str) -> tuple[Path, Path]:
    return directory / f"{name}.key", directory / f"{name}.key_secret"


def generate(directory: Path, name: str, overwrite: bool = False) -> tuple[Path, Path]:
    """Make ``name.key`` and ``name.key_secret`` (mode 0600) in ``directory``."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    public, secret = _pair(directory, name)
    if public.exists() and secret.exists() and not overwrite:
        return public, secret
    public_file, secret_file = zmq.auth.create_certificates(str(directory), name)
    os.chmod(secret_file, 0o600)
    return Path(public_file), Path(secret_file)


def authorize(keys_dir: Path, public_key_file: Path) -> Path:
    """Add an agent's public key to schedd's list."""
    target_dir = keys_dir / "authorized"
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / public_key_file.name
    shutil.copyfile(public_key_file, target)
    return target


def load_secret(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file."""
    try:
        public, secret = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read key {path}: {exc}; run `kiln keygen`") from None
    if secret is None:
        raise KeyFileError(f"{path} holds no secret key; run `kiln keygen`")
    return public, secret


def load_public(path: Path) -> bytes:
    try:
        public, _ = zmq.auth.load_certificate(str(path))
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read key {path}: {exc}; run `kiln keygen`") from None
    return public


def server_secret(keys_dir: Path) -> Path:
    return _pair(keys_dir, "schedd")[1]


def server_public(keys_dir: Path) -> Path:
    return _pair(keys_dir, "schedd")[0]


def agent_secret(keys_dir: Path, node: str) -> Path:
    return _pair(keys_dir / "agents", node)[1]


def generate_cluster(keys_dir: Path, nodes: list[str]) -> None:
    """What ``kiln up`` needs: a schedd pair, a pair per node, each node's key authorised."""
    generate(keys_dir, "schedd")
    for node in nodes:
        public, _ = generate(keys_dir / "agents", node)
        authorize(keys_dir, public)


class AgentKeyring:
    """schedd's view of ``authorized/``: which public key belongs to which node.

    Used as pyzmq's CURVE credentials provider (``callback``), and afterwards to check that
    a message's authenticated key (its ``User-Id``) is the key of the node it claims to be.
    The folder is re-read when it changes, so an administrator can add a node without a restart.
    """

    def __init__(self, keys_dir: Path, log=None):
        self.folder = keys_dir / "authorized"
        self.log = log
        # a refused peer may retry many times a second: its first refusal, then a count a minute
        self.refusals = RepeatLimiter(log) if log is not None else None
        self._mtime = -1.0
        self._nodes: dict[bytes, str] = {}

    def _refresh(self) -> None:
        try:
            mtime = self.folder.stat().st_mtime
        except OSError:
            self._nodes = {}
            return
        if mtime == self._mtime:
            return
        nodes = {}
        for path in sorted(self.folder.glob("*.key")):
            try:
                nodes[load_public(path)] = path.stem
            except KeyFileError:
                continue
        self._nodes, self._mtime = nodes, mtime

    def node_of(self, public_key: bytes) -> str | None:
        self._refresh()
        return self._nodes.get(public_key)

    def callback(self, domain: str, public_key: bytes) -> bool:
        node = self.node_of(public_key)
        if node is None and self.refusals is not None:
            text = public_key.decode(errors="replace")
            self.refusals.warning(text, "refused an agent with an unknown CURVE key %s", text)
        return node is not None
