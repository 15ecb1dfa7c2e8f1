"""Who asks, and the one place every service lets a request in: the request context and the
authorization hook, shared by the broker's request pipeline, the coordinator's and the controller's
gRPC services and the controller's REST API.

``RequestContext`` says who asks (principal — ``ANONYMOUS`` until authentication exists — client id,
peer), which API and when it arrived. ``enter`` builds it and asks the service's authorization hook
(today ``allow_all``; ACLs plug in here), raising ``NotAuthorized``. ``authorized_handlers`` puts that
entry in front of every method of a generated gRPC service (unary and streaming alike), so a method added
later cannot skip it; a refusal ends the call with PERMISSION_DENIED. With ``hand_context`` the method
receives the context it entered with, ``method(request, context, ctx)``, so the API behind it can decide
with it (per-resource ACLs).

Before the principal is resolved (``_guarded`` and ``resolve_principal``, which the broker's pipeline and
the quota service call), a call from a gRPC connection the process's ``GrpcConnectionGate``
(``shared.security.connection_rate``, installed by ``set_connection_gate`` when ``connection_creation_rate``
is limited) refuses ends RESOURCE_EXHAUSTED: a new connection from a host over its rate. Unlimited: one
list lookup per call; limited: one dict lookup per call from an admitted connection. Must not import services.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from shared.quota.entities import ANONYMOUS

if TYPE_CHECKING:
    from shared.security.connection_rate import GrpcConnectionGate

Handlers = dict[str, grpc.RpcMethodHandler]


@dataclass(slots=True)
class RequestContext:
    api: str
    client_id: str
    principal: str  # the principal's *name* ("ANONYMOUS", "alice", a mapped certificate DN): the quota user entity
    peer: str
    arrival: float  # time.monotonic()
    host: str = ""  # the peer's IP address, for ACL host matching ("" when unknown)
    cert_subject: str | None = None  # the verified client certificate's DN (RFC 4514), None without mTLS

    @property
    def kafka_principal(self) -> str:
        """Kafka's principal string, ``User:<name>``, as ACLs name it."""
        return f"User:{self.principal}"


#: ``(principal name, verified certificate DN or None)`` of a gRPC call, from its servicer context.
PrincipalResolver = Callable[[Any], tuple[str, str | None]]


def anonymous(context: Any) -> tuple[str, str | None]:
    """The resolver while security is off: everyone is ``ANONYMOUS``."""
    return ANONYMOUS, None


_resolver: list[PrincipalResolver] = [anonymous]


def set_principal_resolver(resolver: PrincipalResolver) -> None:
    """Installed once per process by the service's security setup (certificates, SCRAM sessions)."""
    _resolver[0] = resolver


def resolve_principal(context: Any) -> tuple[str, str | None]:
    """The call's ``(principal name, certificate DN)``; a call from a connection over the host's
    ``connection_creation_rate`` raises ``ConnectionThrottled`` (RESOURCE_EXHAUSTED set on ``context``)."""
    gate = _gate[0]
    if gate is not None and context.peer() not in gate.admitted:  # the hot path: one dict lookup
        refusal = connection_refusal(context)
        if refusal is not None:
            context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
            context.set_details(refusal)
            raise ConnectionThrottled(refusal)
    return _resolver[0](context)


class CallRefused(grpc.RpcError):
    """A call ended before its method ran, quietly (no traceback): ``shared.grpc_guard`` aborts it with the
    class's ``status``. As a ``grpc.RpcError`` it also passes the guard's generic handler untouched."""

    status = grpc.StatusCode.UNAVAILABLE


class Unauthenticated(CallRefused):
    """A call that carried a credential no longer (or never) valid, e.g. an unknown or expired session token:
    ``shared.grpc_guard`` ends it UNAUTHENTICATED (the client authenticates again)."""

    status = grpc.StatusCode.UNAUTHENTICATED


# -- connection_creation_rate on the gRPC doors -------------------------------------------------------------

_gate: list[GrpcConnectionGate | None] = [None]
_clock: list[Callable[[], float]] = [time.monotonic]
log = logging.getLogger(__name__)


class ConnectionThrottled(CallRefused):
    """A call from a new connection over its host's ``connection_creation_rate``: RESOURCE_EXHAUSTED."""

    status = grpc.StatusCode.RESOURCE_EXHAUSTED


def set_connection_gate(gate: GrpcConnectionGate | None, clock: Callable[[], float] = time.monotonic) -> None:
    """Installed once per process (``shared.service.serve``) when ``connection_creation_rate`` is limited."""
    _gate[0] = gate
    _clock[0] = clock


def _verified_certificate(context: Any) -> bool:
    try:
        auth = context.auth_context()
    except Exception:
        return False
    return bool(auth and auth.get("x509_subject"))


