"""The broker's request pipeline: every client request passes through it.

    context -> authorization hook -> (KIP-219 hold) -> handler -> quota accounting -> throttle

``RequestContext`` says who asks (client id from the request, the principal
the process's resolver gives — a verified certificate or a SCRAM session,
``ANONYMOUS`` on a plaintext cluster — peer address), which API and when it
arrived. The hook accepts every API; ACLs are decided per resource by the
request layer with ``pipeline.access`` (``shared.security.access.Access``:
disabled, at no cost, on a plaintext cluster), the same on both doors. A
denial a response cannot carry as an error code ends a gRPC call with
PERMISSION_DENIED and Kafka's error name in the details. Usage (bytes in, bytes out, handler time) is counted in the
``QuotaAccounting`` the quota client reports; the throttle time comes from
the quota service's latest decisions. As Kafka since KIP-219, a response goes
out at once carrying ``throttle_time_ms`` and the *next* request on that
stream (or, for unary calls, from that connection) waits that long; a fetch
over quota is answered at once with no data.

``ProduceSequencer`` is the explicit order of appends on one ProduceStream:
its single reader runs, request by request, the hold and the synchronous
append; only the waits for replication run concurrently, and responses go out
in request order. Must not import server.py (server.py imports this).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc

from services.broker.quota_state import QuotaAccounting
from shared.quota.entities import ANONYMOUS, QuotaType
from shared.request_context import NotAuthorized, RequestContext, allow_all, enter, resolve_principal
from shared.security.access import DISABLED, Access, AuthorizationFailed

__all__ = ["NotAuthorized", "RequestContext", "RequestPipeline", "ProduceSequencer", "allow_all", "deny",
           "through_pipeline"]

MAX_IN_FLIGHT_PER_STREAM = 16
# Plain ints on the hot path (an IntEnum member hashes and compares more slowly).
PRODUCE, FETCH, _REQUEST = int(QuotaType.PRODUCE), int(QuotaType.FETCH), int(QuotaType.REQUEST)
PRODUCE_TYPES = (PRODUCE, _REQUEST)
FETCH_TYPES = (FETCH, _REQUEST)
REQUEST_TYPES = (_REQUEST,)  # every other API: request quotas (handler time) only

Req = TypeVar("Req")
Pending = TypeVar("Pending")


class RequestPipeline:
    """Shared by all of a broker's calls; per-stream state lives in the callers."""

    def __init__(self, accounting: QuotaAccounting | None = None,
                 authorize: Callable[[RequestContext], bool] = allow_all,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.accounting = accounting or QuotaAccounting()
        self.authorize = authorize
        self.clock = clock
        self.metrics: Any = None  # services.broker.metrics.BrokerMetrics when the process exposes /metrics
        #: ACL decisions for both doors (the service sets it from ``service.security`` at start)
        self.access: Access = DISABLED
        self._peer_holds: dict[str, float] = {}

    def context(self, api: str, client_id: str, peer: str, principal: str = ANONYMOUS,
                cert_subject: str | None = None) -> RequestContext:
        """The request's context, authorized (raises ``NotAuthorized``). ``principal``: the principal's
        name (``resolve_principal`` of a gRPC call, the Kafka connection's authenticated principal)."""
        return enter(api, client_id, peer, self.authorize, self.clock, principal, cert_subject)

    def account(self, ctx: RequestContext, qtype: int, amount: float, handler_s: float,
                types: tuple[int, ...]) -> int:
        """Count a request's bytes and handler time; return its throttle_time_ms (the hot path)."""
        acc = self.accounting
        now = self.clock()
        acc.record(qtype, ctx.principal, ctx.client_id, amount, now)
        acc.record(_REQUEST, ctx.principal, ctx.client_id, handler_s * 100.0, now)
        wait = acc.throttle_s(types, ctx.principal, ctx.client_id, now) if acc.has_decisions else 0.0
        return int(wait * 1000 + 0.999) if wait > 0 else 0

    def throttle_ms(self, ctx: RequestContext, types: tuple[int, ...]) -> int:
        wait = self.accounting.throttle_s(types, ctx.principal, ctx.client_id, self.clock())
        return int(wait * 1000 + 0.999) if wait > 0 else 0

    def record(self, ctx: RequestContext, qtype: QuotaType, amount: float) -> None:
        self.accounting.record(qtype, ctx.principal, ctx.client_id, amount, self.clock())

    def record_handler_time(self, ctx: RequestContext, seconds: float) -> None:
        """Request quotas count handler time in percent-seconds (Kafka's request_percentage)."""
        self.accounting.record(_REQUEST, ctx.principal, ctx.client_id, seconds * 100.0, self.clock())

    async def hold(self, until: float) -> None:
        """KIP-219: the request after a throttled response waits until the throttle ends."""
        delay = until - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)

    # -- unary calls: the hold is per connection (peer) ------------------------------------------------

    async def hold_peer(self, ctx: RequestContext) -> None:
        until = self._peer_holds.get(ctx.peer)
        if until is not None:
            await self.hold(until)

    def set_peer_hold(self, ctx: RequestContext, throttle_ms: int) -> None:
        if throttle_ms > 0:
            if len(self._peer_holds) > 10_000:  # forget ended holds
                now = self.clock()
                self._peer_holds = {p: u for p, u in self._peer_holds.items() if u > now}
            self._peer_holds[ctx.peer] = self.clock() + throttle_ms / 1000


