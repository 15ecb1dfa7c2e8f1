"""Who may talk to the quota service (issue 23): usage reports only from brokers, each only as itself.

A forged ``ReportUsage`` stream claiming to be brokers 1-3 could throttle any client id (the throttle is
capped at the quota window by ``decider.py``, but even 11 s per request is a denial of service). When
security is on, a ``ReportUsage`` stream is accepted only from a broker's service certificate
(``CN=broker-<id>,OU=tidelog-service``, verified by the internal mTLS port) with CLUSTER_ACTION, and
every report in it must carry that certificate's id as ``broker_id``; ``DescribeUsage`` needs CLUSTER
DESCRIBE. A refusal ends the call with PERMISSION_DENIED, its details starting with Kafka's name
(``CLUSTER_AUTHORIZATION_FAILED``), and is audited. Plaintext: everything as before (no authorizer).

``add_to_server(servicer, server, security_of)`` registers the QuotaService behind these checks;
``security_of()`` gives the process's ``ServiceSecurity`` (None until it exists: then a TLS process
refuses, a plaintext one allows). ``report_refusal`` is the rule alone, for tests.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from shared.grpc_codecs import RewrittenHandlers
from shared.proto import quota_pb2 as qpb
from shared.proto import quota_pb2_grpc as qpb_grpc
from shared.request_context import RequestContext, enter, resolve_principal, service_role
from shared.security.access import service_id
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType

log = logging.getLogger(__name__)

DENIED = "CLUSTER_AUTHORIZATION_FAILED"


def _audit(ctx: RequestContext, op: AclOperation, detail: str) -> None:
    try:
        from shared.security import audit
    except ImportError:  # pragma: no cover
        log.warning("authorization denied", extra={"principal": ctx.kafka_principal, "api": ctx.api, "detail": detail})
        return
    try:
        audit.event("authorization_denied", principal=ctx.kafka_principal, host=ctx.host, door="grpc",
                    operation=f"{ctx.api} {op.name}", resource=f"CLUSTER:{CLUSTER_NAME}", detail=detail)
    except Exception:
        log.exception("audit failed")


def stream_refusal(access: Any, ctx: RequestContext) -> str | None:
    """None when the caller may open a usage stream (or security is off); else why not (audited)."""
    if access is None:
        return None
    if service_role(ctx) != "broker" or service_id(ctx) is None:
        why = f"{DENIED}: ReportUsage is only for broker service certificates (has {ctx.cert_subject or 'none'})"
    elif not access.allowed(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        why = f"{DENIED}: {ctx.kafka_principal} may not CLUSTER_ACTION"
    else:
        return None
    _audit(ctx, AclOperation.CLUSTER_ACTION, why)
    return why


def report_refusal(access: Any, ctx: RequestContext, broker_id: int) -> str | None:
    """None when this report may be counted: security off, or the stream's broker reporting as itself."""
    if access is None:
        return None
    if (why := stream_refusal(access, ctx)) is not None:
        return why
    if service_id(ctx) != broker_id:
        why = f"{DENIED}: broker {service_id(ctx)} may not report usage as broker {broker_id}"
        _audit(ctx, AclOperation.CLUSTER_ACTION, why)
        return why
    return None


def describe_refusal(access: Any, ctx: RequestContext) -> str | None:
    if access is None or access.allowed(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return None
    why = f"{DENIED}: {ctx.kafka_principal} may not DESCRIBE the cluster"
    _audit(ctx, AclOperation.DESCRIBE, why)
    return why


class QuotaAccess:
    """The process's ``Access``, built once from ``security_of()``; None while security is off."""

    def __init__(self, security_of: Callable[[], Any]) -> None:
        self.security_of = security_of
        self._built: tuple[Any, Any] | None = None

    def get(self) -> Any:
        security = self.security_of()
        if security is None:
            from shared.security import transport

            return _DENY_ALL if transport.current() is not None else None
        if not security.enabled:
            return None
        if self._built is None or self._built[0] is not security:
            from shared.security.access import Access

            self._built = (security, Access(security))
        return self._built[1]


class _DenyAll:
    def allowed(self, ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str = CLUSTER_NAME) -> bool:
        return False


_DENY_ALL = _DenyAll()


def _context(api: str, context: Any) -> RequestContext:
    principal, cert_subject = resolve_principal(context)
    return enter(api, "", context.peer() or "", principal=principal, cert_subject=cert_subject)


def guard(access: QuotaAccess) -> Callable[[dict[str, grpc.RpcMethodHandler]], dict[str, grpc.RpcMethodHandler]]:
    """The handler rewrite: ReportUsage and DescribeUsage behind their rules."""

    def rewrite(handlers: dict[str, grpc.RpcMethodHandler]) -> dict[str, grpc.RpcMethodHandler]:
        report = handlers.get("ReportUsage")
        if report is not None and report.stream_stream is not None:
            handlers["ReportUsage"] = report._replace(  # type: ignore[attr-defined]
                stream_stream=_guarded_reports(report.stream_stream, access))
        describe = handlers.get("DescribeUsage")
        if describe is not None and describe.unary_unary is not None:
            handlers["DescribeUsage"] = describe._replace(  # type: ignore[attr-defined]
                unary_unary=_guarded_describe(describe.unary_unary, access))
        return handlers

    return rewrite


def _guarded_reports(behavior: Any, access: QuotaAccess) -> Any:
    async def report_usage(requests: AsyncIterator[qpb.UsageReport], context: Any) -> AsyncIterator[Any]:
        acc = access.get()
        if acc is None:  # plaintext: exactly the servicer's stream
            async for out in behavior(requests, context):
                yield out
            return
        ctx = _context("ReportUsage", context)
        if (why := stream_refusal(acc, ctx)) is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
            return

        async def checked() -> AsyncIterator[qpb.UsageReport]:
            async for report in requests:
                if (refusal := report_refusal(acc, ctx, report.broker_id)) is not None:
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
                    return
                yield report

        async for out in behavior(checked(), context):
            yield out

    return report_usage


def _guarded_describe(behavior: Any, access: QuotaAccess) -> Any:
    async def describe_usage(request: qpb.DescribeUsageRequest, context: Any) -> Any:
        acc = access.get()
        if acc is not None and (why := describe_refusal(acc, _context("DescribeUsage", context))) is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        return await behavior(request, context)

    return describe_usage


def add_to_server(servicer: qpb_grpc.QuotaServiceServicer, server: Any,
                  security_of: Callable[[], Any] = lambda: None) -> None:
    """Register the QuotaService behind the rules above (``main.py``: ``security_of=lambda: self.security``)."""
    qpb_grpc.add_QuotaServiceServicer_to_server(servicer, RewrittenHandlers(server, guard(QuotaAccess(security_of))))
