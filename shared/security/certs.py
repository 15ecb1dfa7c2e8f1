"""Certificates for a secure cluster (``tidelog up --secure``): a CA, one certificate per service, an
admin/client certificate, PEM files, verification, and reload when files change.

Keys are EC P-256 (ECDSA with SHA-256): a key takes well under a millisecond to make (RSA 2048 takes tens
to hundreds), so a cluster's worth of certificates and the tests' many short-lived ones are cheap;
signatures and handshakes are faster than RSA's at equal strength (~128-bit, as RSA 3072); and every
party Tidelog talks to accepts it (OpenSSL under grpcio, Go's crypto/tls in etcd, librdkafka, httpx).

Subjects read, in RFC 4514 / Kafka's ``X500Principal.getName()`` order, ``CN=<role>-<id>,OU=tidelog-service``
for services and ``CN=<name>,OU=tidelog-client`` for people and programs, which is what
``ssl.principal.mapping.rules`` see. Every leaf certificate names 127.0.0.1 and localhost (plus any given
SANs) and is good for both TLS server and client authentication (services are both).

File layout written by ``create_cluster_pki``::

    <dir>/ca.crt  ca.key            the CA (ca.key 0600: only ``tidelog up`` needs it)
    <dir>/<role>-<id>.crt  .key     one per service
    <dir>/<admin>.crt  .key         the admin client

Clock: ``now`` is a parameter everywhere it matters (tests make expired and future certificates).
Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVICE_OU = "tidelog-service"
CLIENT_OU = "tidelog-client"
DEFAULT_SANS = ("127.0.0.1", "localhost")
CA_VALID_DAYS = 3650
LEAF_VALID_DAYS = 825  # the longest leaf lifetime browsers and most tooling still accept
_CLOCK_SKEW = dt.timedelta(minutes=5)  # not_before is backdated this much for peers with a slow clock

PrivateKey = ec.EllipticCurvePrivateKey


class CertificateError(Exception):
    """A certificate does not verify (unknown CA, bad signature, expired, not yet valid)."""


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: PrivateKey

    @property
    def subject(self) -> str:
        return subject_dn(self.cert)

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else dt.datetime.now(dt.UTC)


def _new_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def subject_dn(cert: x509.Certificate) -> str:
    """The subject as Kafka's principal mapping sees it (RFC 4514: most specific first)."""
    return cert.subject.rfc4514_string()


def service_common_name(role: str, ident: int | str) -> str:
    return f"{role}-{ident}"


