"""The authorizer: Kafka's ACL rules as one pure, indexed class.

A decision (``authorize``) follows Kafka's ``AclAuthorizer`` / ``StandardAuthorizer``:

1. a principal listed in ``super.users`` may do anything;
2. if no ACL at all applies to the resource (any principal, any operation), the answer is
   ``allow.everyone.if.no.acl.found`` (false on a secure cluster);
3. a matching DENY beats any matching ALLOW;
4. otherwise an ALLOW must match.

An ACL *applies to* a resource when its pattern is LITERAL with the same name, LITERAL ``*``, or
PREFIXED with a prefix of the name; it *matches* a request when, besides, its principal is the
request's or ``User:*``, its host is the request's or ``*``, and its operation is the requested one or
ALL, or (for ALLOW only) one implying it (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS
implies DESCRIBE_CONFIGS).

Index: per resource type, LITERAL patterns in a dict by name and PREFIXED patterns in a dict per
prefix length (a lookup tries each distinct length not longer than the name, a handful in practice).
Each pattern keeps, per principal and host, two bitmasks of operations (DENY, ALLOW), so matching is a
few dict lookups and an AND. Decisions are cached by ``(principal, host, operation, type, name)``; any
change replaces the cache. One writer at a time (the store's watch); readers in other threads are
safe with ``replace_all`` and ``remove`` (a new index is swapped in whole), while ``add`` extends the
live index in place.

Pure: no I/O, no clock. Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from shared.security.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    allow_operations_granting,
    binding_sort_key,
    parse_principal,
)

#: Decisions kept before the cache is emptied and refilled (bounds memory under a scan of names).
DEFAULT_CACHE_SIZE = 200_000

# Indexed by operation code (a list: faster than a dict keyed by the enum).
_DENY_MASK: list[int] = [(1 << op) | (1 << AclOperation.ALL) for op in AclOperation]
_ALLOW_MASK: list[int] = [sum(1 << o for o in allow_operations_granting(op)) for op in AclOperation]

# principal -> host -> [deny ops bitmask, allow ops bitmask]
_Rules = dict[str, dict[str, list[int]]]


def parse_super_users(value: str | Iterable[str] | None) -> frozenset[str]:
    """Kafka's ``super.users``: principals separated by semicolons (``User:admin;User:broker-1``)."""
    if value is None:
        return frozenset()
    items = value.split(";") if isinstance(value, str) else list(value)
    out = set()
    for item in items:
        item = item.strip()
        if item:
            parse_principal(item)
            out.add(item)
    return frozenset(out)


@dataclass
class _TypeIndex:
    literal: dict[str, _Rules] = field(default_factory=dict)
    prefixed: dict[int, dict[str, _Rules]] = field(default_factory=dict)  # prefix length -> prefix -> rules
    prefix_lengths: tuple[int, ...] = ()  # sorted ascending


