"""Authorization as a service's API modules ask for it: ``Access`` over the process's ``Authorizer``.

One ``Access`` per process (built from ``service.security``); every API module asks it ``allowed`` /
``require`` with the request's ``RequestContext`` (its Kafka principal ``User:<name>`` and peer host), an
operation, a resource type and a name. Plaintext (``Access.disabled()``, Kafka without
``authorizer.class.name``) allows everything: callers on a hot path test ``access.enabled`` once and
skip the rest. Secure: a decision is the authorizer's cached dict lookup.

``require`` raises ``AuthorizationFailed`` with Kafka's error for the resource type
(``TOPIC_AUTHORIZATION_FAILED`` 29, ``GROUP_AUTHORIZATION_FAILED`` 30, ``CLUSTER_AUTHORIZATION_FAILED`` 31,
``TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` 53); every denial is written to the audit log
(``shared.security.audit``) when that module exists.

Internal RPCs (follower fetch, transaction markers, cleaner leases, usage reports) also name the role of
the service certificate they must come from: ``require_service(ctx, "broker")`` wants a verified
``CN=broker-<id>,OU=tidelog-service`` certificate *and* CLUSTER_ACTION on the cluster.
Must not import ``services``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext, service_role
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType, normalize_host
from shared.security.authorizer import Authorizer

try:  # written by the audit helper; optional until it exists
    from shared.security import audit as _audit
except ImportError:  # pragma: no cover - depends on the tree
    _audit = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The error Kafka answers when an operation on a resource of this type is denied.
DENIED_CODE: dict[ResourceType, ErrorCode] = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}

TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                          ResourceType.TRANSACTIONAL_ID)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                                AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE)
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE)


class AuthorizationFailed(Exception):
    """A denied operation: Kafka's code (``code.name`` is what gRPC details and REST bodies carry)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def name(self) -> str:
        return self.code.name


