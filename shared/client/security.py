"""Client-side security: kafka-python's settings turned into gRPC channels and REST options.

``security_protocol``:

* ``"PLAINTEXT"`` (the default): ``client_security(...)`` returns None and every channel stays the
  plain ``grpc.insecure_channel`` it always was (no per-call cost at all);
* ``"SSL"``: TLS verifying the cluster against ``ssl_cafile``; with ``ssl_certfile`` / ``ssl_keyfile``
  the client presents its certificate (mutual TLS: the certificate is the principal);
* ``"SASL_SSL"``: TLS plus SCRAM (``sasl_mechanism`` ``"SCRAM-SHA-256"`` | ``"SCRAM-SHA-512"``,
  ``sasl_plain_username``, ``sasl_plain_password``). Each channel carries
  ``grpc.metadata_call_credentials`` whose plugin attaches ``authorization: Bearer <token>``; the token
  comes from one SCRAM exchange per server address (``Sasl.Authenticate``, ``shared.security.grpc_auth``),
  cached and shared by every channel to that address, redone before it expires and after a call ends
  UNAUTHENTICATED (the server restarted or dropped the session). The client checks the server's nonce
  extends its own and verifies the server's signature (``ScramClient``), so a server that does not know
  the user's ServerKey cannot pose as the cluster.

REST (the Admin client, the CLI): HTTPS verified with ``ssl_cafile``; HTTP Basic with the SASL user
(the controller checks it against the same SCRAM credentials); the client certificate when given.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc

from shared.errors import ErrorCode, TidelogError, error_for
from shared.proto import security_pb2 as spb
from shared.proto import security_pb2_grpc as spb_grpc
from shared.security.scram import SaslAuthenticationError, ScramClient, mechanism

if TYPE_CHECKING:
    from shared.security.transport import TlsFiles

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_SSL = "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_SSL)
DEFAULT_SASL_MECHANISM = "SCRAM-SHA-512"
#: A session is renewed once this share of its lifetime has passed (Kafka re-authenticates at 85-95%).
RENEW_AT = 0.85
HANDSHAKE_TIMEOUT_S = 10.0

Options = Sequence[tuple[str, Any]] | None


def authentication_failed(message: str) -> TidelogError:
    """Kafka's ``SaslAuthenticationException`` (``SASL_AUTHENTICATION_FAILED``, 58): wrong user or
    password, or the server could not prove it knows the user's credential. Not retriable."""
    return error_for(ErrorCode.SASL_AUTHENTICATION_FAILED, message)


@dataclass(frozen=True)
class SecurityConfig:
    """kafka-python's names, validated."""

    security_protocol: str = PLAINTEXT
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def __post_init__(self) -> None:
        proto = (self.security_protocol or PLAINTEXT).upper()
        object.__setattr__(self, "security_protocol", proto)
        if proto not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, got {proto!r}")
        if proto == PLAINTEXT:
            return
        if not self.ssl_cafile:
            raise ValueError(f"security_protocol={proto} needs ssl_cafile (the cluster's CA certificate)")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together")
        if proto == SASL_SSL:
            mech = self.sasl_mechanism or DEFAULT_SASL_MECHANISM
            mechanism(mech)  # raises ValueError for an unsupported one
            object.__setattr__(self, "sasl_mechanism", mech.upper())
            if not self.sasl_plain_username or not self.sasl_plain_password:
                raise ValueError("security_protocol=SASL_SSL needs sasl_plain_username and sasl_plain_password")

    @property
    def tls(self) -> TlsFiles | None:
        if self.security_protocol == PLAINTEXT:
            return None
        from shared.security.transport import TlsFiles  # cryptography: only for secure clients
        assert self.ssl_cafile
        return TlsFiles(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)


def client_security(security_protocol: str | None = PLAINTEXT, sasl_mechanism: str | None = None,
                    sasl_plain_username: str | None = None, sasl_plain_password: str | None = None,
                    ssl_cafile: str | None = None, ssl_certfile: str | None = None,
                    ssl_keyfile: str | None = None) -> ClientSecurity | None:
    """The security of a client built with kafka-python's settings; None for PLAINTEXT."""
    config = SecurityConfig(security_protocol or PLAINTEXT, sasl_mechanism, sasl_plain_username, sasl_plain_password,
                            ssl_cafile, ssl_certfile, ssl_keyfile)
    return None if config.security_protocol == PLAINTEXT else ClientSecurity(config)


@dataclass
class _Session:
    token: str
    renew_at: float  # time.monotonic()


