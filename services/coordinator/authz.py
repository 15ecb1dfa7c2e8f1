"""The coordinator's per-resource authorization (issue 23): who may join, commit, fetch, describe, delete
groups, and run transactions, as Kafka's ``KafkaApis`` decides for the same requests.

The API modules (``services/coordinator/api``) ask ``access_of(c)`` once per call: None while security
is off (plaintext: Kafka without an authorizer, everything allowed, one attribute read per call), else an
``Access`` over the process's ``ServiceSecurity`` (``c.security``, set by the service at start). A
process configured for TLS whose security object is not in place yet refuses everything (``DenyAll``):
the gRPC server starts listening before the ACLs are loaded.

Rules (Kafka's operations; a refusal is Kafka's error code in the response's error fields, audited):

- membership (Heartbeat, JoinGroup, SyncGroup, LeaveGroup, ConsumerGroupHeartbeat) and OffsetCommit:
  GROUP READ (GROUP_AUTHORIZATION_FAILED 30); a commit's topics TOPIC READ (TOPIC_AUTHORIZATION_FAILED
  29 per partition, the others committed); a heartbeat's subscribed topics TOPIC DESCRIBE;
- OffsetFetch: GROUP DESCRIBE, topics DESCRIBE (asked-for partitions of others answer 29, a fetch of all
  leaves them out); OffsetDelete: GROUP DELETE, topics READ;
- DescribeGroups: GROUP DESCRIBE per group (no member ids or epochs otherwise); ListGroups: only the
  groups the principal may describe (all with CLUSTER DESCRIBE); DeleteGroups: GROUP DELETE;
- FindCoordinator: GROUP DESCRIBE / TRANSACTIONAL_ID DESCRIBE per key;
- transactions: TRANSACTIONAL_ID WRITE for InitProducerId, AddPartitionsToTxn (and TOPIC WRITE per
  partition), AddOffsetsToTxn and TxnOffsetCommit (and GROUP READ), EndTxn; DESCRIBE for
  DescribeTransactions and the ids ListTransactions shows (53);
- internal: ``CompleteTxnOffsets`` only from a coordinator's service certificate, AddPartitionsToTxn
  ``verify_only`` only from a broker's or a coordinator's (``service_role``), each with CLUSTER CLUSTER_ACTION
  (CLUSTER_AUTHORIZATION_FAILED 31).
"""

from __future__ import annotations

import logging
from typing import Any

from shared.errors import ErrorCode
from shared.request_context import RequestContext, service_role
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger(__name__)

Op = AclOperation
Res = ResourceType
E = ErrorCode

#: resource type -> the Kafka error of a refusal on it
DENIED: dict[ResourceType, ErrorCode] = {
    Res.TOPIC: E.TOPIC_AUTHORIZATION_FAILED,
    Res.GROUP: E.GROUP_AUTHORIZATION_FAILED,
    Res.CLUSTER: E.CLUSTER_AUTHORIZATION_FAILED,
    Res.TRANSACTIONAL_ID: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def audit_denied(ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str, code: ErrorCode) -> None:
    """An authorization denial in the audit log (``shared.security.audit``), when that module exists."""
    try:
        from shared.security import audit
    except ImportError:  # pragma: no cover
        log.warning("authorization denied", extra={"principal": ctx.kafka_principal, "api": ctx.api,
                                                   "operation": op.name, "resource": f"{rtype.name}:{name}"})
        return
    try:
        audit.event("authorization_denied", principal=ctx.kafka_principal, host=ctx.host, door="grpc",
                    operation=f"{ctx.api} {op.name}", resource=f"{rtype.name}:{name}", detail=code.name)
    except Exception:  # never let auditing fail a request
        log.exception("audit failed")


def audit_change(ctx: RequestContext, resource: str, detail: str = "") -> None:
    """A successful admin change (a group deleted, offsets deleted) in the audit log."""
    try:
        from shared.security import audit

        audit.event("admin_change", principal=ctx.kafka_principal, host=ctx.host, door="grpc",
                    operation=ctx.api, resource=resource, detail=detail, allowed=True)
    except Exception:  # never let auditing fail a request
        log.exception("audit failed")


def allowed(access: Any, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str) -> bool:
    """One decision, audited when it is a refusal (``access`` is not None: security is on)."""
    if access.allowed(ctx, op, rtype, name):
        return True
    audit_denied(ctx, op, rtype, name, DENIED.get(rtype, E.CLUSTER_AUTHORIZATION_FAILED))
    return False


def denied_message(op: AclOperation, rtype: ResourceType, name: str) -> str:
    return f"{DENIED[rtype].name}: not authorized to {op.name} {rtype.name} {name!r}"


def internal_refusal(access: Any, ctx: RequestContext, *roles: str) -> str | None:
    """None when the caller is a service certificate of one of ``roles`` with CLUSTER_ACTION; else why not."""
    if service_role(ctx) not in roles:
        audit_denied(ctx, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME, E.CLUSTER_AUTHORIZATION_FAILED)
        return (f"CLUSTER_AUTHORIZATION_FAILED: {ctx.api} is only for {'/'.join(roles)} service certificates "
                f"(has {ctx.cert_subject or 'none'})")
    if not allowed(access, ctx, Op.CLUSTER_ACTION, Res.CLUSTER, CLUSTER_NAME):
        return f"CLUSTER_AUTHORIZATION_FAILED: {ctx.principal} may not CLUSTER_ACTION"
    return None


def split_topics(access: Any, ctx: RequestContext, op: AclOperation, names: Any) -> set[str]:
    """The distinct topic names among ``names`` the principal may not ``op`` (each audited once)."""
    return {name for name in set(names) if not allowed(access, ctx, op, Res.TOPIC, name)}
