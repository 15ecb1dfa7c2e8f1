"""shared/security/access.py: the Access every API module asks, table-driven over a real Authorizer.

Plaintext (``Access.disabled()``) allows everything; secure, each decision is the authorizer's, a denial
is Kafka's code for the resource type and is audited; internal RPCs want a service certificate of the
right role and CLUSTER_ACTION."""

from __future__ import annotations

from typing import Any

import pytest

from shared.errors import ErrorCode
from shared.request_context import RequestContext
from shared.security import access as access_module
from shared.security.access import (
    DISABLED,
    Access,
    AuthorizationFailed,
    denied_code,
    door_of,
    service_id,
)
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType, acl
from shared.security.authorizer import Authorizer
from shared.security.service_security import ServiceSecurity

Op, RT = AclOperation, ResourceType
BROKER2 = "CN=broker-2,OU=tidelog-service"
CLEANER1 = "CN=cleaner-1,OU=tidelog-service"


def ctx(name: str = "ANONYMOUS", cert: str | None = None, host: str = "127.0.0.1",
        peer: str = "ipv4:127.0.0.1:5000") -> RequestContext:
    return RequestContext("Produce", "c", name, peer, 0.0, host, cert)


def authorizer() -> Authorizer:
    return Authorizer([
        acl("User:alice", "WRITE", "TOPIC", "orders"),
        acl("User:alice", "READ", "TOPIC", "logs-", pattern_type="PREFIXED"),
        acl("User:alice", "READ", "TOPIC", "logs-secret", permission="DENY"),
        acl("User:alice", "READ", "GROUP", "g"),
        acl("User:alice", "WRITE", "TRANSACTIONAL_ID", "tx"),
        acl("User:bob", "DESCRIBE", "TOPIC", "orders", host="::1"),
        acl(f"User:{CLEANER1}", "CLUSTER_ACTION", "CLUSTER", CLUSTER_NAME),
    ], super_users="User:admin")


@pytest.fixture
def acc() -> Access:
    return Access(authorizer=authorizer())


@pytest.mark.parametrize("who,host,op,rtype,name,allowed", [
    ("alice", "127.0.0.1", Op.WRITE, RT.TOPIC, "orders", True),
    ("alice", "127.0.0.1", Op.DESCRIBE, RT.TOPIC, "orders", True),  # WRITE implies DESCRIBE
    ("alice", "127.0.0.1", Op.READ, RT.TOPIC, "orders", False),
    ("alice", "127.0.0.1", Op.READ, RT.TOPIC, "logs-app", True),  # PREFIXED
    ("alice", "127.0.0.1", Op.READ, RT.TOPIC, "logs-secret", False),  # DENY beats ALLOW
    ("alice", "127.0.0.1", Op.READ, RT.GROUP, "g", True),
    ("alice", "127.0.0.1", Op.READ, RT.GROUP, "other", False),
    ("alice", "127.0.0.1", Op.WRITE, RT.TRANSACTIONAL_ID, "tx", True),
    ("bob", "127.0.0.1", Op.DESCRIBE, RT.TOPIC, "orders", False),  # his ACL names another host
    ("bob", "::1", Op.DESCRIBE, RT.TOPIC, "orders", True),
    ("bob", "0:0:0:0:0:0:0:1", Op.DESCRIBE, RT.TOPIC, "orders", True),  # the same address, spelled out
    ("ANONYMOUS", "127.0.0.1", Op.DESCRIBE, RT.TOPIC, "orders", False),
    ("ANONYMOUS", "127.0.0.1", Op.DESCRIBE, RT.TOPIC, "nobody-has-acls", False),  # allow.everyone... false
    ("admin", "127.0.0.1", Op.ALTER, RT.CLUSTER, CLUSTER_NAME, True),  # super user
])
def test_allowed(acc: Access, who: str, host: str, op: AclOperation, rtype: ResourceType, name: str,
                 allowed: bool) -> None:
    assert acc.allowed(ctx(who, host=host), op, rtype, name) is allowed
    assert DISABLED.allowed(ctx(who, host=host), op, rtype, name) is True


