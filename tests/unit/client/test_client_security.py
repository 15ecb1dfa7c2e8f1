"""The client's security (shared.client.security) against a real TLS grpc.aio server on 127.0.0.1 with
the Sasl service (shared.security.grpc_auth) and a guarded ``WhoAmI`` method answering the principal the
request context got: SASL_SSL sessions (one handshake per address, shared by channels, redone after the
server dropped the session), a wrong password, mutual TLS, and kafka-python's settings validated."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from shared import request_context
from shared.client.cluster import ClusterClient
from shared.client.security import ClientSecurity, client_security
from shared.errors import ErrorCode, TidelogError
from shared.grpc_guard import GuardedServer
from shared.quota.entities import ANONYMOUS
from shared.security import grpc_auth
from shared.security.certs import create_cluster_pki
from shared.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential, create_credential

WHOAMI = "/test.Who/WhoAmI"


class Users:
    def __init__(self) -> None:
        self.creds: dict[tuple[str, str], ScramCredential] = {
            ("alice", SCRAM_SHA_512.name): create_credential("alice-secret", SCRAM_SHA_512),
            ("bob", SCRAM_SHA_256.name): create_credential("bob-secret", SCRAM_SHA_256),
        }

    def credential(self, username: str, mech: Any) -> ScramCredential | None:
        return self.creds.get((username, mech if isinstance(mech, str) else mech.name))


class Security:
    enabled = True

    def __init__(self) -> None:
        self.store = Users()

    def certificate_principal(self, context: Any) -> tuple[str, str | None]:
        subject = context.auth_context().get("x509_subject")
        if not subject:
            return ANONYMOUS, None
        dn = subject[0].decode()
        return dn, dn


class Server:
    """A TLS grpc.aio server on its own event loop thread."""

    def __init__(self, pki: Any, *, require_client_cert: bool) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.auth: grpc_auth.GrpcAuthenticator
        self.port = asyncio.run_coroutine_threadsafe(self._start(pki, require_client_cert), self.loop).result(10)
        self.address = f"127.0.0.1:{self.port}"

    async def _start(self, pki: Any, require_client_cert: bool) -> int:
        self.server = grpc.aio.server()

        def behavior(request: bytes, context: Any, ctx: request_context.RequestContext) -> bytes:
            return ctx.principal.encode()

        handlers = request_context.authorized_handlers(hand_context=True)(
            {"WhoAmI": grpc.unary_unary_rpc_method_handler(behavior)})
        guarded = GuardedServer(self.server)  # as shared.service.serve registers every servicer
        guarded.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Who", handlers),))
        self.auth = grpc_auth.attach(guarded, Security())
        paths = pki.services["broker-1"]
        with open(paths.key, "rb") as k, open(paths.cert, "rb") as c, open(pki.ca.cert, "rb") as ca:
            creds = grpc.ssl_server_credentials([(k.read(), c.read())], root_certificates=ca.read(),
                                                require_client_auth=require_client_cert)
        port = self.server.add_secure_port("127.0.0.1:0", creds)
        await self.server.start()
        return port

    def finish(self) -> None:
        """Put the process's principal resolver back; the server is left serving on its daemon thread.

        grpcio's aio server can deadlock in ``stop()`` here (``py-spy dump --native`` of a hung run: the
        loop thread waiting in a futex inside grpc's shutdown under ``Server.stop``, holding the GIL; a
        grpc thread and the test's thread both waiting for the GIL). It hung in about one run of this
        module in five on 6 December, with ``stop(1)`` as with ``stop(None)``, and no timeout can fire
        while the GIL is held. A test server has nothing to flush, so it is not stopped: its port and
        thread go with the test process."""
        request_context.set_principal_resolver(request_context.anonymous)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return create_cluster_pki(str(tmp_path_factory.mktemp("pki")), [("broker", 1)])


@pytest.fixture
def sasl_server(pki: Any) -> Iterator[Server]:
    server = Server(pki, require_client_cert=False)
    yield server
    server.finish()


def whoami(ch: grpc.Channel) -> str:
    return ch.unary_unary(WHOAMI)(b"", timeout=10).decode()


def scram(pki: Any, user: str = "alice", password: str = "alice-secret", mech: str = "SCRAM-SHA-512") -> ClientSecurity:
    sec = client_security("SASL_SSL", mech, user, password, ssl_cafile=pki.ca.cert)
    assert sec is not None
    return sec


def test_sasl_ssl_one_handshake_per_address_shared_by_channels(pki: Any, sasl_server: Server) -> None:
    sec = scram(pki)
    with sec.channel(sasl_server.address) as ch, sec.channel(sasl_server.address) as ch2:
        assert [whoami(ch) for _ in range(3)] + [whoami(ch2)] == ["alice"] * 4
    assert sec.handshakes == 1 and sasl_server.auth.sessions == 1
    bob = scram(pki, "bob", "bob-secret", "SCRAM-SHA-256")
    with bob.channel(sasl_server.address) as ch:
        assert whoami(ch) == "bob"


def test_session_dropped_by_the_server_is_redone_and_renewed_before_expiry(pki: Any, sasl_server: Server) -> None:
    sec = scram(pki)
    with sec.channel(sasl_server.address) as ch:
        assert whoami(ch) == "alice"
        assert sasl_server.auth.revoke_user("alice") == 1  # as after a server restart
        with pytest.raises(grpc.RpcError) as err:
            whoami(ch)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert whoami(ch) == "alice" and sec.handshakes == 2
        # a session is renewed once most of its lifetime has passed
        entry = sec._address(sasl_server.address)
        assert entry.session is not None
        entry.session.renew_at = 0.0
        assert whoami(ch) == "alice" and sec.handshakes == 3


def test_wrong_password_fails_the_call_and_is_not_retriable(pki: Any, sasl_server: Server) -> None:
    sec = scram(pki, password="wrong")
    with sec.channel(sasl_server.address) as ch:
        with pytest.raises(grpc.RpcError):
            whoami(ch)
    assert sec.handshakes == 0 and sec.auth_error(sasl_server.address) is not None
    assert sasl_server.auth.failed_authentications == 1
    cluster = ClusterClient(sasl_server.address, "test", security=sec)
    try:
        with pytest.raises(TidelogError) as err:
            cluster.refresh()
        assert err.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED == 58
    finally:
        cluster.close()


def test_ssl_without_sasl_is_anonymous_on_the_client_port(pki: Any, sasl_server: Server) -> None:
    sec = client_security("SSL", ssl_cafile=pki.ca.cert)
    assert sec is not None
    with sec.channel(sasl_server.address) as ch:
        assert whoami(ch) == ANONYMOUS


def test_ssl_with_a_client_certificate_is_mutual_tls(pki: Any) -> None:
    server = Server(pki, require_client_cert=True)
    try:
        admin = pki.clients["admin"]
        sec = client_security("SSL", ssl_cafile=pki.ca.cert, ssl_certfile=admin.cert, ssl_keyfile=admin.key)
        assert sec is not None
        with sec.channel(server.address) as ch:
            assert "CN=admin" in whoami(ch)
        no_cert = client_security("SSL", ssl_cafile=pki.ca.cert)
        assert no_cert is not None
        with no_cert.channel(server.address) as ch, pytest.raises(grpc.RpcError) as err:
            whoami(ch)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.finish()


def test_kafka_python_settings_are_validated(pki: Any) -> None:
    assert client_security() is None and client_security("plaintext") is None
    with pytest.raises(ValueError, match="security_protocol"):
        client_security("SASL_PLAINTEXT", ssl_cafile=pki.ca.cert)
    with pytest.raises(ValueError, match="ssl_cafile"):
        client_security("SSL")
    with pytest.raises(ValueError, match="sasl_plain_username"):
        client_security("SASL_SSL", ssl_cafile=pki.ca.cert)
    with pytest.raises(ValueError, match="unsupported SASL mechanism"):
        client_security("SASL_SSL", "PLAIN", "u", "p", ssl_cafile=pki.ca.cert)
    with pytest.raises(ValueError, match="go together"):
        client_security("SSL", ssl_cafile=pki.ca.cert, ssl_certfile=pki.clients["admin"].cert)
    sec = scram(pki)
    assert sec.config.sasl_mechanism == "SCRAM-SHA-512" and "alice-secret" not in repr(sec.config)
    opts = sec.http_options()
    assert opts["auth"] == ("alice", "alice-secret") and opts["verify"].verify_mode.name == "CERT_REQUIRED"


def test_plaintext_cluster_client_keeps_the_insecure_channel() -> None:
    cluster = ClusterClient("127.0.0.1:1", "test")
    try:
        ch = cluster.channel("127.0.0.1:1")
        assert type(ch) is grpc._channel.Channel  # no interceptor, no credentials: nothing per call
        ch.close()
    finally:
        cluster.close()


def test_producer_and_consumer_take_kafka_python_settings_and_report_a_wrong_password(pki: Any,
                                                                                      sasl_server: Server) -> None:
    from shared.client import Consumer, Producer, TopicPartition

    kw: dict[str, Any] = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                          "sasl_plain_username": "alice", "sasl_plain_password": "wrong", "ssl_cafile": pki.ca.cert}
    producer = Producer(sasl_server.address, max_block_ms=30_000, **kw)
    try:
        assert producer.cluster.security is not None and producer.cluster.security.sasl
        with pytest.raises(TidelogError) as err:  # at once, not after max_block_ms
            producer.send("t", b"x")
        assert err.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    finally:
        producer.close()
    consumer = Consumer(sasl_server.address, **kw)
    try:
        with pytest.raises(TidelogError) as err:
            consumer.assign([TopicPartition("t", 0)])
            consumer.poll(10_000)
        assert err.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
    finally:
        consumer.close()
