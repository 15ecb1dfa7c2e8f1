"""The console process: the web console on HTTP, plus the standard gRPC health service every Tidelog
service runs (so ``tidelog status`` and compose's health check treat it like the others).

It is a client of the cluster: it takes the REST API's URLs and the brokers' gRPC addresses, and never
reads etcd (``--etcd``, which every service accepts, is ignored here).

On a secure cluster (``TIDELOG_SECURITY_PROTOCOL=SSL`` with its certificate files, as every service) it
serves HTTPS with its own certificate, verifies the REST API (``--rest https://...``) and the brokers (their
client ports as ``--bootstrap-servers``) with the cluster's CA, and asks every visitor to sign in as a
cluster user, acting as that user (``services.console.auth``).

    python -m services.console --rest http://127.0.0.1:8080 --bootstrap-servers 127.0.0.1:9090 --http-port 8088
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Iterator

import grpc
import uvicorn
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from pydantic import Field

from services.console.app import ConsoleConfig, create_app
from services.console.auth import ConsoleSecurity
from shared.logs import setup_logging
from shared.security import transport
from shared.security.service_security import tls_files
from shared.security.transport import reload_ssl_context
from shared.service import watch_lifeline, write_ready_file
from shared.settings import ServiceSettings, load_settings

log = logging.getLogger(__name__)


class ConsoleSettings(ServiceSettings):
    rest: str = Field("http://127.0.0.1:8080", description="the REST admin API's URLs, comma-separated (any controller)")
    bootstrap_servers: str = Field("127.0.0.1:9090", description="brokers' gRPC addresses host:port, comma-separated")
    http_port: int = Field(0, ge=0, le=65535, description="the console's HTTP port (0: any free port)")
    http_host: str | None = Field(None, description="address the HTTP server listens on (default: --host)")
    console_metrics_interval_ms: int = Field(10_000, ge=200, le=600_000,
                                             description="how often the brokers' /metrics are read (traffic, disk use)")


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: this process decides when to stop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(settings: ConsoleSettings) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    if settings.lifeline_fd is not None:
        watch_lifeline(loop, settings.lifeline_fd, stopping.set)
    tls = tls_files(settings)
    transport.configure(tls)  # its channels to the brokers: TLS with its certificate when secure
    grpc_server = grpc.aio.server()
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, grpc_server)
    if tls is None:
        port = grpc_server.add_insecure_port(f"{settings.host}:{settings.port}")
    else:  # the health service only: mutual TLS, as every service's internal port
        port = grpc_server.add_secure_port(f"{settings.host}:{settings.port}",
                                           transport.server_credentials(tls, require_client_cert=True))
    if port == 0:
        raise SystemExit(f"console: cannot listen on {settings.host}:{settings.port}")
    await grpc_server.start()
    security = None if tls is None else ConsoleSecurity(tls.cafile, tls.certfile, tls.keyfile)
    config = ConsoleConfig([u.strip() for u in settings.rest.split(",") if u.strip()], settings.bootstrap_servers,
                           settings.console_metrics_interval_ms / 1000, security)
    # a secure cluster: HTTPS with the console's own certificate (no client certificate asked: users sign in)
    https = {} if tls is None else {"ssl_certfile": tls.certfile, "ssl_keyfile": tls.keyfile}
    uconfig = uvicorn.Config(create_app(config), host=settings.http_host or settings.host, port=settings.http_port,
                             log_level="warning", access_log=False, timeout_graceful_shutdown=2, **https)
    http = _Server(uconfig)
    task = asyncio.create_task(http.serve())
    while not http.started:
        if task.done():
            await task
            raise SystemExit(f"console: cannot serve HTTP on {settings.http_host or settings.host}:{settings.http_port}")
        await asyncio.sleep(0.02)
    http_port = http.servers[0].sockets[0].getsockname()[1]
    url = f"{'http' if tls is None else 'https'}://{settings.advertised}:{http_port}"
    reload = None
    if tls is not None and uconfig.ssl is not None:  # a rewritten certificate is served without a restart
        reload = asyncio.create_task(reload_ssl_context(uconfig.ssl, tls))
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    if settings.ready_file:
        write_ready_file(settings.ready_file, {"role": "console", "id": str(settings.id), "pid": os.getpid(),
                                               "address": f"{settings.advertised}:{port}", "url": url})
    log.info("serving", extra={"url": url})
    waiter = asyncio.create_task(stopping.wait())
    await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    log.info("stopping")
    await health_servicer.enter_graceful_shutdown()
    http.should_exit = True
    with contextlib.suppress(Exception):
        await asyncio.wait_for(task, 10)
    waiter.cancel()
    if reload is not None:
        reload.cancel()
    await grpc_server.stop(grace=0.5)
    log.info("stopped")


def main(argv: list[str] | None = None) -> None:
    settings = load_settings(ConsoleSettings, argv, "python -m services.console")
    setup_logging("console", settings.id, settings.log_level)
    asyncio.run(serve(settings))
