"""TLS transport: real in-process gRPC servers on 127.0.0.1 with the two listeners a secure service has
(internal: mutual TLS; client: TLS), and the certificates a secure cluster uses.

Mutual TLS works and names the peer; a client without a certificate, with one from an unknown CA or an
expired one is refused on the internal port; plaintext to a TLS port is refused; a rewritten certificate
(and CA) applies to the next connection without a restart; the process-wide configuration picks the
channel kind; the certificate principal follows ``ssl.principal.mapping.rules``."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from shared.security import certs, transport
from shared.security.service_security import ServiceSecurity, is_service_subject
from shared.security.transport import TlsFiles

# a fresh connection per channel (gRPC may otherwise share one between channels of equal credentials)
OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


class Health(health_pb2_grpc.HealthServicer):
    def __init__(self) -> None:
        self.subjects: list[str | None] = []

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.subjects.append(ServiceSecurity.peer_subject(context))
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


@dataclass
class Served:
    pki: certs.ClusterPki
    server_tls: TlsFiles
    admin: TlsFiles
    internal: str
    client: str
    health: Health
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def served(tmp_path: Any) -> Iterator[Served]:
    pki = certs.create_cluster_pki(str(tmp_path / "pki"), [("broker", 1)], ["admin"])
    server_tls = TlsFiles(pki.ca.cert, pki.services["broker-1"].cert, pki.services["broker-1"].key)
    admin = TlsFiles(pki.ca.cert, pki.clients["admin"].cert, pki.clients["admin"].key)
    health = Health()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    internal = server.add_secure_port("127.0.0.1:0", transport.server_credentials(server_tls, require_client_cert=True))
    client = server.add_secure_port("127.0.0.1:0", transport.server_credentials(server_tls, require_client_cert=False))
    server.start()
    try:
        yield Served(pki, server_tls, admin, f"127.0.0.1:{internal}", f"127.0.0.1:{client}", health)
    finally:
        server.stop(None)


def check(address: str, tls: TlsFiles | None) -> grpc.StatusCode:
    """One health check over a fresh blocking channel: OK or the failure's status code."""
    with transport.sync_channel(address, OPTIONS, tls=tls) as ch:
        try:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_mutual_tls_names_the_client(served: Served) -> None:
    assert check(served.internal, served.admin) == grpc.StatusCode.OK
    assert served.health.subjects == ["CN=admin,OU=tidelog-client"]


def test_aio_channel_mutual_tls(served: Served) -> None:
    async def call() -> int:
        async with transport.aio_channel(served.internal, OPTIONS, tls=served.admin) as ch:
            reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            return reply.status

    assert asyncio.run(call()) == health_pb2.HealthCheckResponse.SERVING


def test_internal_port_refuses_a_client_without_certificate(served: Served) -> None:
    assert check(served.internal, TlsFiles(served.pki.ca.cert)) == grpc.StatusCode.UNAVAILABLE
    assert served.health.subjects == []


def test_client_port_takes_tls_without_client_certificate(served: Served) -> None:
    assert check(served.client, TlsFiles(served.pki.ca.cert)) == grpc.StatusCode.OK
    assert served.health.subjects == [None]  # no verified certificate: the principal comes from SCRAM


def test_unknown_ca_refused_both_ways(served: Served, tmp_path: Any) -> None:
    other = certs.create_ca("mallory-ca")
    ca = certs.write_pem(str(tmp_path / "other"), "ca", other)
    rogue = certs.write_pem(str(tmp_path / "other"), "broker-9", certs.issue_service(other, "broker", 9))
    # a certificate another CA signed, presented to the internal port
    assert check(served.internal, TlsFiles(served.pki.ca.cert, rogue.cert, rogue.key)) == grpc.StatusCode.UNAVAILABLE
    # a client that trusts another CA does not accept the server's certificate
    assert check(served.client, TlsFiles(ca.cert)) == grpc.StatusCode.UNAVAILABLE
    assert served.health.subjects == []


