"""Authentication on the Kafka listener of a secure broker: TLS (Kafka's SSL listener with
``ssl.client.auth=requested``) and SASL over it (SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN).

One TLS port serves both kinds of client. A client that presents a certificate the cluster CA signed is
authenticated by it, as on Kafka's SSL listener: its principal is ``ssl.principal.mapping.rules`` applied
to the certificate's distinguished name. A client without one must authenticate with SASL before anything
but ApiVersions, SaslHandshake and SaslAuthenticate is served, as on Kafka's SASL_SSL listener (a client
with a certificate may still authenticate with SASL first; the SASL user is then its principal).

``SaslSession`` is one connection's exchange (Kafka's ``SaslServerAuthenticator``), sans I/O: the
listener hands it the decoded SaslHandshake / SaslAuthenticate requests (or, after a SaslHandshake v0, the
raw tokens) and sends what it returns:

    HANDSHAKE_OR_VERSIONS --SaslHandshake(mechanism served)--> AUTHENTICATE --tokens--> COMPLETE
                          \\--SaslHandshake(other)--> FAILED (UNSUPPORTED_SASL_MECHANISM, then closed)
                                         AUTHENTICATE --bad token / proof--> FAILED (SASL_AUTHENTICATION_FAILED 58)

SCRAM (RFC 5802/7677) is ``shared.security.scram.ScramServer``; PLAIN (RFC 4616) checks the password
against the stored SCRAM credential (``shared.security.plain``; one PBKDF2, run off the event loop), and
is offered only because this listener is always TLS. Credentials come from the broker's ``SecurityStore``
(``service.security.store.credential(user, mechanism)``), never a password.

``ListenerSecurity`` is what the listener holds for the whole port: the TLS server context (rebuilt, for
new connections, when the certificate, key or CA files change: ``certs.CertReloader``), the principal
mapper, the credential lookup and the per-host failure tracker (``AuthFailureTracker``: a host's failed
attempts delay its next answers).
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

from cryptography import x509

from shared.errors import ErrorCode
from shared.security.auth_failures import AuthFailureTracker
from shared.security.certs import CertReloader
from shared.security.plain import parse_plain
from shared.security.principal_mapping import PrincipalMapper
from shared.security.scram import (
    MECHANISMS as SCRAM_MECHANISMS,
)
from shared.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslAuthenticationError,
    ScramCredential,
    ScramServer,
    create_credential,
    verify_password,
)

log = logging.getLogger(__name__)

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
API_VERSIONS = 18
SASL_HANDSHAKE_VERSIONS = (0, 1)
SASL_AUTHENTICATE_VERSIONS = (0, 2)
#: What an unauthenticated connection may send (Kafka's SaslServerAuthenticator: anything else closes it).
PRE_AUTH_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
PLAIN = "PLAIN"
#: sasl.enabled.mechanisms, in the order SaslHandshake lists them.
ENABLED_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", PLAIN)
#: Kafka's sasl.server.max.receive.size, made small: before authentication no frame (size prefix) over
#: this is read or buffered (CVE-2022-34917's class: a 2 GB size prefix costs nothing).
SASL_SERVER_MAX_RECEIVE_SIZE = 64 * 1024
#: Kafka's connection.failed.authentication.delay.ms: a failed authentication is answered no sooner.
FAILED_AUTHENTICATION_DELAY_S = 0.1
#: How often (at most) a new connection makes the listener look at its certificate files again.
RELOAD_CHECK_INTERVAL_S = 1.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0

#: ``(user, mechanism name) -> credential or None``: ``SecurityStore.credential``.
CredentialLookup = Callable[[str, str], ScramCredential | None]


class SaslState(Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


def failure_message(mechanism: str | None) -> str:
    """What Kafka tells a client whose authentication failed (it never says which check failed)."""
    if mechanism == PLAIN:
        return "Authentication failed: Invalid username or password"
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class SaslSession:
    """One connection's SASL exchange. ``handshake`` answers a SaslHandshake; ``step`` takes one token
    (a SaslAuthenticate's ``auth_bytes``, or a raw v0 token) and returns the server's next token, raising
    ``SaslAuthenticationError`` when authentication fails (the state is then FAILED: the connection ends)."""

    def __init__(self, credentials: CredentialLookup, *, mechanisms: tuple[str, ...] = ENABLED_MECHANISMS,
                 unknown_user_secret: bytes | None = None) -> None:
        self._credentials = credentials
        self.mechanisms = mechanisms
        self._unknown_secret = unknown_user_secret if unknown_user_secret is not None else os.urandom(32)
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self.mechanism: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: tokens follow as bare size-prefixed frames (no Kafka header)
        self.username: str | None = None  # set when COMPLETE
        self.user_attempted: str | None = None  # the user name the client gave (for logs), once parsed
        self._scram: ScramServer | None = None
        self._round = 0
        self.tokens = 0  # tokens received so far

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def handshake(self, version: int, mechanism: str) -> dict[str, Any]:
        """SaslHandshake -> the response's values. A mechanism not served fails the session
        (``UNSUPPORTED_SASL_MECHANISM``; the listener closes after answering), as a handshake out of turn
        does (``ILLEGAL_SASL_STATE``)."""
        if self.state is not SaslState.HANDSHAKE_OR_VERSIONS:
            self.state = SaslState.FAILED
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": list(self.mechanisms)}
        if mechanism not in self.mechanisms:
            self.state = SaslState.FAILED
            return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": list(self.mechanisms)}
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        if mechanism in SCRAM_MECHANISMS:
            self._scram = ScramServer(SCRAM_MECHANISMS[mechanism], self._scram_lookup(mechanism),
                                      unknown_user_secret=self._unknown_secret)
        self.state = SaslState.AUTHENTICATE
        return {"error_code": ErrorCode.NONE, "mechanisms": list(self.mechanisms)}

    def _scram_lookup(self, mechanism: str) -> Callable[[str], ScramCredential | None]:
        def lookup(user: str) -> ScramCredential | None:
            self.user_attempted = user
            return self._credentials(user, mechanism)

        return lookup

    def step(self, token: bytes) -> bytes:
        """One client token -> the server's answer (raises ``SaslAuthenticationError``)."""
        self.tokens += 1
        if self.state is not SaslState.AUTHENTICATE:
            was, self.state = self.state, SaslState.FAILED
            raise SaslAuthenticationError(f"SASL token received in state {was.value}")
        try:
            if self.mechanism == PLAIN:
                return self._plain(token)
            scram = self._scram
            assert scram is not None
            self._round += 1
            if self._round == 1:
                return scram.client_first(token)
            answer = scram.client_final(token)
            self.username = scram.username
            self.state = SaslState.COMPLETE
            return answer
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            raise
        except Exception as exc:  # anything unexpected in a token is a failed authentication, not a crash
            self.state = SaslState.FAILED
            raise SaslAuthenticationError(f"{type(exc).__name__}: {exc}") from exc

    @property
    def needs_password_check(self) -> bool:
        """The next step costs a PBKDF2 (PLAIN): worth running off the event loop."""
        return self.mechanism == PLAIN and self.state is SaslState.AUTHENTICATE

    def _plain(self, token: bytes) -> bytes:
        creds = parse_plain(token)
        self.user_attempted = creds.username
        stored = None
        mech = SCRAM_SHA_512
        for m in (SCRAM_SHA_512, SCRAM_SHA_256):
            stored = self._credentials(creds.username, m.name)
            if stored is not None:
                mech = m
                break
        if stored is None:  # an unknown user costs the same PBKDF2 as a known one
            verify_password(creds.password, _made_up_plain_credential(self._unknown_secret), SCRAM_SHA_512)
            raise SaslAuthenticationError("unknown user")
        if not verify_password(creds.password, stored, mech):
            raise SaslAuthenticationError("invalid password")
        self.username = creds.username
        self.state = SaslState.COMPLETE
        return b""


_MADE_UP: dict[bytes, ScramCredential] = {}


def _made_up_plain_credential(secret: bytes) -> ScramCredential:
    cred = _MADE_UP.get(secret)
    if cred is None:
        cred = _MADE_UP[secret] = create_credential(secret.hex(), SCRAM_SHA_512, salt=secret[:16])
        if len(_MADE_UP) > 16:
            _MADE_UP.pop(next(iter(_MADE_UP)))
    return cred


def illegal_state_reply(api_key: int) -> dict[str, Any]:
    """SaslHandshake / SaslAuthenticate on an authenticated connection: Kafka's KafkaApis answers
    ILLEGAL_SASL_STATE (the connection goes on)."""
    if api_key == SASL_HANDSHAKE:
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime": 0}


async def handle_after_authentication(apis: Any, req: Any, ctx: Any, conn: Any) -> tuple[dict[str, Any], int]:
    """The handler of SaslHandshake and SaslAuthenticate once the connection is authenticated."""
    return illegal_state_reply(req.api.key), 0


def register(apis: Any) -> None:
    """Claim SaslHandshake and SaslAuthenticate in ApiVersions (secure listener only: a plaintext
    listener answers exactly as before)."""
    apis.register(SASL_HANDSHAKE, SASL_HANDSHAKE_VERSIONS, handle_after_authentication)
    apis.register(SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSIONS, handle_after_authentication)


# -- the listener's TLS and credentials -----------------------------------------------------------------


def server_context(cafile: str, certfile: str, keyfile: str, cadata: str | None = None) -> ssl.SSLContext:
    """TLS server context: this broker's certificate; a client certificate is asked for and, when one
    is presented, verified against the cluster CA (``ssl.client.auth=requested``)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    if cadata is not None:
        ctx.load_verify_locations(cadata=cadata)
    else:
        ctx.load_verify_locations(cafile=cafile)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def peer_subject(ssl_object: Any) -> str | None:
    """The verified client certificate's DN (RFC 4514, as ``certs.subject_dn``), None without one."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


class ListenerSecurity:
    """The secure listener's shared state (one per port)."""

    def __init__(self, cafile: str, certfile: str, keyfile: str, credentials: CredentialLookup,
                 mapper: PrincipalMapper | None = None, *, tracker: AuthFailureTracker | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cafile, self.certfile, self.keyfile = cafile, certfile, keyfile
        self.credentials = credentials
        self.mapper = mapper or PrincipalMapper("DEFAULT")
        self.tracker = tracker or AuthFailureTracker()
        self.clock = clock
        self._reloader = CertReloader((cafile, certfile, keyfile))
        self._context: ssl.SSLContext | None = None
        self._checked = float("-inf")
        self.reloads = 0
        self.unknown_user_secret = os.urandom(32)
        self.context()  # fail at start on unreadable or mismatched files

    @classmethod
    def from_service(cls, security: Any) -> ListenerSecurity | None:
        """From the broker's ``service.security`` (``ServiceSecurity``); None when security is off."""
        if security is None or not getattr(security, "enabled", False):
            return None
        tls = security.tls
        store = security.store
        if tls is None or not (tls.certfile and tls.keyfile):
            raise ValueError("a secure Kafka listener needs ssl_cafile, ssl_certfile and ssl_keyfile")

        def credentials(user: str, mechanism: str) -> ScramCredential | None:
            return store.credential(user, mechanism) if store is not None else None

        return cls(tls.cafile, tls.certfile, tls.keyfile, credentials, getattr(security, "mapper", None))

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: a new one when the files changed (checked at most once a
        second); on a half-written or mismatched set the previous one stays."""
        now = time.monotonic()
        if self._context is not None and now - self._checked < RELOAD_CHECK_INTERVAL_S:
            return self._context
        self._checked = now
        fresh = self._reloader.check()
        if fresh is not None:
            try:
                ctx = server_context(self.cafile, self.certfile, self.keyfile,
                                     cadata=fresh[self.cafile].decode("ascii"))
            except (ssl.SSLError, OSError, ValueError, UnicodeDecodeError) as exc:
                if self._context is None:
                    raise
                # a half-replaced set (a new certificate, the old key): kept until the files change again
                log.warning("Kafka listener TLS files not reloaded", extra={"certfile": self.certfile, "error": str(exc)})
            else:
                if self._context is not None:
                    self.reloads += 1
                    log.info("Kafka listener TLS certificate reloaded", extra={"certfile": self.certfile})
                self._context = ctx
        assert self._context is not None
        return self._context

    def certificate_principal(self, subject: str) -> str:
        """The principal name of a verified certificate DN (raises ``NoMatchingRuleError``)."""
        return self.mapper.name(subject)

    def new_session(self) -> SaslSession:
        return SaslSession(self.credentials, unknown_user_secret=self.unknown_user_secret)


async def run_step(session: SaslSession, token: bytes) -> bytes:
    """``session.step`` — a PLAIN password check (PBKDF2) in a worker thread, SCRAM steps inline."""
    if session.needs_password_check:
        return await asyncio.to_thread(session.step, token)
    return session.step(token)


def audit_failure(principal: str, host: str, mechanism: str | None, detail: str) -> None:
    """An ``authentication_failure`` audit event (when the audit module is there)."""
    try:
        from shared.security import audit
    except ImportError:
        return
    try:
        audit.event("authentication_failure", principal=principal, host=host, door="kafka",
                    operation=f"SASL {mechanism}" if mechanism else "SASL", detail=detail)
    except Exception:
        log.exception("audit event failed")
