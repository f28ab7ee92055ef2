"""kiln/tokens.py: Slurm's auth/jwt HS256 tokens, minted and verified."""

from __future__ import annotations

import base64
import json
import os

import pytest

from kiln import tokens

KEY = b"s" * 32


def test_a_token_names_its_user_until_it_expires() -> None:
    token = tokens.mint(KEY, "alice", 60, now=1000.0)
    assert tokens.verify(KEY, token, now=1059.0) == "alice"
    with pytest.raises(tokens.TokenError, match="^token expired$"):
        tokens.verify(KEY, token, now=1060.0)


def test_the_claims_are_slurms() -> None:
    body = tokens.mint(KEY, "alice", 30, now=1000.0).split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    assert claims == {"exp": 1030, "iat": 1000, "sun": "alice"}


def _with_claims(token: str, **claims: object) -> str:
    head, _, mac = token.split(".")
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{body}.{mac}"


@pytest.mark.parametrize("bad,words", [
    ("", "not a JWT"), ("a.b", "not a JWT"), ("!!.??.**", "not a JWT"),
    ("x" * 5000, "not a JWT"),
])
def test_garbage_is_refused(bad: str, words: str) -> None:
    with pytest.raises(tokens.TokenError, match=words):
        tokens.verify(KEY, bad, now=0)


def test_forged_claims_and_other_keys_are_refused() -> None:
    token = tokens.mint(KEY, "alice", 60, now=1000.0)
    with pytest.raises(tokens.TokenError, match="signature verification failed"):
        tokens.verify(KEY, _with_claims(token, exp=2000, iat=1000, sun="root"), now=1001)
    with pytest.raises(tokens.TokenError, match="signature verification failed"):
        tokens.verify(b"o" * 32, token, now=1001)


def test_only_hs256() -> None:
    head = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    _, body, mac = tokens.mint(KEY, "alice", 60, now=1000.0).split(".")
    with pytest.raises(tokens.TokenError, match="only HS256"):
        tokens.verify(KEY, f"{head}.{body}.{mac}", now=1001)


def test_generate_key_is_0600_and_kept(tmp_path) -> None:
    path = tokens.generate_key(tmp_path / "keys")
    assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_bytes()) == 32
    first = path.read_bytes()
    assert tokens.generate_key(tmp_path / "keys").read_bytes() == first
    assert tokens.generate_key(tmp_path / "keys", overwrite=True).read_bytes() != first
    assert tokens.load_key(tmp_path / "keys") == path.read_bytes()


def test_no_key_says_what_to_run(tmp_path) -> None:
    with pytest.raises(tokens.TokenError, match="run `kiln keygen`"):
        tokens.load_key(tmp_path)
    (tmp_path / tokens.KEY_FILE).write_bytes(os.urandom(4))
    with pytest.raises(tokens.TokenError, match="too short"):
        tokens.load_key(tmp_path)