@pytest.mark.parametrize("rtype,code", [
    (RT.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    (RT.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
    (RT.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    (RT.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
])
def test_require_raises_kafkas_code_per_resource_type(acc: Access, rtype: ResourceType, code: ErrorCode) -> None:
    assert denied_code(rtype) == code
    with pytest.raises(AuthorizationFailed) as info:
        acc.require(ctx("mallory"), Op.DESCRIBE, rtype, "x")
    assert info.value.code == code and info.value.name == code.name
    assert "User:mallory" in info.value.message and "DESCRIBE" in info.value.message
    DISABLED.require(ctx("mallory"), Op.DESCRIBE, rtype, "x")  # plaintext: never


@pytest.mark.parametrize("who,cert,role,ok", [
    ("ANONYMOUS", None, "cleaner", False),  # no certificate
    ("alice", None, "cleaner", False),  # a SCRAM user
    ("CN=alice", "CN=alice", "cleaner", False),  # a client certificate, not a service's
    (BROKER2, BROKER2, "cleaner", False),  # a service, the wrong role
    (CLEANER1, CLEANER1, "cleaner", True),  # the role, and CLUSTER_ACTION by ACL
    (BROKER2, BROKER2, "broker", False),  # the role, but no CLUSTER_ACTION (not a super user here)
])
def test_require_service(acc: Access, who: str, cert: str | None, role: str, ok: bool) -> None:
    c = ctx(who, cert)
    if ok:
        acc.require_service(c, role)
    else:
        with pytest.raises(AuthorizationFailed) as info:
            acc.require_service(c, role)
        assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert acc.is_service(c, role) is ok
    DISABLED.require_service(c, role)


def test_require_service_accepts_any_of_several_roles(acc: Access) -> None:
    acc.require_service(ctx(CLEANER1, CLEANER1), ("coordinator", "cleaner"))
    with pytest.raises(AuthorizationFailed):
        acc.require_service(ctx(BROKER2, BROKER2), ("coordinator", "cleaner"))


def test_allowed_any_is_kafkas_authorize_by_resource_type(acc: Access) -> None:
    assert acc.allowed_any(ctx("alice"), Op.WRITE, RT.TOPIC)
    assert not acc.allowed_any(ctx("bob", host="::1"), Op.WRITE, RT.TOPIC)
    assert DISABLED.allowed_any(ctx("bob"), Op.WRITE, RT.TOPIC)


def test_partition_decides_each_name_once_and_audits_each_refused_name(acc: Access, monkeypatch: Any) -> None:
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(access_module, "_audit", type("A", (), {"event": staticmethod(
        lambda kind, **kw: events.append({"kind": kind, **kw}))}))
    ok, refused = acc.partition(ctx("alice"), Op.READ, RT.TOPIC, ["logs-a", "orders", "orders", "logs-b"],
                                lambda n: n)
    assert ok == ["logs-a", "logs-b"] and refused == ["orders", "orders"]
    assert len(events) == 1
    e = events[0]
    assert e["kind"] == "authorization_denied" and e["principal"] == "User:alice" and e["door"] == "grpc"
    assert e["resource"] == "TOPIC:orders" and e["operation"] == "Produce:READ" and e["host"] == "127.0.0.1"


def test_a_failing_audit_never_fails_the_request(acc: Access, monkeypatch: Any) -> None:
    def boom(kind: str, **kw: Any) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(access_module, "_audit", type("A", (), {"event": staticmethod(boom)}))
    assert acc.check(ctx("alice"), Op.READ, RT.TOPIC, "orders") is False


def test_built_from_service_security() -> None:
    assert not Access(ServiceSecurity.disabled()).enabled
    assert not Access().enabled and not Access.disabled().enabled
    auth = authorizer()
    secure = ServiceSecurity(enabled=True, authorizer=auth)
    a = Access(secure)
    assert a.enabled and a.authorizer is auth
    assert a.allowed(ctx("alice"), Op.WRITE, RT.TOPIC, "orders")
    auth.add([acl("User:carol", "WRITE", "TOPIC", "orders")])  # a change is seen at once (the same authorizer)
    assert a.allowed(ctx("carol"), Op.WRITE, RT.TOPIC, "orders")
    with pytest.raises(ValueError):  # secure without an authorizer: refuse to build rather than allow all
        Access(ServiceSecurity(enabled=True))


@pytest.mark.parametrize("cert,ident", [
    (BROKER2, 2), ("CN=coordinator-17,OU=tidelog-service", 17), ("CN=broker-x,OU=tidelog-service", None),
    ("CN=broker-2,OU=other", None), (None, None),
])
def test_service_id(cert: str | None, ident: int | None) -> None:
    assert service_id(ctx("x", cert)) == ident


def test_door_of() -> None:
    assert door_of(ctx(peer="ipv4:10.0.0.1:5")) == "grpc" and door_of(ctx(peer="ipv6:[::1]:5")) == "grpc"
    assert door_of(ctx(peer="10.0.0.1:5")) == "kafka"


def test_a_cached_decision_is_fast(acc: Access) -> None:
    """The hot path: a repeated decision is a dict lookup (the authorizer's cache) — no timing asserted,
    only that the second decision does not reach the index."""
    c = ctx("alice")
    assert acc.allowed(c, Op.WRITE, RT.TOPIC, "orders")
    auth = acc.authorizer
    assert auth is not None
    calls = []
    original = auth._decide
    auth._decide = lambda *a: calls.append(a) or original(*a)  # type: ignore[method-assign]
    for _ in range(100):
        assert acc.allowed(c, Op.WRITE, RT.TOPIC, "orders")
    assert calls == []
