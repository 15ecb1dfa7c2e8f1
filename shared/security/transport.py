"""TLS for every gRPC door: the process's TLS files, channels and server credentials.

A secure process calls ``configure(TlsFiles(...))`` once (``shared.service.serve`` does it from its
settings); every channel it then opens with ``aio_channel`` / ``sync_channel`` is a TLS channel that
presents the process's certificate (mutual TLS), and a plaintext process (``configure(None)``, the
default) gets the insecure channels it always had, at no extra cost.

Servers: ``server_credentials(tls, require_client_cert=...)`` builds ``grpc.dynamic_ssl_server_credentials``
whose fetcher re-reads the certificate, key and CA files when they change (``certs.CertReloader``), so a
rotated certificate is served from the next handshake on, without a restart. Clients read the files
when they open a channel (again through a reloader: unchanged files cost a few ``stat`` calls).

Two listeners per secure service (Kafka's inter-broker and client listeners; see the security contract):
the internal port requires a client certificate, the client port does not (SCRAM sessions there).
``client_facing(registration)`` is the address to hand a client. Must not import ``services``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import EllipsisType
from typing import Any

import grpc

from shared.security.certs import CertReloader

log = logging.getLogger(__name__)

#: A server's fetcher looks at the files at most this often (it runs on every TLS handshake).
RELOAD_CHECK_INTERVAL_S = 1.0

Options = Sequence[tuple[str, Any]] | None


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA that verifies peers, and (optionally) this party's certificate and key."""

    cafile: str
    certfile: str | None = None
    keyfile: str | None = None

    def __post_init__(self) -> None:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together")

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(p for p in (self.cafile, self.certfile, self.keyfile) if p)


_current: list[TlsFiles | None] = [None]


def configure(tls: TlsFiles | None) -> None:
    """Set the process's TLS files (None: plaintext). ``serve()`` calls it once from the settings."""
    _current[0] = tls


def current() -> TlsFiles | None:
    return _current[0]


# -- reading files (shared by clients and servers) ---------------------------------------------------------


class _Files:
    """The latest good contents of a ``TlsFiles`` set, re-read when the files change."""

    def __init__(self, tls: TlsFiles) -> None:
        self.tls = tls
        self._reloader = CertReloader(tls.paths)
        self._lock = threading.Lock()
        self._contents: dict[str, bytes] | None = None
        self._checked = 0.0
        self.version = 0  # bumped on every change

    def get(self, min_interval: float = 0.0) -> tuple[dict[str, bytes], int]:
        """``(contents, version)``, looking at the files again if ``min_interval`` passed since the last
        look; raises FileNotFoundError before the first good read."""
        with self._lock:
            now = time.monotonic()
            if self._contents is None or now - self._checked >= min_interval:
                self._checked = now
                fresh = self._reloader.check()
                if fresh is not None:
                    self._contents = fresh
                    self.version += 1
            if self._contents is None:
                raise FileNotFoundError(f"cannot read TLS files {', '.join(self.tls.paths)}")
            return self._contents, self.version


_files_cache: dict[TlsFiles, _Files] = {}
_files_lock = threading.Lock()


def _files(tls: TlsFiles) -> _Files:
    with _files_lock:
        f = _files_cache.get(tls)
        if f is None:
            f = _files_cache[tls] = _Files(tls)
        return f


# -- clients -----------------------------------------------------------------------------------------------


def channel_credentials(tls: TlsFiles, call_credentials: grpc.CallCredentials | None = None) -> grpc.ChannelCredentials:
    """TLS verifying the peer against ``tls.cafile``, presenting ``tls.certfile`` when there is one."""
    contents, _ = _files(tls).get()
    creds = grpc.ssl_channel_credentials(
        root_certificates=contents[tls.cafile],
        private_key=contents[tls.keyfile] if tls.keyfile else None,
        certificate_chain=contents[tls.certfile] if tls.certfile else None,
    )
    if call_credentials is not None:
        creds = grpc.composite_channel_credentials(creds, call_credentials)
    return creds


def _resolve(tls: TlsFiles | None | EllipsisType) -> TlsFiles | None:
    return _current[0] if tls is ... else tls


def aio_channel(address: str, options: Options = None, *, tls: TlsFiles | None | EllipsisType = ...,
                call_credentials: grpc.CallCredentials | None = None) -> grpc.aio.Channel:
    """A ``grpc.aio`` channel to ``address``: TLS with the process's files (or ``tls``), else plaintext."""
    files = _resolve(tls)
    if files is None:
        if call_credentials is not None:
            raise ValueError("call credentials need a TLS channel")
        return grpc.aio.insecure_channel(address, options=options)
    return grpc.aio.secure_channel(address, channel_credentials(files, call_credentials), options=options)