def through_pipeline(pipeline: RequestPipeline, api: str, behavior: Callable[..., Awaitable[Any]],
                     hand_context: bool = False) -> Callable[[Any, Any], Awaitable[Any]]:
    """A unary method (Metadata, ListOffsets, ...) in the pipeline: context (with the caller's principal)
    and authorization, the connection's KIP-219 hold, the handler, its time counted against request
    quotas. With ``hand_context`` the handler is called ``behavior(request, context, ctx)``. A handler's
    ``AuthorizationFailed`` ends the call with PERMISSION_DENIED and Kafka's error name."""

    async def handle(request: Any, context: Any) -> Any:
        principal, cert_subject = resolve_principal(context)
        try:
            ctx = pipeline.context(api, getattr(request, "client_id", ""), context.peer(), principal, cert_subject)
        except NotAuthorized as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
            raise
        await pipeline.hold_peer(ctx)
        started = time.perf_counter()
        try:
            return await (behavior(request, context, ctx) if hand_context else behavior(request, context))
        except AuthorizationFailed as exc:
            await deny(context, exc)
            raise
        finally:
            pipeline.record_handler_time(ctx, time.perf_counter() - started)
            pipeline.set_peer_hold(ctx, pipeline.throttle_ms(ctx, (_REQUEST,)))

    return handle


async def deny(context: Any, exc: AuthorizationFailed) -> None:
    """End a gRPC call refused by ACLs: PERMISSION_DENIED, the details starting with Kafka's error name."""
    await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{exc.name}: {exc.message}")


class ProduceSequencer(Generic[Req, Pending]):
    """One ProduceStream's order: ``begin`` (hold, authorization, the synchronous append, accounting)
    runs request by request in arrival order in one reader; ``finish`` (the wait for replication and
    the response) runs concurrently, and responses are yielded in request order. ``ready``, if given,
    answers a request with nothing to wait for (acks 0/1, or every partition failed) at once: no task,
    no extra event-loop turn (None means: wait with ``finish``)."""

    def __init__(self, begin: Callable[[Req], Awaitable[Pending]], finish: Callable[[Pending], Awaitable[Any]],
                 ready: Callable[[Pending], Any] | None = None) -> None:
        self.begin = begin
        self.finish = finish
        self.ready = ready

    async def run(self, requests: AsyncIterator[Req]) -> AsyncIterator[Any]:
        queue: asyncio.Queue[asyncio.Future[Any] | None] = asyncio.Queue(MAX_IN_FLIGHT_PER_STREAM)
        loop = asyncio.get_running_loop()
        ready = self.ready

        async def reader() -> None:
            try:
                async for req in requests:
                    pending = await self.begin(req)  # appends happen here, strictly one after another
                    resp = ready(pending) if ready is not None else None
                    if resp is None:
                        await queue.put(asyncio.ensure_future(self.finish(pending)))
                    else:
                        done = loop.create_future()
                        done.set_result(resp)
                        await queue.put(done)
            finally:
                await queue.put(None)

        reader_task = asyncio.ensure_future(reader())
        try:
            while True:
                task = await queue.get()
                if task is None:
                    break
                yield await task
            await reader_task
        finally:
            reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.RpcError, Exception):
                await reader_task
