"""The Kafka admin handlers (services/broker/kafka/admin_*) in process: every version they claim answers a
request with a response that encodes and decodes as that version's class; the REST answers of a small
in-memory controller come back as Kafka's codes; the broker-local APIs (DescribeLogDirs,
DescribeProducers, DeleteRecords) read real partition logs; and the log start offset moves as Kafka's
DeleteRecords moves it, on the leader and on a follower."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kio.serial import entity_reader

from services.broker.api import BrokerApi
from services.broker.kafka import admin_records
from services.broker.kafka.apis import Connection, KafkaApis
from services.broker.kafka.cluster_links import ClusterLinks
from services.broker.kafka.registry import kafka_apis
from services.broker.log import PartitionLog
from services.broker.metadata_cache import ClusterView
from services.broker.partition import Partition
from services.broker.pipeline import RequestContext, RequestPipeline
from services.broker.replica_manager import ReplicaManager
from shared.config import LogConfig
from shared.errors import ErrorCode, OffsetOutOfRangeError, TidelogError
from shared.kafka.messages import RequestFrame, api, build, encode_response
from shared.metadata.types import PartitionState, TopicRecord
from shared.records.builder import encode_batch
from shared.types import TopicPartition

TS = 1_700_000_000_000
T_ID = uuid.UUID(int=7)


class FakeController(ClusterLinks):
    """ClusterLinks over an in-memory controller: REST calls change the broker's view at once."""

    def __init__(self, rm: ReplicaManager) -> None:
        super().__init__(rm, None, {})
        self.calls: list[tuple[str, str, Any]] = []
        self.quotas: dict[tuple[tuple[str, Any], ...], dict[str, float]] = {}

    async def rest(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        body = kw.get("json")
        self.calls.append((method, path, body))
        view = self.rm.view
        parts = path.strip("/").split("/")
        if parts[:2] == ["v1", "topics"] and method == "POST" and len(parts) == 2:
            if body["name"] in view.topics:
                return 409, {"error": "TOPIC_ALREADY_EXISTS", "message": "exists"}
            add_topic(view, body["name"], body["partitions"], body["configs"])
            return 201, {"topic_id": view.topics[body["name"]].topic_id}
        if parts[:2] == ["v1", "topics"]:
            topic = view.topics.get(parts[2])
            if topic is None:
                return 404, {"error": "UNKNOWN_TOPIC_OR_PARTITION", "message": f"topic {parts[2]!r} does not exist"}
            if method == "DELETE":
                del view.topics[topic.name]
                return 204, None
            if method == "PATCH":
                configs = {k: v for k, v in {**topic.configs, **body["configs"]}.items() if v is not None}
                view.topics[topic.name] = TopicRecord(topic.name, topic.topic_id, topic.assignment, configs)
                return 200, {"config_overrides": configs}
            add_topic(view, topic.name, body["partitions"], topic.configs, topic.topic_id)
            return 200, {}
        if path == "/v1/quotas":
            return 200, {"entries": [{"entity": dict(e), "values": v} for e, v in self.quotas.items()]}
        if path == "/v1/quotas/alter":
            for e in body["entries"]:
                values = self.quotas.setdefault(tuple(sorted(e["entity"].items())), {})
                for op in e["ops"]:
                    values.pop(op["key"], None) if op.get("remove") else values.update({op["key"]: op["value"]})
            return 200, {}
        if path == "/v1/elect-leaders":
            return 503, {"error": "NOT_CONTROLLER", "message": "no active controller right now"}
        return 404, {"error": "NOT_FOUND", "message": path}


def add_topic(view: ClusterView, name: str, partitions: int, configs: dict[str, Any], topic_id: str = "") -> None:
    view.topics[name] = TopicRecord(name, topic_id or uuid.uuid4().hex, {p: [1] for p in range(partitions)}, configs)
    for p in range(partitions):
        view.partitions.setdefault(TopicPartition(name, p), PartitionState(1, 0, [1]))


@pytest.fixture
def world(tmp_path: Any) -> tuple[KafkaApis, FakeController]:
    rm = ReplicaManager(1, str(tmp_path))
    rm.view = ClusterView(brokers={1: {"id": 1, "kafka": "127.0.0.1:9092"}}, cluster_id="c1")
    add_topic(rm.view, "t", 2, {"retention.ms": 1000}, T_ID.hex)
    broker = BrokerApi(rm, RequestPipeline(), 1, configs={"num.partitions": 2, "default.replication.factor": 1})
    links = broker.links = FakeController(rm)
    apis = kafka_apis(broker)
    admin_records.register(apis)
    return apis, links


def call(apis: KafkaApis, key: int, version: int, values: dict[str, Any]) -> Any:
    """Handle a request of that version; the response must encode and decode as that version's class."""
    a = api(key, version)
    frame = RequestFrame(a, 1, "test", build(a.request, values))
    ctx = RequestContext(a.name, "test", "ANONYMOUS", "peer", 0.0)
    response, _ = asyncio.run(apis.handle(frame, ctx, Connection("peer")))
    data = b"".join(encode_response(a, 1, response))[4:]
    _, n = entity_reader(a.response.__header_schema__)(data, 0)
    decoded, m = entity_reader(a.response)(data, n)
    assert n + m == len(data)
    return decoded


REQUESTS: dict[int, dict[str, Any]] = {
    19: {"topics": [{"name": "new", "num_partitions": -1, "replication_factor": -1, "assignments": [],
                     "configs": [{"name": "cleanup.policy", "value": "compact"}]}], "timeout": 1000},
    20: {"topic_names": ["t"], "topics": [{"name": "t", "topic_id": None}], "timeout": 1000},
    37: {"topics": [{"name": "t", "count": 3, "assignments": None}], "timeout": 1000, "validate_only": False},
    32: {"resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None},
                       {"resource_type": 4, "resource_name": "1", "configuration_keys": ["num.partitions"]}],
         "include_synonyms": True, "include_documentation": True},
    33: {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [{"name": "segment.ms", "value": "5"}]}],
         "validate_only": False},
    44: {"resources": [{"resource_type": 2, "resource_name": "t",
                        "configs": [{"name": "cleanup.policy", "config_operation": 2, "value": "compact"}]}],
         "validate_only": False},
    60: {"include_cluster_authorized_operations": True, "endpoint_type": 1},
    48: {"components": [{"entity_type": "user", "match_type": 2, "match": None}], "strict": False},
    49: {"entries": [{"entity": [{"entity_type": "user", "entity_name": "alice"}],
                      "ops": [{"key": "producer_byte_rate", "value": 100.0, "remove": False}]}], "validate_only": False},
    43: {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}], "timeout": 1000},
    35: {"topics": None},
    61: {"topics": [{"name": "t", "partition_indexes": [0]}]},
    21: {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": -1}]}], "timeout": 1000},
}


