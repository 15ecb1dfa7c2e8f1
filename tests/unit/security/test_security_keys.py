"""The etcd key layout of ACLs and users (percent-encoded names; one key per binding / per mechanism)."""

from __future__ import annotations

from shared.metadata.keys import SecurityKeys
from shared.security.acl import acl
from shared.security.scram import SCRAM_SHA_256, SCRAM_SHA_512

KEYS = SecurityKeys("/tidelog/c1/")


def test_acl_keys() -> None:
    b = acl("User:CN=a/b,O=x", "WRITE", "TOPIC", "orders/eu", pattern_type="PREFIXED", host="10.0.0.1",
            permission="DENY")
    key = KEYS.acl(b)
    assert key == b"/tidelog/c1/acls/TOPIC/PREFIXED/orders%2Feu/User%3ACN%3Da%2Fb%2CO%3Dx/10.0.0.1/WRITE/DENY"
    assert key.startswith(KEYS.acls_prefix())
    assert KEYS.acl(acl("User:a", "READ", "TOPIC", "t")) != KEYS.acl(acl("User:a", "READ", "TOPIC", "t", host="h"))


def test_user_keys_round_trip() -> None:
    for name in ("alice", "bob/ops", "é,=x"):
        for mech in (SCRAM_SHA_256, SCRAM_SHA_512):
            key = KEYS.user(name, mech)
            assert key.startswith(KEYS.user_prefix(name)) and key.startswith(KEYS.users_prefix())
            assert KEYS.parse_user(key) == (name, mech.name)
    assert KEYS.parse_user(b"/tidelog/c1/users/alice") is None
    assert KEYS.parse_user(b"/tidelog/c1/users/alice/SCRAM-SHA-512/extra") is None
    assert KEYS.parse_user(b"/tidelog/c2/users/alice/SCRAM-SHA-512") is None
    # one user's prefix never covers another whose name extends it
    assert not KEYS.user("alice2", SCRAM_SHA_512).startswith(KEYS.user_prefix("alice"))