def _name(common_name: str, ou: str | None) -> x509.Name:
    # ASN.1 order is least specific first; rfc4514_string() reverses it: "CN=...,OU=..."
    attrs = [x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou)] if ou else []
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def create_ca(common_name: str = "tidelog-ca", *, valid_days: int = CA_VALID_DAYS,
              now: dt.datetime | None = None) -> Issued:
    key = _new_key()
    name = _name(common_name, None)
    start = _now(now) - _CLOCK_SKEW
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(start + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def _san(names: Iterable[str]) -> x509.SubjectAlternativeName:
    out: list[x509.GeneralName] = []
    for n in dict.fromkeys(names):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(out)


def issue(
    ca: Issued,
    common_name: str,
    *,
    ou: str | None = SERVICE_OU,
    sans: Sequence[str] = DEFAULT_SANS,
    valid_days: int = LEAF_VALID_DAYS,
    now: dt.datetime | None = None,
    not_before: dt.datetime | None = None,
) -> Issued:
    """A leaf certificate signed by ``ca``, for TLS server and client authentication.

    ``not_before`` (default: now minus a little clock skew) and ``valid_days`` set the validity; tests
    pass a past window for an expired certificate or a future one for a not-yet-valid one."""
    key = _new_key()
    start = not_before if not_before is not None else _now(now) - _CLOCK_SKEW
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, ou)).issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start).not_valid_after(start + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_agreement=True, key_cert_sign=False,
                                     crl_sign=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, encipher_only=False, decipher_only=False),
                       critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(_san([*DEFAULT_SANS, *sans]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue_service(ca: Issued, role: str, ident: int | str, *, sans: Sequence[str] = DEFAULT_SANS,
                  valid_days: int = LEAF_VALID_DAYS, now: dt.datetime | None = None,
                  not_before: dt.datetime | None = None) -> Issued:
    """``CN=<role>-<id>,OU=tidelog-service``."""
    return issue(ca, service_common_name(role, ident), ou=SERVICE_OU, sans=sans, valid_days=valid_days, now=now,
                 not_before=not_before)


def issue_client(ca: Issued, name: str, *, sans: Sequence[str] = DEFAULT_SANS, valid_days: int = LEAF_VALID_DAYS,
                 now: dt.datetime | None = None, not_before: dt.datetime | None = None) -> Issued:
    """``CN=<name>,OU=tidelog-client`` (the admin, a CLI user, a program)."""
    return issue(ca, name, ou=CLIENT_OU, sans=sans, valid_days=valid_days, now=now, not_before=not_before)


# -- files -------------------------------------------------------------------------------------------------


def _write(path: str, data: bytes, mode: int) -> None:
    """Write atomically (a reloader never sees half a file) with ``mode`` from the start."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@dataclass(frozen=True)
class PemPaths:
    cert: str
    key: str


def write_pem(directory: str, name: str, issued: Issued) -> PemPaths:
    """``<dir>/<name>.crt`` (0644) and ``<dir>/<name>.key`` (0600)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    paths = PemPaths(os.path.join(directory, f"{name}.crt"), os.path.join(directory, f"{name}.key"))
    _write(paths.key, issued.key_pem(), 0o600)
    _write(paths.cert, issued.cert_pem(), 0o644)
    return paths


@dataclass
class ClusterPki:
    directory: str
    ca: PemPaths
    services: dict[str, PemPaths] = field(default_factory=dict)  # "<role>-<id>" -> paths
    clients: dict[str, PemPaths] = field(default_factory=dict)


def create_cluster_pki(
    directory: str,
    services: Iterable[tuple[str, int | str]],
    clients: Iterable[str] = ("admin",),
    *,
    sans: Sequence[str] = DEFAULT_SANS,
    valid_days: int = LEAF_VALID_DAYS,
    now: dt.datetime | None = None,
) -> ClusterPki:
    """A CA plus one certificate per ``(role, id)`` and per client name, written under ``directory``."""
    ca = create_ca(now=now)
    pki = ClusterPki(directory, write_pem(directory, "ca", ca))
    for role, ident in services:
        cn = service_common_name(role, ident)
        pki.services[cn] = write_pem(directory, cn, issue_service(ca, role, ident, sans=sans,
                                                                  valid_days=valid_days, now=now))
    for name in clients:
        pki.clients[name] = write_pem(directory, name, issue_client(ca, name, sans=sans, valid_days=valid_days,
                                                                     now=now))
    return pki


def load_ca(paths: PemPaths) -> Issued:
    return Issued(load_certificate(paths.cert), load_private_key(paths.key))


def load_certificate(path: str) -> x509.Certificate:
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificate(f.read())


def load_certificates(path: str) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle (a CA file may hold the old and the new CA during a rotation)."""
    with open(path, "rb") as f:
        return x509.load_pem_x509_certificates(f.read())


def load_private_key(path: str) -> PrivateKey:
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{path}: expected an EC private key")
    return key


def verify_certificate(cert: x509.Certificate, cas: x509.Certificate | Sequence[x509.Certificate],
                       now: dt.datetime | None = None) -> x509.Certificate:
    """Check that one of ``cas`` signed ``cert`` and that both are valid at ``now``; returns the CA.

    A sanity check for tooling and tests (``tidelog`` can say *why* a certificate is refused); the TLS
    libraries do the real verification during handshakes."""
    t = _now(now)
    ca_list = [cas] if isinstance(cas, x509.Certificate) else list(cas)
    for ca in ca_list:
        if ca.subject != cert.issuer:
            continue
        try:
            cert.verify_directly_issued_by(ca)
        except (InvalidSignature, ValueError, TypeError):
            continue
        for c, what in ((cert, "certificate"), (ca, "CA certificate")):
            if t < c.not_valid_before_utc:
                raise CertificateError(f"{what} {subject_dn(c)} is not valid before {c.not_valid_before_utc}")
            if t > c.not_valid_after_utc:
                raise CertificateError(f"{what} {subject_dn(c)} expired at {c.not_valid_after_utc}")
        return ca
    raise CertificateError(f"{subject_dn(cert)} is not signed by a trusted CA (issuer {cert.issuer.rfc4514_string()})")


# -- reload ------------------------------------------------------------------------------------------------


class CertReloader:
    """Notices when certificate/key files change, for reload without a restart.

    ``check()`` returns the new contents of every watched file (path -> bytes) when any of them changed
    since the last call (by mtime, size or inode, then by content), else None. The first call always
    returns the contents. A file caught missing or half-replaced keeps the previous state: the caller
    keeps its old credentials and asks again later (writers should replace files atomically, as
    ``write_pem`` does). Callers poll it (every few seconds) and rebuild their TLS credentials on a
    non-None answer."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.paths = tuple(paths)
        self._stats: dict[str, tuple[int, int, int]] = {}
        self._contents: dict[str, bytes] | None = None

    def check(self) -> dict[str, bytes] | None:
        try:
            stats = {p: _stat_key(p) for p in self.paths}
        except OSError:
            return None
        if self._contents is not None and stats == self._stats:
            return None
        try:
            contents = {}
            for p in self.paths:
                with open(p, "rb") as f:
                    contents[p] = f.read()
        except OSError:
            return None
        self._stats = stats
        if contents == self._contents:
            return None  # touched, not changed
        self._contents = contents
        return dict(contents)

    @property
    def current(self) -> dict[str, bytes] | None:
        return None if self._contents is None else dict(self._contents)


def _stat_key(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size, st.st_ino