def test_expired_certificate_refused(served: Served, tmp_path: Any) -> None:
    ca = certs.load_ca(served.pki.ca)
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    expired = certs.write_pem(str(tmp_path / "old"), "admin", certs.issue_client(ca, "admin", now=past, valid_days=1))
    assert check(served.internal, TlsFiles(served.pki.ca.cert, expired.cert, expired.key)) == grpc.StatusCode.UNAVAILABLE
    future = dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    early = certs.write_pem(str(tmp_path / "early"), "admin",
                            certs.issue_client(ca, "admin", not_before=future, valid_days=10))
    assert check(served.internal, TlsFiles(served.pki.ca.cert, early.cert, early.key)) == grpc.StatusCode.UNAVAILABLE
    assert served.health.subjects == []


def test_plaintext_client_refused_on_both_tls_ports(served: Served) -> None:
    assert check(served.internal, None) == grpc.StatusCode.UNAVAILABLE
    assert check(served.client, None) == grpc.StatusCode.UNAVAILABLE
    assert served.health.subjects == []


def test_rewritten_certificate_and_ca_picked_up_without_restart(served: Served, monkeypatch: Any,
                                                                   tmp_path: Any) -> None:
    """Rotate to a new CA: the server's CA, certificate and key files are replaced in place (atomically,
    as ``certs.write_pem`` does); the next handshake uses them, the old credentials stop working."""
    monkeypatch.setattr(transport, "RELOAD_CHECK_INTERVAL_S", 0.0)
    assert check(served.internal, served.admin) == grpc.StatusCode.OK
    new_ca = certs.create_ca("tidelog-ca-2")
    new_dir = str(tmp_path / "new")
    new_admin_paths = certs.write_pem(new_dir, "admin", certs.issue_client(new_ca, "admin"))
    new_ca_paths = certs.write_pem(new_dir, "ca", new_ca)
    new_admin = TlsFiles(new_ca_paths.cert, new_admin_paths.cert, new_admin_paths.key)
    assert check(served.internal, new_admin) == grpc.StatusCode.UNAVAILABLE  # not yet trusted
    directory = os.path.dirname(served.pki.ca.cert)
    certs.write_pem(directory, "broker-1", certs.issue_service(new_ca, "broker", 1))
    certs.write_pem(directory, "ca", new_ca)
    assert check(served.internal, new_admin) == grpc.StatusCode.OK
    assert check(served.client, TlsFiles(new_ca_paths.cert)) == grpc.StatusCode.OK
    # the old admin certificate (old CA) is refused now (its CA file is the rewritten one: the new CA)
    assert check(served.internal, served.admin) == grpc.StatusCode.UNAVAILABLE


def test_client_files_reread_for_a_new_channel(served: Served, tmp_path: Any) -> None:
    """A client whose certificate file is replaced presents the new one on its next channel."""
    ca = certs.load_ca(served.pki.ca)
    paths = certs.write_pem(str(tmp_path / "me"), "me", certs.issue_client(ca, "alice"))
    mine = TlsFiles(served.pki.ca.cert, paths.cert, paths.key)
    assert check(served.internal, mine) == grpc.StatusCode.OK
    certs.write_pem(str(tmp_path / "me"), "me", certs.issue_client(ca, "bob"))
    assert check(served.internal, mine) == grpc.StatusCode.OK
    assert served.health.subjects == ["CN=alice,OU=tidelog-client", "CN=bob,OU=tidelog-client"]


def test_process_configuration_picks_the_channel(served: Served) -> None:
    try:
        transport.configure(served.admin)
        assert transport.current() == served.admin
        assert check(served.internal, ...) == grpc.StatusCode.OK  # type: ignore[arg-type]
        transport.configure(None)
        assert check(served.internal, ...) == grpc.StatusCode.UNAVAILABLE  # type: ignore[arg-type]
    finally:
        transport.configure(None)


def test_call_credentials_need_tls() -> None:
    creds = grpc.access_token_call_credentials("x")
    with pytest.raises(ValueError):
        transport.sync_channel("127.0.0.1:1", tls=None, call_credentials=creds)


def test_client_facing() -> None:
    assert transport.client_facing({"address": "h:1"}) == "h:1"
    assert transport.client_facing({"address": "h:1", "client_address": "h:2"}) == "h:2"


