"""The transaction APIs of the Kafka door (services/broker/kafka/transactions.py) in process: ApiVersions
claims exactly the served table; every claimed version answers and encodes (no coordinator yet:
COORDINATOR_NOT_AVAILABLE); requests reach a TransactionCoordinator (an in-process gRPC fake) with
Kafka's fields, and its errors come back as each version can name them."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import pytest
from kio.serial import entity_reader

from services.broker.api import BrokerApi
from services.broker.kafka import transactions
from services.broker.kafka.apis import Connection, KafkaApis
from services.broker.kafka.registry import kafka_apis
from services.broker.metadata_cache import ClusterView
from services.broker.pipeline import RequestContext, RequestPipeline
from services.broker.replica_manager import ReplicaManager
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame, api, build, encode_response
from shared.metadata.types import PartitionState, TopicRecord
from shared.proto import transactions_pb2 as tpb
from shared.proto import transactions_pb2_grpc as tpb_grpc
from shared.txn_topic import TRANSACTION_STATE_TOPIC
from shared.types import TopicPartition

SERVED = {22: (0, 5), 24: (0, 3), 25: (0, 4), 26: (0, 4), 28: (0, 4), 65: (0, 0), 66: (0, 1), 0: (3, 11)}

REQUESTS: dict[int, dict[str, Any]] = {
    22: {"transactional_id": "tx", "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1},
    24: {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": 5, "v3_and_below_producer_epoch": 0,
         "v3_and_below_topics": [{"name": "t", "partitions": [0, 1]}]},
    25: {"transactional_id": "tx", "producer_id": 5, "producer_epoch": 0, "group_id": "g"},
    26: {"transactional_id": "tx", "producer_id": 5, "producer_epoch": 0, "committed": True},
    28: {"transactional_id": "tx", "group_id": "g", "producer_id": 5, "producer_epoch": 0, "generation_id": 1,
         "member_id": "m", "group_instance_id": None,
         "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 3,
                                                  "committed_leader_epoch": -1, "committed_metadata": None}]}]},
    65: {"transactional_ids": ["tx", "other"]},
    66: {"state_filters": ["Ongoing", "Nope"], "producer_id_filters": [], "duration_filter": -1},
}


@pytest.fixture
def apis(tmp_path: Any) -> KafkaApis:
    rm = ReplicaManager(1, str(tmp_path))
    rm.view = ClusterView(brokers={1: {"id": 1, "kafka": "127.0.0.1:9092"}}, cluster_id="c1")
    rm.view.topics["t"] = TopicRecord("t", uuid.uuid4().hex, {0: [1], 1: [1]}, {})
    broker = BrokerApi(rm, RequestPipeline(), 1)
    return kafka_apis(broker)


async def call(apis: KafkaApis, key: int, version: int, values: dict[str, Any], decode: bool = True) -> Any:
    """Handle a request of that version; the response must encode and decode as that version's class
    (``decode`` False: encode only -- kio's reader refuses the -1 start time Kafka writes for "none")."""
    a = api(key, version)
    frame = RequestFrame(a, 1, "test", build(a.request, values))
    ctx = RequestContext(a.name, "test", "ANONYMOUS", "peer", 0.0)
    response, _ = await apis.handle(frame, ctx, Connection("peer"))
    data = b"".join(encode_response(a, 1, response))[4:]
    if not decode:
        return response
    _, n = entity_reader(a.response.__header_schema__)(data, 0)
    decoded, m = entity_reader(a.response)(data, n)
    assert n + m == len(data)
    return decoded


def test_api_versions_claims_exactly_what_is_served(apis: KafkaApis) -> None:
    for key, versions in SERVED.items():
        assert apis.versions[key] == versions
    claimed = {e["api_key"]: (e["min_version"], e["max_version"]) for e in apis.api_versions()}
    assert {k: claimed[k] for k in SERVED} == SERVED
    assert 27 not in claimed  # WriteTxnMarkers is the coordinator's, over gRPC


def test_every_claimed_version_answers_without_a_coordinator(apis: KafkaApis) -> None:
    async def run() -> None:
        for key, values in REQUESTS.items():
            lo, hi = apis.versions[key]
            for version in range(lo, hi + 1):
                r = await call(apis, key, version, values, decode=key != 65)
                if key == 22:
                    assert (r.error_code, r.producer_id) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)
                elif key == 24:
                    codes = [p.partition_error_code for t in r.results_by_topic_v3_and_below
                             for p in t.results_by_partition]
                    assert codes == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2
                elif key == 65:
                    assert [s.error_code for s in r.transaction_states] == [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 2
                elif key == 66:
                    assert list(r.unknown_state_filters) == ["Nope"] and r.transaction_states == ()
        await apis.close()
    asyncio.run(run())


def test_error_translation_per_version() -> None:
    fenced, abortable = int(ErrorCode.PRODUCER_FENCED), int(ErrorCode.TRANSACTION_ABORTABLE)
    assert transactions.client_error(fenced, 26, 1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert transactions.client_error(fenced, 26, 2) == ErrorCode.PRODUCER_FENCED
    assert transactions.client_error(fenced, 22, 3) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert transactions.client_error(fenced, 22, 4) == ErrorCode.PRODUCER_FENCED
    assert transactions.client_error(abortable, 26, 3) == ErrorCode.INVALID_TXN_STATE
    assert transactions.client_error(abortable, 26, 4) == ErrorCode.TRANSACTION_ABORTABLE
    assert transactions.client_error(abortable, 24, 3) == ErrorCode.INVALID_TXN_STATE
    assert transactions.client_error(abortable, 28, 4) == ErrorCode.TRANSACTION_ABORTABLE


class FakeCoordinator(tpb_grpc.TransactionCoordinatorServicer):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def InitProducerId(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return tpb.TxnInitProducerIdResponse(producer_id=7, producer_epoch=3)

    async def AddPartitionsToTxn(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return tpb.AddPartitionsToTxnResponse(results=[tpb.TxnTopicResult(name="t", partitions=[
            tpb.TxnPartitionResult(partition=0, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))])])

    async def EndTxn(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return tpb.EndTxnResponse(error_code=int(ErrorCode.PRODUCER_FENCED))

    async def DescribeTransactions(self, request: Any, context: Any) -> Any:  # noqa: N802
        return tpb.DescribeTransactionsResponse(transactions=[
            tpb.DescribedTransaction(transactional_id=t, state="Ongoing", transaction_timeout_ms=60_000,
                                     transaction_start_time_ms=1_700_000_000_000, producer_id=7, producer_epoch=3,
                                     topics=[tpb.TxnTopic(name="t", partitions=[0])])
            for t in request.transactional_ids])

    async def ListTransactions(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.seen.append(request)
        return tpb.ListTransactionsResponse(transactions=[
            tpb.ListedTransaction(transactional_id="tx", producer_id=7, transaction_state="Ongoing")])


def test_requests_reach_the_coordinator_owning_the_id(apis: KafkaApis) -> None:
    view = apis.broker.rm.view
    view.topics[TRANSACTION_STATE_TOPIC] = TopicRecord(TRANSACTION_STATE_TOPIC, uuid.uuid4().hex,
                                                       {p: [1] for p in range(50)}, {})
    for p in range(50):
        view.partitions[TopicPartition(TRANSACTION_STATE_TOPIC, p)] = PartitionState(1, 0, [1])

    async def run() -> None:
        fake = FakeCoordinator()
        server = grpc.aio.server()
        tpb_grpc.add_TransactionCoordinatorServicer_to_server(fake, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        apis.broker.txn_coordinator_owners = lambda: {p: {"address": f"127.0.0.1:{port}"} for p in range(50)}
        try:
            r = await call(apis, 22, 4, REQUESTS[22])
            assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 7, 3)
            assert (fake.seen[-1].transactional_id, fake.seen[-1].transaction_timeout_ms) == ("tx", 60_000)
            r = await call(apis, 24, 3, REQUESTS[24])
            assert [(p.partition_index, p.partition_error_code) for p in r.results_by_topic_v3_and_below[0]
                    .results_by_partition] == [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                               (1, ErrorCode.OPERATION_NOT_ATTEMPTED)]
            assert fake.seen[-1].verify_only is False and list(fake.seen[-1].topics[0].partitions) == [0, 1]
            assert (await call(apis, 26, 1, REQUESTS[26])).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
            assert (await call(apis, 26, 3, REQUESTS[26])).error_code == ErrorCode.PRODUCER_FENCED
            assert fake.seen[-1].committed is True
            r = await call(apis, 65, 0, REQUESTS[65])
            assert [(s.transactional_id, s.transaction_state, s.producer_id) for s in r.transaction_states] == [
                ("tx", "Ongoing", 7), ("other", "Ongoing", 7)]
            r = await call(apis, 66, 1, REQUESTS[66])
            assert [(s.transactional_id, s.transaction_state) for s in r.transaction_states] == [("tx", "Ongoing")]
            assert list(fake.seen[-1].state_filters) == ["Ongoing"]
        finally:
            await apis.close()
            await server.stop(None)
    asyncio.run(run())
