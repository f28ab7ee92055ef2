"""Slurm's auth/jwt: HS256 tokens that name a user (``scontrol token``, kiln restd).

A token is a JSON Web Token signed with HMAC-SHA256 under the key ``jwt_hs256.key`` of kiln's
keys directory (``kiln keygen`` makes it, mode 0600; Slurm's ``AuthAltParameters=jwt_key=``).
Its claims are Slurm's: ``iat`` (issued), ``exp`` (expires) and ``sun`` (the user name).
schedd alone mints (``auth_token``) and verifies (``act_for``) them: restd only passes a
token on, so restd needs no key and a token is worth nothing without schedd's.

Standard library only (base64, hashlib, hmac).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

KEY_FILE = "jwt_hs256.key"
KEY_BYTES = 32
_HEADER = {"alg": "HS256", "typ": "JWT"}
MAX_TOKEN = 4096


class TokenError(Exception):
    """Why a token is refused (its message is what the client is told)."""


def key_path(keys_dir: Path) -> Path:
    return Path(keys_dir) / KEY_FILE


def generate_key(keys_dir: Path, overwrite: bool = False) -> Path:
    """Write a random key (mode 0600) unless one is there."""
    keys_dir = Path(keys_dir)
    keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = key_path(keys_dir)
    if path.exists() and not overwrite:
        return path
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(KEY_BYTES))
    os.replace(tmp, path)
    return path


def load_key(keys_dir: Path) -> bytes:
    """The signing key, or TokenError (a missing key turns tokens off)."""
    path = key_path(keys_dir)
    try:
        key = path.read_bytes()
    except OSError:
        raise TokenError(f"auth/jwt is not configured: no key {path} (run `kiln keygen`)") \
            from None
    if len(key) < 16:
        raise TokenError(f"auth/jwt key {path} is too short (run `kiln keygen --force`)")
    return key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint(key: bytes, user: str, lifespan: int, now: float) -> str:
    claims = {"exp": int(now) + int(lifespan), "iat": int(now), "sun": user}
    head = _b64(json.dumps(_HEADER, separators=(",", ":")).encode())
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signed = f"{head}.{body}"
    mac = hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()
    return f"{signed}.{_b64(mac)}"


def verify(key: bytes, token: str, now: float) -> str:
    """The user a valid, unexpired token names; TokenError otherwise."""
    if not token or len(token) > MAX_TOKEN or token.count(".") != 2:
        raise TokenError("invalid token: not a JWT")
    head, body, mac = token.split(".")
    try:
        header = json.loads(_unb64(head))
        claims = json.loads(_unb64(body))
        given = _unb64(mac)
    except (ValueError, UnicodeDecodeError):
        raise TokenError("invalid token: not a JWT") from None
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        raise TokenError("invalid token: only HS256 tokens are accepted")
    expected = hmac.new(key, f"{head}.{body}".encode("ascii"), hashlib.sha256).digest()
    if not hmac.compare_digest(expected, given):
        raise TokenError("invalid token: signature verification failed")
    if not isinstance(claims, dict):
        raise TokenError("invalid token: no claims")
    user, exp = claims.get("sun"), claims.get("exp")
    if not isinstance(user, str) or not user:
        raise TokenError("invalid token: no user name (sun)")
    if not isinstance(exp, int) or isinstance(exp, bool):
        raise TokenError("invalid token: no expiry (exp)")
    if exp <= now:
        raise TokenError("token expired")
    return user
