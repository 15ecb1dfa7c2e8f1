"""The broker's Kafka-protocol listener: Kafka's binary protocol over TCP, translated onto the broker's
request layer (``services/broker/api``) through the per-API modules of this package.

One connection is served as Kafka's ``SocketServer`` serves it: one request at a time, in arrival order
(the client may pipeline; the next request is read once the previous one is answered), so appends of one
connection keep their order and responses go out in request order.

- A frame larger than ``socket.request.max.bytes`` is refused from its 4-byte size prefix, before its
  bytes are read (a body is only ever buffered as it arrives, never allocated from the prefix); the
  connection closes.
- ``max.connections.per.ip`` (Kafka's default: unlimited) bounds the open connections from one host, with
  ``max.connections.per.ip.overrides`` (``host:count,...``) per host: a connection over it is closed as
  soon as it is accepted, with one WARNING line per host per 10 s, before anything is read.
- ``connection_creation_rate`` (Kafka's per-IP quota, KIP-612; default unlimited, as Kafka) bounds how fast a
  host opens connections (``shared.security.connection_rate``: a token bucket per host, burst one second's
  worth). As Kafka's acceptor does with a connection over the quota, the connection is not counted, nothing
  is read from it, and it is closed once its throttle time has passed (at most ``MAX_THROTTLE_S``; at most
  ``MAX_THROTTLED_HELD`` are held at once, the rest closed at once), so a client that reconnects on close
  does not spin; one WARNING line per host per 10 s, ``throttled_connections`` counts them.
- A malformed frame, an unknown API key or an unsupported version of any API but ApiVersions closes the
  connection with one WARNING line. ApiVersions of an unknown version is answered in version 0 with
  ``UNSUPPORTED_VERSION`` and the versions served (KIP-511), as Kafka does.
- A connection idle for ``connections.max.idle.ms`` is closed (one sweeper task for all connections: an
  idle connection costs no timer).
- Every request passes the broker's request pipeline: context (client id, principal, peer) and the
  authorization hook, then the handler, then the KIP-219 throttle: a throttled response goes out at once
  with ``throttle_time_ms`` and the connection reads nothing more until the throttle has passed.

Secure broker (``security_protocol=SSL``, issue 23; ``services.broker.kafka.sasl``): the port speaks TLS
(a new ``SSLContext`` for new connections when the certificate files change). A verified client certificate
authenticates the connection (Kafka's SSL listener, ``ssl.client.auth=requested``); without one the client
must SASL-authenticate (SASL_SSL: SCRAM-SHA-256/512, PLAIN). Until it has, only ApiVersions, SaslHandshake
and SaslAuthenticate are served (anything else closes the connection, as Kafka) and no frame over
``sasl.server.max.receive.size`` (64 KiB here) is read. A failed authentication is answered with
``SASL_AUTHENTICATION_FAILED`` after a delay that grows with the host's recent failures, logged, audited,
and the connection closes. The connection's principal goes into every request's context. A plaintext
listener is exactly as it was (no TLS, no SASL APIs claimed, everyone ``ANONYMOUS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from typing import Any

from services.broker.kafka import sasl
from services.broker.kafka.apis import Connection, KafkaApis
from services.broker.kafka.frames import FrameStream
from services.broker.pipeline import NotAuthorized, RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import (
    MalformedRequest,
    RequestFrame,
    UnknownApi,
    api,
    build,
    encode_response,
    peek_header,
    read_request,
)
from shared.quota.entities import ANONYMOUS
from shared.request_context import ON_BEHALF_OF, peer_host
from shared.security.connection_rate import ConnectionRateLimiter
from shared.security.principal_mapping import NoMatchingRuleError
from shared.security.scram import SaslAuthenticationError

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
API_VERSIONS = 18
#: Kafka's default max.connections.per.ip: unlimited.
UNLIMITED = 2**31 - 1
_REJECT_LOG_EVERY_S = 10.0
#: a connection over connection_creation_rate is held (unread) at most this long before it is closed
MAX_THROTTLE_S = 10.0
#: and at most this many are held at once (more are closed at once)
MAX_THROTTLED_HELD = 1_000


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` as Kafka writes it: ``host:count`` pairs, comma-separated
    (an IPv6 host keeps its colons: the count follows the last one)."""
    out: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        out[host.strip().strip("[]")] = int(count)
    return out


