"""Issue 23, item 4 on the broker: every API on both doors (the gRPC servicer and the Kafka handlers)
decides with the broker's ``Access`` over a real ``Authorizer`` — each API x principal kind is allowed or
refused with Kafka's exact error. The handlers are the real ones, over a real replica manager; principals
reach the gRPC door through the process's principal resolver, as in a secure broker."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from kio.serial import entity_reader
from kio.serial.errors import OutOfBoundValue

from services.broker.api import write_txn_markers as write_txn_markers_api
from services.broker.cleaner_service import CleanerJobs, cleaner_authorizer
from services.broker.fetch_reader import broker_epoch
from services.broker.kafka.apis import Connection, KafkaApis
from services.broker.kafka.registry import kafka_apis
from services.broker.metadata_cache import ClusterView
from services.broker.pipeline import RequestContext, RequestPipeline, through_pipeline
from services.broker.replica_manager import ReplicaManager
from services.broker.server import BrokerServicer
from shared import request_context
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame, api, build, encode_response
from shared.metadata.types import PartitionState, TopicRecord
from shared.proto import tidelog_pb2 as pb
from shared.proto.produce_wire import parse_produce_request
from shared.records.builder import encode_batch
from shared.request_context import NotAuthorized
from shared.security.access import DISABLED, Access
from shared.security.acl import acl
from shared.security.authorizer import Authorizer
from shared.types import TopicPartition

E = ErrorCode
T0, U0 = TopicPartition("t", 0), TopicPartition("u", 0)
INC1, INC2, INC3 = "1700000000000-00000001", "1700000000001-00000002", "1700000000002-00000003"
T_ID, U_ID = uuid.uuid4().hex, uuid.uuid4().hex


def svc(role: str, ident: int) -> str:
    return f"CN={role}-{ident},OU=tidelog-service"


BROKER2, BROKER3, COORD, CONTROLLER, CLEANER = (svc("broker", 2), svc("broker", 3), svc("coordinator", 1),
                                                svc("controller", 1), svc("cleaner", 1))


@dataclass(frozen=True)
class Who:
    """A principal kind: its name and the verified certificate it came with (None: SCRAM or anonymous)."""

    name: str
    cert: str | None = None


ALICE, BOB, ANON, ADMIN = Who("alice"), Who("bob"), Who("ANONYMOUS"), Who("admin")
B2, B3, COORDINATOR, CTRL, CLEANER1 = (Who(BROKER2, BROKER2), Who(BROKER3, BROKER3), Who(COORD, COORD),
                                       Who(CONTROLLER, CONTROLLER), Who(CLEANER, CLEANER))


def authorizer() -> Authorizer:
    """A secure cluster: super.users = admin + the service certificates; allow.everyone.if.no.acl.found false."""
    return Authorizer([
        acl("User:alice", "WRITE", "TOPIC", "t"),
        acl("User:alice", "READ", "TOPIC", "t"),
        acl("User:alice", "WRITE", "TRANSACTIONAL_ID", "tx-alice"),
        acl("User:alice", "READ", "GROUP", "g-alice"),
        acl("User:bob", "DESCRIBE", "TOPIC", "u"),
    ], super_users=["User:admin"] + [f"User:{s}" for s in (BROKER2, BROKER3, COORD, CONTROLLER, CLEANER)])


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class FakeContext:
    """A gRPC servicer context: the peer and the caller the resolver reads; abort raises."""

    def __init__(self, who: Who) -> None:
        self.who = who

    def peer(self) -> str:
        return "ipv4:127.0.0.1:5555"

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


@pytest.fixture(autouse=True)
def resolver() -> Iterator[None]:
    """The process's principal resolver, as a secure service installs it (here: from the fake context)."""
    request_context.set_principal_resolver(lambda context: (context.who.name, context.who.cert))
    yield
    request_context.set_principal_resolver(request_context.anonymous)


@dataclass
class World:
    servicer: BrokerServicer
    apis: KafkaApis
    rm: ReplicaManager


async def world(path: str, access: Access) -> World:
    """Broker 1 leads t-0 and u-0 (replicas 1, 2, 3), brokers 2 and 3 registered with their incarnations."""
    rm = ReplicaManager(1, path)
    brokers = {i: {"id": i, "address": f"127.0.0.1:{100 + i}", "client_address": f"127.0.0.1:{200 + i}",
                   "kafka": f"127.0.0.1:{300 + i}", "incarnation": inc}
               for i, inc in ((1, INC1), (2, INC2), (3, INC3))}
    view = ClusterView(brokers=brokers, cluster_id="c1",
                       topics={"t": TopicRecord("t", T_ID, {0: [1, 2, 3]}), "u": TopicRecord("u", U_ID, {0: [1, 2, 3]})},
                       partitions={T0: PartitionState(1, 1, [1], 1), U0: PartitionState(1, 1, [1], 1)})
    await rm.apply_metadata(view)
    pipeline = RequestPipeline()
    pipeline.access = access
    counter = iter(range(1000, 2000))

    async def allocate() -> int:
        return next(counter)

    servicer = BrokerServicer(rm, 1, allocate, pipeline=pipeline)
    return World(servicer, kafka_apis(servicer.api), rm)


