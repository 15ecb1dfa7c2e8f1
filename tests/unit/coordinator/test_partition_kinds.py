"""The coordinator's partition machinery for two internal topics: each kind's keys, placement,
balancing and routing, independent of the other's. No network."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.coordinator.config import GroupConfig
from services.coordinator.group import GroupError
from services.coordinator.ownership import plan
from services.coordinator.partition_kind import (
    GROUP_MARKER_KEY,
    GROUPS,
    TRANSACTIONS,
    TXN_MARKER_KEY,
    LatestValueShard,
    groups_kind,
    transactions_kind,
)
from services.coordinator.runtime import CoordinatorRuntime, PartitionRuntime
from services.coordinator.shard import GroupShard
from services.coordinator.writer import PartitionWriter
from shared.coordinator_lookup import COORDINATOR_TOPICS, find_coordinators
from shared.errors import ErrorCode
from shared.metadata.keys import Keys
from shared.offsets_topic import OFFSETS_TOPIC, java_string_hash, partition_for
from shared.proto import tidelog_pb2 as pb
from shared.records import decode_records, iter_batches, records_section
from shared.txn_topic import TRANSACTION_STATE_TOPIC, txn_partition_for, txn_replication_factor, txn_topic_configs

KEYS = Keys("c")


def test_the_two_kinds_own_partitions_on_different_keys() -> None:
    g, t = groups_kind(GroupConfig()), transactions_kind(LatestValueShard)
    assert (g.topic, t.topic) == (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)
    assert g.owner_key(KEYS, 3) == b"/tidelog/c/offsets-owners/3"
    assert t.owner_key(KEYS, 3) == b"/tidelog/c/txn-owners/3"
    assert t.producer_key(KEYS, 3) == b"/tidelog/c/txn-producers/3" != g.producer_key(KEYS, 3)
    assert t.owner_key(KEYS, 3).startswith(t.owners_prefix(KEYS))
    assert not t.owner_key(KEYS, 3).startswith(g.owners_prefix(KEYS))
    assert KEYS.internal_topic_request(TRANSACTION_STATE_TOPIC) == b"/tidelog/c/internal-topic-requests/__transaction_state"
    assert isinstance(g.new_shard(2), GroupShard) and isinstance(t.new_shard(2), LatestValueShard)
    assert (g.marker_key, t.marker_key) == (GROUP_MARKER_KEY, TXN_MARKER_KEY)


def test_a_transactional_id_is_placed_by_kafkas_hash() -> None:
    assert java_string_hash("hello") == 99162322
    assert txn_partition_for("hello") == 99162322 % 50 == 22
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Utils.abs(MIN_VALUE) is 0
    assert txn_partition_for("polygenelubricants") == 0
    assert all(txn_partition_for(s, 7) == partition_for(s, 7) for s in ("a", "tx-1", "ü∂", ""))


def test_transaction_state_topic_configs_follow_kafka_within_the_replication_factor() -> None:
    assert txn_replication_factor(1) == 1 and txn_replication_factor(5) == 3
    assert txn_topic_configs(3) == {"cleanup.policy": "compact", "min.insync.replicas": 2, "segment.bytes": 104857600}
    assert txn_topic_configs(1)["min.insync.replicas"] == 1  # Tidelog refuses min.insync.replicas > RF


def test_each_kind_is_balanced_by_the_same_rule_on_its_own() -> None:
    live = ["a", "b"]
    offsets_owners = {p: {"owner": "a"} for p in range(6)}  # a held everything before b came
    txn_owners: dict[int, dict[str, str]] = {}
    assert plan(6, live, offsets_owners, "a") == ([], [1, 3, 5])
    assert plan(50, live, txn_owners, "a") == (list(range(0, 50, 2)), [])
    assert plan(50, live, txn_owners, "b") == (list(range(1, 50, 2)), [])


def test_find_coordinator_for_transactional_ids() -> None:
    assert COORDINATOR_TOPICS == {0: OFFSETS_TOPIC, 1: TRANSACTION_STATE_TOPIC}
    p = txn_partition_for("tx", 50)
    resp = find_coordinators(["tx"], 50, {p: {"owner": "c1", "address": "h:1"}}, TRANSACTION_STATE_TOPIC)
    assert (resp.coordinators[0].node_id, resp.coordinators[0].partition, resp.coordinators[0].error_code) == ("c1", p, 0)
    missing = find_coordinators(["tx"], 0, {}, TRANSACTION_STATE_TOPIC).coordinators[0]
    assert missing.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and TRANSACTION_STATE_TOPIC in missing.error_message
    assert pb.FindCoordinatorRequest(group_ids=["tx"], key_type=1).key_type == 1


def test_the_transaction_markers_key_names_no_transactional_id() -> None:
    from services.coordinator.txn.records import decode_key

    assert decode_key(TXN_MARKER_KEY) == ""  # TransactionLogKey v0, empty id: Kafka never has such an id
    shard = LatestValueShard(0)
    shard.replay(b"k", b"v")
    shard.replay(TXN_MARKER_KEY, None)
    assert shard.values == {b"k": b"v"} and shard.replayed == 2


# -- the runtime's routing, with a store that records what is asked of it ------------------------


class FakeTxnClient:
    def __init__(self) -> None:
        self.puts: list[bytes] = []
        self.transactions = self

    def put(self, key: bytes, value: bytes, lease: Any = None) -> tuple[bytes, bytes]:
        return key, value

    async def transaction(self, compare: list[Any], success: list[Any], failure: list[Any]) -> tuple[bool, list[Any]]:
        self.puts += [k for k, _ in success]
        return True, []


class FakeStore:
    def __init__(self) -> None:
        self.keys = KEYS
        self.client = FakeTxnClient()

    def cmp_absent(self, key: bytes) -> tuple[str, bytes]:
        return "absent", key


def _runtime() -> tuple[CoordinatorRuntime, FakeStore]:
    store = FakeStore()
    rt = CoordinatorRuntime(store, "me", "h:1", GroupConfig(),  # type: ignore[arg-type]
                            kinds=[groups_kind(GroupConfig()), transactions_kind(LatestValueShard)])
    return rt, store


def _error(call: Any) -> ErrorCode:
    with pytest.raises(GroupError) as err:
        call()
    return err.value.code


def test_routing_a_transactional_id() -> None:
    async def scenario() -> None:
        rt, store = _runtime()
        assert _error(lambda: rt.txn_runtime_for("tx")) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        await asyncio.sleep(0)
        assert store.client.puts == [KEYS.internal_topic_request(TRANSACTION_STATE_TOPIC)]  # asked once
        assert _error(lambda: rt.txn_runtime_for("tx")) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        await asyncio.sleep(0)
        assert len(store.client.puts) == 1
        rt.view.topics = {TRANSACTION_STATE_TOPIC: ("id", 50), OFFSETS_TOPIC: ("id2", 6)}
        p = txn_partition_for("tx", 50)
        assert _error(lambda: rt.txn_runtime_for("tx")) == ErrorCode.NOT_COORDINATOR
        pr = PartitionRuntime(p, LatestValueShard(p), 1, kind=TRANSACTIONS)
        rt.owned[TRANSACTIONS][p] = pr
        assert _error(lambda: rt.txn_runtime_for("tx")) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        pr.loaded = True
        assert rt.txn_runtime_for("tx") is pr
        # the same partition number of __consumer_offsets is another ownership
        assert _error(lambda: rt.runtime_for("g")) == ErrorCode.NOT_COORDINATOR
        assert p not in rt.partitions
        assert rt.partitions is rt.owned[GROUPS]

    asyncio.run(scenario())


def test_a_runtime_without_the_transaction_kind_says_so() -> None:
    rt = CoordinatorRuntime(FakeStore(), "me", "h:1", GroupConfig())  # type: ignore[arg-type]
    assert list(rt.kinds) == [GROUPS]
    assert _error(lambda: rt.txn_runtime_for("tx")) == ErrorCode.COORDINATOR_NOT_AVAILABLE


# -- the fenced writer on __transaction_state --------------------------------------------------------


class RecordingBroker:
    def __init__(self) -> None:
        self.requests: list[pb.ProduceRequest] = []

    async def Produce(self, request: pb.ProduceRequest, timeout: float) -> pb.ProduceResponse:
        self.requests.append(request)
        resp = pb.ProduceResponse()
        resp.topics.add(name=request.topics[0].name).partitions.add(partition=request.topics[0].partitions[0].partition,
                                                                    base_offset=len(self.requests) - 1)
        return resp


def test_the_writer_fences_a_transaction_state_partition_with_its_marker() -> None:
    async def scenario() -> None:
        broker = RecordingBroker()

        async def stub_for(_: int) -> RecordingBroker:
            return broker

        kind = transactions_kind(LatestValueShard)
        w = PartitionWriter(7, 11, 3, stub_for, lambda why: None, "t",  # type: ignore[arg-type]
                            topic=kind.topic, marker_key=kind.marker_key)
        assert await w.write_marker() == 0
        await w.close()
        topic = broker.requests[0].topics[0]
        assert (topic.name, topic.partitions[0].partition, broker.requests[0].acks) == (TRANSACTION_STATE_TOPIC, 7, -1)
        data = topic.partitions[0].records
        (pos, header), = list(iter_batches(data))
        assert (header.producer_id, header.producer_epoch) == (11, 3)
        rec, = decode_records(header, records_section(data, header, pos))
        assert (rec.key, rec.value) == (TXN_MARKER_KEY, None)

    asyncio.run(scenario())