def connection_refusal(context: Any) -> str | None:
    """None when the call's connection is admitted (the hot path: one dict lookup), else why it is not.
    A connection with a verified client certificate (a service on the mutual-TLS port) is admitted
    without counting."""
    gate = _gate[0]
    if gate is None:
        return None
    peer = context.peer() or ""
    if peer in gate.admitted:
        return None
    now = _clock[0]()
    wait = gate.admit(peer, now, trusted=_verified_certificate(context))
    if wait <= 0.0:
        return None
    host = peer_host(peer)
    limiter = gate.limiter
    if limiter.should_log(host, now):
        log.warning("refusing a new gRPC connection: the host is over connection_creation_rate",
                    extra={"host": host, "connection_creation_rate": limiter.rate, "refused": limiter.refused})
    return (f"connection_creation_rate: too many new connections from {host} (at most {limiter.describe()}); "
            f"retry in {wait:.3f} s")


def peer_host(peer: str) -> str:
    """gRPC's peer string (``ipv4:127.0.0.1:5555``, ``ipv6:[::1]:5555``) or ``host:port`` -> the IP address."""
    if peer.startswith(("ipv4:", "ipv6:")):
        peer = peer[5:]
    host, sep, _port = peer.rpartition(":")
    if not sep:
        return peer
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def service_role(ctx: RequestContext) -> str | None:
    """The role (``broker``, ``controller``, ...) of a service certificate (``CN=<role>-<id>,OU=tidelog-service``),
    None for anything else: internal RPCs check it besides CLUSTER_ACTION."""
    return subject_role(ctx.cert_subject)


#: The principal (name) a request is served for while a broker forwards it: the Kafka door's admin requests
#: reach the controller's REST API with the broker's certificate and this name in ``ON_BEHALF_OF_HEADER``,
#: so the controller authorizes and audits the user, not the broker (it believes the header only from a
#: broker's certificate).
ON_BEHALF_OF: ContextVar[str | None] = ContextVar("tidelog_on_behalf_of", default=None)
ON_BEHALF_OF_HEADER = "x-tidelog-on-behalf-of"


def subject_role(subject: str | None) -> str | None:
    """``service_role`` of a certificate DN."""
    if not subject:
        return None
    parts = dict(p.split("=", 1) for p in subject.split(",") if "=" in p)
    if parts.get("OU") != "tidelog-service":
        return None
    role, sep, ident = parts.get("CN", "").rpartition("-")
    return role if sep and role and ident else None


Authorize = Callable[[RequestContext], bool]


def allow_all(ctx: RequestContext) -> bool:
    """The authorization hook until ACLs exist."""
    return True


class NotAuthorized(Exception):
    pass


def enter(api: str, client_id: str, peer: str, authorize: Authorize = allow_all,
          clock: Callable[[], float] = time.monotonic, principal: str = ANONYMOUS,
          cert_subject: str | None = None) -> RequestContext:
    """The request's context, authorized (raises ``NotAuthorized``)."""
    ctx = RequestContext(api, client_id, principal, peer, clock(), peer_host(peer), cert_subject)
    if not authorize(ctx):
        raise NotAuthorized(f"{ctx.principal} may not call {api}")
    return ctx


def authorized_handlers(authorize: Authorize = allow_all, skip: frozenset[str] = frozenset(),
                        hand_context: bool = False) -> Callable[[Handlers], Handlers]:
    """A ``RewrittenHandlers`` rewrite: every method of the service (but ``skip``, which enter the
    pipeline in their bodies) passes ``enter`` before its behaviour runs. With ``hand_context`` the
    behaviour is called as ``(request, context, ctx)``: the servicer's methods take the context built
    here (once per call, once per stream) instead of building their own."""

    def rewrite(handlers: Handlers) -> Handlers:
        for name, h in list(handlers.items()):
            if name in skip:
                continue
            for kind in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
                behavior = getattr(h, kind)
                if behavior is not None:
                    guarded = _guarded(name, kind, behavior, authorize, hand_context)
                    handlers[name] = h._replace(**{kind: guarded})  # type: ignore[attr-defined]
        return handlers

    return rewrite


def _guarded(api: str, kind: str, behavior: Any, authorize: Authorize, hand_context: bool) -> Any:
    async def check(request: Any, context: Any) -> RequestContext:
        gate = _gate[0]
        if gate is not None and context.peer() not in gate.admitted:  # the hot path: one dict lookup
            refusal = connection_refusal(context)
            if refusal is not None:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
                raise ConnectionThrottled(refusal)  # abort raises; this is for a context that does not
        client_id = getattr(request, "client_id", "") if not kind.startswith("stream") else ""
        principal, cert_subject = _resolver[0](context)
        try:
            return enter(api, client_id, context.peer() or "", authorize, principal=principal, cert_subject=cert_subject)
        except NotAuthorized as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
            raise  # abort raises; this is for a context that does not

    def run(request: Any, context: Any, ctx: RequestContext) -> Any:
        return behavior(request, context, ctx) if hand_context else behavior(request, context)

    if kind.endswith("_stream"):  # a response stream: an async generator
        async def streaming(request: Any, context: Any) -> Any:
            out = run(request, context, await check(request, context))
            if hasattr(out, "__aiter__"):
                async for item in out:
                    yield item
            else:
                for item in out:
                    yield item

        return streaming

    async def unary(request: Any, context: Any) -> Any:
        out = run(request, context, await check(request, context))
        return await out if inspect.isawaitable(out) else out

    return unary
