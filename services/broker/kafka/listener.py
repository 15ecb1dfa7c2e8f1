"""The broker's Kafka-protocol listener: Kafka's binary protocol over TCP, translated onto the broker's
request layer (``services/broker/api``) through the per-API modules of this package.

One connection is served as Kafka's ``SocketServer`` serves it: one request at a time, in arrival order
(the client may pipeline; the next request is read once the previous one is answered), so appends of one
connection keep their order and responses go out in request order.

- A frame larger than ``socket.request.max.bytes`` is refused from its 4-byte size prefix, before its
  bytes are read; the connection closes.
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


class KafkaListener:
    def __init__(self, apis: KafkaApis, *, max_request_bytes: int = 100 * 1024 * 1024,
                 max_idle_ms: int = 600_000) -> None:
        self.apis = apis
        self.max_request_bytes = max_request_bytes
        self.max_idle_s = max_idle_ms / 1000
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
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

