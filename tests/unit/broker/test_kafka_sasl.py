"""The Kafka listener's authentication (issue 23): the SASL state machine bytes in, bytes out, then the
real listener over real TLS sockets, with request frames written by kio and tokens by the SCRAM client
(its request layer is a stand-in: ApiVersions, and a Metadata handler that records who asked)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from services.broker.kafka import sasl
from services.broker.kafka.apis import KafkaApis, handle_api_versions
from services.broker.kafka.listener import KafkaListener
from services.broker.pipeline import RequestContext, RequestPipeline
from shared.errors import ErrorCode
from shared.security.auth_failures import AuthFailureTracker
from shared.security.certs import ClusterPki, create_cluster_pki, issue_client, load_ca, write_pem
from shared.security.principal_mapping import PrincipalMapper
from shared.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    SaslAuthenticationError,
    ScramAuthenticationError,
    ScramClient,
    ScramCredential,
    create_credential,
)
from tests.integration.kafka_util import KafkaWire, encode_request

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36

USERS = {("alice", "SCRAM-SHA-512"): create_credential("alice-secret", SCRAM_SHA_512),
         ("alice", "SCRAM-SHA-256"): create_credential("alice-secret", SCRAM_SHA_256),
         ("bob", "SCRAM-SHA-256"): create_credential("bob-secret", SCRAM_SHA_256)}


def lookup(user: str, mech: str) -> ScramCredential | None:
    return USERS.get((user, mech))


# -- the state machine, bytes in, bytes out ---------------------------------------------------------------


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_scram_exchange_completes_with_the_right_password(mech: Any) -> None:
    s = sasl.SaslSession(lookup)
    assert s.handshake(1, mech.name) == {"error_code": 0, "mechanisms": list(sasl.ENABLED_MECHANISMS)}
    assert s.state is sasl.SaslState.AUTHENTICATE and not s.raw_tokens
    client = ScramClient(mech, "alice", "alice-secret")
    server_first = s.step(client.first())
    assert not s.complete
    client.verify(s.step(client.final(server_first)))  # the server proved it knows the ServerKey
    assert s.complete and s.username == "alice"


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "alice-secret"), ("bob", "bob-secret")])
def test_scram_exchange_fails_for_a_wrong_password_an_unknown_user_or_a_missing_mechanism(user: str,
                                                                                         password: str) -> None:
    s = sasl.SaslSession(lookup)
    s.handshake(1, "SCRAM-SHA-512")  # bob has only a SCRAM-SHA-256 credential
    client = ScramClient(SCRAM_SHA_512, user, password)
    server_first = s.step(client.first())  # an unknown user gets a salt too: existence is not revealed
    assert b",s=" in server_first
    with pytest.raises(SaslAuthenticationError):
        s.step(client.final(server_first))
    assert s.state is sasl.SaslState.FAILED and s.username is None and s.user_attempted == user
    with pytest.raises(SaslAuthenticationError):  # a failed session takes nothing more
        s.step(b"anything")


def test_a_replayed_client_final_with_another_nonce_fails() -> None:
    """CVE-2024-56128's check is the SCRAM server's: a client-final whose nonce is not the server's."""
    s1, s2 = sasl.SaslSession(lookup), sasl.SaslSession(lookup)
    for s in (s1, s2):
        s.handshake(1, "SCRAM-SHA-256")
    c = ScramClient(SCRAM_SHA_256, "alice", "alice-secret")
    first = c.first()
    final = c.final(s1.step(first))
    s2.step(first)
    with pytest.raises(ScramAuthenticationError):
        s2.step(final)


def test_plain_checks_the_password_against_the_scram_credential() -> None:
    ok = sasl.SaslSession(lookup)
    ok.handshake(1, "PLAIN")
    assert ok.needs_password_check
    assert ok.step(b"\0bob\0bob-secret") == b"" and ok.complete and ok.username == "bob"
    for token in (b"\0bob\0wrong", b"\0nobody\0x", b"alice\0bob\0bob-secret", b"\0bob", b"\xff\0\xff\0\xff"):
        bad = sasl.SaslSession(lookup)
        bad.handshake(1, "PLAIN")
        with pytest.raises(SaslAuthenticationError):
            bad.step(token)
        assert bad.state is sasl.SaslState.FAILED
    assert sasl.failure_message("PLAIN") == "Authentication failed: Invalid username or password"
    assert sasl.failure_message("SCRAM-SHA-512") == ("Authentication failed during authentication due to invalid "
                                                     "credentials with SASL mechanism SCRAM-SHA-512")