def test_every_claimed_version_answers_and_encodes(world: tuple[KafkaApis, FakeController], tmp_path: Any) -> None:
    apis, _ = world
    for key, values in REQUESTS.items():
        lo, hi = apis.versions[key]
        for version in range(lo, hi + 1):
            call(apis, key, version, values)  # the response of each version round-trips
            apis.broker.rm.view.topics.pop("new", None)
            add_topic(apis.broker.rm.view, "t", 2, {"retention.ms": 1000}, T_ID.hex)


def test_create_topics_defaults_validate_only_and_errors(world: tuple[KafkaApis, FakeController]) -> None:
    apis, links = world
    r = call(apis, 19, 7, {"topics": [{"name": "new", "num_partitions": -1, "replication_factor": -1,
                                       "assignments": [], "configs": []}], "validate_only": True, "timeout": 0})
    assert (r.topics[0].error_code, r.topics[0].num_partitions, r.topics[0].replication_factor) == (0, 2, 1)
    assert links.calls == []  # validate_only asks nobody
    r = call(apis, 19, 7, {"topics": [
        {"name": "new", "num_partitions": 3, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "retention.ms", "value": "10"}]},
        {"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
        {"name": "x", "num_partitions": 1, "replication_factor": 2, "assignments": [], "configs": []},
        {"name": "y", "num_partitions": -1, "replication_factor": -1,
         "assignments": [{"partition_index": 0, "broker_ids": [1]}], "configs": []},
        {"name": "z", "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "retention.ms", "value": "never"}]},
        {"name": "d", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
        {"name": "d", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
    ], "validate_only": False, "timeout": 1000})
    codes = [(t.name, int(t.error_code)) for t in r.topics]
    assert codes == [("new", 0), ("t", ErrorCode.TOPIC_ALREADY_EXISTS), ("x", ErrorCode.INVALID_REPLICATION_FACTOR),
                     ("y", ErrorCode.INVALID_REQUEST), ("z", ErrorCode.INVALID_CONFIG),
                     ("d", ErrorCode.INVALID_REQUEST), ("d", ErrorCode.INVALID_REQUEST)]
    assert r.topics[0].topic_id.hex == apis.broker.rm.view.topics["new"].topic_id
    assert [c.value for c in r.topics[0].configs if c.name == "retention.ms"] == ["10"]
    assert [c[:2] for c in links.calls] == [("POST", "/v1/topics")]


def test_delete_topics_by_name_and_id(world: tuple[KafkaApis, FakeController]) -> None:
    apis, _ = world
    r = call(apis, 20, 6, {"topics": [{"name": None, "topic_id": T_ID}, {"name": None, "topic_id": uuid.uuid4()},
                                      {"name": "nope", "topic_id": None}, {"name": "__consumer_offsets"}],
                           "timeout": 1000})
    assert [(x.name, int(x.error_code)) for x in r.responses] == [
        ("t", 0), (None, ErrorCode.UNKNOWN_TOPIC_ID), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("__consumer_offsets", ErrorCode.POLICY_VIOLATION)]
    assert "t" not in apis.broker.rm.view.topics


def test_configs_partitions_and_quotas_go_through_rest(world: tuple[KafkaApis, FakeController]) -> None:
    apis, links = world
    r = call(apis, 44, 1, REQUESTS[44])
    assert r.responses[0].error_code == 0
    assert apis.broker.rm.view.topics["t"].configs == {"retention.ms": 1000, "cleanup.policy": "compact,delete"}
    r = call(apis, 32, 4, REQUESTS[32])
    topic = {c.name: c for c in r.results[0].configs}
    assert topic["cleanup.policy"].value == "compact,delete" and topic["cleanup.policy"].config_source == 1
    assert [(c.name, c.value, c.read_only) for c in r.results[1].configs] == [("num.partitions", "2", True)]
    r = call(apis, 33, 2, {"resources": [{"resource_type": 4, "resource_name": "1",
                                          "configs": [{"name": "num.partitions", "value": "3"}]},
                                         {"resource_type": 4, "resource_name": "2", "configs": []},
                                         {"resource_type": 8, "resource_name": "1", "configs": []}],
                           "validate_only": False})
    assert [int(x.error_code) for x in r.responses] == [ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_REQUEST,
                                                        ErrorCode.INVALID_REQUEST]
    r = call(apis, 37, 3, {"topics": [{"name": "t", "count": 1, "assignments": None},
                                      {"name": "u", "count": 3, "assignments": None}], "timeout": 0,
                           "validate_only": False})
    assert [int(x.error_code) for x in r.results] == [ErrorCode.INVALID_PARTITIONS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    call(apis, 49, 1, REQUESTS[49])
    r = call(apis, 48, 1, {"components": [{"entity_type": "user", "match_type": 0, "match": "alice"}], "strict": True})
    assert [(e.entity[0].entity_name, e.values[0].key, e.values[0].value) for e in r.entries] == [
        ("alice", "producer_byte_rate", 100.0)]
    r = call(apis, 43, 2, REQUESTS[43])  # the fake controller is away: the retriable NOT_CONTROLLER per partition
    assert int(r.replica_election_results[0].partition_result[0].error_code) == ErrorCode.NOT_CONTROLLER


def test_describe_cluster_endpoint_types(world: tuple[KafkaApis, FakeController]) -> None:
    apis, _ = world
    r = call(apis, 60, 1, REQUESTS[60])
    assert (r.cluster_id, r.controller_id, [(b.broker_id, b.host, b.port) for b in r.brokers]) == (
        "c1", 1, [(1, "127.0.0.1", 9092)])
    assert int(call(apis, 60, 1, {**REQUESTS[60], "endpoint_type": 2}).error_code) == ErrorCode.MISMATCHED_ENDPOINT_TYPE
    assert int(call(apis, 60, 1, {**REQUESTS[60], "endpoint_type": 9}).error_code) == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


# -- broker-local APIs on real partition logs ----------------------------------------------------------------------


def hosted(apis: KafkaApis, tmp_path: Any, leader: int = 1, policy: str = "delete") -> Partition:
    tp = TopicPartition("t", 0)
    config = LogConfig(segment_bytes=250, cleanup_policy=policy)
    part = Partition(tp, PartitionLog(str(tmp_path / "t-0"), config, lambda: TS), 1, lambda: TS)
    part.update_state(leader, 0, [1], [1], 0, 1)
    apis.broker.rm.partitions[tp] = part
    return part


def records(n: int, pid: int = -1, seq: int = -1, ts: int = TS) -> bytes:
    return encode_batch([(ts + i, b"k%d" % i, b"v" * 40, None) for i in range(n)], producer_id=pid, producer_epoch=0,
                        base_sequence=seq)


def test_log_dirs_and_producers(world: tuple[KafkaApis, FakeController], tmp_path: Any) -> None:
    apis, _ = world
    part = hosted(apis, tmp_path)
    part.append_as_leader(records(2, pid=42, seq=0), 1)
    part.append_as_leader(records(3, pid=42, seq=2, ts=TS + 500), 1)
    r = call(apis, 35, 4, REQUESTS[35])
    [d] = r.results
    assert (d.log_dir, d.topics[0].name, d.topics[0].partitions[0].partition_size) == (
        str(tmp_path), "t", part.log.size)
    assert d.total_bytes > 0 and d.usable_bytes >= 0
    assert call(apis, 35, 1, {"topics": [{"topic": "other", "partitions": [0]}]}).results[0].topics == ()
    [p] = call(apis, 61, 0, REQUESTS[61]).topics[0].partitions
    [state] = p.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.last_timestamp) == (42, 0, 4, TS + 502)
    assert (state.coordinator_epoch, state.current_txn_start_offset) == (-1, -1)
    part.update_state(2, 1, [2], [1, 2], 1, 1)  # a follower now
    assert int(call(apis, 61, 0, REQUESTS[61]).topics[0].partitions[0].error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_delete_records_moves_the_log_start_up_to_the_high_watermark(world: tuple[KafkaApis, FakeController],
                                                                     tmp_path: Any) -> None:
    apis, _ = world
    part = hosted(apis, tmp_path)
    for _ in range(6):
        part.append_as_leader(records(2), 1)  # one batch per 250-byte segment
    assert part.high_watermark == 12 and len(part.log.segments) > 3
    segments = len(part.log.segments)

    def delete(offset: int, partition: int = 0) -> tuple[int, int]:
        r = call(apis, 21, 2, {"topics": [{"name": "t", "partitions": [{"partition_index": partition,
                                                                         "offset": offset}]}], "timeout": 1000})
        p = r.topics[0].partitions[0]
        return int(p.error_code), int(p.low_watermark)

    assert delete(5) == (0, 5)
    assert part.log.log_start_offset == 5 and len(part.log.segments) < segments
    with pytest.raises(OffsetOutOfRangeError):
        part.read(4, 1000, for_consumer=True)
    assert delete(3) == (0, 5)  # never backwards
    assert delete(13) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert delete(-7) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)
    assert delete(-1) == (0, 12)  # -1: the high watermark
    assert delete(0, partition=1)[0] == ErrorCode.NOT_LEADER_OR_FOLLOWER  # hosted elsewhere
    reopened = PartitionLog(str(tmp_path / "t-0"), part.log.config, lambda: TS)
    assert reopened.log_start_offset == 12  # checkpointed


def test_delete_records_refused_on_compacted_topics(world: tuple[KafkaApis, FakeController], tmp_path: Any) -> None:
    apis, _ = world
    part = hosted(apis, tmp_path, policy="compact")
    part.append_as_leader(records(2), 1)
    with pytest.raises(TidelogError) as info:
        part.delete_records(1)
    assert info.value.code == ErrorCode.POLICY_VIOLATION


def test_a_follower_takes_the_leaders_log_start_up_to_its_high_watermark(tmp_path: Any) -> None:
    follower = Partition(TopicPartition("t", 0), PartitionLog(str(tmp_path / "f"), LogConfig(segment_bytes=250),
                                                              lambda: TS), 2, lambda: TS)
    follower.update_state(1, 0, [1, 2], [1, 2], 0, 1)
    leader = PartitionLog(str(tmp_path / "l"), LogConfig(segment_bytes=250), lambda: TS)
    for _ in range(4):
        leader.append_as_leader(records(2), 0)
    while follower.log_end_offset < leader.log_end_offset:  # a read stops at its segment's end
        follower.append_as_follower(leader.read(follower.log_end_offset, 10_000).records)
    follower.follower_update_hw(6)
    follower.follower_update_log_start(7)  # beyond our high watermark: only up to it
    assert follower.log.log_start_offset == 6
    follower.follower_update_log_start(2)  # never backwards
    assert follower.log.log_start_offset == 6
