"""The broker's Kafka-protocol listener: Kafka's binary protocol over TCP, translated onto the broker's
request layer (``services/broker/api``) through the per-API modules of this package.

One connection is served as Kafka's ``SocketServer`` serves it: one request at a time, in arrival order
(the client may pipeline; the next request is read once the previous one is answered), so appends of one
connection keep their order and responses go out in request order.

- A frame larger than ``socket.request.max.bytes`` is refused from its 4-byte size prefix, before its
  bytes are read (a body is only ever buffered as it arrives, never allocated from the prefix); the
  connection closes.
- ``max.connections.per.ip`` (Kafka's default: unlimited) bounds the open connections from one host, with
  ``max.connections.per.ip.overrides`` (``host:count,...``) per host: a connection over it is closed as
  soon as it is accepted, with one WARNING line per host per 10 s, before anything is read.
- A malformed frame, an unknown API key or an unsupported version of any API but ApiVersions closes the
  connection with one WARNING line. ApiVersions of an unknown version is answered in version 0 with
  ``UNSUPPORTED_VERSION`` and the versions served (KIP-511), as Kafka does.
- A connection idle for ``connections.max.idle.ms`` is closed (one sweeper task for all connections: an
  idle connection costs no timer).
- Every request passes the broker's request pipeline: context (client id, principal, peer) and the
  authorization hook, then the handler, then the KIP-219 throttle: a throttled response goes out at once
  with ``throttle_time_ms`` and the connection reads nothing more until the throttle has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time

from services.broker.kafka.apis import Connection, KafkaApis
from services.broker.pipeline import NotAuthorized
from shared.kafka.messages import MalformedRequest, UnknownApi, api, encode_response, peek_header, read_request

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
API_VERSIONS = 18
#: Kafka's default max.connections.per.ip: unlimited.
UNLIMITED = 2**31 - 1
_REJECT_LOG_EVERY_S = 10.0


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` as Kafka writes it: ``host:count`` pairs, comma-separated
    (an IPv6 host keeps its colons: the count follows the last one)."""
    out: dict[str, int] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"max.connections.per.ip.overrides: {item!r} is not host:count")
        out[host.strip().strip("[]")] = int(count)
    return out