def denied_code(rtype: ResourceType) -> ErrorCode:
    return DENIED_CODE.get(rtype, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def door_of(ctx: RequestContext) -> str:
    """``grpc`` for a gRPC peer string (``ipv4:...``), ``kafka`` for the Kafka listener's ``host:port``."""
    return "grpc" if ctx.peer.startswith(("ipv4:", "ipv6:", "unix:")) else "kafka"


def service_id(ctx: RequestContext) -> int | None:
    """The numeric id of a service certificate (``CN=broker-3,...`` -> 3), None for anything else."""
    if service_role(ctx) is None or not ctx.cert_subject:
        return None
    for part in ctx.cert_subject.split(","):
        key, _, value = part.partition("=")
        if key.strip() == "CN":
            ident = value.rpartition("-")[2]
            return int(ident) if ident.isdigit() else None
    return None


class Access:
    """Allowed or not, for one process. ``enabled`` False: everything is allowed, at no cost."""

    __slots__ = ("enabled", "authorizer", "_hosts")

    def __init__(self, security: Any = None, *, authorizer: Authorizer | None = None) -> None:
        """From a ``ServiceSecurity`` (``.enabled``, ``.authorizer``), or straight from an ``authorizer``
        (enabled; tests and tools)."""
        if authorizer is None and security is not None and getattr(security, "enabled", False):
            authorizer = security.authorizer
            if authorizer is None:  # never fail open: a secure process without an authorizer is a bug
                raise ValueError("security is enabled but the process has no authorizer")
        self.authorizer = authorizer
        self.enabled = authorizer is not None
        self._hosts: dict[str, str] = {}  # peer host -> the spelling ACLs use (IPv6 compressed)

    @classmethod
    def disabled(cls) -> Access:
        return cls()

    # -- decisions ---------------------------------------------------------------------------------

    def _host(self, host: str) -> str:
        h = self._hosts.get(host)
        if h is None:
            if len(self._hosts) > 10_000:
                self._hosts.clear()
            h = self._hosts[host] = normalize_host(host) if host else "*"
        return h

    def allowed(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """May the request's principal do ``op`` on the resource? (True when not enabled.)"""
        auth = self.authorizer
        if auth is None:
            return True
        return auth.authorize(ctx.kafka_principal, self._host(ctx.host), op, rtype, name)

    def allowed_any(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType) -> bool:
        """Kafka's ``authorizeByResourceType``: ``op`` on *some* resource of the type."""
        auth = self.authorizer
        if auth is None:
            return True
        return auth.authorize_by_resource_type(ctx.kafka_principal, self._host(ctx.host), op, rtype)

    def require(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME,
                code: ErrorCode | None = None) -> None:
        """``allowed`` or raise ``AuthorizationFailed`` (audited)."""
        if not self.allowed(ctx, op, rtype, name):
            raise self.denied(ctx, op, rtype, name, code)

    def check(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
        """``allowed``, auditing a denial (for callers that answer the error code themselves)."""
        if self.allowed(ctx, op, rtype, name):
            return True
        self.denied(ctx, op, rtype, name)
        return False

    def partition(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, items: Iterable[T],
                  name_of: Callable[[T], str]) -> tuple[list[T], list[T]]:
        """``(allowed, denied)`` items (Kafka's ``partitionSeqByAuthorized``), each name decided once;
        denials are audited, one line per distinct name."""
        ok: list[T] = []
        refused: list[T] = []
        seen: dict[str, bool] = {}
        for item in items:
            name = name_of(item)
            verdict = seen.get(name)
            if verdict is None:
                verdict = seen[name] = self.check(ctx, op, rtype, name)
            (ok if verdict else refused).append(item)
        return ok, refused

    def require_service(self, ctx: RequestContext, role: str | Iterable[str], op: AclOperation = CLUSTER_ACTION,
                        code: ErrorCode = ErrorCode.CLUSTER_AUTHORIZATION_FAILED) -> None:
        """An internal RPC: a verified service certificate of ``role`` (one of them) and ``op`` on the
        cluster. Raises ``AuthorizationFailed`` (audited) otherwise. Always allowed when not enabled."""
        if self.authorizer is None:
            return
        roles = (role,) if isinstance(role, str) else tuple(role)
        have = service_role(ctx)
        if have not in roles:
            raise self.denied(ctx, op, CLUSTER, CLUSTER_NAME, code,
                              detail=f"needs a {'/'.join(roles)} service certificate, has "
                                     f"{ctx.cert_subject or 'none'}")
        if not self.allowed(ctx, op, CLUSTER, CLUSTER_NAME):
            raise self.denied(ctx, op, CLUSTER, CLUSTER_NAME, code)

    def is_service(self, ctx: RequestContext, role: str, op: AclOperation = CLUSTER_ACTION) -> bool:
        """``require_service`` as a boolean (audited on refusal)."""
        try:
            self.require_service(ctx, role, op)
        except AuthorizationFailed:
            return False
        return True

    def denied(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str,
               code: ErrorCode | None = None, detail: str = "") -> AuthorizationFailed:
        """The error for a denial, after auditing it (the caller raises or answers it)."""
        code = code if code is not None else denied_code(rtype)
        resource = f"{rtype.name}:{name}"
        message = f"{ctx.kafka_principal} is not authorized to {op.name} {resource}" + (f" ({detail})" if detail
                                                                                        else "")
        audit(ctx, op, resource, message)
        return AuthorizationFailed(code, message)


def audit(ctx: RequestContext, op: AclOperation, resource: str, detail: str) -> None:
    """One ``authorization_denied`` audit event (nothing while the audit module is absent)."""
    if _audit is None:
        return
    try:
        _audit.event("authorization_denied", principal=ctx.kafka_principal, host=ctx.host, door=door_of(ctx),
                     operation=f"{ctx.api}:{op.name}", resource=resource, detail=detail)
    except Exception:  # auditing must never fail the request it reports
        log.exception("audit event failed")


DISABLED = Access.disabled()

__all__ = ["Access", "AuthorizationFailed", "DENIED_CODE", "DISABLED", "denied_code", "door_of", "service_id"]


class DenyAll:
    """The access of a TLS process whose security is not set up yet: nothing is allowed."""

    enabled = True

    def allowed(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return False

    def require(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME,
                code: ErrorCode | None = None) -> None:
        raise TidelogError("security is still starting; retry shortly", code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


DENY_ALL = DenyAll()


def access_of(holder: Any) -> Any:
    """The ``Access`` of a service's API object (one with ``security`` and ``_access`` attributes: the
    controller's and the coordinator's APIs, the transaction service), built once per ``security``; None
    when security is off; ``DENY_ALL`` while a TLS process's security is not set up yet."""
    from shared.security import transport

    security = getattr(holder, "security", None)
    if security is None:
        return DENY_ALL if transport.current() is not None else None
    if not security.enabled:
        return None
    access = holder._access
    if access is None or access[0] is not security:
        access = holder._access = (security, Access(security))
    return access[1]
