"""User authentication over gRPC: a SCRAM handshake RPC that opens a session, and the principal
resolver that maps a call's session token (or its client certificate) to a principal.

Why a session and not per-call SCRAM: each SCRAM proof costs the client a PBKDF2 (>= 4096 HMACs) and
two round trips. So ``Sasl.Authenticate`` runs one exchange (RFC 5802 / 7677, ``shared.security.scram``)
in two calls — client-first -> server-first + a handshake id, then client-final -> server-final + a
random session token and its lifetime (Kafka's ``connections.max.reauth.ms``: 1 h by default) — and
later calls carry ``authorization: Bearer <token>`` metadata (``grpc.metadata_call_credentials`` on the
client, over TLS, which keeps the token secret). gRPC does not expose its connections to handlers, so
the session is bound to the peer's host instead: a token presented from another host is not honoured.

The resolver (installed with ``shared.request_context.set_principal_resolver``) answers, per call:
a valid token from its host -> the session's user (while the user keeps the credential it authenticated
with: deleting the user or changing the password ends its sessions); no token -> the verified client certificate's mapped
principal (mTLS, ``ServiceSecurity.certificate_principal``), else ``ANONYMOUS``; a token that is
unknown, expired or from another host -> the call ends ``UNAUTHENTICATED`` and the client
authenticates again.

Bounds (before authentication, nothing large): the session table holds at most ``max_sessions``
(expired ones first out, then the oldest), pending handshakes at most ``max_pending`` (and
``max_pending_per_host`` per host) for
``handshake_timeout_s`` each, SCRAM messages at most ``scram.MAX_MESSAGE_BYTES``. Failed attempts are
logged, reported to the audit log (``shared.security.audit`` when present) and slowed per host
(``AuthFailureTracker``: the answer to a host with recent failures waits its delay). Tokens are looked
up by their SHA-256, so the lookup never compares secret bytes. Must not import ``services``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from shared import request_context
from shared.errors import ErrorCode
from shared.proto import security_pb2 as spb
from shared.proto import security_pb2_grpc as spb_grpc
from shared.quota.entities import ANONYMOUS
from shared.request_context import peer_host
from shared.security.auth_failures import AuthFailureTracker
from shared.security.scram import (
    MAX_MESSAGE_BYTES,
    MECHANISMS,
    SaslAuthenticationError,
    ScramServer,
    parse_client_first,
)

log = logging.getLogger(__name__)

#: Kafka's connections.max.reauth.ms is unbounded by default; a session here lives at most this long.
DEFAULT_SESSION_LIFETIME_S = 3600.0
HANDSHAKE_TIMEOUT_S = 10.0
MAX_SESSIONS = 100_000
MAX_PENDING = 1_000
MAX_PENDING_PER_HOST = 16
BEARER = "bearer "
#: Kafka's message for a failed SCRAM exchange (it never says which rule failed).
FAILED_MESSAGE = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"

#: ``request_context.Unauthenticated`` (when it exists) ends the call UNAUTHENTICATED in the guard, quietly;
#: as a ``grpc.RpcError`` it also passes ``shared.grpc_guard`` untouched (grpc keeps the code set here).
_BASES: tuple[type[Exception], ...] = tuple(
    b for b in (getattr(request_context, "Unauthenticated", None), grpc.RpcError) if b is not None)


class InvalidSession(*_BASES):  # type: ignore[misc]
    """A call presented a session token that is unknown, expired or from another host: UNAUTHENTICATED."""


@dataclass(frozen=True, slots=True)
class Session:
    principal: str  # the user's name ("alice"): RequestContext.principal
    host: str
    mechanism: str
    expires_at: float  # clock()
    credential: Any  # the user's credential when it authenticated: a deleted user or a new password ends it


@dataclass(slots=True)
class _Pending:
    scram: ScramServer
    user: str
    host: str
    mechanism: str
    expires_at: float


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def bearer_token(context: Any) -> str | None:
    """The token of an ``authorization: Bearer <token>`` metadata entry, None without one."""
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            if text[:7].lower() == BEARER:
                return text[7:].strip()
            return ""  # some other scheme: not a session token
    return None


def _audit(**fields: Any) -> None:
    """Report to the audit log when the module exists (written by another change; optional here)."""
    try:
        from shared.security import audit
    except ImportError:
        return
    try:
        audit.event(**fields)
    except Exception as exc:  # the audit log must never break authentication
        log.debug("audit event not written", extra={"error": str(exc)})


class GrpcAuthenticator:
    """The session table, the pending handshakes and the per-host failure accounting of one process."""

    def __init__(self, credential: Callable[[str, str], Any], *,
                 certificate_principal: Callable[[Any], tuple[str, str | None]] | None = None,
                 session_lifetime_s: float = DEFAULT_SESSION_LIFETIME_S,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
                 max_sessions: int = MAX_SESSIONS, max_pending: int = MAX_PENDING,
                 max_pending_per_host: int = MAX_PENDING_PER_HOST,
                 failures: AuthFailureTracker | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = asyncio.sleep) -> None:
        self._credential = credential
        self._certificate_principal = certificate_principal
        self.session_lifetime_s = session_lifetime_s
        self.handshake_timeout_s = handshake_timeout_s
        self.max_sessions = max_sessions
        self.max_pending = max_pending
        self.max_pending_per_host = max_pending_per_host
        self.failures = failures if failures is not None else AuthFailureTracker()
        self._clock = clock
        self._sleep = sleep
        self._sessions: OrderedDict[bytes, Session] = OrderedDict()  # by SHA-256 of the token, oldest first
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._unknown_user_secret = os.urandom(32)
        self.authentications = 0
        self.failed_authentications = 0

    # -- sessions ------------------------------------------------------------------------------------------

    def session(self, token: str, host: str) -> Session | None:
        """The live session of ``token`` opened from ``host``, else None."""
        key = _digest(token)
        s = self._sessions.get(key)
        if s is None or s.host != host:
            return None
        if self._clock() >= s.expires_at or self._credential(s.principal, s.mechanism) != s.credential:
            self._sessions.pop(key, None)
            return None
        return s

    def _open_session(self, principal: str, host: str, mechanism: str) -> str:
        credential = self._credential(principal, mechanism)
        now = self._clock()
        if len(self._sessions) >= self.max_sessions:
            for key in [k for k, s in self._sessions.items() if now >= s.expires_at]:
                del self._sessions[key]
            while len(self._sessions) >= self.max_sessions:
                self._sessions.popitem(last=False)
        token = secrets.token_urlsafe(32)
        self._sessions[_digest(token)] = Session(principal, host, mechanism, now + self.session_lifetime_s, credential)
        return token

    def revoke_user(self, principal: str) -> int:
        """End every session of a user (e.g. after the user was deleted); returns how many."""
        doomed = [k for k, s in self._sessions.items() if s.principal == principal]
        for key in doomed:
            del self._sessions[key]
        return len(doomed)

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- the resolver ------------------------------------------------------------------------------------------

    def principal_of(self, context: Any) -> tuple[str, str | None]:
        """The call's principal: its session's user, its certificate's mapped name, or ANONYMOUS. A token
        that is not a live session of this host counts as no credential here (``resolve`` refuses it)."""
        token = bearer_token(context)
        if token:
            s = self.session(token, peer_host(context.peer() or ""))
            if s is not None:
                return s.principal, None
        return self._certificate(context)

    def _certificate(self, context: Any) -> tuple[str, str | None]:
        if self._certificate_principal is not None:
            return self._certificate_principal(context)
        return ANONYMOUS, None

    def resolve(self, context: Any) -> tuple[str, str | None]:
        """The process-wide principal resolver: as ``principal_of``, but a call whose token is not a
        live session of its host ends UNAUTHENTICATED (so the client authenticates again)."""
        token = bearer_token(context)
        if token is None:
            return self._certificate(context)
        host = peer_host(context.peer() or "")
        s = self.session(token, host) if token else None
        if s is not None:
            return s.principal, None
        log.info("call with an unknown or expired session token refused", extra={"host": host})
        _audit(kind="authentication_failure", principal="User:" + ANONYMOUS, host=host, door="grpc",
               operation="session", resource="", detail="unknown or expired session token")
        context.set_code(grpc.StatusCode.UNAUTHENTICATED)
        context.set_details("SESSION_EXPIRED: unknown or expired session token; authenticate again")
        raise InvalidSession("unknown or expired session token; authenticate again")

    # -- the handshake -----------------------------------------------------------------------------------------

    def _expire_pending(self, now: float) -> None:
        while self._pending:
            hid, p = next(iter(self._pending.items()))
            if now < p.expires_at:
                break
            del self._pending[hid]

    async def authenticate(self, request: spb.SaslAuthenticateRequest, host: str) -> spb.SaslAuthenticateResponse:
        mech_name = request.mechanism.upper()
        mech = MECHANISMS.get(mech_name)
        if mech is None:
            return spb.SaslAuthenticateResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                error_message=f"Unsupported SASL mechanism {request.mechanism}",
                enabled_mechanisms=list(MECHANISMS))
        if not request.handshake_id:  # a new attempt from a host with recent failures waits first
            delay = self.failures.delay_s(host, self._clock())
            if delay > 0:
                await self._sleep(delay)
        if len(request.auth_bytes) > MAX_MESSAGE_BYTES:
            return await self._failed(host, mech_name, "", "SCRAM message too large")
        now = self._clock()
        self._expire_pending(now)
        if not request.handshake_id:
            return self._first(request, host, mech_name, now)
        p = self._pending.pop(request.handshake_id, None)
        if p is None or p.host != host or p.mechanism != mech_name:
            return await self._failed(host, mech_name, "", "unknown or expired handshake")
        try:
            server_final = p.scram.client_final(bytes(request.auth_bytes))
        except SaslAuthenticationError as exc:
            return await self._failed(host, mech_name, p.user, str(exc))
        user = p.scram.username or ""
        token = self._open_session(user, host, mech_name)
        self.failures.success(host)
        self.authentications += 1
        log.info("SASL authentication succeeded", extra={"principal": "User:" + user, "host": host,
                                                          "mechanism": mech_name})
        return spb.SaslAuthenticateResponse(auth_bytes=server_final, session_token=token,
                                            session_lifetime_ms=int(self.session_lifetime_s * 1000))

    def _first(self, request: spb.SaslAuthenticateRequest, host: str, mech_name: str,
               now: float) -> spb.SaslAuthenticateResponse:
        if (len(self._pending) >= self.max_pending
                or sum(1 for p in self._pending.values() if p.host == host) >= self.max_pending_per_host):
            log.warning("SASL handshake refused: too many in progress", extra={"host": host})
            return spb.SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                error_message="too many authentications in progress; retry later")
        mech = MECHANISMS[mech_name]
        scram = ScramServer(mech, lambda user: self._credential(user, mech_name),
                            unknown_user_secret=self._unknown_user_secret)
        try:
            server_first = scram.client_first(bytes(request.auth_bytes))
            user = parse_client_first(bytes(request.auth_bytes)).username
        except SaslAuthenticationError as exc:
            # answered at once: the delay of a malformed first message is the next attempt's
            self._record_failure(host, mech_name, "", str(exc))
            return spb.SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                error_message=FAILED_MESSAGE.format(mech_name))
        hid = secrets.token_urlsafe(16)
        self._pending[hid] = _Pending(scram, user, host, mech_name, now + self.handshake_timeout_s)
        return spb.SaslAuthenticateResponse(auth_bytes=server_first, handshake_id=hid)

    def _record_failure(self, host: str, mech_name: str, name: str, reason: str) -> float:
        self.failed_authentications += 1
        delay = self.failures.failure(host, self._clock())
        log.warning("SASL authentication failed", extra={"host": host, "user": name, "mechanism": mech_name,
                                                         "reason": reason, "delay_s": round(delay, 3)})
        _audit(kind="authentication_failure", principal=f"User:{name}" if name else "User:" + ANONYMOUS,
               host=host, door="grpc", operation="SaslAuthenticate", resource="", detail=reason)
        return delay

    async def _failed(self, host: str, mech_name: str, name: str, reason: str) -> spb.SaslAuthenticateResponse:
        delay = self._record_failure(host, mech_name, name, reason)
        if delay > 0:  # as Kafka's connection.failed.authentication.delay.ms: the failure answers late
            await self._sleep(delay)
        return spb.SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                                            error_message=FAILED_MESSAGE.format(mech_name))


class SaslServicer(spb_grpc.SaslServicer):
    def __init__(self, auth: GrpcAuthenticator) -> None:
        self.auth = auth

    async def Authenticate(self, request: spb.SaslAuthenticateRequest, context: Any) -> spb.SaslAuthenticateResponse:
        # not behind request_context's guard (it resolves no principal): a new connection over its host's
        # connection_creation_rate is refused here, before any SCRAM work
        refusal = request_context.connection_refusal(context)
        if refusal is not None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        return await self.auth.authenticate(request, peer_host(context.peer() or ""))


def attach(server: grpc.aio.Server, security: Any, **options: Any) -> GrpcAuthenticator:
    """Register the Sasl service on ``server`` (before it starts) and install the resolver that knows
    its sessions (and, without a token, ``security.certificate_principal``). ``security`` is the
    process's ``ServiceSecurity`` (``.store.credential(user, mechanism)``); returns the authenticator."""

    def credential(user: str, mech: str) -> Any:
        store = security.store  # looked up per handshake: the store may be set up after attach
        return store.credential(user, mech) if store is not None else None

    auth = GrpcAuthenticator(credential, certificate_principal=security.certificate_principal, **options)
    spb_grpc.add_SaslServicer_to_server(SaslServicer(auth), server)
    request_context.set_principal_resolver(auth.resolve)
    return auth