class KafkaListener:
    def __init__(self, apis: KafkaApis, *, max_request_bytes: int = 100 * 1024 * 1024,
                 max_idle_ms: int = 600_000, max_connections_per_ip: int = UNLIMITED,
                 max_connections_per_ip_overrides: dict[str, int] | None = None) -> None:
        self.apis = apis
        self.max_request_bytes = max_request_bytes
        self.max_idle_s = max_idle_ms / 1000
        self.max_connections_per_ip = max_connections_per_ip
        self.max_connections_per_ip_overrides = dict(max_connections_per_ip_overrides or {})
        self._per_host: dict[str, int] = {}
        self._rejected_logged: dict[str, float] = {}
        self.rejected_connections = 0
        self.server: asyncio.Server | None = None
        self.port = 0
        self._connections: dict[asyncio.StreamWriter, Connection] = {}
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._serve, host, port, limit=1 << 20, backlog=1024)
        self.port = self.server.sockets[0].getsockname()[1]
        self._sweeper = asyncio.create_task(self._sweep_idle())
        return self.port

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self.server is not None:
            self.server.close()
        for writer in list(self._connections):
            writer.close()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)
        await self.apis.close()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def _sweep_idle(self) -> None:
        interval = min(max(self.max_idle_s / 4, 0.05), 10.0)
        while True:
            await asyncio.sleep(interval)
            cutoff = time.monotonic() - self.max_idle_s
            for writer, conn in list(self._connections.items()):
                if conn.last_active < cutoff and not conn.busy:
                    log.info("closing idle Kafka connection", extra={"peer": conn.peer})
                    writer.close()

    def _admit(self, host: str) -> bool:
        """Count a new connection from ``host`` if ``max.connections.per.ip`` (or its override) allows it."""
        limit = self.max_connections_per_ip_overrides.get(host, self.max_connections_per_ip)
        open_now = self._per_host.get(host, 0)
        if open_now >= limit:
            self.rejected_connections += 1
            now = time.monotonic()
            if now - self._rejected_logged.get(host, float("-inf")) >= _REJECT_LOG_EVERY_S:
                self._rejected_logged[host] = now
                log.warning("rejecting Kafka connection: the host has max.connections.per.ip open",
                            extra={"host": host, "max.connections.per.ip": limit})
            return False
        self._per_host[host] = open_now + 1
        return True

    def _release(self, host: str) -> None:
        left = self._per_host.get(host, 0) - 1
        if left > 0:
            self._per_host[host] = left
        else:
            self._per_host.pop(host, None)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        host = str(peername[0]) if isinstance(peername, tuple) else str(peername)
        if not self._admit(host):
            writer.close()
            return
        peer = f"ipv4:{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        conn = Connection(peer)
        self._connections[writer] = conn
        try:
            await self._loop(reader, writer, conn)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Kafka connection failed", extra={"peer": peer})
        finally:
            self._release(host)
            self._connections.pop(writer, None)
            conn.close()
            writer.close()

    async def _loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: Connection) -> None:
        apis = self.apis
        pipeline = apis.pipeline
        while True:
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            conn.last_active = time.monotonic()
            if size < 0 or size > self.max_request_bytes:
                log.warning("closing Kafka connection: request size out of bounds",
                            extra={"peer": conn.peer, "size": size, "socket.request.max.bytes": self.max_request_bytes})
                return
            frame = await reader.readexactly(size)
            conn.busy = True
            try:
                reply = await self._handle(frame, conn)
            finally:
                conn.busy = False
                conn.last_active = time.monotonic()
            if reply is None:  # closed by the handler (already logged)
                return
            chunks, throttle_ms = reply
            if chunks:
                writer.write(b"".join(chunks))
                if writer.transport.get_write_buffer_size() > 4 * 1024 * 1024:
                    await writer.drain()
            if conn.close_after_reply:
                log.info("closing Kafka connection after a failed acks=0 produce", extra={"peer": conn.peer})
                await writer.drain()
                return
            if throttle_ms > 0:  # KIP-219: mute the connection until the throttle has passed
                await pipeline.hold(pipeline.clock() + throttle_ms / 1000)

    async def _handle(self, frame: bytes, conn: Connection) -> tuple[list[bytes], int] | None:
        try:
            key, version, correlation_id = peek_header(frame)
        except MalformedRequest as exc:
            log.warning("closing Kafka connection: malformed request", extra={"peer": conn.peer, "error": str(exc)})
            return None
        served = self.apis.versions.get(key)
        if served is None or not served[0] <= version <= served[1]:
            if key == API_VERSIONS:
                return [b"".join(encode_response(api(API_VERSIONS, 0), correlation_id,
                                                 self.apis.unsupported_api_versions()))], 0
            log.warning("closing Kafka connection: unsupported request",
                        extra={"peer": conn.peer, "api_key": key, "api_version": version,
                               "served": list(served) if served else None})
            return None
        try:
            request = read_request(frame, api(key, version))
        except (MalformedRequest, UnknownApi) as exc:
            log.warning("closing Kafka connection: malformed request", extra={"peer": conn.peer, "error": str(exc)})
            return None
        try:
            ctx = self.apis.pipeline.context(request.api.name, request.client_id, conn.peer)
        except NotAuthorized as exc:
            log.warning("closing Kafka connection: not authorized", extra={"peer": conn.peer, "error": str(exc)})
            return None
        body, throttle_ms = await self.apis.handle(request, ctx, conn)
        if body is None:  # acks=0: no response
            return [], throttle_ms
        return encode_response(request.api, request.correlation_id, body), throttle_ms

