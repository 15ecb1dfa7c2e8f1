"""Certificates: a cluster's PKI on disk, verification (unknown CA, expired, not yet valid), a real TLS
handshake with the files, and the reloader."""

from __future__ import annotations

import datetime as dt
import os
import socket
import ssl
import stat
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from shared.security.certs import (
    CertificateError,
    CertReloader,
    create_ca,
    create_cluster_pki,
    issue,
    issue_client,
    issue_service,
    load_ca,
    load_certificate,
    load_certificates,
    load_private_key,
    subject_dn,
    verify_certificate,
    write_pem,
)
from shared.security.principal_mapping import PrincipalMapper

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)


def test_cluster_pki_files_and_modes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pki = create_cluster_pki(str(tmp_path / "tls"), [("broker", 1), ("broker", 2), ("controller", 1)])
    assert set(pki.services) == {"broker-1", "broker-2", "controller-1"} and set(pki.clients) == {"admin"}
    ca = load_certificate(pki.ca.cert)
    for paths in [pki.ca, *pki.services.values(), *pki.clients.values()]:
        assert stat.S_IMODE(os.stat(paths.key).st_mode) == 0o600
        assert isinstance(load_private_key(paths.key), ec.EllipticCurvePrivateKey)
    for name, paths in pki.services.items():
        cert = load_certificate(paths.cert)
        assert subject_dn(cert) == f"CN={name},OU=tidelog-service"
        assert verify_certificate(cert, ca) == ca
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
        assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    admin = load_certificate(pki.clients["admin"].cert)
    assert subject_dn(admin) == "CN=admin,OU=tidelog-client"
    assert load_ca(pki.ca).cert == ca
    assert not any(f.endswith(".tmp") or ".tmp" in f for f in os.listdir(tmp_path / "tls"))


def test_subjects_map_through_principal_rules() -> None:
    ca = create_ca()
    mapper = PrincipalMapper("RULE:^CN=([^,]+),OU=tidelog-service$/$1/,RULE:^CN=([^,]+),OU=tidelog-client$/$1/,DEFAULT")
    assert mapper.principal(issue_service(ca, "broker", 3).subject) == "User:broker-3"
    assert mapper.principal(issue_client(ca, "alice").subject) == "User:alice"


def test_unknown_ca_is_refused() -> None:
    ca, other = create_ca(), create_ca()  # same subject "CN=tidelog-ca", different key
    leaf = issue_service(ca, "broker", 1)
    with pytest.raises(CertificateError, match="trusted CA"):
        verify_certificate(leaf.cert, other.cert)
    assert verify_certificate(leaf.cert, [other.cert, ca.cert]) == ca.cert  # a bundle during a CA rotation


def test_expired_and_not_yet_valid() -> None:
    ca = create_ca(now=NOW - dt.timedelta(days=30))
    expired = issue(ca, "old", not_before=NOW - dt.timedelta(days=10), valid_days=1)
    with pytest.raises(CertificateError, match="expired"):
        verify_certificate(expired.cert, ca.cert, now=NOW)
    future = issue(ca, "soon", not_before=NOW + dt.timedelta(days=1))
    with pytest.raises(CertificateError, match="not valid before"):
        verify_certificate(future.cert, ca.cert, now=NOW)
    fine = issue(ca, "fine", now=NOW)
    verify_certificate(fine.cert, ca.cert, now=NOW)
    short_ca = create_ca(valid_days=60, now=NOW)
    leaf = issue(short_ca, "outlives-its-ca", now=NOW)
    with pytest.raises(CertificateError, match="CA certificate .* expired"):
        verify_certificate(leaf.cert, short_ca.cert, now=NOW + dt.timedelta(days=100))


def test_extensions() -> None:
    ca = create_ca()
    assert ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    leaf = issue(ca, "x", sans=["10.1.2.3", "broker.example"])
    assert not leaf.cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    eku = leaf.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {o.dotted_string for o in eku} == {"1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"}
    san = leaf.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(i) for i in san.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.1.2.3"}
    assert set(san.get_values_for_type(x509.DNSName)) == {"localhost", "broker.example"}


def test_files_work_for_mutual_tls(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The written files drive a real mutual-TLS handshake with Python's ssl (OpenSSL): the server sees
    the client's subject; a client from another CA is refused."""
    pki = create_cluster_pki(str(tmp_path), [("broker", 1)], clients=["admin"])
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.ca.cert)
    server_ctx.load_cert_chain(pki.services["broker-1"].cert, pki.services["broker-1"].key)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[object] = []

    def serve(count: int) -> None:
        for _ in range(count):
            conn, _addr = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    seen.append(dict(x[0] for x in tls.getpeercert()["subject"]))
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError) as exc:
                seen.append(exc)

    t = threading.Thread(target=serve, args=(2,), daemon=True)
    t.start()

    def client(cert: str, key: str) -> bytes:
        ctx = ssl.create_default_context(cafile=pki.ca.cert)
        ctx.load_cert_chain(cert, key)
        with socket.create_connection(("127.0.0.1", port)) as raw, ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.recv(2)

    assert client(pki.clients["admin"].cert, pki.clients["admin"].key) == b"ok"
    rogue = write_pem(str(tmp_path / "rogue"), "mallory", issue_client(create_ca(), "mallory"))
    try:  # TLS 1.3: the refusal reaches the client at its first read, as an alert or a closed socket
        got = client(rogue.cert, rogue.key)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
        got = b""
    assert got == b""
    t.join(5)
    listener.close()
    assert seen[0] == {"commonName": "admin", "organizationalUnitName": "tidelog-client"}
    assert isinstance(seen[1], ssl.SSLError)


def test_reloader(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ca = create_ca()
    paths = write_pem(str(tmp_path), "broker-1", issue_service(ca, "broker", 1))
    reloader = CertReloader([paths.cert, paths.key])
    first = reloader.check()
    assert first is not None and first[paths.cert].startswith(b"-----BEGIN CERTIFICATE-----")
    assert reloader.check() is None
    os.utime(paths.cert)  # touched, same bytes
    assert reloader.check() is None
    renewed = issue_service(ca, "broker", 1)
    write_pem(str(tmp_path), "broker-1", renewed)
    got = reloader.check()
    assert got is not None and got[paths.cert] == renewed.cert_pem() and got[paths.key] == renewed.key_pem()
    assert reloader.current == got
    os.unlink(paths.key)  # mid-rotation: keep the old state
    assert reloader.check() is None
    assert reloader.current == got


def test_ca_bundle_loading(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = create_ca("ca-a"), create_ca("ca-b")
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes(a.cert_pem() + b.cert_pem())
    assert [subject_dn(c) for c in load_certificates(str(bundle))] == ["CN=ca-a", "CN=ca-b"]
