"""The authorizer, table-driven, after Kafka's AclAuthorizerTest / StandardAuthorizerTest themes: deny beats
allow, wildcard principal/host/resource, prefixed patterns, implications, super users, the no-ACL
default, filters (describe/remove) and cache invalidation."""

from __future__ import annotations

import pytest

from shared.security.acl import (
    AccessControlEntryFilter,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePatternFilter,
    ResourceType,
    acl,
    binding_from_json,
    binding_to_json,
)
from shared.security.authorizer import Authorizer, parse_super_users

Op, R = AclOperation, ResourceType
ALICE, BOB, CAROL = "User:alice", "User:bob", "User:carol"
H1, H2 = "192.168.1.1", "192.168.1.2"

# Each case: ACLs, then (principal, host, operation, resource type, name, expected).
CASES = {
    "allow literal": (
        [acl(ALICE, "READ", "TOPIC", "orders")],
        [(ALICE, H1, Op.READ, R.TOPIC, "orders", True),
         (BOB, H1, Op.READ, R.TOPIC, "orders", False),          # ACLs exist on the resource: others refused
         (ALICE, H1, Op.WRITE, R.TOPIC, "orders", False),
         (ALICE, H1, Op.READ, R.TOPIC, "orders2", False),        # literal is not a prefix
         (ALICE, H1, Op.READ, R.GROUP, "orders", False)],        # another resource type
    ),
    "deny beats allow (same host)": (
        [acl(ALICE, "READ", "TOPIC", "t", host=H1), acl(ALICE, "READ", "TOPIC", "t", host=H2),
         acl(ALICE, "READ", "TOPIC", "t", host=H1, permission="DENY")],
        [(ALICE, H1, Op.READ, R.TOPIC, "t", False),
         (ALICE, H2, Op.READ, R.TOPIC, "t", True),
         (ALICE, "10.0.0.9", Op.READ, R.TOPIC, "t", False)],     # host not listed
    ),
    "deny for one user beats allow for everyone (Kafka testDenyTakesPrecedence)": (
        [acl("User:*", "ALL", "TOPIC", "t"), acl(ALICE, "READ", "TOPIC", "t", host=H1, permission="DENY")],
        [(ALICE, H1, Op.READ, R.TOPIC, "t", False),
         (ALICE, H2, Op.READ, R.TOPIC, "t", True),
         (ALICE, H1, Op.WRITE, R.TOPIC, "t", True),
         (BOB, H1, Op.READ, R.TOPIC, "t", True)],
    ),
    "deny on wildcard resource beats allow on literal": (
        [acl(ALICE, "WRITE", "TOPIC", "t"), acl(ALICE, "WRITE", "TOPIC", "*", permission="DENY")],
        [(ALICE, H1, Op.WRITE, R.TOPIC, "t", False)],
    ),
    "deny on prefix beats allow on literal": (
        [acl(ALICE, "ALL", "TOPIC", "payments.card"),
         acl("User:*", "WRITE", "TOPIC", "payments.", pattern_type="PREFIXED", permission="DENY")],
        [(ALICE, H1, Op.WRITE, R.TOPIC, "payments.card", False),
         (ALICE, H1, Op.READ, R.TOPIC, "payments.card", True)],
    ),
    "allow all everywhere (Kafka testAllowAllAccess)": (
        [acl("User:*", "ALL", "TOPIC", "*")],
        [(ALICE, H1, Op.READ, R.TOPIC, "any", True),
         (BOB, H2, Op.DELETE, R.TOPIC, "other", True),
         (BOB, H2, Op.READ, R.GROUP, "g", False)],
    ),
    "wildcard principal and host": (
        [acl("User:*", "READ", "GROUP", "g", host="*")],
        [(ALICE, H1, Op.READ, R.GROUP, "g", True), (CAROL, "::1", Op.READ, R.GROUP, "g", True)],
    ),
    "wildcard principal means User:*, not any string": (
        [acl("User:*", "READ", "GROUP", "g")],
        [("User:*", H1, Op.READ, R.GROUP, "g", True)],
    ),
    "exact host only": (
        [acl(ALICE, "READ", "TOPIC", "t", host=H1)],
        [(ALICE, H1, Op.READ, R.TOPIC, "t", True), (ALICE, H2, Op.READ, R.TOPIC, "t", False)],
    ),
    "wildcard resource (Kafka testWildCardAcls)": (
        [acl(ALICE, "READ", "TOPIC", "*"), acl(ALICE, "WRITE", "TOPIC", "topic1")],
        [(ALICE, H1, Op.READ, R.TOPIC, "topic1", True),
         (ALICE, H1, Op.READ, R.TOPIC, "anything", True),
         (ALICE, H1, Op.WRITE, R.TOPIC, "topic1", True),
         (ALICE, H1, Op.WRITE, R.TOPIC, "topic2", False),
         (ALICE, H1, Op.READ, R.TOPIC, "*", True)],
    ),
    "prefixed allow (Kafka testAccessAllowedIfAllowAclExistsOnPrefixedResource)": (
        [acl(ALICE, "READ", "TOPIC", "foo", pattern_type="PREFIXED")],
        [(ALICE, H1, Op.READ, R.TOPIC, "foo", True),
         (ALICE, H1, Op.READ, R.TOPIC, "foobar", True),
         (ALICE, H1, Op.READ, R.TOPIC, "fo", False),
         (ALICE, H1, Op.READ, R.TOPIC, "xfoo", False)],
    ),
    "single-character names (Kafka testSingleCharacterResourceAcls)": (
        [acl(ALICE, "READ", "TOPIC", "f")],
        [(ALICE, H1, Op.READ, R.TOPIC, "f", True), (ALICE, H1, Op.READ, R.TOPIC, "foo", False)],
    ),
    "several prefixes of different lengths": (
        [acl(ALICE, "READ", "TOPIC", "a", pattern_type="PREFIXED"),
         acl(BOB, "READ", "TOPIC", "abc", pattern_type="PREFIXED"),
         acl(CAROL, "READ", "TOPIC", "abcdef", pattern_type="PREFIXED")],
        [(ALICE, H1, Op.READ, R.TOPIC, "abcdefg", True),
         (BOB, H1, Op.READ, R.TOPIC, "abcdefg", True),
         (CAROL, H1, Op.READ, R.TOPIC, "abcdefg", True),
         (CAROL, H1, Op.READ, R.TOPIC, "abcde", False),
         (BOB, H1, Op.READ, R.TOPIC, "ab", False)],
    ),
    "cluster resource": (
        [acl("User:broker-1", "CLUSTER_ACTION", "CLUSTER", "kafka-cluster")],
        [("User:broker-1", H1, Op.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster", True),
         (ALICE, H1, Op.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster", False),
         ("User:broker-1", H1, Op.ALTER, R.CLUSTER, "kafka-cluster", False)],
    ),
    "transactional id and user resources": (
        [acl(ALICE, "WRITE", "TRANSACTIONAL_ID", "tx-", pattern_type="PREFIXED"),
         acl(ALICE, "CREATE_TOKENS", "USER", "bob")],
        [(ALICE, H1, Op.WRITE, R.TRANSACTIONAL_ID, "tx-1", True),
         (ALICE, H1, Op.DESCRIBE, R.TRANSACTIONAL_ID, "tx-1", True),
         (ALICE, H1, Op.WRITE, R.TOPIC, "tx-1", False),
         (ALICE, H1, Op.CREATE_TOKENS, R.USER, "bob", True),
         (ALICE, H1, Op.DESCRIBE_TOKENS, R.USER, "bob", False)],
    ),
    "empty resource name via wildcard (Kafka testAuthorizeWithEmptyResourceName)": (
        [acl(ALICE, "READ", "GROUP", "*")],
        [(ALICE, H1, Op.READ, R.GROUP, "", True)],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_decisions(name: str) -> None:
    bindings, checks = CASES[name]
    authz = Authorizer(bindings)
    for principal, host, op, rtype, rname, expected in checks:
        got = authz.authorize(principal, host, op, rtype, rname)
        assert got is expected, f"{name}: {principal} {host} {op.name} {rtype.name}:{rname} -> {got}"
        # the uncached path agrees with the cached one
        assert authz._decide(principal, host, op, rtype, rname) is expected


ALL_OPS = [o for o in AclOperation if o not in (Op.UNKNOWN, Op.ANY, Op.ALL)]
IMPLIED = {Op.READ: {Op.DESCRIBE}, Op.WRITE: {Op.DESCRIBE}, Op.DELETE: {Op.DESCRIBE}, Op.ALTER: {Op.DESCRIBE},
           Op.ALTER_CONFIGS: {Op.DESCRIBE_CONFIGS}}


@pytest.mark.parametrize("granted", [Op.ALL, *ALL_OPS], ids=lambda o: o.name)
def test_implications_of_allow(granted: AclOperation) -> None:
    """Kafka's testAclInheritance: ALLOW X grants exactly X and what X implies (ALL: everything)."""
    authz = Authorizer([acl(ALICE, granted, "CLUSTER", "kafka-cluster")])
    expected = set(ALL_OPS) if granted == Op.ALL else {granted, *IMPLIED.get(granted, ())}
    allowed = {op for op in ALL_OPS if authz.authorize(ALICE, H1, op, R.CLUSTER, "kafka-cluster")}
    assert allowed == expected


@pytest.mark.parametrize("denied", [Op.ALL, *ALL_OPS], ids=lambda o: o.name)
def test_implications_of_deny(denied: AclOperation) -> None:
    """DENY X refuses exactly X (ALL: everything); a DENY implies nothing (DENY READ leaves DESCRIBE)."""
    authz = Authorizer([acl(ALICE, "ALL", "TOPIC", "t"), acl(ALICE, denied, "TOPIC", "t", permission="DENY")])
    refused = {op for op in ALL_OPS if not authz.authorize(ALICE, H1, op, R.TOPIC, "t")}
    assert refused == (set(ALL_OPS) if denied == Op.ALL else {denied})


def test_super_users_beat_deny() -> None:
    """Kafka testSuperUserHasAccess: super users pass even a DENY ALL aimed at them."""
    authz = Authorizer([acl("User:admin", "ALL", "TOPIC", "*", permission="DENY"),
                        acl("User:broker-1", "ALL", "CLUSTER", "kafka-cluster", permission="DENY")],
                       super_users="User:admin; User:broker-1")
    assert authz.authorize("User:admin", H1, Op.DELETE, R.TOPIC, "t")
    assert authz.authorize("User:broker-1", H1, Op.CLUSTER_ACTION, R.CLUSTER, "kafka-cluster")
    assert authz.authorize("User:admin", H1, Op.READ, R.GROUP, "no-acls-here")
    assert not authz.authorize(ALICE, H1, Op.READ, R.GROUP, "no-acls-here")
    authz.set_super_users("")
    assert not authz.authorize("User:admin", H1, Op.DELETE, R.TOPIC, "t")


def test_super_users_parsing() -> None:
    assert parse_super_users("User:a;User:b;") == {"User:a", "User:b"}
    assert parse_super_users(["User:a"]) == {"User:a"}
    assert parse_super_users(None) == frozenset() and parse_super_users("") == frozenset()
    with pytest.raises(InvalidAclError):
        parse_super_users("alice")


def test_no_acl_found_default() -> None:
    """Kafka testNoAclFound / testNoAclFoundOverride: only resources with no ACL at all fall to the default."""
    bindings = [acl(ALICE, "READ", "TOPIC", "guarded")]
    closed = Authorizer(bindings, allow_everyone_if_no_acl_found=False)
    open_ = Authorizer(bindings, allow_everyone_if_no_acl_found=True)
    assert not closed.authorize(BOB, H1, Op.READ, R.TOPIC, "free")
    assert open_.authorize(BOB, H1, Op.READ, R.TOPIC, "free")
    assert open_.authorize(BOB, H1, Op.READ, R.GROUP, "any-group")  # no index for the type at all
    assert not open_.authorize(BOB, H1, Op.READ, R.TOPIC, "guarded")  # an ACL exists: no fallback
    assert not open_.authorize(ALICE, H1, Op.WRITE, R.TOPIC, "guarded")
    assert open_.has_acls(R.TOPIC, "guarded") and not open_.has_acls(R.TOPIC, "free")


def test_changes_invalidate_cached_decisions() -> None:
    authz = Authorizer()
    args = (ALICE, H1, Op.WRITE, R.TOPIC, "t")
    assert not authz.authorize(*args)
    version = authz.version
    assert authz.add([acl(ALICE, "WRITE", "TOPIC", "t")]) != []
    assert authz.version > version
    assert authz.authorize(*args)
    authz.add([acl(ALICE, "WRITE", "TOPIC", "t", permission="DENY")])
    assert not authz.authorize(*args)
    authz.remove(AclBindingFilter(entry=AccessControlEntryFilter(permission_type=AclPermissionType.DENY)))
    assert authz.authorize(*args)
    assert authz.replace_all([]) is True
    assert not authz.authorize(*args)
    assert authz.replace_all([]) is False


def test_cache_is_bounded() -> None:
    authz = Authorizer([acl(ALICE, "READ", "TOPIC", "t", pattern_type="PREFIXED")], cache_size=10)
    for i in range(100):
        assert authz.authorize(ALICE, H1, Op.READ, R.TOPIC, f"t{i}")
    assert len(authz._cache) <= 10


def test_add_is_idempotent_and_validates_all_first() -> None:
    authz = Authorizer()
    b = acl(ALICE, "READ", "TOPIC", "t")
    assert authz.add([b, b]) == [b]
    assert authz.add([b]) == []
    bad = acl(ALICE, "READ", "TOPIC", "u")
    object.__setattr__(bad.entry, "principal", "alice")  # corrupt it after construction
    with pytest.raises(InvalidAclError):
        authz.add([acl(BOB, "READ", "TOPIC", "t"), bad])
    assert len(authz) == 1


@pytest.mark.parametrize("kwargs", [
    dict(principal="alice", operation="READ", resource_type="TOPIC", name="t"),
    dict(principal=ALICE, operation="ANY", resource_type="TOPIC", name="t"),
    dict(principal=ALICE, operation="READ", resource_type="ANY", name="t"),
    dict(principal=ALICE, operation="READ", resource_type="TOPIC", name=""),
    dict(principal=ALICE, operation="READ", resource_type="TOPIC", name="t", pattern_type="MATCH"),
    dict(principal=ALICE, operation="READ", resource_type="TOPIC", name="*", pattern_type="PREFIXED"),
    dict(principal=ALICE, operation="READ", resource_type="TOPIC", name="t", permission="ANY"),
    dict(principal=ALICE, operation="READ", resource_type="TOPIC", name="t", host=""),
])
def test_invalid_bindings(kwargs: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidAclError):
        acl(kwargs.pop("principal"), kwargs.pop("operation"), kwargs.pop("resource_type"), kwargs.pop("name"), **kwargs)


# -- filters: Kafka's AclBindingFilter semantics ---------------------------------------------------------

BINDINGS = [
    acl(ALICE, "READ", "TOPIC", "orders"),
    acl(ALICE, "WRITE", "TOPIC", "orders", permission="DENY", host=H1),
    acl(BOB, "READ", "TOPIC", "ord", pattern_type="PREFIXED"),
    acl("User:*", "DESCRIBE", "TOPIC", "*"),
    acl(ALICE, "READ", "GROUP", "orders"),
    acl(CAROL, "ALL", "TOPIC", "orders-eu"),
]


def _names(found: list) -> set[tuple[str, str, str]]:  # type: ignore[type-arg]
    return {(b.entry.principal, b.pattern.name, b.pattern.pattern_type.name) for b in found}


@pytest.mark.parametrize("flt, expected", [
    (AclBindingFilter(), {(ALICE, "orders", "LITERAL"), (BOB, "ord", "PREFIXED"), ("User:*", "*", "LITERAL"),
                          (CAROL, "orders-eu", "LITERAL")}),
    (AclBindingFilter(ResourcePatternFilter(R.TOPIC, "orders", PatternType.LITERAL)), {(ALICE, "orders", "LITERAL")}),
    (AclBindingFilter(ResourcePatternFilter(R.TOPIC, "orders", PatternType.ANY)), {(ALICE, "orders", "LITERAL")}),
    (AclBindingFilter(ResourcePatternFilter(R.ANY, "orders", PatternType.ANY)), {(ALICE, "orders", "LITERAL")}),
    (AclBindingFilter(ResourcePatternFilter(R.TOPIC, "orders", PatternType.MATCH)),
     {(ALICE, "orders", "LITERAL"), (BOB, "ord", "PREFIXED"), ("User:*", "*", "LITERAL")}),
    (AclBindingFilter(ResourcePatternFilter(R.TOPIC, "ord", PatternType.PREFIXED)), {(BOB, "ord", "PREFIXED")}),
    (AclBindingFilter(ResourcePatternFilter(R.TOPIC, None, PatternType.PREFIXED)), {(BOB, "ord", "PREFIXED")}),
    (AclBindingFilter(entry=AccessControlEntryFilter(principal=ALICE)), {(ALICE, "orders", "LITERAL")}),
    (AclBindingFilter(entry=AccessControlEntryFilter(principal="User:*")), {("User:*", "*", "LITERAL")}),
    (AclBindingFilter(entry=AccessControlEntryFilter(host=H1)), {(ALICE, "orders", "LITERAL")}),
    (AclBindingFilter(entry=AccessControlEntryFilter(operation=Op.ALL)), {(CAROL, "orders-eu", "LITERAL")}),
    (AclBindingFilter(entry=AccessControlEntryFilter(permission_type=AclPermissionType.DENY)),
     {(ALICE, "orders", "LITERAL")}),
])
def test_describe_filters(flt: AclBindingFilter, expected: set) -> None:  # type: ignore[type-arg]
    authz = Authorizer(BINDINGS)
    assert _names(authz.describe(flt)) == expected


def test_describe_counts_and_group_filter() -> None:
    authz = Authorizer(BINDINGS)
    assert len(authz.describe()) == len(BINDINGS)
    assert len(authz.describe(AclBindingFilter(ResourcePatternFilter(R.GROUP)))) == 1
    assert len(authz.describe(AclBindingFilter(ResourcePatternFilter(R.TOPIC, "orders", PatternType.ANY)))) == 2


def test_remove_by_filter() -> None:
    authz = Authorizer(BINDINGS)
    removed = authz.remove(AclBindingFilter(ResourcePatternFilter(R.TOPIC, "orders", PatternType.MATCH),
                                            AccessControlEntryFilter(permission_type=AclPermissionType.ALLOW)))
    assert _names(removed) == {(ALICE, "orders", "LITERAL"), (BOB, "ord", "PREFIXED"), ("User:*", "*", "LITERAL")}
    assert len(authz) == len(BINDINGS) - 3
    assert not authz.authorize(ALICE, H1, Op.READ, R.TOPIC, "orders")
    assert not authz.authorize(BOB, H1, Op.READ, R.TOPIC, "ordinary")  # the prefixed one is gone too
    assert authz.authorize(CAROL, H1, Op.WRITE, R.TOPIC, "orders-eu")
    assert authz.remove([]) == []
    with pytest.raises(InvalidAclError):
        authz.remove(AclBindingFilter(ResourcePatternFilter(R.UNKNOWN)))


def test_json_round_trip() -> None:
    for b in BINDINGS:
        assert binding_from_json(binding_to_json(b)) == b
    with pytest.raises(InvalidAclError):
        binding_from_json({"principal": ALICE})


def test_kafka_numeric_codes() -> None:
    assert [int(x) for x in (R.TOPIC, R.GROUP, R.CLUSTER, R.TRANSACTIONAL_ID, R.DELEGATION_TOKEN, R.USER)] == [2, 3, 4, 5, 6, 7]
    assert [int(x) for x in (PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED)] == [1, 2, 3, 4]
    assert [int(x) for x in (AclPermissionType.ANY, AclPermissionType.DENY, AclPermissionType.ALLOW)] == [1, 2, 3]
    assert [int(x) for x in (Op.ALL, Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION,
                             Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.CREATE_TOKENS,
                             Op.DESCRIBE_TOKENS)] == list(range(2, 15))


def test_ten_thousand_acls_decide_correctly() -> None:
    """Scale check (not timing: scripts/bench/authorizer_micro.py measures): 10,000 ACLs, a few known answers."""
    bindings = [acl(f"User:u{i}", "READ", "TOPIC", f"t{i}", pattern_type="PREFIXED" if i % 2 else "LITERAL")
                for i in range(10_000)]
    bindings.append(acl("User:u7", "READ", "TOPIC", "t77", permission="DENY"))
    authz = Authorizer(bindings)
    assert authz.authorize("User:u4", H1, Op.READ, R.TOPIC, "t4")
    assert not authz.authorize("User:u4", H1, Op.READ, R.TOPIC, "t40")  # literal
    assert authz.authorize("User:u7", H1, Op.READ, R.TOPIC, "t7-x")  # prefixed
    assert not authz.authorize("User:u7", H1, Op.READ, R.TOPIC, "t77")  # prefixed allow, literal deny
    assert authz.authorize("User:u77", H1, Op.DESCRIBE, R.TOPIC, "t77")


# -- authorize_by_resource_type (Kafka's AuthorizerTest / AclAuthorizerTest testAuthorizeByResourceType*) --


def _by_type(bindings: list, principal: str = ALICE, op: AclOperation = Op.WRITE, **kw: object) -> bool:  # type: ignore[type-arg]
    return Authorizer(bindings, **kw).authorize_by_resource_type(principal, H1, op, R.TOPIC)  # type: ignore[arg-type]


@pytest.mark.parametrize("bindings, expected", [
    ([], False),
    ([acl(ALICE, "WRITE", "TOPIC", "t")], True),
    ([acl(ALICE, "ALL", "TOPIC", "t")], True),
    ([acl(ALICE, "READ", "TOPIC", "t")], False),                        # no implications here
    ([acl(BOB, "WRITE", "TOPIC", "t")], False),                         # someone else's
    ([acl("User:*", "WRITE", "TOPIC", "t")], True),
    ([acl(ALICE, "WRITE", "TOPIC", "t", host=H2)], False),              # another host
    ([acl(ALICE, "WRITE", "GROUP", "t")], False),                       # another type
    ([acl(ALICE, "WRITE", "TOPIC", "*")], True),
    ([acl(ALICE, "WRITE", "TOPIC", "*"), acl(ALICE, "WRITE", "TOPIC", "*", permission="DENY")], False),
    ([acl(ALICE, "WRITE", "TOPIC", "t"), acl(ALICE, "WRITE", "TOPIC", "*", permission="DENY")], False),
    ([acl(ALICE, "WRITE", "TOPIC", "t"), acl(ALICE, "WRITE", "TOPIC", "t", permission="DENY")], False),
    ([acl(ALICE, "WRITE", "TOPIC", "t"), acl(ALICE, "WRITE", "TOPIC", "u", permission="DENY")], True),
    ([acl(ALICE, "WRITE", "TOPIC", "abc"), acl(ALICE, "WRITE", "TOPIC", "ab", pattern_type="PREFIXED",
                                                 permission="DENY")], False),   # a dominant prefixed deny
    ([acl(ALICE, "WRITE", "TOPIC", "abc", pattern_type="PREFIXED"),
      acl(ALICE, "WRITE", "TOPIC", "abcd", pattern_type="PREFIXED", permission="DENY")], True),  # deny narrower
    ([acl(ALICE, "WRITE", "TOPIC", "abc", pattern_type="PREFIXED"),
      acl(ALICE, "WRITE", "TOPIC", "abc", permission="DENY")], True),   # a literal deny does not cover a prefix
    ([acl(ALICE, "WRITE", "TOPIC", "t"), acl(ALICE, "ALL", "TOPIC", "t", permission="DENY")], False),
])
def test_authorize_by_resource_type(bindings: list, expected: bool) -> None:  # type: ignore[type-arg]
    assert _by_type(bindings) is expected


def test_authorize_by_resource_type_super_user_and_no_acl_default() -> None:
    deny_all = [acl("User:admin", "ALL", "TOPIC", "*", permission="DENY")]
    assert _by_type(deny_all, "User:admin", super_users="User:admin")
    assert _by_type([], allow_everyone_if_no_acl_found=True)
    assert not _by_type([], allow_everyone_if_no_acl_found=False)


def test_hosts_are_normalized() -> None:
    from shared.security.acl import normalize_host

    assert normalize_host("0:0:0:0:0:0:0:1") == "::1"
    assert normalize_host("::ffff:10.0.0.1") == "10.0.0.1"
    assert normalize_host("*") == "*" and normalize_host("broker.example") == "broker.example"
    authz = Authorizer([acl(ALICE, "READ", "TOPIC", "t", host="0:0:0:0:0:0:0:1")])
    assert authz.describe()[0].entry.host == "::1"
    assert authz.authorize(ALICE, normalize_host("0::1"), Op.READ, R.TOPIC, "t")
