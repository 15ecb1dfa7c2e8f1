"""The table of Kafka APIs this broker serves: API key -> (versions served, handler module).

Each handler module of this package holds one API (or one family of them) as
``API_KEY``/``VERSIONS``/``handle`` (or a ``HANDLERS`` table): it translates a kio request into calls on
the broker's request layer and returns the response as plain values, which ``shared.kafka.messages.build``
shapes into the response class of the request's version — so every version claimed in ApiVersions is
answered by the same code, with the fields that version has.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from services.broker.pipeline import REQUEST_TYPES, RequestContext, RequestPipeline
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame, api, build, defined
from shared.quota.entities import ANONYMOUS

log = logging.getLogger(__name__)

# APIs answered by the broker itself count their handler time against request quotas (request_percentage);
# Produce and Fetch account in the request layer; forwarded APIs (groups, topic administration) wait on
# another service, which is not this broker's handler time.
_LOCAL_APIS = frozenset({18, 3, 2, 22, 10, 32, 35, 61, 21, 60})
# What a handler returns: the response as plain values (None: no response, acks=0) and its throttle_time_ms.
Reply = tuple[dict[str, Any] | None, int]
Handler = Callable[["KafkaApis", RequestFrame, RequestContext, "Connection"], Awaitable[Reply]]


@dataclass
class Connection:
    """One client connection's state: fetch sessions (KIP-227) live in the broker; activity for the
    idle sweeper; who authenticated on it."""

    peer: str
    last_active: float = field(default_factory=time.monotonic)
    busy: bool = False
    close_after_reply: bool = False  # e.g. an acks=0 produce failed: Kafka closes so the client refreshes metadata
    closers: list[Callable[[], None]] = field(default_factory=list)
    # Who is on the other end (issue 23). A plaintext listener leaves these as they are: everyone is
    # ANONYMOUS and authenticated. A secure one starts unauthenticated, then sets the principal from the
    # client certificate or the SASL exchange (``services.broker.kafka.sasl``).
    principal: str = ANONYMOUS  # the principal's name (RequestContext.principal; ACLs see User:<name>)
    cert_subject: str | None = None  # the verified client certificate's DN
    authenticated: bool = True
    sasl: Any = None  # services.broker.kafka.sasl.SaslSession while SASL may still run on this connection

    def close(self) -> None:
        for c in self.closers:
            try:
                c()
            except Exception:
                log.exception("closing connection state failed")


class KafkaApis:
    """The broker's Kafka request handlers and what they share (the request layer, the pipeline)."""

    def __init__(self, broker: Any, pipeline: RequestPipeline) -> None:
        self.broker = broker  # services.broker.api.BrokerApi: the request layer both doors share
        self.pipeline = pipeline
        self.fetch_sessions: Any = None  # services.broker.kafka.fetch.FetchSessions
        self.groups: Any = None  # services.broker.kafka.group_routing.CoordinatorRouter
        self.txn: Any = None  # services.broker.kafka.group_routing.TxnRouter (made on first use)
        self.consumer_members: Any = None  # services.broker.kafka.groups_consumer.MemberCache
        self._ids_view: Any = None
        self._ids: tuple[dict[uuid.UUID, str], dict[str, uuid.UUID]] = ({}, {})
        self.handlers: dict[int, Handler] = {}
        self.versions: dict[int, tuple[int, int]] = {}

    def register(self, api_key: int, versions: tuple[int, int], handler: Handler) -> None:
        # Fail at start for a version kio has no definition of; its classes load on first use (``api``).
        missing = [v for v in range(versions[0], versions[1] + 1) if not defined(api_key, v)]
        if missing:
            raise ValueError(f"api key {api_key}: no Kafka definition of versions {missing}")
        self.handlers[api_key] = handler
        self.versions[api_key] = versions

    async def handle(self, request: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
        key = request.api.key
        started = time.perf_counter()
        values, throttle_ms = await self.handlers[key](self, request, ctx, conn)
        if key in _LOCAL_APIS:  # request quotas (request_percentage), as through_pipeline on gRPC
            self.pipeline.record_handler_time(ctx, time.perf_counter() - started)
            throttle_ms = max(throttle_ms, self.pipeline.throttle_ms(ctx, REQUEST_TYPES))
        if values is not None and "throttle_time" not in values:
            values = {**values, "throttle_time": throttle_ms}
        return (None if values is None else build(request.api.response, values)), throttle_ms

    def topic_ids(self) -> tuple[dict[uuid.UUID, str], dict[str, uuid.UUID]]:
        """Topic id -> name and name -> id of the current metadata view (topic ids are UUIDs on the Kafka
        door), built once per topics snapshot (the metadata cache replaces ``view.topics`` on every change)
        rather than on every fetch or heartbeat."""
        topics = self.broker.rm.view.topics
        if self._ids_view is not topics:
            by_id = {uuid.UUID(hex=t.topic_id): name for name, t in topics.items() if t.topic_id}
            self._ids = (by_id, {n: i for i, n in by_id.items()})
            self._ids_view = topics
        return self._ids

    async def close(self) -> None:
        if self.groups is not None:
            await self.groups.close()
        if self.txn is not None:
            await self.txn.close()

    def api_versions(self) -> list[dict[str, int]]:
        return [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(self.versions.items())]

    def unsupported_api_versions(self) -> Any:
        """ApiVersions v0 with UNSUPPORTED_VERSION and what is served (the client retries within it)."""
        return build(api(18, 0).response, error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self.api_versions())


async def handle_api_versions(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    return {"error_code": 0, "api_keys": apis.api_versions()}, 0