def run(path: Any, access: Access, body: Any) -> Any:
    async def go() -> Any:
        w = await world(str(path), access)
        return await body(w)

    return asyncio.run(go())


def secure() -> Access:
    return Access(authorizer=authorizer())


def batch(**kw: Any) -> bytes:
    return encode_batch([(int(time.time() * 1000), None, b"v", None)], **kw)


TRANSACTIONAL = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0, "transactional": True}
IDEMPOTENT = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0}


# -- Kafka door helpers -------------------------------------------------------------------------------------


async def kcall(apis: KafkaApis, who: Who, key: int, version: int, values: dict[str, Any]) -> Any:
    """Handle a Kafka request as ``who`` (the listener's context), decoded as that version's response."""
    a = api(key, version)
    frame = RequestFrame(a, 1, "test", build(a.request, values))
    ctx = apis.pipeline.context(a.name, "test", "127.0.0.1:40000", who.name, who.cert)
    response, _ = await apis.handle(frame, ctx, Connection("127.0.0.1:40000"))
    if response is None:
        return None
    data = b"".join(encode_response(a, 1, response))[4:]
    _, n = entity_reader(a.response.__header_schema__)(data, 0)
    try:
        decoded, _ = entity_reader(a.response)(data, n)
    except OutOfBoundValue:  # kio's reader refuses a -1 timestamp Kafka writes (DescribeTransactions)
        return response
    return decoded


# -- Produce: TOPIC WRITE, TRANSACTIONAL_ID WRITE (CVE-2018-17196), on both doors ----------------------------