def test_handshake_refusals_and_order() -> None:
    s = sasl.SaslSession(lookup)
    assert s.handshake(1, "GSSAPI")["error_code"] == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert s.state is sasl.SaslState.FAILED
    s = sasl.SaslSession(lookup)
    with pytest.raises(SaslAuthenticationError):  # a token before the handshake
        s.step(b"n,,n=alice,r=abc")
    s = sasl.SaslSession(lookup)
    assert s.handshake(0, "SCRAM-SHA-256")["error_code"] == 0 and s.raw_tokens  # v0: bare tokens follow
    assert s.handshake(1, "SCRAM-SHA-256")["error_code"] == ErrorCode.ILLEGAL_SASL_STATE
    s = sasl.SaslSession(lookup)
    s.handshake(1, "SCRAM-SHA-256")
    with pytest.raises(SaslAuthenticationError):  # garbage, not a crash
        s.step(b"\x00" * 5000)


# -- the listener, over real sockets ----------------------------------------------------------------------


@dataclass
class Served:
    contexts: list[RequestContext] = field(default_factory=list)


async def _metadata(apis: KafkaApis, req: Any, ctx: RequestContext, conn: Any) -> tuple[dict[str, Any], int]:
    apis.served.contexts.append(ctx)  # type: ignore[attr-defined]
    return {"brokers": [], "topics": []}, 0


@dataclass
class Running:
    port: int
    listener: KafkaListener
    served: Served
    pki: ClusterPki
    loop: asyncio.AbstractEventLoop

    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def _start(security: Any) -> tuple[KafkaListener, Served, asyncio.AbstractEventLoop, int, threading.Thread]:
    loop = asyncio.new_event_loop()
    apis = KafkaApis(None, RequestPipeline())
    served = Served()
    apis.served = served  # type: ignore[attr-defined]
    apis.register(API_VERSIONS, (0, 4), handle_api_versions)
    apis.register(METADATA, (0, 12), _metadata)
    listener = KafkaListener(apis, security=security, max_idle_ms=60_000)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    port = asyncio.run_coroutine_threadsafe(listener.start("127.0.0.1", 0), loop).result(10)
    return listener, served, loop, port, thread


def _stop(listener: KafkaListener, loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    asyncio.run_coroutine_threadsafe(listener.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ClusterPki:
    return create_cluster_pki(str(tmp_path_factory.mktemp("kafka-pki")), [("broker", 1)], clients=("app",))


@pytest.fixture(scope="module")
def secure(pki: ClusterPki) -> Iterator[Running]:
    broker = pki.services["broker-1"]
    security = sasl.ListenerSecurity(pki.ca.cert, broker.cert, broker.key, lookup,
                                     PrincipalMapper("RULE:^CN=(.*?),OU=tidelog-client$/$1/,DEFAULT"),
                                     tracker=AuthFailureTracker(free_failures=3, base_delay_s=0.05, max_delay_s=0.2))
    listener, served, loop, port, thread = _start(security)
    try:
        yield Running(port, listener, served, pki, loop)
    finally:
        _stop(listener, loop, thread)


class TlsWire(KafkaWire):
    """A raw Kafka connection over TLS (optionally presenting a client certificate)."""

    def __init__(self, address: str, cafile: str, cert: tuple[str, str] | None = None, timeout: float = 10.0) -> None:
        ctx = ssl.create_default_context(cafile=cafile)
        if cert is not None:
            ctx.load_cert_chain(*cert)
        host, _, port = address.rpartition(":")
        raw = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname="localhost")
        self._correlation = 0

    def handshake(self, mechanism: str, version: int = 1) -> Any:
        return self.request(SASL_HANDSHAKE, version, {"mechanism": mechanism})

    def authenticate(self, token: bytes, version: int = 2) -> Any:
        return self.request(SASL_AUTHENTICATE, version, {"auth_bytes": token})

    def metadata(self) -> Any:
        return self.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                           "include_topic_authorized_operations": False})

    def scram(self, mech: Any, user: str, password: str, version: int = 2) -> Any:
        assert self.handshake(mech.name).error_code == 0
        client = ScramClient(mech, user, password)
        first = self.authenticate(client.first(), version)
        if first.error_code != 0:
            return first
        final = self.authenticate(client.final(bytes(first.auth_bytes)), version)
        if final.error_code == 0:
            client.verify(bytes(final.auth_bytes))
        return final


