"""Kafka's DescribeAcls / CreateAcls / DeleteAcls (``/v1/acls``), over ``shared.security.acl_store``.

Bindings live in etcd, one key each, so any controller answers, active or standby. Each binding created or
deleted is an ``admin_change`` audit event (who, from where, which binding). The rights Kafka asks for
(CLUSTER DESCRIBE to describe, CLUSTER ALTER to create or delete) are checked at the REST door before the
route runs (``rest/rules.py``).

Also home of what ``user_admin`` shares: the controller's ``SecurityStore`` (``security_store``) and the
audit call.
"""

from __future__ import annotations

import ipaddress
import weakref
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictStr

from services.controller.api import ControllerApi
from shared.errors import ErrorCode, TidelogError
from shared.metadata.store import MetadataStore
from shared.request_context import RequestContext
from shared.security import audit
from shared.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AclBinding,
    AclBindingFilter,
    InvalidAclError,
    binding_from_json,
    binding_to_json,
    normalize_host,
)
from shared.security.acl_store import SecurityStore

#: At most this many bindings per CreateAcls (one request should not be a bulk import).
MAX_BINDINGS = 1000
NAME_MAX = 255
NO_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]*$"


def upper(value: Any) -> Any:
    """Kafka's enum names are case-insensitive on the way in (``read``, ``Read``, ``READ``)."""
    return value.upper() if isinstance(value, str) else value


def check_principal(value: str) -> str:
    """Kafka's principal form, ``User:<name>`` (the only principal type Tidelog's authorizer sees)."""
    kind, sep, name = value.partition(":")
    if kind != "User" or not sep or not name:
        raise ValueError(f"principal must be 'User:<name>' (Kafka's principal form; 'User:*' for everyone), "
                         f"got {value!r}")
    return value


def check_host(value: str) -> str:
    """``*`` or an IP address (peers are matched by address, as Kafka's authorizer does), normalized."""
    if value != WILDCARD_HOST:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"host must be '*' or an IP address, got {value!r}") from None
    return normalize_host(value)


ConcreteResourceType = Literal["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "USER"]
ConcreteOperation = Literal["ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
                            "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS",
                            "DESCRIBE_TOKENS"]
Principal = Annotated[StrictStr, Field(max_length=NAME_MAX + 5, pattern=NO_CONTROL, examples=["User:alice"]),
                      AfterValidator(check_principal)]
Host = Annotated[StrictStr, Field(max_length=64, examples=["*"]), AfterValidator(check_host)]
ResourceName = Annotated[StrictStr, Field(min_length=1, max_length=NAME_MAX, pattern=NO_CONTROL)]


class AclBindingBody(BaseModel):
    """One binding: who (principal, host) may or may not (permission_type) do what (operation) to which
    resources (resource_type, resource_name, pattern_type). Type names are case-insensitive."""

    model_config = ConfigDict(extra="forbid")
    resource_type: Annotated[ConcreteResourceType, BeforeValidator(upper)]
    resource_name: ResourceName = Field(..., description="a name; '*' (LITERAL) for every resource of the type; "
                                        "a prefix (PREFIXED); the CLUSTER resource is 'kafka-cluster'")
    pattern_type: Annotated[Literal["LITERAL", "PREFIXED"], BeforeValidator(upper)] = "LITERAL"
    principal: Principal
    host: Host = WILDCARD_HOST
    operation: Annotated[ConcreteOperation, BeforeValidator(upper)]
    permission_type: Annotated[Literal["ALLOW", "DENY"], BeforeValidator(upper)] = "ALLOW"

    def binding(self) -> AclBinding:
        """The domain binding; INVALID_REQUEST for what Kafka's CreateAcls refuses beyond the field rules."""
        if self.resource_type == "CLUSTER" and self.resource_name != CLUSTER_NAME:
            raise TidelogError(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME!r}, "
                               f"got {self.resource_name!r}", code=ErrorCode.INVALID_REQUEST)
        try:
            return binding_from_json(self.model_dump())
        except InvalidAclError as exc:
            raise TidelogError(str(exc), code=ErrorCode.INVALID_REQUEST) from None


class AclBindingView(BaseModel):
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str


class AclList(BaseModel):
    acls: list[AclBindingView]


class CreateAcls(BaseModel):
    model_config = ConfigDict(extra="forbid")
    acls: list[AclBindingBody] = Field(..., min_length=1, max_length=MAX_BINDINGS)


class CreateAclsResult(BaseModel):
    created: list[AclBindingView] = Field(..., description="bindings that did not exist before")
    existing: list[AclBindingView] = Field(..., description="bindings that were already there (unchanged)")


# -- shared with user_admin: the store, the access check, the audit trail -----------------------------------

_stores: weakref.WeakKeyDictionary[MetadataStore, SecurityStore] = weakref.WeakKeyDictionary()


def security_store(c: ControllerApi) -> SecurityStore:
    """The controller's ``SecurityStore``: its ``ServiceSecurity``'s when security is on (``c.security``),
    else one over the controller's metadata store (ACLs and users can be prepared on a plaintext cluster
    before it is secured). Administration reads and writes etcd directly, not a cache."""
    store = getattr(getattr(c, "security", None), "store", None)
    if store is not None:
        return store
    store = _stores.get(c.store)
    if store is None:
        store = _stores[c.store] = SecurityStore(c.store)
    return store


def audit_change(ctx: RequestContext, operation: str, resource: str, detail: str) -> None:
    audit.event("admin_change", principal=ctx.kafka_principal, host=ctx.host, door="rest", operation=operation,
                resource=resource, detail=detail, allowed=True)


def _views(bindings: list[AclBinding]) -> list[AclBindingView]:
    return [AclBindingView(**binding_to_json(b)) for b in bindings]


def _audit_bindings(ctx: RequestContext, operation: str, bindings: list[AclBinding]) -> None:
    for b in bindings:
        p, e = b.pattern, b.entry
        audit_change(ctx, operation, f"{p.resource_type.name}:{p.pattern_type.name}:{p.name}",
                     f"{e.principal} {e.permission_type.name} {e.operation.name} from host {e.host}")


# -- the APIs -----------------------------------------------------------------------------------------------


async def describe_acls(c: ControllerApi, ctx: RequestContext, request: AclBindingFilter) -> AclList:
    return AclList(acls=_views(await security_store(c).describe_acls(request.validate())))


async def create_acls(c: ControllerApi, ctx: RequestContext, request: CreateAcls) -> CreateAclsResult:
    bindings = list(dict.fromkeys(b.binding() for b in request.acls))  # all validated before any is written
    created = await security_store(c).add_acls(bindings)
    _audit_bindings(ctx, "CreateAcls", created)
    new = set(created)
    return CreateAclsResult(created=_views(created), existing=_views([b for b in bindings if b not in new]))


async def delete_acls(c: ControllerApi, ctx: RequestContext, request: AclBindingFilter) -> AclList:
    """Kafka's DeleteAcls with one filter: every binding it matches (a filter of ANY / absent fields matches
    broadly, MATCH every pattern applying to a name), returned as deleted."""
    deleted = await security_store(c).remove_acls(request.validate())
    _audit_bindings(ctx, "DeleteAcls", deleted)
    return AclList(acls=_views(deleted))
