"""gRPC servicer of the broker: protobuf in, replica manager calls, protobuf out. Translation only.

The two messages that carry record batches skip the generated classes: produce
requests are read in place (``produce_wire.parse_produce_request``: the batches
stay in the received bytes) and fetch responses are written by hand
(``fetch_wire.encode_fetch_response``: each batch is copied once, into the
response). The wire format is unchanged, so any protobuf client reads them;
``add_broker_servicer`` installs the codecs.

Every call's ``RequestContext`` carries the caller's principal (``resolve_principal``: a verified
certificate or a SCRAM session; once per call, once per stream) and ACLs are decided by the request layer
(``services/broker/api``) with ``pipeline.access``, as on the Kafka door. A refusal is Kafka's error code in
the response where it has one (per partition, per coordinator key, InitProducerId's ``error_code``), else
PERMISSION_DENIED with Kafka's error name in the details (DescribeLogDirs, WriteTxnMarkers, a follower
session fetch)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from services.broker.api import BrokerApi
from services.broker.api import describe_log_dirs as describe_log_dirs_api
from services.broker.api import describe_producers as describe_producers_api
from services.broker.api import fetch as fetch_api
from services.broker.api import init_producer_id as init_producer_id_api
from services.broker.api import list_offsets as list_offsets_api
from services.broker.api import metadata as metadata_api
from services.broker.api import produce as produce_api
from services.broker.api import write_txn_markers as write_txn_markers_api
from services.broker.follower_sessions import StreamFetchSession, is_session_fetch
from services.broker.pipeline import (
    NotAuthorized,
    ProduceSequencer,
    RequestContext,
    RequestPipeline,
    deny,
    through_pipeline,
)
from services.broker.replica_manager import ReplicaManager
from services.broker.replica_results import FetchSpec, ProduceResult, grpc_partition_data
from shared.coordinator_lookup import COORDINATOR_TOPICS, find_coordinators, unknown_key_type
from shared.errors import ErrorCode, TidelogError
from shared.grpc_codecs import Handlers, RewrittenHandlers
from shared.offsets_topic import OFFSETS_TOPIC
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.proto.fetch_wire import FetchPartitionData, encode_fetch_response
from shared.proto.produce_wire import ProduceRequestView, WireError, parse_produce_request
from shared.proto.wire import pass_bytes
from shared.records.header import next_offset_after
from shared.request_context import resolve_principal
from shared.security.access import CLUSTER, CLUSTER_ACTION, DESCRIBE, GROUP, TOPIC, TRANSACTIONAL_ID
from shared.security.transport import client_facing
from shared.txn_topic import COORDINATOR_TYPE_GROUP
from shared.types import TopicPartition

log = logging.getLogger(__name__)
MAX_IN_FLIGHT_PER_STREAM = 16
# A produce appended, waiting for replication: the request and the request layer's pending produce.
PendingProduce = tuple[ProduceRequestView, produce_api.PendingProduce]


class BrokerServicer(pb_grpc.BrokerServicer):
    def __init__(self, rm: ReplicaManager, broker_id: int,
                 allocate_producer_id: Callable[[], Awaitable[int]] | None = None,
                 coordinator_owners: Callable[[], dict[int, dict[str, Any]]] | None = None,
                 pipeline: RequestPipeline | None = None) -> None:
        self.rm = rm
        self.broker_id = broker_id
        self.allocate_producer_id = allocate_producer_id
        self.coordinator_owners = coordinator_owners or dict
        self.pipeline = pipeline or RequestPipeline()
        self.api = BrokerApi(rm, self.pipeline, broker_id, allocate_producer_id, self.coordinator_owners)

    # -- metadata --------------------------------------------------------------------------------

    async def Metadata(self, request: pb.MetadataRequest, context: Any,
                       ctx: RequestContext | None = None) -> pb.MetadataResponse:
        snap = metadata_api.describe(self.api, list(request.topics) or None, ctx)
        resp = pb.MetadataResponse(cluster_id=snap.cluster_id)
        for b in snap.brokers:
            resp.brokers.append(pb.BrokerNode(id=b.id, address=b.address, rack=b.rack or "", kafka=b.kafka))
        if snap.controller:
            c = snap.controller
            resp.controller.CopyFrom(pb.ControllerNode(id=c["id"], address=c["address"], rest=c.get("rest", ""),
                                                       epoch=snap.controller_epoch))
        for t in snap.topics:
            if t.error:
                resp.topics.append(pb.TopicMetadata(name=t.name, error_code=t.error))
                continue
            tm = pb.TopicMetadata(name=t.name, topic_id=t.topic_id)
            for p in t.partitions:
                tm.partitions.append(pb.PartitionMetadata(partition=p.partition, error_code=p.error, leader=p.leader,
                                                          leader_epoch=p.leader_epoch, replicas=p.replicas, isr=p.isr))
            resp.topics.append(tm)
        return resp

    # -- produce ------------------------------------------------------------------------------------

    def _authorize(self, request: ProduceRequestView, ctx: RequestContext) -> dict[TopicPartition, ProduceResult]:
        """ACLs (secure clusters only): the partitions refused, with Kafka's errors."""
        data = [(TopicPartition(t.name, p.partition), p.records) for t in request.topics for p in t.partitions]
        return produce_api.authorize(self.api, ctx, request.transactional_id or None, data)

    async def _checks(self, request: ProduceRequestView, ctx: RequestContext,
                      ) -> dict[TopicPartition, ProduceResult] | None:
        """ACLs, then KIP-890 verification of what they allow: the partitions not to append."""
        refused = self._authorize(request, ctx) if self.pipeline.access.enabled else None
        if request.transactional_id:
            verified = await self._verify(request, refused)
            if verified:
                refused = {**(refused or {}), **verified}
        return refused

    def _append(self, request: ProduceRequestView, ctx: RequestContext,
                refused: dict[TopicPartition, ProduceResult] | None = None) -> PendingProduce:
        """The synchronous part of a produce: append, count the usage, read the throttle. ``refused``:
        partitions the transaction coordinator did not confirm (``_verify``), answered without an append."""
        data = [
            (TopicPartition(t.name, p.partition), p.records)
            for t in request.topics
            for p in t.partitions
        ]
        if refused:
            data = [d for d in data if d[0] not in refused]
        pending = produce_api.append(self.api, ctx, produce_api.ProduceCall(request.acks, request.timeout_ms, data))
        if refused:
            pending.results.update(refused)
        return request, pending

    async def _verify(self, request: ProduceRequestView, refused: dict[TopicPartition, ProduceResult] | None = None,
                      ) -> dict[TopicPartition, ProduceResult] | None:
        """KIP-890: a transaction's first batch on a partition waits for the coordinator's word
        (``refused``: partitions ACLs refused already, not asked about)."""
        verifier = self.api.txn_verifier
        if not request.transactional_id or verifier is None:
            return None
        data = [(TopicPartition(t.name, p.partition), p.records) for t in request.topics for p in t.partitions]
        if refused:
            data = [d for d in data if d[0] not in refused]
            if not data:
                return None
        return await verifier.verify(request.transactional_id, request.transaction_version, data)

    async def _respond(self, pending: PendingProduce) -> pb.ProduceResponse:
        request, p = pending
        return self._response(request, await produce_api.complete(self.api, p), p.throttle_ms)

    def _ready(self, pending: PendingProduce) -> pb.ProduceResponse | None:
        """The response at once when nothing waits for replication (acks 0/1): no task, no loop turn."""
        request, p = pending
        results = produce_api.ready(self.api, p)
        return None if results is None else self._response(request, results, p.throttle_ms)

    def _response(self, request: ProduceRequestView, results: dict[TopicPartition, ProduceResult],
                  throttle_ms: int) -> pb.ProduceResponse:
        resp = pb.ProduceResponse(correlation_id=request.correlation_id, throttle_time_ms=throttle_ms)
        by_topic: dict[str, pb.ProduceTopicResponse] = {}
        for tp, r in results.items():
            tr = by_topic.get(tp.topic)
            if tr is None:
                tr = by_topic[tp.topic] = resp.topics.add(name=tp.topic)
            tr.partitions.add(partition=tp.partition, error_code=r.error, error_message=r.message,
                              base_offset=r.base_offset, log_append_time_ms=r.log_append_time,
                              log_start_offset=r.log_start_offset)
        return resp

    async def Produce(self, request: ProduceRequestView | WireError,  # type: ignore[override]
                      context: Any) -> pb.ProduceResponse:
        request = await _well_formed(request, context)
        ctx = await _context(self.pipeline, "Produce", request.client_id, context.peer(), context)
        await self.pipeline.hold_peer(ctx)
        refused = await self._checks(request, ctx) if request.transactional_id or self.pipeline.access.enabled \
            else None
        pending = self._append(request, ctx, refused)
        self.pipeline.set_peer_hold(ctx, pending[1].throttle_ms)
        return await self._respond(pending)

    async def ProduceStream(self, request_iterator: AsyncIterator[ProduceRequestView | WireError],  # type: ignore[override]
                            context: Any) -> AsyncIterator[pb.ProduceResponse]:
        malformed: list[WireError] = []

        async def requests() -> AsyncIterator[ProduceRequestView]:
            async for request in request_iterator:
                if isinstance(request, WireError):
                    malformed.append(request)  # the requests before it are answered, then the call fails
                    return
                yield request

        # Appends happen in arrival order (the sequencer's reader), completions are awaited and
        # answered in the same order, so acks=all waits do not stall appends.
        peer = context.peer()
        who = resolve_principal(context)  # once per stream
        hold_until = 0.0

        async def begin(request: ProduceRequestView) -> PendingProduce:
            nonlocal hold_until
            ctx = await _context(self.pipeline, "Produce", request.client_id, peer, context, who)
            if hold_until:
                await self.pipeline.hold(hold_until)  # KIP-219: the previous response was throttled
            refused = await self._checks(request, ctx) if request.transactional_id or self.pipeline.access.enabled \
                else None
            pending = self._append(request, ctx, refused)
            throttle_ms = pending[1].throttle_ms
            hold_until = self.pipeline.clock() + throttle_ms / 1000 if throttle_ms else 0.0
            return pending

        async for resp in ProduceSequencer(begin, self._respond, self._ready).run(requests()):
            yield resp
        if malformed:
            await _well_formed(malformed[0], context)

    # -- fetch --------------------------------------------------------------------------------------

    async def _fetch(self, request: pb.FetchRequest, ctx: RequestContext,
                     session: dict[TopicPartition, int] | None = None) -> tuple[bytes, int]:
        """Serve one fetch; returns the response and its throttle_time_ms. ``session`` (FetchStream
        only) maps each partition to where this stream's last response for it ended; ``incremental``
        requests read from there. Consumers over their quota get no data, at once."""
        specs = []
        for t in request.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                offset = p.fetch_offset
                # Never for followers: their fetch offset is what they have written, which is what
                # moves the high watermark; the stream's position only says what was sent.
                if session is not None and request.incremental and request.replica_id < 0:
                    offset = session.get(tp, offset)
                specs.append(FetchSpec(tp, offset, p.partition_max_bytes or 1024 * 1024,
                                       p.current_leader_epoch if p.current_leader_epoch else -1))
        call = fetch_api.FetchCall(request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes, specs,
                                   request.isolation_level, replica_epoch=request.replica_epoch)
        results, throttle_ms = await fetch_api.fetch(self.api, ctx, call)
        if results is None:  # over quota: no data, at once
            return encode_fetch_response(correlation_id=request.correlation_id, topics=[],
                                         throttle_time_ms=throttle_ms), throttle_ms
        offsets = {s.tp: s.offset for s in specs}
        by_topic: dict[str, list[FetchPartitionData]] = {}
        for tp, r in results.items():
            fetch_offset = offsets[tp]
            next_offset = next_offset_after(r.records, fetch_offset)
            if session is not None:
                if r.error:
                    session.pop(tp, None)
                else:
                    session[tp] = next_offset
            by_topic.setdefault(tp.topic, []).append(grpc_partition_data(tp, r, fetch_offset, next_offset))
        return encode_fetch_response(correlation_id=request.correlation_id, topics=list(by_topic.items()),
                                     throttle_time_ms=throttle_ms), throttle_ms

    async def Fetch(self, request: pb.FetchRequest, context: Any) -> bytes:  # type: ignore[override]
        ctx = await _context(self.pipeline, "Fetch", request.client_id, context.peer(), context)
        await self.pipeline.hold_peer(ctx)
        resp, throttle_ms = await self._fetch(request, ctx)
        self.pipeline.set_peer_hold(ctx, throttle_ms)
        return resp

    async def FetchStream(self, request_iterator: AsyncIterator[pb.FetchRequest],  # type: ignore[override]
                          context: Any) -> AsyncIterator[bytes]:
        # Requests are served one after another in arrival order (an asyncio.Lock is FIFO), so
        # incremental requests see the positions the previous response left; while one is read,
        # the previous response is being written, and a client may keep several in flight.
        session: dict[TopicPartition, int] = {}
        follower_session = StreamFetchSession(self.rm)  # a follower's fetch session lives as long as its stream
        lock = asyncio.Lock()
        peer = context.peer()
        who = resolve_principal(context)  # once per stream
        hold_until = 0.0

        async def handle(request: pb.FetchRequest) -> bytes:
            nonlocal hold_until
            async with lock:
                ctx = await _context(self.pipeline, "Fetch", request.client_id, peer, context, who)
                if is_session_fetch(request):
                    access = self.pipeline.access
                    if access.enabled:
                        refusal = fetch_api.follower_refusal(access, ctx, request.replica_id)
                        if refusal is not None:
                            await deny(context, refusal)
                    return await follower_session.fetch(request, self.pipeline.metrics)
                if hold_until:
                    await self.pipeline.hold(hold_until)  # KIP-219: the previous response was throttled
                resp, throttle_ms = await self._fetch(request, ctx, session)
                hold_until = self.pipeline.clock() + throttle_ms / 1000 if throttle_ms else 0.0
                return resp

        try:
            async for resp in _pipelined(request_iterator, handle):
                yield resp
        finally:
            follower_session.close()

    # -- list offsets ----------------------------------------------------------------------------------

    async def ListOffsets(self, request: pb.ListOffsetsRequest, context: Any,
                          ctx: RequestContext | None = None) -> pb.ListOffsetsResponse:
        queries = [list_offsets_api.OffsetQuery(TopicPartition(t.name, p.partition), p.timestamp,
                                                p.current_leader_epoch if p.current_leader_epoch else -1)
                   for t in request.topics for p in t.partitions]
        resp = pb.ListOffsetsResponse()
        by_topic: dict[str, Any] = {}
        for a in list_offsets_api.list_offsets(self.api, queries, request.replica_id, request.isolation_level, ctx):
            tr = by_topic.get(a.tp.topic)
            if tr is None:
                tr = by_topic[a.tp.topic] = resp.topics.add(name=a.tp.topic)
            if a.error:
                tr.partitions.add(partition=a.tp.partition, error_code=a.error, error_message=a.message, offset=-1)
            else:
                tr.partitions.add(partition=a.tp.partition, offset=a.offset, timestamp=a.timestamp,
                                  leader_epoch=a.leader_epoch)
        return resp

    async def OffsetsForLeaderEpoch(self, request: pb.OffsetsForLeaderEpochRequest, context: Any,
                                    ctx: RequestContext | None = None) -> pb.OffsetsForLeaderEpochResponse:
        """Kafka's rule (KIP-320): CLUSTER_ACTION (followers) or DESCRIBE on the topic (consumers checking
        for truncation); else TOPIC_AUTHORIZATION_FAILED for its partitions."""
        resp = pb.OffsetsForLeaderEpochResponse()
        access = self.pipeline.access
        denied: set[str] = set()
        if access.enabled and ctx is not None and not access.allowed(ctx, CLUSTER_ACTION, CLUSTER):
            denied = {t.name for t in request.topics if not access.check(ctx, DESCRIBE, TOPIC, t.name)}
        for t in request.topics:
            tr = resp.topics.add(name=t.name)
            for p in t.partitions:
                if t.name in denied:
                    tr.partitions.add(partition=p.partition, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                      leader_epoch=-1, end_offset=-1)
                    continue
                try:
                    epoch, end = self.rm.offsets_for_leader_epoch(TopicPartition(t.name, p.partition),
                                                                  p.current_leader_epoch, p.leader_epoch)
                    tr.partitions.add(partition=p.partition, leader_epoch=epoch, end_offset=end)
                except TidelogError as exc:
                    tr.partitions.add(partition=p.partition, error_code=exc.code, leader_epoch=-1, end_offset=-1)
        return resp

    async def InitProducerId(self, request: pb.InitProducerIdRequest, context: Any,
                             ctx: RequestContext | None = None) -> pb.InitProducerIdResponse:
        a = await init_producer_id_api.init_producer_id(self.api, request.transactional_id or None, ctx=ctx)
        return pb.InitProducerIdResponse(error_code=a.error, producer_id=a.producer_id, producer_epoch=a.producer_epoch)

    async def WriteTxnMarkers(self, request: pb.WriteTxnMarkersRequest, context: Any,
                              ctx: RequestContext | None = None) -> pb.WriteTxnMarkersResponse:
        """Internal: a coordinator's (or the controller's) certificate only; anyone else PERMISSION_DENIED
        (CLUSTER_AUTHORIZATION_FAILED), even with no markers: the refusal is the call's, not a partition's."""
        if ctx is not None and self.pipeline.access.enabled:
            self.pipeline.access.require_service(ctx, write_txn_markers_api.MARKER_WRITERS)
        markers = [write_txn_markers_api.TxnMarker(m.producer_id, m.producer_epoch, m.committed, m.coordinator_epoch,
                                                   [TopicPartition(t.name, p) for t in m.topics for p in t.partitions])
                   for m in request.markers]
        out = []
        for answer in await write_txn_markers_api.write_txn_markers(self.api, markers, ctx=ctx):
            by_topic: dict[str, list[pb.TxnMarkerPartitionResult]] = {}
            for tp, r in answer.results.items():
                by_topic.setdefault(tp.topic, []).append(pb.TxnMarkerPartitionResult(
                    partition=tp.partition, error_code=r.error, error_message=r.message))
            out.append(pb.WritableTxnMarkerResult(producer_id=answer.producer_id, topics=[
                pb.TxnMarkerTopicResult(name=t, partitions=ps) for t, ps in by_topic.items()]))
        return pb.WriteTxnMarkersResponse(markers=out)

    async def DescribeProducers(self, request: pb.DescribeProducersRequest, context: Any,
                                ctx: RequestContext | None = None) -> pb.DescribeProducersResponse:
        tps = [TopicPartition(t.name, p) for t in request.topics for p in t.partitions]
        by_topic: dict[str, list[pb.DescribeProducersPartition]] = {}
        for tp, r in describe_producers_api.describe_producers(self.api, tps, ctx).items():
            by_topic.setdefault(tp.topic, []).append(pb.DescribeProducersPartition(
                partition=tp.partition, error_code=r.error, error_message=r.message, active_producers=[
                    pb.ActiveProducer(producer_id=s.producer_id, producer_epoch=s.producer_epoch,
                                      last_sequence=s.last_sequence, last_timestamp=s.last_timestamp,
                                      coordinator_epoch=s.coordinator_epoch,
                                      current_txn_start_offset=s.current_txn_start_offset)
                    for s in r.producers]))
        return pb.DescribeProducersResponse(topics=[pb.DescribeProducersTopicResult(name=t, partitions=ps)
                                                    for t, ps in by_topic.items()])

    async def DescribeLogDirs(self, request: pb.DescribeLogDirsRequest, context: Any,
                              ctx: RequestContext | None = None) -> pb.DescribeLogDirsResponse:
        if ctx is not None:
            describe_log_dirs_api.authorize(self.api, ctx)  # AuthorizationFailed: PERMISSION_DENIED
        d = describe_log_dirs_api.describe_log_dirs(self.api, [(t.name, list(t.partitions)) for t in request.topics])
        by_topic: dict[str, list[pb.DescribeLogDirsPartition]] = {}
        for r in d.replicas:
            by_topic.setdefault(r.tp.topic, []).append(pb.DescribeLogDirsPartition(
                partition=r.tp.partition, size=r.size, offset_lag=r.offset_lag, is_future=r.is_future))
        return pb.DescribeLogDirsResponse(broker_id=self.api.broker_id, results=[pb.DescribeLogDirsResult(
            log_dir=d.path, total_bytes=d.total_bytes, usable_bytes=d.usable_bytes,
            topics=[pb.DescribeLogDirsTopicResult(name=t, partitions=ps) for t, ps in by_topic.items()])])

    async def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: Any,
                              ctx: RequestContext | None = None) -> pb.FindCoordinatorResponse:
        name = COORDINATOR_TOPICS.get(request.key_type)
        if name is None:
            return unknown_key_type(request.group_ids, request.key_type)
        access = self.pipeline.access
        if access.enabled and ctx is not None:
            return self._find_coordinators_authorized(request, name, ctx)
        return self._find_coordinators(list(request.group_ids), name)

    def _find_coordinators(self, keys: list[str], name: str, ctx: RequestContext | None = None,
                           ) -> pb.FindCoordinatorResponse:
        topic = self.rm.view.topics.get(name)
        if name == OFFSETS_TOPIC:
            owners = self.coordinator_owners()
        else:
            if topic is None and self.api.request_internal_topic is not None:
                self.api.request_internal_topic(name)  # Kafka creates __transaction_state on this first lookup
            owners = self.api.txn_coordinator_owners()
        if ctx is not None and not ctx.cert_subject:  # a client on the client port: its TLS address
            owners = {p: {**o, "address": client_facing(o)} if o.get("client_address") else o
                      for p, o in owners.items()}
        return find_coordinators(keys, len(topic.assignment) if topic else 0, owners, name)

    def _find_coordinators_authorized(self, request: pb.FindCoordinatorRequest, name: str,
                                      ctx: RequestContext) -> pb.FindCoordinatorResponse:
        """Kafka's rule: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED) or on the transactional id
        (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) per key."""
        rtype = GROUP if request.key_type == COORDINATOR_TYPE_GROUP else TRANSACTIONAL_ID
        ok, denied = self.pipeline.access.partition(ctx, DESCRIBE, rtype, list(request.group_ids), lambda k: k)
        found = {c.group_id: c for c in self._find_coordinators(ok, name, ctx).coordinators} if ok else {}
        resp = pb.FindCoordinatorResponse()
        refused = set(denied)
        for key in request.group_ids:
            if key in refused:
                code = ErrorCode.GROUP_AUTHORIZATION_FAILED if rtype == GROUP \
                    else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                resp.coordinators.add(group_id=key, error_code=code, error_message=code.name, partition=-1)
            else:
                resp.coordinators.append(found[key])
        return resp