def sync_channel(address: str, options: Options = None, *, tls: TlsFiles | None | EllipsisType = ...,
                 call_credentials: grpc.CallCredentials | None = None) -> grpc.Channel:
    """A blocking ``grpc`` channel to ``address``: TLS with the process's files (or ``tls``), else plaintext."""
    files = _resolve(tls)
    if files is None:
        if call_credentials is not None:
            raise ValueError("call credentials need a TLS channel")
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, channel_credentials(files, call_credentials), options=options)


def client_facing(reg: dict[str, Any]) -> str:
    """The address a *client* should dial from a service registration: the TLS client port when the
    cluster is secure, else the one address."""
    return str(reg.get("client_address") or reg["address"])


# -- servers -----------------------------------------------------------------------------------------------


def _server_config(tls: TlsFiles, contents: dict[str, bytes]) -> grpc.ServerCertificateConfiguration:
    assert tls.certfile and tls.keyfile
    return grpc.ssl_server_certificate_configuration(
        [(contents[tls.keyfile], contents[tls.certfile])], root_certificates=contents[tls.cafile])


def server_credentials(tls: TlsFiles, *, require_client_cert: bool) -> grpc.ServerCredentials:
    """TLS server credentials from ``tls`` (certificate and key required). With ``require_client_cert``
    a peer must present a certificate the CA signed (mutual TLS). The files are looked at again (at most
    once a second, on a handshake) and a changed certificate, key or CA applies to the next handshakes."""
    if not (tls.certfile and tls.keyfile):
        raise ValueError("a TLS server needs ssl_certfile and ssl_keyfile")
    files = _files(tls)
    contents, version = files.get()
    initial = _server_config(tls, contents)
    served = [version]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        try:
            contents, version = files.get(RELOAD_CHECK_INTERVAL_S)
            if version == served[0]:
                return None
            config = _server_config(tls, contents)
            served[0] = version
        except Exception as exc:  # a half-written or invalid file: keep serving the old one
            log.warning("TLS files not reloaded", extra={"files": list(tls.paths), "error": str(exc)})
            return None
        log.info("TLS certificate reloaded", extra={"certfile": tls.certfile})
        return config

    return grpc.dynamic_ssl_server_credentials(initial, fetch, require_client_authentication=require_client_cert)


# -- HTTPS (the controller's REST API under uvicorn) ----------------------------------------------------------


def uvicorn_tls(tls: TlsFiles | None) -> dict[str, Any]:
    """uvicorn's TLS settings: HTTPS with the service's certificate; a client certificate the CA signed is
    verified when one is offered (users come with HTTP Basic instead). Plaintext: none."""
    if tls is None:
        return {}
    return {"ssl_certfile": tls.certfile, "ssl_keyfile": tls.keyfile, "ssl_ca_certs": tls.cafile,
            "ssl_cert_reqs": ssl.CERT_OPTIONAL, "http": _peer_certificate_protocol()}


#: The ASGI scope key under which a verified client certificate's DN (RFC 4514) reaches the app.
PEER_SUBJECT_SCOPE_KEY = "tidelog.peer_subject"


class _WithPeerSubject:
    """An ASGI app that adds the connection's verified client-certificate DN to every request's scope."""

    def __init__(self, app: Any, subject: str) -> None:
        self.app, self.subject = app, subject

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app({**scope, PEER_SUBJECT_SCOPE_KEY: self.subject}, receive, send)


def _peer_certificate_protocol() -> type:
    """uvicorn's HTTP protocol, telling the app the client certificate the TLS handshake verified (ASGI has no
    field for it): a service (a broker forwarding a Kafka admin request) authenticates to REST by its
    certificate, as it does on gRPC; users still come with HTTP Basic."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class PeerCertificateProtocol(H11Protocol):
        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            ssl_object = transport.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if der:  # present only if verified against the CA (CERT_OPTIONAL fails the handshake otherwise)
                from cryptography import x509

                self.app = _WithPeerSubject(self.app, x509.load_der_x509_certificate(der).subject.rfc4514_string())

    return PeerCertificateProtocol


async def reload_ssl_context(context: ssl.SSLContext, tls: TlsFiles, interval_s: float = 5.0) -> None:
    """Serve a rewritten certificate/key (and trust an added CA) from the next handshake on, without a
    restart: the server's SSL context is updated in place, every ``interval_s``, until cancelled. (A CA
    removed from the file stays trusted until a restart: an SSL context's trust store only grows.)"""
    reloader = CertReloader(tls.paths)
    reloader.check()  # what the server loaded
    while True:
        await asyncio.sleep(interval_s)
        if reloader.check() is None:
            continue
        try:
            context.load_cert_chain(tls.certfile or "", tls.keyfile or "")
            context.load_verify_locations(cafile=tls.cafile)
            log.info("HTTPS certificate reloaded", extra={"certfile": tls.certfile})
        except (OSError, ssl.SSLError) as exc:
            log.warning("HTTPS certificate not reloaded", extra={"error": str(exc)})