PRODUCE_RULES = [
    (ALICE, "t", None, {}, E.NONE),
    (ALICE, "t", None, IDEMPOTENT, E.NONE),  # WRITE on the topic is WRITE on some topic (KIP-679)
    (ALICE, "u", None, {}, E.TOPIC_AUTHORIZATION_FAILED),
    (BOB, "t", None, {}, E.TOPIC_AUTHORIZATION_FAILED),
    (BOB, "u", None, {}, E.TOPIC_AUTHORIZATION_FAILED),  # DESCRIBE is not WRITE
    (ANON, "t", None, {}, E.TOPIC_AUTHORIZATION_FAILED),
    (ALICE, "t", None, TRANSACTIONAL, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),  # transactional, no id
    (ALICE, "t", "tx-bob", TRANSACTIONAL, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (ALICE, "t", "tx-bob", {}, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (BOB, "t", "tx-alice", TRANSACTIONAL, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (ALICE, "t", "tx-alice", TRANSACTIONAL, E.NONE),
    (ADMIN, "t", None, {}, E.NONE),
    (B2, "u", None, {}, E.NONE),  # a service certificate is a super user
]


@pytest.mark.parametrize("who,topic,tid,kw,code", PRODUCE_RULES)
def test_grpc_produce(tmp_path: Any, who: Who, topic: str, tid: str | None, kw: dict[str, Any],
                      code: ErrorCode) -> None:
    async def body(w: World) -> int:
        req = pb.ProduceRequest(acks=1, timeout_ms=1000, transactional_id=tid or "", topics=[pb.ProduceTopicData(
            name=topic, partitions=[pb.ProducePartitionData(partition=0, records=batch(**kw))])])
        resp = await w.servicer.Produce(parse_produce_request(req.SerializeToString()), FakeContext(who))
        return resp.topics[0].partitions[0].error_code

    assert run(tmp_path, secure(), body) == code


@pytest.mark.parametrize("who,topic,tid,kw,code", PRODUCE_RULES)
def test_kafka_produce(tmp_path: Any, who: Who, topic: str, tid: str | None, kw: dict[str, Any],
                       code: ErrorCode) -> None:
    async def body(w: World) -> int:
        r = await kcall(w.apis, who, 0, 9, {"transactional_id": tid, "acks": 1, "timeout": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": batch(**kw)}]}]})
        return r.responses[0].partition_responses[0].error_code

    assert run(tmp_path, secure(), body) == code


def test_produce_refuses_only_the_unauthorized_topics(tmp_path: Any) -> None:
    async def body(w: World) -> dict[str, int]:
        req = pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[
            pb.ProduceTopicData(name=n, partitions=[pb.ProducePartitionData(partition=0, records=batch())])
            for n in ("t", "u")])
        resp = await w.servicer.Produce(parse_produce_request(req.SerializeToString()), FakeContext(ALICE))
        assert w.rm.partitions[U0].log_end_offset == 0  # nothing written where refused
        return {t.name: t.partitions[0].error_code for t in resp.topics}

    assert run(tmp_path, secure(), body) == {"t": E.NONE, "u": E.TOPIC_AUTHORIZATION_FAILED}


# -- Fetch: consumers TOPIC READ; followers only as that very broker (CVE-2018-1288) -----------------------------


FETCH_RULES = [
    (ALICE, -1, "t", E.NONE),
    (ALICE, -1, "u", E.TOPIC_AUTHORIZATION_FAILED),
    (BOB, -1, "t", E.TOPIC_AUTHORIZATION_FAILED),
    (BOB, -1, "u", E.TOPIC_AUTHORIZATION_FAILED),  # DESCRIBE is not READ
    (ANON, -1, "t", E.TOPIC_AUTHORIZATION_FAILED),
    (ADMIN, -1, "t", E.NONE),
    (B2, 2, "t", E.NONE),  # broker 2 fetching as itself
    (B3, 2, "t", E.TOPIC_AUTHORIZATION_FAILED),  # another broker's certificate
    (ALICE, 2, "t", E.TOPIC_AUTHORIZATION_FAILED),  # a client claiming to be a replica
    (ADMIN, 2, "t", E.TOPIC_AUTHORIZATION_FAILED),  # even a super user without that broker's certificate
    (ANON, 2, "t", E.TOPIC_AUTHORIZATION_FAILED),
    (COORDINATOR, 2, "t", E.TOPIC_AUTHORIZATION_FAILED),  # a service, the wrong role
]


@pytest.mark.parametrize("who,replica_id,topic,code", FETCH_RULES)
def test_grpc_fetch(tmp_path: Any, who: Who, replica_id: int, topic: str, code: ErrorCode) -> None:
    async def body(w: World) -> int:
        w.rm.partitions[TopicPartition(topic, 0)].append_as_leader(batch(), 1)
        req = pb.FetchRequest(replica_id=replica_id, replica_epoch=broker_epoch(INC2), max_wait_ms=0, min_bytes=0,
                              max_bytes=1 << 20, topics=[pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(
                                  partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        resp = pb.FetchResponse.FromString(await w.servicer.Fetch(req, FakeContext(who)))
        part = w.rm.partitions[TopicPartition(topic, 0)]
        if code and replica_id >= 0:  # a refused follower fetch moves nothing
            assert part.high_watermark == 0 or part.high_watermark == part.log_end_offset
        return resp.topics[0].partitions[0].error_code

    assert run(tmp_path, secure(), body) == code


@pytest.mark.parametrize("who,topic,code", [(w, t, c) for w, r, t, c in FETCH_RULES if r < 0])
def test_kafka_fetch(tmp_path: Any, who: Who, topic: str, code: ErrorCode) -> None:
    async def body(w: World) -> int:
        r = await kcall(w.apis, who, 1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                             "session_id": 0, "session_epoch": -1, "topics": [
                                                 {"topic": topic, "partitions": [
                                                     {"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                                      "partition_max_bytes": 1 << 20}]}]})
        return r.responses[0].partitions[0].error_code

    assert run(tmp_path, secure(), body) == code


def test_forged_follower_session_fetch_is_refused_on_the_stream(tmp_path: Any) -> None:
    async def body(w: World) -> Aborted:
        req = pb.FetchRequest(replica_id=2, replica_epoch=broker_epoch(INC2), max_wait_ms=0, min_bytes=0,
                              max_bytes=1 << 20, session_id=0, session_epoch=0, topics=[pb.FetchTopic(
                                  name="t", partitions=[pb.FetchPartition(partition=0, fetch_offset=0,
                                                                          partition_max_bytes=1 << 20)])])

        async def requests() -> Any:
            yield req

        with pytest.raises(Aborted) as info:
            async for _ in w.servicer.FetchStream(requests(), FakeContext(ALICE)):
                pass
        return info.value

    refusal = run(tmp_path, secure(), body)
    assert refusal.code == grpc.StatusCode.PERMISSION_DENIED
    assert refusal.details.startswith("CLUSTER_AUTHORIZATION_FAILED")


# -- Metadata: only what the principal may DESCRIBE; client addresses to clients ------------------------------


@pytest.mark.parametrize("who,asked,expect", [
    (ALICE, [], {"t": E.NONE}),
    (BOB, [], {"u": E.NONE}),
    (ANON, [], {}),
    (ADMIN, [], {"t": E.NONE, "u": E.NONE}),
    (BOB, ["t", "u", "nope"], {"t": E.TOPIC_AUTHORIZATION_FAILED, "u": E.NONE,
                               "nope": E.TOPIC_AUTHORIZATION_FAILED}),  # existence not disclosed
    (ADMIN, ["nope"], {"nope": E.UNKNOWN_TOPIC_OR_PARTITION}),
])
def test_grpc_metadata(tmp_path: Any, who: Who, asked: list[str], expect: dict[str, ErrorCode]) -> None:
    async def body(w: World) -> pb.MetadataResponse:
        handle = through_pipeline(w.servicer.pipeline, "Metadata", w.servicer.Metadata, hand_context=True)
        return await handle(pb.MetadataRequest(topics=asked), FakeContext(who))

    resp = run(tmp_path, secure(), body)
    assert {t.name: t.error_code for t in resp.topics} == expect
    addresses = {b.address for b in resp.brokers}
    assert addresses == ({f"127.0.0.1:{100 + i}" for i in (1, 2, 3)} if who.cert
                         else {f"127.0.0.1:{200 + i}" for i in (1, 2, 3)})


def test_grpc_metadata_gives_service_certificates_the_internal_address(tmp_path: Any) -> None:
    async def body(w: World) -> set[str]:
        resp = await w.servicer.Metadata(pb.MetadataRequest(), FakeContext(B2),
                                         w.servicer.pipeline.context("Metadata", "", "p", B2.name, B2.cert))
        return {b.address for b in resp.brokers}

    assert run(tmp_path, secure(), body) == {"127.0.0.1:101", "127.0.0.1:102", "127.0.0.1:103"}


@pytest.mark.parametrize("who,names,expect", [
    (ALICE, None, {"t": E.NONE}),
    (BOB, None, {"u": E.NONE}),
    (ANON, None, {}),
    (BOB, ["t"], {"t": E.TOPIC_AUTHORIZATION_FAILED}),
    (ALICE, ["new-topic"], {"new-topic": E.TOPIC_AUTHORIZATION_FAILED}),  # not describable: no auto-create
])
def test_kafka_metadata(tmp_path: Any, who: Who, names: list[str] | None, expect: dict[str, ErrorCode]) -> None:
    async def body(w: World) -> Any:
        topics = None if names is None else [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names]
        return await kcall(w.apis, who, 3, 12, {"topics": topics, "allow_auto_topic_creation": True,
                                                "include_topic_authorized_operations": True})

    r = run(tmp_path, secure(), body)
    assert {t.name: t.error_code for t in r.topics} == expect
    for t in r.topics:
        if t.name == "t" and who is ALICE:  # READ, WRITE and DESCRIBE (implied)
            assert t.topic_authorized_operations == (1 << 3) | (1 << 4) | (1 << 8)


def test_kafka_metadata_by_id_does_not_name_an_undescribable_topic(tmp_path: Any) -> None:
    async def body(w: World) -> Any:
        return await kcall(w.apis, BOB, 3, 12, {"topics": [{"name": None, "topic_id": uuid.UUID(hex=T_ID)}]})

    (t,) = run(tmp_path, secure(), body).topics
    assert (t.error_code, t.name, t.topic_id) == (E.TOPIC_AUTHORIZATION_FAILED, None, uuid.UUID(hex=T_ID))


def test_kafka_metadata_auto_create_needs_create(tmp_path: Any) -> None:
    """DESCRIBE on a missing topic but no CREATE: TOPIC_AUTHORIZATION_FAILED, nothing created."""
    auth = authorizer()
    auth.add([acl("User:carol", "DESCRIBE", "TOPIC", "new-")])
    created: list[str] = []

    class Links:
        async def auto_create_topic(self, name: str) -> int:
            created.append(name)
            return int(E.LEADER_NOT_AVAILABLE)

    async def body(w: World) -> dict[str, int]:
        w.servicer.api.links = Links()
        out = {}
        for who in (Who("carol"), ADMIN):
            r = await kcall(w.apis, who, 3, 12, {"topics": [{"name": "new-", "topic_id": uuid.UUID(int=0)}],
                                                 "allow_auto_topic_creation": True})
            out[who.name] = r.topics[0].error_code
        return out

    assert run(tmp_path, Access(authorizer=auth), body) == {"carol": E.TOPIC_AUTHORIZATION_FAILED,
                                                           "admin": E.LEADER_NOT_AVAILABLE}
    assert created == ["new-"]


# -- ListOffsets, OffsetsForLeaderEpoch, DescribeProducers ---------------------------------------------------------


@pytest.mark.parametrize("who,topic,code", [
    (ALICE, "t", E.NONE), (BOB, "u", E.NONE), (BOB, "t", E.TOPIC_AUTHORIZATION_FAILED),
    (ANON, "u", E.TOPIC_AUTHORIZATION_FAILED),
])
def test_list_offsets_both_doors(tmp_path: Any, who: Who, topic: str, code: ErrorCode) -> None:
    async def body(w: World) -> tuple[int, int, int]:
        ctx = w.servicer.pipeline.context("ListOffsets", "", "p", who.name, who.cert)
        grpc_resp = await w.servicer.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
            name=topic, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=-1)])]), FakeContext(who), ctx)
        epochs = await w.servicer.OffsetsForLeaderEpoch(pb.OffsetsForLeaderEpochRequest(topics=[
            pb.EpochTopic(name=topic, partitions=[pb.EpochPartition(partition=0, current_leader_epoch=-1,
                                                                    leader_epoch=1)])]), FakeContext(who), ctx)
        k = await kcall(w.apis, who, 2, 7, {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        return (grpc_resp.topics[0].partitions[0].error_code, epochs.topics[0].partitions[0].error_code,
                k.topics[0].partitions[0].error_code)

    assert run(tmp_path, secure(), body) == (code, code, code)


@pytest.mark.parametrize("who,topic,code", [
    (ALICE, "t", E.NONE), (BOB, "u", E.TOPIC_AUTHORIZATION_FAILED), (ADMIN, "u", E.NONE),
])
def test_describe_producers_needs_read(tmp_path: Any, who: Who, topic: str, code: ErrorCode) -> None:
    async def body(w: World) -> tuple[int, int]:
        ctx = w.servicer.pipeline.context("DescribeProducers", "", "p", who.name, who.cert)
        g = await w.servicer.DescribeProducers(pb.DescribeProducersRequest(topics=[pb.DescribeProducersTopic(
            name=topic, partitions=[0])]), FakeContext(who), ctx)
        k = await kcall(w.apis, who, 61, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
        return g.topics[0].partitions[0].error_code, k.topics[0].partitions[0].error_code

    assert run(tmp_path, secure(), body) == (code, code)


# -- InitProducerId: IDEMPOTENT_WRITE (or WRITE on some topic), TRANSACTIONAL_ID WRITE ------------------------------


@pytest.mark.parametrize("who,tid,grpc_code,kafka_code", [
    (ALICE, None, E.NONE, E.NONE),
    (BOB, None, E.CLUSTER_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED),
    (ANON, None, E.CLUSTER_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED),
    (BOB, "tx-alice", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    # authorized, then the door's own answer (gRPC has no transactional ids; no coordinator here)
    (ALICE, "tx-alice", E.UNSUPPORTED_VERSION, None),
])
def test_init_producer_id(tmp_path: Any, who: Who, tid: str | None, grpc_code: ErrorCode,
                          kafka_code: ErrorCode | None) -> None:
    async def body(w: World) -> tuple[int, int]:
        ctx = w.servicer.pipeline.context("InitProducerId", "", "p", who.name, who.cert)
        g = await w.servicer.InitProducerId(pb.InitProducerIdRequest(transactional_id=tid or ""), FakeContext(who), ctx)
        k = await kcall(w.apis, who, 22, 4, {"transactional_id": tid, "transaction_timeout": 60_000,
                                             "producer_id": -1, "producer_epoch": -1})
        return g.error_code, k.error_code

    g, k = run(tmp_path, secure(), body)
    assert g == grpc_code
    if kafka_code is None:
        assert k not in (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.CLUSTER_AUTHORIZATION_FAILED)
    else:
        assert k == kafka_code


# -- internal RPCs: WriteTxnMarkers, DescribeLogDirs, the cleaner's streams --------------------------------------


@pytest.mark.parametrize("who,refused", [
    (COORDINATOR, False), (CTRL, False), (B2, True), (ADMIN, True), (ALICE, True), (ANON, True),
])
def test_write_txn_markers_only_from_a_coordinator_or_controller_certificate(tmp_path: Any, who: Who,
                                                                              refused: bool) -> None:
    request = pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
        producer_id=7, producer_epoch=0, committed=False, coordinator_epoch=0,
        topics=[pb.WritableTxnMarkerTopic(name="t", partitions=[0])])])

    async def body(w: World) -> tuple[Any, Any, int]:
        handle = through_pipeline(w.servicer.pipeline, "WriteTxnMarkers", w.servicer.WriteTxnMarkers,
                                  hand_context=True)
        try:
            outcome: Any = (await handle(request, FakeContext(who))).markers[0].topics[0].partitions[0].error_code
        except Aborted as exc:
            outcome = exc
        # the request layer itself, as any door would call it
        ctx = w.servicer.pipeline.context("WriteTxnMarkers", "", "p", who.name, who.cert)
        marker = write_txn_markers_api.TxnMarker(7, 0, False, 0, [T0])
        answer = (await write_txn_markers_api.write_txn_markers(w.servicer.api, [marker], ctx=ctx))[0]
        return outcome, answer.results[T0].error, w.rm.partitions[T0].log_end_offset

    outcome, layer_code, end = run(tmp_path, secure(), body)
    if refused:
        assert isinstance(outcome, Aborted) and outcome.code == grpc.StatusCode.PERMISSION_DENIED
        assert outcome.details.startswith("CLUSTER_AUTHORIZATION_FAILED")
        assert (layer_code, end) == (E.CLUSTER_AUTHORIZATION_FAILED, 0)  # nothing written
    else:
        assert outcome != E.CLUSTER_AUTHORIZATION_FAILED and layer_code != E.CLUSTER_AUTHORIZATION_FAILED
        assert end == 2  # both markers written


@pytest.mark.parametrize("who,allowed", [(ADMIN, True), (B2, True), (ALICE, False), (ANON, False)])
def test_describe_log_dirs_needs_cluster_describe(tmp_path: Any, who: Who, allowed: bool) -> None:
    async def body(w: World) -> tuple[Any, int]:
        handle = through_pipeline(w.servicer.pipeline, "DescribeLogDirs", w.servicer.DescribeLogDirs,
                                  hand_context=True)
        try:
            outcome: Any = await handle(pb.DescribeLogDirsRequest(), FakeContext(who))
        except Aborted as exc:
            outcome = exc
        k = await kcall(w.apis, who, 35, 3, {"topics": None})
        return outcome, k.error_code

    outcome, kafka_code = run(tmp_path, secure(), body)
    if allowed:
        assert isinstance(outcome, pb.DescribeLogDirsResponse) and kafka_code == 0
    else:
        assert outcome.code == grpc.StatusCode.PERMISSION_DENIED
        assert outcome.details.startswith("CLUSTER_AUTHORIZATION_FAILED")
        assert kafka_code == E.CLUSTER_AUTHORIZATION_FAILED


@pytest.mark.parametrize("method,who,allowed", [
    ("AcquireJob", CLEANER1, True), ("ReadSegments", CLEANER1, True), ("CompleteJob", CLEANER1, True),
    ("AcquireJob", ANON, False), ("ReadSegments", ALICE, False), ("RenewLease", B2, False),
    ("FailJob", ADMIN, False),  # a super user, but not a cleaner's certificate
    ("CleanerStatus", ADMIN, True), ("CleanerStatus", CLEANER1, True), ("CleanerStatus", ALICE, False),
])
def test_cleaner_streams_only_for_cleaner_certificates(tmp_path: Any, method: str, who: Who, allowed: bool) -> None:
    jobs = CleanerJobs(ReplicaManager(1, str(tmp_path)), lambda: 0)
    authorize = cleaner_authorizer(jobs)
    ctx = RequestContext(method, "", who.name, "ipv4:127.0.0.1:1", 0.0, "127.0.0.1", who.cert)
    assert authorize(ctx)  # plaintext: everyone
    jobs.access = secure()
    if allowed:
        assert authorize(ctx)
    else:
        with pytest.raises(NotAuthorized, match="^CLUSTER_AUTHORIZATION_FAILED"):
            authorize(ctx)


# -- FindCoordinator -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("who,key_type,key,code", [
    (BOB, 0, "g-alice", E.GROUP_AUTHORIZATION_FAILED),
    (BOB, 1, "tx-alice", E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (ALICE, 0, "g-alice", E.COORDINATOR_NOT_AVAILABLE),  # allowed (READ implies DESCRIBE); no coordinator yet
    (ALICE, 1, "tx-alice", E.COORDINATOR_NOT_AVAILABLE),
])
def test_find_coordinator_both_doors(tmp_path: Any, who: Who, key_type: int, key: str, code: ErrorCode) -> None:
    async def body(w: World) -> tuple[int, int]:
        ctx = w.servicer.pipeline.context("FindCoordinator", "", "p", who.name, who.cert)
        g = await w.servicer.FindCoordinator(pb.FindCoordinatorRequest(key_type=key_type, group_ids=[key]),
                                             FakeContext(who), ctx)
        k = await kcall(w.apis, who, 10, 4, {"key_type": key_type, "coordinator_keys": [key]})
        return g.coordinators[0].error_code, k.coordinators[0].error_code

    assert run(tmp_path, secure(), body) == (code, code)


# -- the Kafka door's admin, group and transaction APIs ------------------------------------------------------------


TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = (int(E.TOPIC_AUTHORIZATION_FAILED),
                                                          int(E.GROUP_AUTHORIZATION_FAILED),
                                                          int(E.CLUSTER_AUTHORIZATION_FAILED),
                                                          int(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
GROUP_TOPICS = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                              "committed_leader_epoch": -1, "committed_metadata": None}]}]

# (api key, version, request, what to read from the response) -> codes for bob (denied)
KAFKA_RULES: list[tuple[str, int, int, dict[str, Any], Any, int]] = [
    ("CreateTopics", 19, 5, {"topics": [{"name": "x", "num_partitions": 1, "replication_factor": 1}], "timeout": 100},
     lambda r: r.topics[0].error_code, TOPIC_DENIED),
    ("DeleteTopics", 20, 5, {"topic_names": ["t"], "timeout": 100}, lambda r: r.responses[0].error_code, TOPIC_DENIED),
    ("CreatePartitions", 37, 1, {"topics": [{"name": "t", "count": 3, "assignments": None}], "timeout": 100},
     lambda r: r.results[0].error_code, TOPIC_DENIED),
    ("DescribeConfigs topic", 32, 1, {"resources": [{"resource_type": 2, "resource_name": "u"}]},
     lambda r: r.results[0].error_code, TOPIC_DENIED),
    ("DescribeConfigs broker", 32, 1, {"resources": [{"resource_type": 4, "resource_name": "1"}]},
     lambda r: r.results[0].error_code, CLUSTER_DENIED),
    ("AlterConfigs", 33, 1, {"resources": [{"resource_type": 2, "resource_name": "u", "configs": []}]},
     lambda r: r.responses[0].error_code, TOPIC_DENIED),
    ("IncrementalAlterConfigs", 44, 1, {"resources": [{"resource_type": 2, "resource_name": "u", "configs": []}]},
     lambda r: r.responses[0].error_code, TOPIC_DENIED),
    ("DescribeClientQuotas", 48, 1, {"components": [], "strict": False}, lambda r: r.error_code, CLUSTER_DENIED),
    ("AlterClientQuotas", 49, 1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "bob"}],
                                               "ops": [{"key": "producer_byte_rate", "value": 1.0}]}]},
     lambda r: r.entries[0].error_code, CLUSTER_DENIED),
    ("ElectLeaders", 43, 1, {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}],
                             "timeout": 100}, lambda r: r.replica_election_results[0].partition_result[0].error_code,
     CLUSTER_DENIED),
    ("DeleteRecords", 21, 2, {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": -1}]}],
                              "timeout": 100}, lambda r: r.topics[0].partitions[0].error_code, TOPIC_DENIED),
    ("JoinGroup", 11, 5, {"group_id": "g-alice", "session_timeout": 10_000, "rebalance_timeout": 10_000,
                          "member_id": "", "protocol_type": "consumer", "protocols": []},
     lambda r: r.error_code, GROUP_DENIED),
    ("SyncGroup", 14, 3, {"group_id": "g-alice", "generation_id": 1, "member_id": "m", "assignments": []},
     lambda r: r.error_code, GROUP_DENIED),
    ("Heartbeat", 12, 3, {"group_id": "g-alice", "generation_id": 1, "member_id": "m"},
     lambda r: r.error_code, GROUP_DENIED),
    ("LeaveGroup", 13, 3, {"group_id": "g-alice", "members": [{"member_id": "m"}]},
     lambda r: r.error_code, GROUP_DENIED),
    ("OffsetCommit", 8, 8, {"group_id": "g-alice", "generation_id_or_member_epoch": -1, "member_id": "",
                            "topics": GROUP_TOPICS}, lambda r: r.topics[0].partitions[0].error_code, GROUP_DENIED),
    ("OffsetFetch", 9, 7, {"group_id": "g-alice", "topics": [{"name": "t", "partition_indexes": [0]}]},
     lambda r: r.error_code, GROUP_DENIED),
    ("OffsetDelete", 47, 0, {"group_id": "g-alice", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
     lambda r: r.error_code, GROUP_DENIED),
    ("DescribeGroups", 15, 5, {"groups": ["g-alice"]}, lambda r: r.groups[0].error_code, GROUP_DENIED),
    ("DeleteGroups", 42, 2, {"groups_names": ["g-alice"]}, lambda r: r.results[0].error_code, GROUP_DENIED),
    ("ConsumerGroupHeartbeat", 68, 0, {"group_id": "g-alice", "member_id": "m", "member_epoch": 0,
                                       "rebalance_timeout": 10_000, "subscribed_topic_names": ["t"],
                                       "topic_partitions": []}, lambda r: r.error_code, GROUP_DENIED),
    ("ConsumerGroupDescribe", 69, 0, {"group_ids": ["g-alice"]}, lambda r: r.groups[0].error_code, GROUP_DENIED),
    ("AddPartitionsToTxn", 24, 3, {"v3_and_below_transactional_id": "tx-alice", "v3_and_below_producer_id": 5,
                                   "v3_and_below_producer_epoch": 0,
                                   "v3_and_below_topics": [{"name": "t", "partitions": [0]}]},
     lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code, TXN_DENIED),
    ("AddOffsetsToTxn", 25, 3, {"transactional_id": "tx-alice", "producer_id": 5, "producer_epoch": 0,
                                "group_id": "g-alice"}, lambda r: r.error_code, TXN_DENIED),
    ("EndTxn", 26, 3, {"transactional_id": "tx-alice", "producer_id": 5, "producer_epoch": 0, "committed": True},
     lambda r: r.error_code, TXN_DENIED),
    ("TxnOffsetCommit", 28, 3, {"transactional_id": "tx-alice", "group_id": "g-alice", "producer_id": 5,
                                "producer_epoch": 0, "generation_id": -1, "member_id": "", "topics": GROUP_TOPICS},
     lambda r: r.topics[0].partitions[0].error_code, TXN_DENIED),
    ("DescribeTransactions", 65, 0, {"transactional_ids": ["tx-alice"]},
     lambda r: r.transaction_states[0].error_code, TXN_DENIED),
]


