"""The common life cycle of a Tidelog service process.

``run(ServiceClass, SettingsClass)`` parses settings (exit 2 on bad input),
sets up JSON logging, starts a ``grpc.aio`` server with the standard gRPC
health service, lets the service add its own servicers and start its work,
writes the ready file, and on SIGTERM/SIGINT stops in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from shared.grpc_guard import GuardedServer
from shared.logs import setup_logging
from shared.metadata.store import MetadataStore
from shared.metrics import start_metrics_server
from shared.request_context import set_connection_gate, set_principal_resolver
from shared.runtime import tune_allocator
from shared.security import audit, transport
from shared.security.connection_rate import (
    SECURE_DEFAULT_RATE,
    ConnectionRateLimiter,
    GrpcConnectionGate,
    is_unlimited,
)
from shared.security.service_security import ServiceSecurity, tls_files
from shared.settings import ServiceSettings, load_settings

S = TypeVar("S", bound=ServiceSettings)
log = logging.getLogger(__name__)

#: The largest gRPC message a server receives (a produce request included): a larger one is refused
#: with RESOURCE_EXHAUSTED, authenticated or not. A service's settings may set it
#: (``grpc_max_receive_message_bytes``); this is the default.
GRPC_MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024

GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", GRPC_MAX_RECEIVE_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
]


def server_options(settings: Any) -> list[tuple[str, Any]]:
    """``GRPC_OPTIONS`` with the receive bound of ``settings`` if it has one."""
    bound = int(getattr(settings, "grpc_max_receive_message_bytes", 0) or GRPC_MAX_RECEIVE_MESSAGE_BYTES)
    return [(k, bound if k == "grpc.max_receive_message_length" else v) for k, v in GRPC_OPTIONS]


def connection_creation_rate(settings: ServiceSettings) -> float:
    """New connections per second per host on this service's client doors (Kafka's per-IP quota
    ``connection_creation_rate``): the ``connection_creation_rate`` setting (``--connection-creation-rate``,
    ``TIDELOG_CONNECTION_CREATION_RATE``), else unlimited on a plaintext cluster (Kafka's default) and ``SECURE_DEFAULT_RATE`` on a
    secure one. 0 (or less) is unlimited."""
    value = settings.connection_creation_rate
    if value is None:
        return SECURE_DEFAULT_RATE if settings.secure else 0.0
    return float(value)


def install_connection_gate(settings: Any) -> GrpcConnectionGate | None:
    """The process's gRPC gate (``shared.request_context``) when ``connection_creation_rate`` is limited."""
    rate = connection_creation_rate(settings)
    if is_unlimited(rate):
        set_connection_gate(None)
        return None
    idle_s = int(getattr(settings, "connections_max_idle_ms", 600_000)) / 1000
    gate = GrpcConnectionGate(ConnectionRateLimiter(rate), idle_s=idle_s, now=time.monotonic())
    set_connection_gate(gate, time.monotonic)
    log.info("gRPC connection_creation_rate", extra={"connection_creation_rate": gate.limiter.describe()})
    return gate


class Service(Generic[S]):
    """Base of every role. Subclasses override the hooks; the runner calls them in order."""

    role = "service"
    #: Upper bound for ``stop()``; a service that cannot finish in time is stopped anyway.
    stop_timeout_s = 20.0

    def __init__(self, settings: S) -> None:
        self.settings = settings
        self.address = ""  # the gRPC address other services dial (mutual TLS when secure)
        self.client_address = ""  # secure only: the client-facing TLS port ("" when plaintext)
        self.metrics_address = ""  # host:port of /metrics ("" when off)
        self.tls = tls_files(settings)  # None: plaintext
        self.store = MetadataStore(settings.etcd_endpoint, settings.cluster, timeout=5, tls=self.tls)
        #: TLS files, ACL/user caches and the authorizer (``disabled()`` when plaintext); its store's caches
        #: are followed from ``serve()`` on, after etcd is connected and before ``start()``
        self.security = ServiceSecurity.from_settings(settings, self.store)
        self.stopping = asyncio.Event()

    @property
    def instance(self) -> str:
        return str(self.settings.id)

    def add_servicers(self, server: grpc.aio.Server) -> None:
        """Register this role's gRPC servicers (before the server starts)."""

    async def start(self) -> None:
        """Start the role's work once the gRPC server listens on ``self.address``."""

    async def stop(self) -> None:
        """Stop the role's work (before the gRPC server stops)."""

    def ready_info(self) -> dict[str, Any]:
        info = {"role": self.role, "id": self.instance, "address": self.address, "pid": os.getpid()}
        if self.client_address:
            info["client_address"] = self.client_address
        if self.metrics_address:
            info["metrics"] = self.metrics_address
        return info


def write_ready_file(path: str, info: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.replace(tmp, path)


def watch_lifeline(loop: asyncio.AbstractEventLoop, fd: int, on_close: Callable[[], None]) -> None:
    """Call ``on_close`` once the pipe ``fd`` reads end of file: the launcher that started this
    process (and alone holds the write end) has exited, however it died."""

    def readable() -> None:
        # Only end of file makes the pipe readable (nothing is ever written to it), so this read does
        # not block. The descriptor is shared with the other children: it stays blocking for them.
        try:
            data = os.read(fd, 4096)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            log.warning("launcher gone (lifeline closed); stopping")
            on_close()

    try:
        os.fstat(fd)
    except OSError as exc:
        raise SystemExit(f"--lifeline-fd {fd}: not an open file descriptor ({exc.strerror})") from None
    loop.add_reader(fd, readable)


async def serve(service: Service[Any]) -> None:
    settings = service.settings
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.stopping.set)
    if settings.lifeline_fd is not None:
        watch_lifeline(loop, settings.lifeline_fd, service.stopping.set)
    try:
        metrics_port = start_metrics_server(settings.host, settings.metrics_port)
    except OSError as exc:
        raise SystemExit(f"{service.role}: cannot serve /metrics on {settings.host}:{settings.metrics_port} "
                         f"({exc.strerror})") from None
    if metrics_port is not None:
        service.metrics_address = f"{settings.advertised}:{metrics_port}"
    security = service.security
    transport.configure(service.tls)  # every channel this process opens: TLS with its certificate when secure
    server = grpc.aio.server(options=server_options(settings))
    health_servicer = health.aio.HealthServicer()
    guarded: Any = GuardedServer(server)  # every method: bad bytes -> INVALID_ARGUMENT (shared/grpc_guard.py)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, guarded)
    service.add_servicers(guarded)
    if security.enabled:
        set_principal_resolver(security.certificate_principal)
        attach_grpc_auth(guarded, security)
    install_connection_gate(settings)
    service.address, service.client_address = listen(server, service.role, settings, service.tls)
    await server.start()
    try:
        await service.store.connect(settings.etcd_connection_timeout_ms / 1000)
        if security.enabled:
            await security.start()
        await service.start()
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        if settings.ready_file:
            write_ready_file(settings.ready_file, service.ready_info())
        log.info("serving", extra={"address": service.address})
        await service.stopping.wait()
        log.info("stopping")
    finally:
        await health_servicer.enter_graceful_shutdown()
        try:
            await asyncio.wait_for(service.stop(), service.stop_timeout_s)
        except TimeoutError:
            log.warning("stop timed out", extra={"timeout_s": service.stop_timeout_s})
        except Exception:
            log.exception("stop failed")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(service.store.close(), 10)
        await server.stop(grace=1.0)
        log.info("stopped")


def listen(server: grpc.aio.Server, role: str, settings: Any, tls: transport.TlsFiles | None) -> tuple[str, str]:
    """Add the service's ports to ``server``: ``(address, client_address)``.

    Plaintext: one insecure port (``--port``); client_address is "". Secure: the internal port (``--port``,
    mutual TLS, a certificate the CA signed required) and the client port (``--client-port``, TLS, no
    client certificate: SCRAM sessions). gRPC cannot *ask* for an optional client certificate, hence two."""
    def bound(port: int, where: int) -> int:
        if port == 0:
            raise SystemExit(f"{role}: cannot listen on {settings.host}:{where}")
        return port

    if tls is None:
        port = bound(server.add_insecure_port(f"{settings.host}:{settings.port}"), settings.port)
        return f"{settings.advertised}:{port}", ""
    try:
        mutual = transport.server_credentials(tls, require_client_cert=True)
        one_way = transport.server_credentials(tls, require_client_cert=False)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{role}: cannot use the TLS files: {exc}") from None
    internal = bound(server.add_secure_port(f"{settings.host}:{settings.port}", mutual), settings.port)
    client = bound(server.add_secure_port(f"{settings.host}:{settings.client_port}", one_way), settings.client_port)
    return f"{settings.advertised}:{internal}", f"{settings.advertised}:{client}"


def attach_grpc_auth(server: Any, security: ServiceSecurity) -> None:
    """Register the SCRAM handshake service and the session-token resolver (``shared.security.grpc_auth``)."""
    try:
        from shared.security import grpc_auth
    except ModuleNotFoundError as exc:
        if exc.name != "shared.security.grpc_auth":
            raise
        log.error("shared.security.grpc_auth is missing: no SCRAM sessions on the client port; "
                  "only certificate holders can call this service")
        return
    grpc_auth.attach(server, security)


def run(service_cls: type[Service[S]], settings_cls: type[S], argv: list[str] | None = None) -> None:
    """Entry point of ``python -m services.<role>``."""
    prog = f"python -m services.{service_cls.role}"
    settings = load_settings(settings_cls, argv, prog)
    setup_logging(service_cls.role, settings.id, settings.log_level)
    tune_allocator()
    os.makedirs(settings.data_dir, exist_ok=True)
    audit.configure(audit.default_path(settings.data_dir),  # authentication failures, denials, admin changes
                    max_bytes=settings.audit_log_max_bytes, backups=settings.audit_log_backups)

    async def main() -> None:
        await serve(service_cls(settings))

    try:
        asyncio.run(main())
    except ConnectionError as exc:
        log.error("cannot start", extra={"error": str(exc)})
        sys.exit(1)


class RegisteredService(Service[S]):
    """A role whose instances register ``{address}`` under ``/services/<role>/<instance>``.

    Instance 0 means "derive a unique name from the host name and pid" (for
    containers scaled with ``docker compose --scale``).
    """

    @property
    def instance(self) -> str:
        if self.settings.id == 0:
            import socket

            return f"{socket.gethostname()}-{os.getpid()}"
        return str(self.settings.id)

    def registration_value(self) -> dict[str, Any]:
        value = {"address": self.address, "metrics": self.metrics_address}
        if self.client_address:  # secure: where clients connect (shared.security.transport.client_facing)
            value["client_address"] = self.client_address
        return value

    async def start(self) -> None:
        await self.store.register(
            self.store.keys.service(self.role, self.instance),
            self.registration_value(),
            self.settings.session_timeout_s,
        )
