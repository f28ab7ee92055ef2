"""schedd/restrelay.py: who kiln restd's act_for may name."""

from __future__ import annotations

import os
import pwd
import time

import pytest

from kiln import tokens
from kiln.config import from_dict
from kiln.identity import Caller
from schedd import restrelay


@pytest.fixture
def cfg(tmp_path):
    cfg = from_dict({"home": str(tmp_path), "schedd": {"rest_relays": ["kilnrest"]}})
    tokens.generate_key(cfg.keys_path)
    return cfg


ME = pwd.getpwuid(os.getuid())
RELAY = Caller(uid=ME.pw_uid, gid=ME.pw_gid)


def test_a_valid_token_is_its_users_whoever_relays_it(cfg) -> None:
    token = tokens.mint(tokens.load_key(cfg.keys_path), ME.pw_name, 60, time.time())
    caller = restrelay.caller(cfg, Caller(uid=12345, gid=12345), {"token": token}, time.time())
    assert caller == Caller(uid=ME.pw_uid, gid=ME.pw_gid)
    named = {"token": token, "user": ME.pw_name}
    assert restrelay.caller(cfg, RELAY, named, time.time()).uid == ME.pw_uid


def test_a_token_never_acts_as_another_user(cfg) -> None:
    token = tokens.mint(tokens.load_key(cfg.keys_path), ME.pw_name, 60, time.time())
    with pytest.raises(restrelay.ActForError, match="may not act as user someoneelse") as err:
        restrelay.caller(cfg, RELAY, {"token": token, "user": "someoneelse"}, time.time())
    assert err.value.code == "auth_invalid"
    with pytest.raises(restrelay.ActForError, match="a token or a uid, not both"):
        restrelay.caller(cfg, RELAY, {"token": token, "uid": 0, "gid": 0}, time.time())


def test_expired_and_unknown_users_tokens_are_refused(cfg) -> None:
    key = tokens.load_key(cfg.keys_path)
    old = tokens.mint(key, ME.pw_name, 1, time.time() - 10)
    with pytest.raises(restrelay.ActForError, match="token expired"):
        restrelay.caller(cfg, RELAY, {"token": old}, time.time())
    ghost = tokens.mint(key, "nosuchuserhere", 60, time.time())
    with pytest.raises(restrelay.ActForError, match="unknown user nosuchuserhere"):
        restrelay.caller(cfg, RELAY, {"token": ghost}, time.time())


def test_a_local_identity_only_from_a_listed_relay(cfg) -> None:
    with pytest.raises(restrelay.ActForError, match="is not a REST relay") as err:
        restrelay.caller(cfg, RELAY, {"uid": 0, "gid": 0}, time.time())
    assert err.value.code == "permission_denied"
    cfg.rest_relays = [ME.pw_name]
    assert restrelay.caller(cfg, RELAY, {"uid": 4242, "gid": 7}, time.time()) == \
        Caller(uid=4242, gid=7)
    with pytest.raises(restrelay.ActForError, match="no token and no local identity"):
        restrelay.caller(cfg, RELAY, {}, time.time())