@pytest.mark.parametrize("name,key,version,values,read,code", KAFKA_RULES, ids=[r[0] for r in KAFKA_RULES])
def test_kafka_door_refuses_bob(tmp_path: Any, name: str, key: int, version: int, values: dict[str, Any],
                                read: Any, code: int) -> None:
    async def body(w: World) -> tuple[int, int]:
        denied = read(await kcall(w.apis, BOB, key, version, values))
        allowed = read(await kcall(w.apis, ADMIN, key, version, values))  # may fail further on: not by ACLs
        return denied, allowed

    denied, allowed = run(tmp_path, secure(), body)
    assert denied == code
    assert allowed not in (TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED)


def test_kafka_offset_commit_refuses_topics_without_read(tmp_path: Any) -> None:
    async def body(w: World) -> int:
        r = await kcall(w.apis, ALICE, 8, 8, {"group_id": "g-alice", "generation_id_or_member_epoch": -1,
                                              "member_id": "", "topics": [{**GROUP_TOPICS[0], "name": "u"}]})
        return r.topics[0].partitions[0].error_code

    assert run(tmp_path, secure(), body) == TOPIC_DENIED


def test_kafka_list_transactions_and_groups_need_no_acl_to_ask(tmp_path: Any) -> None:
    """ListGroups / ListTransactions filter what they list; asking is not refused."""
    async def body(w: World) -> tuple[int, int]:
        g = await kcall(w.apis, BOB, 16, 4, {"states_filter": []})
        t = await kcall(w.apis, BOB, 66, 0, {"state_filters": [], "producer_id_filters": []})
        return g.error_code, t.error_code

    g, t = run(tmp_path, secure(), body)
    assert g not in (CLUSTER_DENIED, GROUP_DENIED) and t != TXN_DENIED