class Authorizer:
    def __init__(
        self,
        bindings: Iterable[AclBinding] = (),
        *,
        super_users: str | Iterable[str] | None = None,
        allow_everyone_if_no_acl_found: bool = False,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self.super_users = parse_super_users(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._cache_size = cache_size
        self._bindings: set[AclBinding] = set()
        self._index: dict[ResourceType, _TypeIndex] = {}
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}
        self.version = 0  # bumped on every change (lets callers notice a reload)
        self.add(bindings)

    # -- decisions ------------------------------------------------------------------------------

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, resource_name: str
    ) -> bool:
        key = (principal, host, operation, resource_type, resource_name)
        cache = self._cache  # a change swaps in a new dict: a decision made on the old ACLs lands in the old one
        cached = cache.get(key)
        if cached is not None:
            return cached
        result = self._decide(principal, host, operation, resource_type, resource_name)
        if len(cache) >= self._cache_size:
            cache.clear()
        cache[key] = result
        return result

    def _decide(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        index = self._index.get(resource_type)
        if index is None:
            return self.allow_everyone_if_no_acl_found
        # every pattern applying to the resource (inlined _applying: this is the hot path)
        literal = index.literal
        groups = []
        rules = literal.get(name)
        if rules is not None:
            groups.append(rules)
        if name != WILDCARD_RESOURCE:
            rules = literal.get(WILDCARD_RESOURCE)
            if rules is not None:
                groups.append(rules)
        n = len(name)
        prefixed = index.prefixed
        for length in index.prefix_lengths:
            if length > n:
                break
            rules = prefixed[length].get(name[:length])
            if rules is not None:
                groups.append(rules)
        if not groups:
            return self.allow_everyone_if_no_acl_found
        deny_bits = _DENY_MASK[operation]
        allow_bits = _ALLOW_MASK[operation]
        allowed = False
        whos = (principal, WILDCARD_PRINCIPAL)
        hs = (host, WILDCARD_HOST)
        for rules in groups:
            for who in whos:
                hosts = rules.get(who)
                if hosts is None:
                    continue
                for h in hs:
                    masks = hosts.get(h)
                    if masks is not None:
                        if masks[0] & deny_bits:
                            return False
                        if masks[1] & allow_bits:
                            allowed = True
        return allowed

    def _applying(self, resource_type: ResourceType, name: str) -> list[_Rules]:
        """The rule sets of every pattern applying to the resource (possibly empty)."""
        index = self._index.get(resource_type)
        if index is None:
            return []
        out = [r for r in (index.literal.get(name), index.literal.get(WILDCARD_RESOURCE)) if r is not None]
        for length in index.prefix_lengths:
            if length > len(name):
                break
            rules = index.prefixed[length].get(name[:length])
            if rules is not None:
                out.append(rules)
        return out

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Kafka's ``Authorizer.authorizeByResourceType``: may the principal do ``operation`` on *some*
        resource of this type? (An idempotent producer without CLUSTER IDEMPOTENT_WRITE needs WRITE on
        some topic.) Super users may; otherwise an ALLOW for the operation (or ALL; no implications)
        on LITERAL ``*`` suffices unless a DENY on LITERAL ``*`` exists, and an ALLOW on another
        pattern suffices unless a DENY covers it (the same LITERAL name, or a PREFIXED deny that is a
        prefix of the allowed name). Not cached: it is asked once per producer, not per request."""
        if self._decide(principal, host, operation, resource_type, "hardcode"):  # Kafka's probe name
            return True
        op_bits = (1 << operation) | (1 << AclOperation.ALL)
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allow = False
        index = self._index.get(resource_type)
        if index is None:
            return False
        tables = [(PatternType.LITERAL, index.literal)]
        tables += [(PatternType.PREFIXED, t) for t in index.prefixed.values()]
        for pattern_type, table in tables:
            for name, rules in table.items():
                for who in (principal, WILDCARD_PRINCIPAL):
                    for h in (host, WILDCARD_HOST):
                        masks = rules.get(who, {}).get(h)
                        if masks is None:
                            continue
                        if masks[0] & op_bits:
                            if pattern_type == PatternType.LITERAL and name == WILDCARD_RESOURCE:
                                return False
                            deny[pattern_type].add(name)
                        if masks[1] & op_bits:
                            if pattern_type == PatternType.LITERAL and name == WILDCARD_RESOURCE:
                                wildcard_allow = True
                            else:
                                allow[pattern_type].add(name)
        if wildcard_allow:
            return True
        denied_prefixes = deny[PatternType.PREFIXED]
        for pattern_type, names in allow.items():
            for name in names:
                if pattern_type == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                    continue
                if not any(name[:i] in denied_prefixes for i in range(1, len(name) + 1)):
                    return True
        return False

    def has_acls(self, resource_type: ResourceType, resource_name: str) -> bool:
        """Does any ACL apply to this resource (whatever its principal and operation)?"""
        return bool(self._applying(resource_type, resource_name))

    # -- administration (Kafka's createAcls / deleteAcls / acls(filter)) ---------------------------

    def describe(self, flt: AclBindingFilter | None = None) -> list[AclBinding]:
        """Every binding the filter matches (all when None), in a stable order."""
        out = [b for b in self._bindings if flt is None or flt.matches(b)]
        return sorted(out, key=binding_sort_key)

    def add(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Add bindings (validated first, all or none); returns those that were new."""
        bindings = [b.validate() for b in bindings]
        added = []
        for b in bindings:
            if b not in self._bindings:
                self._bindings.add(b)
                _index_add(self._index, b)
                added.append(b)
        if added:
            self._changed()
        return added

    def remove(self, filters: AclBindingFilter | Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Remove every binding any of the filters matches; returns them."""
        flts = [filters] if isinstance(filters, AclBindingFilter) else list(filters)
        for f in flts:
            f.validate()
        doomed = [b for b in self._bindings if any(f.matches(b) for f in flts)]
        for b in doomed:
            self._bindings.discard(b)
        if doomed:
            self._rebuild()
        return sorted(doomed, key=binding_sort_key)

    def replace_all(self, bindings: Iterable[AclBinding]) -> bool:
        """Make the set of bindings exactly ``bindings`` (a store snapshot); False if nothing changed."""
        new = {b.validate() for b in bindings}
        if new == self._bindings:
            return False
        self._bindings = new
        self._rebuild()
        return True

    def set_super_users(self, super_users: str | Iterable[str] | None) -> None:
        self.super_users = parse_super_users(super_users)
        self._changed()

    def __len__(self) -> int:
        return len(self._bindings)

    # -- index maintenance ------------------------------------------------------------------------

    def _changed(self) -> None:
        self._cache = {}
        self.version += 1

    def _rebuild(self) -> None:
        index: dict[ResourceType, _TypeIndex] = {}
        for b in self._bindings:
            _index_add(index, b)
        self._index = index  # swapped whole: a reader in another thread never sees a half-built index
        self._changed()



def _index_add(indexes: dict[ResourceType, _TypeIndex], b: AclBinding) -> None:
    p, e = b.pattern, b.entry
    index = indexes.setdefault(p.resource_type, _TypeIndex())
    if p.pattern_type == PatternType.LITERAL:
        table = index.literal
    else:
        length = len(p.name)
        if length not in index.prefixed:
            index.prefixed[length] = {}
            index.prefix_lengths = tuple(sorted(index.prefixed))
        table = index.prefixed[length]
    rules = table.setdefault(p.name, {})
    masks = rules.setdefault(e.principal, {}).setdefault(e.host, [0, 0])
    masks[0 if e.permission_type == AclPermissionType.DENY else 1] |= 1 << e.operation


__all__ = ["Authorizer", "parse_super_users"]