def _api_versions(w: KafkaWire) -> dict[int, tuple[int, int]]:
    r = w.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert r.error_code == 0
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}


def test_scram_sha_512_then_requests_carry_the_user(secure: Running) -> None:
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        versions = _api_versions(w)
        assert versions[SASL_HANDSHAKE] == (0, 1) and versions[SASL_AUTHENTICATE] == (0, 2)
        r = w.scram(SCRAM_SHA_512, "alice", "alice-secret")
        assert r.error_code == 0 and r.error_message is None
        before = len(secure.served.contexts)
        w.metadata()
        ctx = secure.served.contexts[before]
        assert (ctx.principal, ctx.kafka_principal, ctx.cert_subject, ctx.host) == ("alice", "User:alice", None,
                                                                                    "127.0.0.1")
        again = w.authenticate(b"n,,n=alice,r=x")  # after authentication: Kafka's ILLEGAL_SASL_STATE, no close
        assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
        w.metadata()


def test_scram_sha_256_with_authenticate_v0(secure: Running) -> None:
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        assert w.scram(SCRAM_SHA_256, "bob", "bob-secret", version=0).error_code == 0
        w.metadata()
        assert secure.served.contexts[-1].principal == "bob"


def test_a_wrong_password_is_sasl_authentication_failed_and_the_connection_closes(secure: Running) -> None:
    failures = secure.listener.authentication_failures
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        r = w.scram(SCRAM_SHA_512, "alice", "wrong")
        assert r.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert r.error_message == sasl.failure_message("SCRAM-SHA-512")
        assert w.closed_by_peer(5)
    assert secure.listener.authentication_failures == failures + 1


def test_plain_over_tls(secure: Running) -> None:
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        assert w.handshake("PLAIN").error_code == 0
        assert w.authenticate(b"\0alice\0alice-secret").error_code == 0
        w.metadata()
        assert secure.served.contexts[-1].principal == "alice"
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        assert w.handshake("PLAIN").error_code == 0
        r = w.authenticate(b"\0alice\0nope")
        assert (r.error_code, r.error_message) == (ErrorCode.SASL_AUTHENTICATION_FAILED,
                                                   "Authentication failed: Invalid username or password")
        assert w.closed_by_peer(5)


def test_handshake_v0_then_bare_tokens(secure: Running) -> None:
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        assert w.handshake("SCRAM-SHA-256", version=0).error_code == 0
        client = ScramClient(SCRAM_SHA_256, "alice", "alice-secret")
        token = client.first()
        w.send(len(token).to_bytes(4, "big") + token)
        server_first = w.read_frame()
        assert server_first is not None
        token = client.final(server_first)
        w.send(len(token).to_bytes(4, "big") + token)
        server_final = w.read_frame()
        assert server_final is not None
        client.verify(server_final)
        w.metadata()
        assert secure.served.contexts[-1].principal == "alice"


def test_an_unsupported_mechanism_is_answered_then_closed(secure: Running) -> None:
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        r = w.handshake("GSSAPI")
        assert r.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert list(r.mechanisms) == list(sasl.ENABLED_MECHANISMS)
        assert w.closed_by_peer(5)


def test_before_authentication_only_the_sasl_apis_are_served(secure: Running) -> None:
    served = len(secure.served.contexts)
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        _api_versions(w)
        w.send(encode_request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}, 7))
        assert w.read_frame() is None  # closed, unanswered
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:  # half-way through SCRAM is not authenticated either
        assert w.handshake("SCRAM-SHA-512").error_code == 0
        assert w.authenticate(ScramClient(SCRAM_SHA_512, "alice", "alice-secret").first()).error_code == 0
        w.send(encode_request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}, 7))
        assert w.read_frame() is None
    assert len(secure.served.contexts) == served


@pytest.mark.parametrize("size", [2**31 - 1, sasl.SASL_SERVER_MAX_RECEIVE_SIZE + 1])
def test_a_large_size_prefix_before_authentication_is_refused_unread(secure: Running, size: int) -> None:
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:
        w.send(size.to_bytes(4, "big") + b"\x00" * 100)
        assert w.closed_by_peer(5)


