"""Property: the indexed, cached authorizer decides exactly as a plain reading of Kafka's rules
(a linear scan over every binding) for random ACL sets and requests, and stays so across changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.security.acl import (
    IMPLIED_BY_ALLOW,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePatternFilter,
    ResourceType,
    acl,
)
from shared.security.authorizer import Authorizer

PRINCIPALS = ["User:a", "User:b", "User:*"]
HOSTS = ["*", "10.0.0.1", "10.0.0.2"]
NAMES = ["t", "to", "top", "topic", "x", "*"]
OPS = [o for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)]
TYPES = [ResourceType.TOPIC, ResourceType.GROUP]

bindings_st = st.builds(
    lambda p, h, op, t, name, perm, prefixed: acl(
        p, op, t, name, host=h, permission=perm,
        pattern_type="PREFIXED" if prefixed and name != "*" else "LITERAL"),
    st.sampled_from(PRINCIPALS), st.sampled_from(HOSTS), st.sampled_from(OPS), st.sampled_from(TYPES),
    st.sampled_from(NAMES), st.sampled_from(["ALLOW", "DENY"]), st.booleans(),
)
requests_st = st.tuples(st.sampled_from(["User:a", "User:b", "User:c"]), st.sampled_from(["10.0.0.1", "10.0.0.2"]),
                        st.sampled_from([o for o in OPS if o != AclOperation.ALL]), st.sampled_from(TYPES),
                        st.sampled_from([n for n in NAMES if n != "*"] + ["topics", "xy"]))


def reference(bindings: list[AclBinding], principal: str, host: str, op: AclOperation, rtype: ResourceType,
              name: str, super_users: set[str], allow_everyone: bool) -> bool:
    if principal in super_users:
        return True
    applying = [b for b in bindings if b.pattern.resource_type == rtype and b.pattern.matches_name(name)]
    if not applying:
        return allow_everyone
    mine = [b.entry for b in applying if b.entry.principal in (principal, "User:*") and b.entry.host in (host, "*")]
    if any(e.permission_type == AclPermissionType.DENY and e.operation in (op, AclOperation.ALL) for e in mine):
        return False
    return any(e.permission_type == AclPermissionType.ALLOW
               and (e.operation in (op, AclOperation.ALL) or op in IMPLIED_BY_ALLOW.get(e.operation, ()))
               for e in mine)


@settings(max_examples=200, deadline=None)
@given(st.lists(bindings_st, max_size=25), st.lists(requests_st, min_size=1, max_size=20), st.booleans(),
       st.sets(st.sampled_from(["User:a", "User:c"]), max_size=1))
def test_indexed_equals_reference(bindings: list[AclBinding], reqs: list, allow_everyone: bool,  # type: ignore[type-arg]
                                  supers: set[str]) -> None:
    authz = Authorizer(bindings, allow_everyone_if_no_acl_found=allow_everyone, super_users=supers)
    for r in reqs * 2:  # the second pass is answered by the cache
        assert authz.authorize(*r) == reference(bindings, *r, supers, allow_everyone), r


@settings(max_examples=100, deadline=None)
@given(st.lists(bindings_st, max_size=20), st.lists(bindings_st, max_size=10), st.sampled_from(TYPES),
       st.sampled_from(NAMES), st.lists(requests_st, min_size=1, max_size=10))
def test_changes_keep_decisions_exact(first: list[AclBinding], more: list[AclBinding], rtype: ResourceType,
                                      name: str, reqs: list) -> None:  # type: ignore[type-arg]
    authz = Authorizer(first)
    for r in reqs:
        authz.authorize(*r)  # fill the cache
    authz.add(more)
    current = list(dict.fromkeys(first + more))
    for r in reqs:
        assert authz.authorize(*r) == reference(current, *r, set(), False)
    flt = AclBindingFilter(ResourcePatternFilter(rtype, name, PatternType.MATCH))
    removed = authz.remove(flt)
    assert set(removed) == {b for b in current if flt.matches(b)}
    current = [b for b in current if not flt.matches(b)]
    assert set(authz.describe()) == set(current)
    for r in reqs:
        assert authz.authorize(*r) == reference(current, *r, set(), False)