class KafkaListener:
    def __init__(self, apis: KafkaApis, *, max_request_bytes: int = 100 * 1024 * 1024,
                 max_idle_ms: int = 600_000, max_connections_per_ip: int = UNLIMITED,
                 max_connections_per_ip_overrides: dict[str, int] | None = None,
                 connection_creation_rate: float = 0.0,
                 security: Any = None, sasl_max_receive_bytes: int = sasl.SASL_SERVER_MAX_RECEIVE_SIZE) -> None:
        """``security``: the broker's ``service.security`` (``ServiceSecurity``; TLS and SASL when it is
        enabled), or a ready ``sasl.ListenerSecurity``; None or disabled: plaintext. ``connection_creation_rate``:
        new connections per second per host (0: unlimited)."""
        self.apis = apis
        self.security: sasl.ListenerSecurity | None = (
            security if isinstance(security, sasl.ListenerSecurity) else sasl.ListenerSecurity.from_service(security))
        self.sasl_max_receive_bytes = min(sasl_max_receive_bytes, max_request_bytes)
        self.authentication_failures = 0
        if self.security is not None:
            sasl.register(apis)
        self.max_request_bytes = max_request_bytes
        self.max_idle_s = max_idle_ms / 1000
        self.max_connections_per_ip = max_connections_per_ip
        self.max_connections_per_ip_overrides = dict(max_connections_per_ip_overrides or {})
        self._per_host: dict[str, int] = {}
        self._rejected_logged: dict[str, float] = {}
        self.rejected_connections = 0
        self.connection_rate = ConnectionRateLimiter(connection_creation_rate)
        self.throttled_connections = 0
        self._throttled: set[FrameStream] = set()
        self.server: asyncio.Server | None = None
        self.port = 0
        self._connections: dict[FrameStream, Connection] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> int:
        secure = self.secure
        self.server = await asyncio.get_running_loop().create_server(
            lambda: FrameStream(self._serve, paused=secure), host, port, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]
        self._sweeper = asyncio.create_task(self._sweep_idle())
        return self.port

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self.server is not None:
            self.server.close()
        for writer in [*self._connections, *self._throttled]:
            writer.close()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)
        await self.apis.close()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def _sweep_idle(self) -> None:
        interval = min(max(self.max_idle_s / 4, 0.05), 10.0)
        while True:
            await asyncio.sleep(interval)
            cutoff = time.monotonic() - self.max_idle_s
            for writer, conn in list(self._connections.items()):
                if conn.last_active < cutoff and not conn.busy:
                    log.info("closing idle Kafka connection", extra={"peer": conn.peer})
                    writer.close()

    def _admit(self, host: str) -> bool:
        """Count a new connection from ``host`` if ``max.connections.per.ip`` (or its override) allows it."""
        limit = self.max_connections_per_ip_overrides.get(host, self.max_connections_per_ip)
        open_now = self._per_host.get(host, 0)
        if open_now >= limit:
            self.rejected_connections += 1
            now = time.monotonic()
            if now - self._rejected_logged.get(host, float("-inf")) >= _REJECT_LOG_EVERY_S:
                self._rejected_logged[host] = now
                log.warning("rejecting Kafka connection: the host has max.connections.per.ip open",
                            extra={"host": host, "max.connections.per.ip": limit})
            return False
        self._per_host[host] = open_now + 1
        return True

    def _over_rate(self, host: str) -> float:
        """0.0 when ``connection_creation_rate`` admits a new connection from ``host`` (and counts it), else
        how long to hold it before closing it (counted in ``throttled_connections``, logged once per 10 s)."""
        now = time.monotonic()
        wait = self.connection_rate.admit(host, now)
        if wait <= 0.0:
            return 0.0
        self.throttled_connections += 1
        if self.connection_rate.should_log(host, now):
            log.warning("throttling Kafka connection: the host is over connection_creation_rate; closing it "
                        "after its throttle time", extra={"host": host, "throttle_time_ms": int(wait * 1000),
                                                          "connection_creation_rate": self.connection_rate.rate,
                                                          "throttled_connections": self.throttled_connections})
        return min(wait, MAX_THROTTLE_S)

    async def _close_throttled(self, writer: FrameStream, wait: float) -> None:
        """Kafka's delayed close of a throttled connection: nothing is read, it closes after ``wait``."""
        if len(self._throttled) >= MAX_THROTTLED_HELD:
            writer.close()
            return
        self._throttled.add(writer)
        try:
            await asyncio.sleep(wait)
        finally:
            self._throttled.discard(writer)
            writer.close()

    def _release(self, host: str) -> None:
        left = self._per_host.get(host, 0) - 1
        if left > 0:
            self._per_host[host] = left
        else:
            self._per_host.pop(host, None)

    @property
    def secure(self) -> bool:
        return self.security is not None

    async def _serve(self, stream: FrameStream) -> None:
        reader = writer = stream
        peername = writer.get_extra_info("peername")
        host = str(peername[0]) if isinstance(peername, tuple) else str(peername)
        if not self.connection_rate.unlimited:
            wait = self._over_rate(host)
            if wait > 0.0:
                await self._close_throttled(writer, wait)
                return
        if not self._admit(host):
            writer.close()
            return
        peer = f"ipv4:{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        conn = Connection(peer)
        self._connections[writer] = conn
        try:
            if self.security is not None and not await self._start_tls(writer, conn):
                return
            await self._loop(reader, writer, conn)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Kafka connection failed", extra={"peer": peer})
        finally:
            self._release(host)
            self._connections.pop(writer, None)
            conn.close()
            writer.close()

    async def _start_tls(self, writer: FrameStream, conn: Connection) -> bool:
        """The TLS handshake (a context made for the current certificate files), then who the peer is:
        a verified client certificate authenticates it; without one it must SASL-authenticate."""
        security = self.security
        assert security is not None
        try:
            await writer.start_tls(security.context(), ssl_handshake_timeout=sasl.TLS_HANDSHAKE_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # plaintext to the TLS port, an unknown CA, an expired certificate, a timeout
            log.info("Kafka TLS handshake failed", extra={"peer": conn.peer, "error": str(exc) or type(exc).__name__})
            return False
        conn.sasl = security.new_session()  # SASL may still come first, even with a certificate
        subject = sasl.peer_subject(writer.get_extra_info("ssl_object"))
        if subject is None:
            conn.authenticated = False
            return True
        try:
            conn.principal = security.certificate_principal(subject)
        except NoMatchingRuleError as exc:
            self._authentication_failed(conn, None, f"ssl.principal.mapping.rules: {exc}", principal=f"User:{subject}")
            return False
        conn.cert_subject = subject
        return True

    async def _loop(self, reader: FrameStream, writer: FrameStream, conn: Connection) -> None:
        apis = self.apis
        pipeline = apis.pipeline
        while True:
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            conn.last_active = time.monotonic()
            if size < 0 or size > self.max_request_bytes:
                log.warning("closing Kafka connection: request size out of bounds",
                            extra={"peer": conn.peer, "size": size, "socket.request.max.bytes": self.max_request_bytes})
                return
            if not conn.authenticated and size > self.sasl_max_receive_bytes:  # checked before reading a byte of it
                log.warning("closing Kafka connection: request size over the bound before authentication",
                            extra={"peer": conn.peer, "size": size,
                                   "sasl.server.max.receive.size": self.sasl_max_receive_bytes})
                return
            frame = await reader.readexactly(size)
            conn.busy = True
            try:
                session = conn.sasl
                if session is not None and session.raw_tokens:
                    reply = await self._raw_token(frame, conn, session)
                else:
                    reply = await self._handle(frame, conn)
            finally:
                conn.busy = False
                conn.last_active = time.monotonic()
            if reply is None:  # closed by the handler (already logged)
                return
            chunks, throttle_ms = reply
            if chunks:
                writer.write_pieces(chunks)
                if writer.write_buffer_size() > 4 * 1024 * 1024:
                    await writer.drain()
            if conn.close_after_reply:
                if conn.sasl is not None and conn.sasl.state is sasl.SaslState.FAILED:
                    log.info("closing Kafka connection after a failed SASL exchange", extra={"peer": conn.peer})
                else:
                    log.info("closing Kafka connection after a failed acks=0 produce", extra={"peer": conn.peer})
                await writer.drain()
                return
            if throttle_ms > 0:  # KIP-219: mute the connection until the throttle has passed
                await pipeline.hold(pipeline.clock() + throttle_ms / 1000)

    async def _handle(self, frame: bytes, conn: Connection) -> tuple[list[bytes], int] | None:
        try:
            key, version, correlation_id = peek_header(frame)
        except MalformedRequest as exc:
            log.warning("closing Kafka connection: malformed request", extra={"peer": conn.peer, "error": str(exc)})
            return None
        served = self.apis.versions.get(key)
        if served is None or not served[0] <= version <= served[1]:
            if key == API_VERSIONS:
                return [b"".join(encode_response(api(API_VERSIONS, 0), correlation_id,
                                                 self.apis.unsupported_api_versions()))], 0
            log.warning("closing Kafka connection: unsupported request",
                        extra={"peer": conn.peer, "api_key": key, "api_version": version,
                               "served": list(served) if served else None})
            return None
        session = conn.sasl
        if session is not None:  # a secure connection on which SASL may still run
            if key == sasl.SASL_HANDSHAKE or key == sasl.SASL_AUTHENTICATE:
                return await self._sasl_request(frame, key, version, conn, session)
            if not conn.authenticated:
                if key != API_VERSIONS:
                    log.warning("closing Kafka connection: unexpected request before authentication",
                                extra={"peer": conn.peer, "api_key": key, "api_version": version})
                    return None
            elif key != API_VERSIONS:
                conn.sasl = None  # authenticated by its certificate and at work: SASL is over
        try:
            request = read_request(frame, api(key, version))
        except (MalformedRequest, UnknownApi) as exc:
            log.warning("closing Kafka connection: malformed request", extra={"peer": conn.peer, "error": str(exc)})
            return None
        try:
            if conn.cert_subject is None and conn.principal == ANONYMOUS:
                ctx = self.apis.pipeline.context(request.api.name, request.client_id, conn.peer)
            else:
                ctx = self._context(request, conn)
        except NotAuthorized as exc:
            log.warning("closing Kafka connection: not authorized", extra={"peer": conn.peer, "error": str(exc)})
            return None
        if ctx.principal == ANONYMOUS and ctx.cert_subject is None:
            body, throttle_ms = await self.apis.handle(request, ctx, conn)
        else:  # what the broker forwards (admin requests to the controller) goes on behalf of this principal
            token = ON_BEHALF_OF.set(ctx.principal)
            try:
                body, throttle_ms = await self.apis.handle(request, ctx, conn)
            finally:
                ON_BEHALF_OF.reset(token)
        if body is None:  # acks=0: no response
            return [], throttle_ms
        return encode_response(request.api, request.correlation_id, body), throttle_ms


    # -- authentication (secure listener) -----------------------------------------------------------------

    def _context(self, request: RequestFrame, conn: Connection) -> RequestContext:
        """The request's context with the connection's principal, through the pipeline's hook."""
        return self.apis.pipeline.context(request.api.name, request.client_id, conn.peer,
                                          principal=conn.principal, cert_subject=conn.cert_subject)

    async def _sasl_request(self, frame: bytes, key: int, version: int, conn: Connection,
                            session: sasl.SaslSession) -> tuple[list[bytes], int] | None:
        """SaslHandshake / SaslAuthenticate while the connection may still authenticate."""
        try:
            request = read_request(frame, api(key, version))
        except (MalformedRequest, UnknownApi) as exc:
            log.warning("closing Kafka connection: malformed request", extra={"peer": conn.peer, "error": str(exc)})
            return None
        if key == sasl.SASL_HANDSHAKE:
            values = session.handshake(version, str(request.body.mechanism))
            if values["error_code"] != ErrorCode.NONE:
                log.warning("closing Kafka connection: SASL handshake refused",
                            extra={"peer": conn.peer, "mechanism": str(request.body.mechanism)[:64],
                                   "error": ErrorCode(values["error_code"]).name})
                conn.close_after_reply = True
            return self._reply(request, values), 0
        if session.raw_tokens or session.state is not sasl.SaslState.AUTHENTICATE:
            state = "handshake v0 (bare tokens)" if session.raw_tokens else session.state.value
            log.warning("closing Kafka connection: SaslAuthenticate out of turn", extra={"peer": conn.peer, "state": state})
            session.state = sasl.SaslState.FAILED
            conn.close_after_reply = True
            return self._reply(request, {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                                         "error_message": f"Unexpected SaslAuthenticate request in state {state}"}), 0
        answer = await self._authenticate(conn, session, bytes(request.body.auth_bytes))
        if answer is None:
            conn.close_after_reply = True
            return self._reply(request, {"error_code": ErrorCode.SASL_AUTHENTICATION_FAILED,
                                         "error_message": sasl.failure_message(session.mechanism),
                                         "auth_bytes": b""}), 0
        return self._reply(request, {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": answer,
                                     "session_lifetime": 0}), 0

    async def _raw_token(self, frame: bytes, conn: Connection,
                         session: sasl.SaslSession) -> tuple[list[bytes], int] | None:
        """After SaslHandshake v0 the tokens come bare (size prefix, no Kafka header) and go back the same
        way; a failure just closes the connection (v0 has no way to say why)."""
        answer = await self._authenticate(conn, session, frame)
        if answer is None:
            return None
        return [_SIZE.pack(len(answer)), answer], 0

    async def _authenticate(self, conn: Connection, session: sasl.SaslSession, token: bytes) -> bytes | None:
        """One token through the session; None when authentication failed (logged, counted, audited,
        answered only after the host's delay)."""
        security = self.security
        assert security is not None
        host = peer_host(conn.peer)
        tracker = security.tracker
        if session.tokens == 0:  # once per attempt: a host that failed recently has its next attempt looked at later
            wait = tracker.delay_s(host, security.clock())
            if wait > 0:
                await asyncio.sleep(wait)
        try:
            answer = await sasl.run_step(session, token)
        except SaslAuthenticationError as exc:
            user = session.user_attempted
            delay = self._authentication_failed(conn, session.mechanism, str(exc),
                                                principal=f"User:{user}" if user else "User:ANONYMOUS")
            await asyncio.sleep(max(delay, sasl.FAILED_AUTHENTICATION_DELAY_S))
            return None
        if session.complete:
            tracker.success(host)
            assert session.username is not None
            conn.principal = session.username
            conn.cert_subject = None  # the SASL user is who this connection is
            conn.authenticated = True
            conn.sasl = None
            log.debug("Kafka client authenticated", extra={"peer": conn.peer, "mechanism": session.mechanism,
                                                             "principal": f"User:{session.username}"})
        return answer

    def _authentication_failed(self, conn: Connection, mechanism: str | None, reason: str, *,
                               principal: str) -> float:
        security = self.security
        assert security is not None
        host = peer_host(conn.peer)
        self.authentication_failures += 1
        delay = security.tracker.failure(host, security.clock())
        log.warning("Kafka authentication failed", extra={"peer": conn.peer, "mechanism": mechanism,
                                                          "principal": principal[:256], "reason": reason[:256],
                                                          "delay_s": round(delay, 3)})
        sasl.audit_failure(principal, host, mechanism, reason)
        return delay

    @staticmethod
    def _reply(request: RequestFrame, values: dict[str, Any]) -> list[bytes]:
        return [b"".join(encode_response(request.api, request.correlation_id, build(request.api.response, values)))]
