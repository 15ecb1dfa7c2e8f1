"""The controller's authorization (issue 23), shared by its two doors: the gRPC service (``grpc_api.py``)
and the REST API (``rest/``, whose per-route table is ``rest/rules.py``).

``access_of(c)`` is None while security is off (plaintext: Kafka without an authorizer, everything
allowed; one attribute read per call), else an ``Access`` (``shared.security.access``) over the process's
``ServiceSecurity`` (``ControllerApi.security``, set by the controller at start). A process configured for
TLS whose security object is not in place yet refuses everything.

gRPC rules: AlterPartition and ControlledShutdown only from a broker's service certificate
(``CN=broker-<id>,OU=tidelog-service``) whose id is the request's ``broker_id``, with CLUSTER_ACTION
(so a client holding a broker's incarnation from ``/v1/cluster`` cannot shut brokers out of the ISR);
AlterPartitionReassignments CLUSTER ALTER, ListPartitionReassignments CLUSTER DESCRIBE.
A refusal is CLUSTER_AUTHORIZATION_FAILED (31) in the response's error field, audited.
"""

from __future__ import annotations

import logging
from typing import Any

from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext, service_role
from shared.security.access import service_id
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger(__name__)

Op = AclOperation
Res = ResourceType

DENIED: dict[ResourceType, ErrorCode] = {
    Res.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    Res.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    Res.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    Res.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def door_of(ctx: RequestContext) -> str:
    """``rest`` for a REST route's context (its api is ``METHOD /path``), else ``grpc``."""
    return "rest" if " /" in ctx.api else "grpc"


def _audit(kind: str, ctx: RequestContext, operation: str, resource: str, detail: str, allowed: bool) -> None:
    try:
        from shared.security import audit
    except ImportError:  # pragma: no cover - the audit module lands with the admin helper
        log.info(kind, extra={"principal": ctx.kafka_principal, "api": ctx.api, "operation": operation,
                              "resource": resource, "detail": detail})
        return
    try:
        audit.event(kind, principal=ctx.kafka_principal, host=ctx.host, door=door_of(ctx),  # type: ignore[arg-type]
                    operation=operation, resource=resource, detail=detail, allowed=allowed)
    except Exception:  # auditing never fails the request it reports
        log.exception("audit failed")


def audit_denied(ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str, detail: str) -> None:
    _audit("authorization_denied", ctx, f"{ctx.api} {op.name}", f"{rtype.name}:{name}", detail, False)


def audit_change(ctx: RequestContext, resource: str, detail: str = "") -> None:
    """A successful admin change (topic created, quota set, election...) in the audit log."""
    _audit("admin_change", ctx, ctx.api, resource, detail, True)


def denied_error(ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str,
                 detail: str = "") -> TidelogError:
    """The (audited) error of a denial: Kafka's code for the resource type."""
    code = DENIED.get(rtype, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    message = f"{ctx.kafka_principal} is not authorized to {op.name} {rtype.name} {name!r}"
    if detail:
        message += f" ({detail})"
    audit_denied(ctx, op, rtype, name, code.name + (f": {detail}" if detail else ""))
    return TidelogError(message, code=code)


def allowed(access: Any, ctx: RequestContext, ops: AclOperation | tuple[AclOperation, ...], rtype: ResourceType,
            name: str) -> bool:
    """Any of ``ops`` allowed (no audit)."""
    if isinstance(ops, AclOperation):
        return access.allowed(ctx, ops, rtype, name)
    return any(access.allowed(ctx, op, rtype, name) for op in ops)


def require(access: Any, ctx: RequestContext, ops: AclOperation | tuple[AclOperation, ...], rtype: ResourceType,
            name: str) -> None:
    """Raise the audited ``TidelogError`` (29/30/31/53) unless one of ``ops`` is allowed."""
    if not allowed(access, ctx, ops, rtype, name):
        first = ops if isinstance(ops, AclOperation) else ops[0]
        raise denied_error(ctx, first, rtype, name)


def broker_refusal(access: Any, ctx: RequestContext, broker_id: int) -> str | None:
    """None when the caller is broker ``broker_id``'s own service certificate with CLUSTER_ACTION (or
    security is off: ``access`` None); else why not (audited)."""
    if access is None:
        return None
    if service_role(ctx) != "broker":
        detail = f"{ctx.api} is only for broker service certificates (has {ctx.cert_subject or 'none'})"
    elif service_id(ctx) != broker_id:
        detail = f"a certificate of broker {service_id(ctx)} may not speak for broker {broker_id}"
    elif not access.allowed(ctx, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME):
        detail = "no CLUSTER_ACTION"
    else:
        return None
    return str(denied_error(ctx, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME, detail))
