"""Kafka's ACL model as values: resource types, pattern types, operations, permissions, bindings and
binding filters (``AclBinding`` / ``AclBindingFilter``), with Kafka's numeric codes.

The codes are those of Apache Kafka's clients (``org.apache.kafka.common.acl.AclOperation``,
``AclPermissionType``, ``org.apache.kafka.common.resource.ResourceType``, ``PatternType``), so they can
go on the Kafka wire (DescribeAcls/CreateAcls/DeleteAcls) unchanged.

Pure: no I/O. The authorizer (``shared.security.authorizer``) indexes these values; the store
(``shared.security.acl_store``) persists them as JSON (``binding_to_json`` / ``binding_from_json``).
Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import IntEnum
from typing import Any


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, names compared exactly
    MATCH = 2  # filters only: every pattern that would apply to the given name
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


#: A LITERAL resource name matching every resource of its type (Kafka's ``ResourcePattern.WILDCARD_RESOURCE``).
WILDCARD_RESOURCE = "*"
#: The principal matching every principal (Kafka's ``AclEntry.WildcardPrincipalString``).
WILDCARD_PRINCIPAL = "User:*"
#: The host matching every host.
WILDCARD_HOST = "*"
#: The name of the one CLUSTER resource (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"

#: An ALLOW of the key operation is also an ALLOW of each operation in its value (Kafka's implications:
#: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS). ALL implies
#: every operation, for ALLOW and DENY alike. A DENY implies nothing beyond itself (DENY READ does not
#: deny DESCRIBE), as in Kafka.
IMPLIED_BY_ALLOW: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.READ: frozenset({AclOperation.DESCRIBE}),
    AclOperation.WRITE: frozenset({AclOperation.DESCRIBE}),
    AclOperation.DELETE: frozenset({AclOperation.DESCRIBE}),
    AclOperation.ALTER: frozenset({AclOperation.DESCRIBE}),
    AclOperation.ALTER_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS}),
}


def allow_operations_granting(op: AclOperation) -> frozenset[AclOperation]:
    """The operations whose ALLOW grants ``op``: itself, ALL, and every operation implying it."""
    ops = {op, AclOperation.ALL}
    ops.update(o for o, implied in IMPLIED_BY_ALLOW.items() if op in implied)
    return frozenset(ops)


class InvalidAclError(ValueError):
    """A binding or filter Kafka would refuse (``INVALID_REQUEST`` on the wire)."""


def normalize_host(host: str) -> str:
    """One spelling per address, so an ACL's host and a peer's address compare as strings: IPv6 in its
    compressed form (``0:0:0:0:0:0:0:1`` -> ``::1``), IPv4-mapped IPv6 as IPv4; ``*`` and anything that
    is not an IP address (Kafka also compares hosts as strings) unchanged. Bindings made by ``acl()``
    are normalized; callers normalize a peer's address the same way before ``authorize``."""
    if host == WILDCARD_HOST:
        return host
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return addr.compressed


def parse_principal(principal: str) -> tuple[str, str]:
    """``"User:alice"`` -> ``("User", "alice")``; Kafka's ``SecurityUtils.parseKafkaPrincipal``."""
    ptype, sep, name = principal.partition(":")
    if not sep or not ptype or not name:
        raise InvalidAclError(f"principal must be 'Type:name', got {principal!r}")
    return ptype, name


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def validate(self) -> None:
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise InvalidAclError(f"a binding needs a concrete resource type, not {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"a binding's pattern type is LITERAL or PREFIXED, not {self.pattern_type.name}")
        if not self.name:
            raise InvalidAclError("resource name must not be empty")
        if self.pattern_type == PatternType.PREFIXED and self.name == WILDCARD_RESOURCE:
            raise InvalidAclError("use a LITERAL '*' to match every resource, not PREFIXED '*'")

    def matches_name(self, name: str) -> bool:
        """Would this pattern apply to the resource called ``name`` (same type assumed)?"""
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD_RESOURCE


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def validate(self) -> None:
        parse_principal(self.principal)
        if not self.host:
            raise InvalidAclError("host must not be empty (use '*' for every host)")
        if self.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise InvalidAclError(f"a binding needs a concrete operation, not {self.operation.name}")
        if self.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"a binding's permission is ALLOW or DENY, not {self.permission_type.name}")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> AclBinding:
        self.pattern.validate()
        self.entry.validate()
        return self


def acl(
    principal: str,
    operation: AclOperation | str,
    resource_type: ResourceType | str,
    name: str,
    *,
    permission: AclPermissionType | str = AclPermissionType.ALLOW,
    host: str = WILDCARD_HOST,
    pattern_type: PatternType | str = PatternType.LITERAL,
) -> AclBinding:
    """A validated binding from names or enums: ``acl("User:alice", "READ", "TOPIC", "orders")``."""

    def conv(enum: Any, v: Any) -> Any:
        return enum[v.upper()] if isinstance(v, str) else enum(v)

    return AclBinding(
        ResourcePattern(conv(ResourceType, resource_type), name, conv(PatternType, pattern_type)),
        AccessControlEntry(principal, normalize_host(host), conv(AclOperation, operation),
                           conv(AclPermissionType, permission)),
    ).validate()


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Kafka's ``ResourcePatternFilter``: ``name=None`` matches any name; ANY types match any type;
    ``PatternType.MATCH`` selects every pattern that applies to ``name`` (literal equal, literal ``*``,
    prefixes of it); ``PatternType.ANY`` or a concrete pattern type compares names exactly."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, p: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != p.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, p.pattern_type):
            return self.name == p.name
        return p.matches_name(self.name)  # MATCH

    def validate(self) -> None:
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            raise InvalidAclError("a filter cannot name an UNKNOWN type")


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Kafka's ``AccessControlEntryFilter``: None / ANY match anything; otherwise exact equality
    (a filter for ``User:alice`` does not select ``User:*`` entries)."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, e: AccessControlEntry) -> bool:
        return (
            (self.principal is None or self.principal == e.principal)
            and (self.host is None or self.host == e.host)
            and (self.operation == AclOperation.ANY or self.operation == e.operation)
            and (self.permission_type == AclPermissionType.ANY or self.permission_type == e.permission_type)
        )

    def validate(self) -> None:
        if self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN:
            raise InvalidAclError("a filter cannot name an UNKNOWN type")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, b: AclBinding) -> bool:
        return self.pattern.matches(b.pattern) and self.entry.matches(b.entry)

    def validate(self) -> AclBindingFilter:
        self.pattern.validate()
        self.entry.validate()
        return self


def binding_sort_key(b: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    """A stable order for listings: resource, then principal, host, operation, permission."""
    return (b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type, b.entry.principal, b.entry.host,
            b.entry.operation, b.entry.permission_type)


#: Matches every binding.
ANY_FILTER = AclBindingFilter()


# -- JSON form (the etcd value and the REST body) ------------------------------------------------------


def binding_to_json(b: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": b.pattern.resource_type.name,
        "resource_name": b.pattern.name,
        "pattern_type": b.pattern.pattern_type.name,
        "principal": b.entry.principal,
        "host": b.entry.host,
        "operation": b.entry.operation.name,
        "permission_type": b.entry.permission_type.name,
    }


def binding_from_json(d: dict[str, Any]) -> AclBinding:
    try:
        return acl(
            d["principal"], d["operation"], d["resource_type"], d["resource_name"],
            permission=d["permission_type"], host=d["host"], pattern_type=d["pattern_type"],
        )
    except KeyError as exc:
        raise InvalidAclError(f"ACL JSON lacks or misnames {exc}") from exc