def test_tls_files_need_cert_and_key_together() -> None:
    with pytest.raises(ValueError):
        TlsFiles("ca.crt", "me.crt", None)


# -- the certificate principal ------------------------------------------------------------------------------


class _Context:
    def __init__(self, subject: bytes | None) -> None:
        self._auth = {"transport_security_type": [b"ssl"]}
        if subject is not None:
            self._auth["x509_subject"] = [subject]

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._auth


class _Settings:
    security_protocol = "SSL"
    ssl_cafile = "ca.crt"
    ssl_certfile = "me.crt"
    ssl_keyfile = "me.key"
    super_users = "User:admin"
    ssl_principal_mapping_rules = "RULE:^CN=(.*?),OU=tidelog-client$/$1/,DEFAULT"
    allow_everyone_if_no_acl_found = None


class _Metadata:
    class keys:  # noqa: N801
        root = "/tidelog/t/"


def test_certificate_principal_and_service_super_users() -> None:
    sec = ServiceSecurity.from_settings(_Settings(), _Metadata())  # type: ignore[arg-type]
    assert sec.enabled and sec.tls == TlsFiles("ca.crt", "me.crt", "me.key")
    assert sec.authorizer is not None and not sec.authorizer.allow_everyone_if_no_acl_found
    assert sec.certificate_principal(_Context(b"CN=admin,OU=tidelog-client")) == ("admin", "CN=admin,OU=tidelog-client")
    assert sec.certificate_principal(_Context(None)) == ("ANONYMOUS", None)
    dn = "CN=broker-2,OU=tidelog-service"
    assert "User:" + dn not in sec.authorizer.super_users
    assert sec.certificate_principal(_Context(dn.encode())) == (dn, dn)
    assert sec.authorizer.super_users == {"User:admin", "User:" + dn}
    assert is_service_subject(dn) and not is_service_subject("CN=admin,OU=tidelog-client")


def test_disabled_security_is_anonymous() -> None:
    sec = ServiceSecurity.disabled()
    assert not sec.enabled and sec.authorizer is None and sec.store is None
    assert sec.certificate_principal(_Context(b"CN=admin,OU=tidelog-client")) == ("ANONYMOUS", None)


# -- the REST API's certificate (controller: uvicorn's SSL context, updated in place) -------------------------


def test_https_certificate_reloaded_in_place(tmp_path: Any) -> None:
    import ssl

    ca = certs.create_ca()
    d = str(tmp_path / "rest")
    ca_paths = certs.write_pem(d, "ca", ca)
    paths = certs.write_pem(d, "controller-1", certs.issue_service(ca, "controller", 1))
    tls = TlsFiles(ca_paths.cert, paths.cert, paths.key)
    opts = transport.uvicorn_tls(tls)
    assert opts["ssl_cert_reqs"] == ssl.CERT_OPTIONAL and transport.uvicorn_tls(None) == {}
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(opts["ssl_certfile"], opts["ssl_keyfile"])
    client_ctx = ssl.create_default_context(cafile=ca_paths.cert)

    async def served_subject(port: int) -> str:
        _r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx, server_hostname="127.0.0.1")
        der = w.get_extra_info("ssl_object").getpeercert(binary_form=True)
        w.close()
        from cryptography import x509
        return x509.load_der_x509_certificate(der).subject.rfc4514_string()

    async def scenario() -> tuple[str, str]:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        reloader = asyncio.create_task(transport.reload_ssl_context(server_ctx, tls, interval_s=0.01))
        try:
            before = await served_subject(port)
            certs.write_pem(d, "controller-1", certs.issue(ca, "controller-1-renewed"))
            after = before
            for _ in range(500):  # until the reloader has run (bounded)
                after = await served_subject(port)
                if after != before:
                    break
                await asyncio.sleep(0.01)
            return before, after
        finally:
            reloader.cancel()
            server.close()

    before, after = asyncio.run(scenario())
    assert before == "CN=controller-1,OU=tidelog-service"
    assert after == "CN=controller-1-renewed,OU=tidelog-service"