# -- plaintext: no authorizer, everything as before ----------------------------------------------------------------


def test_plaintext_allows_everyone_everything(tmp_path: Any) -> None:
    async def body(w: World) -> None:
        assert not w.servicer.pipeline.access.enabled
        for reg in w.rm.view.brokers.values():  # a plaintext cluster registers no client port
            reg.pop("client_address")
        req = pb.ProduceRequest(acks=1, timeout_ms=1000, topics=[pb.ProduceTopicData(
            name="t", partitions=[pb.ProducePartitionData(partition=0, records=batch(**TRANSACTIONAL))])])
        resp = await w.servicer.Produce(parse_produce_request(req.SerializeToString()), FakeContext(ANON))
        assert resp.topics[0].partitions[0].error_code == E.NONE
        handle = through_pipeline(w.servicer.pipeline, "Metadata", w.servicer.Metadata, hand_context=True)
        meta = await handle(pb.MetadataRequest(), FakeContext(ANON))
        assert {t.name for t in meta.topics} == {"t", "u"}
        assert {b.address for b in meta.brokers} == {"127.0.0.1:101", "127.0.0.1:102", "127.0.0.1:103"}
        fetch = pb.FetchResponse.FromString(await w.servicer.Fetch(pb.FetchRequest(
            replica_id=2, replica_epoch=broker_epoch(INC2), max_wait_ms=0, max_bytes=1 << 20, topics=[pb.FetchTopic(
                name="t", partitions=[pb.FetchPartition(partition=0, partition_max_bytes=1 << 20)])]),
            FakeContext(ANON)))
        assert fetch.topics[0].partitions[0].error_code == E.NONE  # KIP-380's epoch check only
        for key, version, values, read in [(r[1], r[2], r[3], r[4]) for r in KAFKA_RULES]:
            code = read(await kcall(w.apis, ANON, key, version, values))
            assert code not in (TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED), (key, code)

    run(tmp_path, DISABLED, body)