def test_a_client_certificate_authenticates_through_the_mapping_rules(secure: Running) -> None:
    app = secure.pki.clients["app"]
    with TlsWire(secure.address(), secure.pki.ca.cert, (app.cert, app.key)) as w:
        w.metadata()  # no SASL needed
        ctx = secure.served.contexts[-1]
        assert (ctx.principal, ctx.cert_subject) == ("app", "CN=app,OU=tidelog-client")
    broker = secure.pki.services["broker-1"]  # no rule but DEFAULT matches it: the DN itself
    with TlsWire(secure.address(), secure.pki.ca.cert, (broker.cert, broker.key)) as w:
        w.metadata()
        assert secure.served.contexts[-1].kafka_principal == "User:CN=broker-1,OU=tidelog-service"
    with TlsWire(secure.address(), secure.pki.ca.cert, (app.cert, app.key)) as w:  # SASL first: the user wins
        _api_versions(w)
        assert w.scram(SCRAM_SHA_256, "bob", "bob-secret").error_code == 0
        w.metadata()
        ctx = secure.served.contexts[-1]
        assert (ctx.principal, ctx.cert_subject) == ("bob", None)


def test_a_certificate_from_another_ca_and_plaintext_are_refused(secure: Running, tmp_path: Any) -> None:
    other = create_cluster_pki(str(tmp_path / "other"), [], clients=("app",))
    served = len(secure.served.contexts)
    try:  # TLS 1.3: the client may finish its side before the server refuses the certificate and closes
        with TlsWire(secure.address(), secure.pki.ca.cert, (other.clients["app"].cert, other.clients["app"].key)) as w:
            w.send(encode_request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False}))
            assert w.read_frame() is None
    except (ssl.SSLError, ConnectionError):
        pass
    assert len(secure.served.contexts) == served
    with KafkaWire(secure.address()) as w:  # a plaintext client: the TLS handshake fails, nothing is served
        w.send(encode_request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}))
        assert w.closed_by_peer(15)


def test_the_certificate_is_reloaded_for_new_connections(pki: ClusterPki, tmp_path: Any) -> None:
    d = str(tmp_path)
    for name in ("ca.crt", "broker-1.crt", "broker-1.key"):
        shutil.copy(os.path.join(pki.directory, name), os.path.join(d, name))
    paths = (os.path.join(d, "ca.crt"), os.path.join(d, "broker-1.crt"), os.path.join(d, "broker-1.key"))
    security = sasl.ListenerSecurity(*paths, lookup)
    listener, _served, loop, port, thread = _start(security)
    try:
        def serial() -> int:
            with TlsWire(f"127.0.0.1:{port}", paths[0]) as w:
                _api_versions(w)
                der = w.sock.getpeercert(binary_form=True)  # type: ignore[attr-defined]
            from cryptography import x509
            return int(x509.load_der_x509_certificate(der).serial_number)

        before = serial()
        renewed = issue_client(load_ca(pki.ca), "broker-1")  # any leaf of the same CA will do
        write_pem(d, "broker-1", renewed)
        security._checked = float("-inf")  # the next connection looks at the files (else: within a second)
        assert serial() == renewed.cert.serial_number != before
        assert security.reloads == 1
    finally:
        _stop(listener, loop, thread)


def test_a_plaintext_listener_claims_no_sasl_api_and_serves_anonymous() -> None:
    listener, served, loop, port, thread = _start(None)
    try:
        with KafkaWire(f"127.0.0.1:{port}") as w:
            versions = _api_versions(w)
            assert SASL_HANDSHAKE not in versions and SASL_AUTHENTICATE not in versions
            w.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": False})
            assert (served.contexts[-1].principal, served.contexts[-1].cert_subject) == ("ANONYMOUS", None)
            w.send(encode_request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))  # unknown here, as before
            assert w.read_frame() is None
    finally:
        _stop(listener, loop, thread)


def test_failures_slow_the_host(secure: Running) -> None:
    """Failures are counted per host (after the free ones, the host's answers wait the tracker's delay)."""
    tracker = secure.listener.security.tracker  # type: ignore[union-attr]
    tracker.success("127.0.0.1")
    for _ in range(4):
        with TlsWire(secure.address(), secure.pki.ca.cert) as w:
            assert w.scram(SCRAM_SHA_256, "alice", "wrong").error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    now = secure.listener.security.clock()  # type: ignore[union-attr]
    assert tracker.failures("127.0.0.1", now) == 4  # counted per host: the 4th was answered after its delay
    with TlsWire(secure.address(), secure.pki.ca.cert) as w:  # a success forgets the host
        assert w.scram(SCRAM_SHA_256, "alice", "alice-secret").error_code == 0
    assert tracker.failures("127.0.0.1", secure.listener.security.clock()) == 0  # type: ignore[union-attr]