class _AddressSessions:
    """The session with one server address: one handshake at a time, shared by every channel."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.session: _Session | None = None
        self.error: SaslAuthenticationError | None = None  # the last handshake's refusal


class ClientSecurity:
    """Channels and REST options for one client (a Producer, Consumer, Admin or the CLI)."""

    def __init__(self, config: SecurityConfig) -> None:
        if config.security_protocol == PLAINTEXT:
            raise ValueError("ClientSecurity is for SSL and SASL_SSL; PLAINTEXT needs none")
        self.config = config
        tls = config.tls
        assert tls is not None
        self.tls = tls
        self.sasl = config.security_protocol == SASL_SSL
        self._sessions: dict[str, _AddressSessions] = {}
        self._lock = threading.Lock()
        self.handshakes = 0  # completed SCRAM exchanges (for tests and metrics)

    # -- gRPC -------------------------------------------------------------------------------------------------

    def channel(self, address: str, options: Options = None) -> grpc.Channel:
        """A TLS channel to ``address``; with SASL_SSL every call on it carries the address's session token."""
        from shared.security.transport import channel_credentials
        if not self.sasl:
            return grpc.secure_channel(address, channel_credentials(self.tls), options=options)
        creds = channel_credentials(self.tls, grpc.metadata_call_credentials(_BearerPlugin(self, address),
                                                                              name="tidelog-scram"))
        return grpc.intercept_channel(grpc.secure_channel(address, creds, options=options), _ReauthOnUnauthenticated(self, address))

    def _address(self, address: str) -> _AddressSessions:
        with self._lock:
            s = self._sessions.get(address)
            if s is None:
                s = self._sessions[address] = _AddressSessions()
            return s

    def token(self, address: str) -> str:
        """The session token for ``address``: cached, or from a new SCRAM exchange (blocking)."""
        entry = self._address(address)
        with entry.lock:
            s = entry.session
            if s is not None and time.monotonic() < s.renew_at:
                return s.token
            try:
                entry.session = self._handshake(address)
            except SaslAuthenticationError as exc:
                entry.session, entry.error = None, exc
                raise
            entry.error = None
            return entry.session.token

    def invalidate(self, address: str) -> None:
        """Forget the session with ``address`` (the server refused its token): the next call authenticates."""
        with self._lock:
            entry = self._sessions.get(address)
        if entry is not None:
            entry.session = None

    def auth_error(self, address: str) -> SaslAuthenticationError | None:
        """Why the last handshake with ``address`` was refused, if it was."""
        with self._lock:
            entry = self._sessions.get(address)
        return None if entry is None else entry.error

    def _handshake(self, address: str) -> _Session:
        cfg = self.config
        assert cfg.sasl_mechanism and cfg.sasl_plain_username and cfg.sasl_plain_password
        scram = ScramClient(mechanism(cfg.sasl_mechanism), cfg.sasl_plain_username, cfg.sasl_plain_password)
        from shared.security.transport import channel_credentials
        with grpc.secure_channel(address, channel_credentials(self.tls)) as ch:
            stub = spb_grpc.SaslStub(ch)
            first = stub.Authenticate(spb.SaslAuthenticateRequest(mechanism=cfg.sasl_mechanism, auth_bytes=scram.first()),
                                      timeout=HANDSHAKE_TIMEOUT_S)
            _check(first, cfg.sasl_mechanism)
            final = scram.final(first.auth_bytes)  # checks the server nonce extends ours (CVE-2024-56128)
            done = stub.Authenticate(spb.SaslAuthenticateRequest(mechanism=cfg.sasl_mechanism, auth_bytes=final,
                                                                 handshake_id=first.handshake_id),
                                     timeout=HANDSHAKE_TIMEOUT_S)
            _check(done, cfg.sasl_mechanism)
        scram.verify(done.auth_bytes)  # the server knew the user's ServerKey
        if not done.session_token:
            raise SaslAuthenticationError("the server sent no session token")
        lifetime = max(done.session_lifetime_ms, 1_000) / 1000
        self.handshakes += 1
        return _Session(done.session_token, time.monotonic() + lifetime * RENEW_AT)

    # -- REST ---------------------------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.tls.cafile)
        if self.tls.certfile and self.tls.keyfile:
            ctx.load_cert_chain(self.tls.certfile, self.tls.keyfile)
        return ctx

    def http_options(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.Client`` / ``httpx.request``: TLS verified with the CA, the client
        certificate when given, HTTP Basic with the SASL user when SASL_SSL."""
        out: dict[str, Any] = {"verify": self.ssl_context()}
        if self.sasl:
            out["auth"] = (self.config.sasl_plain_username, self.config.sasl_plain_password)
        return out


def _check(resp: spb.SaslAuthenticateResponse, mech: str) -> None:
    if resp.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        raise SaslAuthenticationError(f"the server does not support {mech} (it offers {', '.join(resp.enabled_mechanisms)})")
    if resp.error_code:
        raise SaslAuthenticationError(resp.error_message or ErrorCode(resp.error_code).name)


def http_options(security: ClientSecurity | None) -> dict[str, Any]:
    """``httpx`` keyword arguments for ``security`` (none for PLAINTEXT)."""
    return {} if security is None else security.http_options()


class _BearerPlugin(grpc.AuthMetadataPlugin):
    """Attaches the address's session token to each call (grpc runs this on its own thread)."""

    def __init__(self, security: ClientSecurity, address: str) -> None:
        self._security = security
        self._address = address

    def __call__(self, context: grpc.AuthMetadataContext, callback: grpc.AuthMetadataPluginCallback) -> None:
        try:
            token = self._security.token(self._address)
        except Exception as exc:  # the call fails with this error (UNAUTHENTICATED / UNAVAILABLE)
            callback((), exc)
            return
        callback((("authorization", "Bearer " + token),), None)


class _ReauthOnUnauthenticated(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                               grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """A call that ends UNAUTHENTICATED drops the address's session, so the next one authenticates again."""

    def __init__(self, security: ClientSecurity, address: str) -> None:
        self._security = security
        self._address = address

    def _done(self, call: Any) -> None:
        try:
            code = call.code()
        except Exception:
            return
        if code == grpc.StatusCode.UNAUTHENTICATED and self._security.auth_error(self._address) is None:
            self._security.invalidate(self._address)

    def _watch(self, call: Any) -> Any:
        call.add_done_callback(self._done)
        return call

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return self._watch(continuation(client_call_details, request))

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return self._watch(continuation(client_call_details, request))

    def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return self._watch(continuation(client_call_details, request_iterator))

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return self._watch(continuation(client_call_details, request_iterator))