async def _context(pipeline: RequestPipeline, api: str, client_id: str, peer: str, context: Any,
                   who: tuple[str, str | None] | None = None) -> RequestContext:
    """The call's context with its principal (``who``: resolved once for a stream)."""
    principal, cert_subject = who if who is not None else resolve_principal(context)
    try:
        return pipeline.context(api, client_id, peer, principal, cert_subject)
    except NotAuthorized as exc:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        raise


def _read_produce_request(data: bytes) -> ProduceRequestView | WireError:
    """Request deserializer: a malformed request is handed to the method, which refuses it with
    INVALID_ARGUMENT (an exception here would end the call as UNKNOWN)."""
    try:
        return parse_produce_request(data)
    except WireError as exc:
        return exc


async def _well_formed(request: ProduceRequestView | WireError, context: Any) -> ProduceRequestView:
    if isinstance(request, WireError):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed ProduceRequest: {request}")
    assert not isinstance(request, WireError)
    return request


_OWN_PIPELINE = ("Produce", "ProduceStream", "Fetch", "FetchStream")  # enter the pipeline in their bodies


def _broker_codecs(pipeline: RequestPipeline) -> Callable[[Handlers], Handlers]:
    """The broker's hand-written codecs: produce requests read in place, fetch responses passed through
    as bytes; and the methods that do not enter the request pipeline in their bodies wrapped into it."""

    def rewrite(handlers: Handlers) -> Handlers:
        for name in ("Produce", "ProduceStream"):
            handlers[name] = handlers[name]._replace(request_deserializer=_read_produce_request)  # type: ignore[attr-defined]
        for name in ("Fetch", "FetchStream"):
            handlers[name] = handlers[name]._replace(response_serializer=pass_bytes)  # type: ignore[attr-defined]
        for name, h in list(handlers.items()):  # the other methods enter the pipeline here
            if name not in _OWN_PIPELINE and h.unary_unary is not None:  # type: ignore[attr-defined]
                handlers[name] = h._replace(  # type: ignore[attr-defined]
                    unary_unary=through_pipeline(pipeline, name, h.unary_unary,  # type: ignore[attr-defined]
                                                 hand_context=True))
        return handlers

    return rewrite


def add_broker_servicer(servicer: BrokerServicer, server: grpc.aio.Server) -> None:
    """Register the broker's gRPC methods, with the hand-written codecs for produce and fetch."""
    pb_grpc.add_BrokerServicer_to_server(servicer, RewrittenHandlers(server, _broker_codecs(servicer.pipeline)))


async def _pipelined(requests: AsyncIterator[Any], handle: Any) -> AsyncIterator[Any]:
    """FetchStream: handle requests concurrently (bounded), yield responses in request order. Each handler
    starts only after the previous one has started its synchronous part (ProduceStream orders its appends
    with the pipeline's explicit ``ProduceSequencer`` instead)."""
    queue: asyncio.Queue[asyncio.Task[Any] | None] = asyncio.Queue(MAX_IN_FLIGHT_PER_STREAM)

    async def reader() -> None:
        try:
            async for req in requests:
                task = asyncio.ensure_future(handle(req))
                await asyncio.sleep(0)  # let the task run its synchronous read before the next one starts
                await queue.put(task)
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
