"""Kafka's admin APIs on the brokers' Kafka listeners, against a real cluster (3 brokers, real etcd):
confluent-kafka's AdminClient (librdkafka) and kafka-python 3's KafkaAdminClient, unchanged, create,
describe, alter and delete topics and configs, grow partitions and describe the cluster; client quotas,
DescribeProducers and DescribeLogDirs go over the wire as kio-encoded requests (neither client has calls
for them); bad input gets Kafka's codes. One cluster serves the whole module."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from shared.errors import ErrorCode
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.kafka_util import KafkaWire


def unique(prefix: str = "adm") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("kafka-admin")), cleaners=0)
    yield c
    kill_cluster(c)


@pytest.fixture(scope="module")
def bootstrap(cluster: Cluster) -> str:
    return str(cluster.info["kafka_bootstrap"])


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def kafka_address(cluster: Cluster, broker: int) -> str:
    return str(cluster.proc("broker", broker).info["kafka"])


def rest_topic(cluster: Cluster, name: str) -> dict[str, Any]:
    r = httpx.get(f"{cluster.rest}/v1/topics/{name}", timeout=5)
    return r.json() if r.status_code == 200 else {}


def result_of(future: Any) -> Any:
    return future.result(timeout=60)


def error_of(future: Any) -> int:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=60)
    err: KafkaError = info.value.args[0]
    return int(err.code())


def eventually(fn: Callable[[], Any], what: str) -> Any:
    """``fn()`` once it stops raising: a broker's metadata view trails the controller by a moment."""
    def attempt() -> Any:
        try:
            return fn() or True
        except KafkaException as exc:
            raise AssertionError(str(exc)) from None
    return wait_for(attempt, 30, what=what)


def described(admin: AdminClient, topic: str) -> dict[str, Any]:
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return dict(result_of(future))


def call(wire: KafkaWire, api_key: int, version: int, **values: Any) -> Any:
    return wire.request(api_key, version, values)


@pytest.fixture
def raw(cluster: Cluster) -> Iterator[KafkaWire]:
    with KafkaWire(kafka_address(cluster, 1), timeout=60) as conn:
        yield conn


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------------


def test_create_describe_alter_and_delete_topics_with_confluent_kafka(cluster: Cluster, admin: AdminClient) -> None:
    name, defaults, checked = unique(), unique(), unique()
    futures = admin.create_topics([NewTopic(name, 3, 2, config={"retention.ms": "100000"}),
                                   NewTopic(defaults)],  # -1 / -1: num.partitions and default.replication.factor
                                  operation_timeout=30)
    for f in futures.values():
        assert result_of(f) is None
    assert len(rest_topic(cluster, name)["partitions"]) == 3 and rest_topic(cluster, name)["replication_factor"] == 2
    assert (len(rest_topic(cluster, defaults)["partitions"]), rest_topic(cluster, defaults)["replication_factor"]) == (1, 1)
    assert result_of(admin.create_topics([NewTopic(checked, 2, 1)], validate_only=True)[checked]) is None
    assert rest_topic(cluster, checked) == {}  # validate_only created nothing

    configs = eventually(lambda: described(admin, name), "the new topic's configs")
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == ("100000",
                                                                              ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == ("1073741824",
                                                                                 ConfigSource.DEFAULT_CONFIG.value)
    assert not configs["retention.ms"].is_read_only and not configs["retention.ms"].is_sensitive

    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("segment.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    assert result_of(admin.incremental_alter_configs([resource])[resource]) is None
    assert rest_topic(cluster, name)["config_overrides"] == {"cleanup.policy": "compact,delete", "segment.ms": 3600000}
    checked_validate = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    assert result_of(admin.incremental_alter_configs([checked_validate], validate_only=True)[checked_validate]) is None
    assert rest_topic(cluster, name)["config_overrides"]["cleanup.policy"] == "compact,delete"

    legacy = ConfigResource(ResourceType.TOPIC, name, set_config={"retention.ms": "5000"})
    with pytest.warns(DeprecationWarning):
        future = admin.alter_configs([legacy])[legacy]
    assert result_of(future) is None
    assert rest_topic(cluster, name)["config_overrides"] == {"retention.ms": 5000}  # AlterConfigs replaces them all
    eventually(lambda: described(admin, name)["retention.ms"].value == "5000" or None, "the altered config described")

    assert result_of(admin.create_partitions([NewPartitions(name, 5)], validate_only=True)[name]) is None
    assert len(rest_topic(cluster, name)["partitions"]) == 3
    assert result_of(admin.create_partitions([NewPartitions(name, 5)], operation_timeout=30)[name]) is None
    assert len(rest_topic(cluster, name)["partitions"]) == 5

    for f in admin.delete_topics([name, defaults], operation_timeout=30).values():
        assert result_of(f) is None
    assert rest_topic(cluster, name) == {} and rest_topic(cluster, defaults) == {}


def test_bad_requests_get_kafkas_error_codes(cluster: Cluster, admin: AdminClient, raw: KafkaWire) -> None:
    name = unique()
    assert result_of(admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=30)[name]) is None
    topics = [NewTopic("bad name!", 1, 1), NewTopic(name, 1, 1), NewTopic(unique(), 1, 9),
              NewTopic(unique(), 1, 1, config={"retention.ms": "soon"}),
              NewTopic(unique(), 1, 1, config={"no.such.config": "1"}),
              NewTopic(unique(), 1, 1, config={"min.insync.replicas": "2"})]  # above the replication factor
    futures = admin.create_topics(topics, operation_timeout=30)
    assert [error_of(futures[t.topic]) for t in topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.TOPIC_ALREADY_EXISTS,
                                    ErrorCode.INVALID_REPLICATION_FACTOR, ErrorCode.INVALID_CONFIG,
                                    ErrorCode.INVALID_CONFIG, ErrorCode.INVALID_CONFIG]

    r = call(raw, 19, 7, topics=[{"name": unique(), "num_partitions": 0, "replication_factor": 1, "assignments": [],
                                 "configs": []},
                                {"name": unique(), "num_partitions": -1, "replication_factor": -1,
                                 "assignments": [{"partition_index": 0, "broker_ids": [1]}], "configs": []}],
                 timeout=5000, validate_only=False)
    assert [int(t.error_code) for t in r.topics] == [ErrorCode.INVALID_PARTITIONS, ErrorCode.INVALID_REQUEST]
    assert "replica assignments" in r.topics[1].error_message

    assert error_of(admin.create_partitions([NewPartitions(name, 1)])[name]) == ErrorCode.INVALID_PARTITIONS
    missing = unique()
    assert error_of(admin.create_partitions([NewPartitions(missing, 4)])[missing]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert error_of(admin.delete_topics([missing])[missing]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert error_of(admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"]) == ErrorCode.POLICY_VIOLATION
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, missing)]).values()
    assert error_of(future) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def incremental(*entries: ConfigEntry) -> int:
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(entries))
        return error_of(admin.incremental_alter_configs([resource])[resource])

    assert incremental(ConfigEntry("segment.ms", "1", incremental_operation=AlterConfigOpType.APPEND)) == \
        ErrorCode.INVALID_CONFIG
    assert incremental(ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)) == \
        ErrorCode.INVALID_CONFIG
    assert incremental(ConfigEntry("no.such", "1", incremental_operation=AlterConfigOpType.SET)) == \
        ErrorCode.INVALID_CONFIG
    broker = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    assert error_of(admin.incremental_alter_configs([broker])[broker]) == ErrorCode.INVALID_CONFIG
    assert rest_topic(cluster, name)["config_overrides"] == {}  # nothing refused was applied


def test_describe_cluster_and_broker_configs_with_confluent_kafka(cluster: Cluster, admin: AdminClient) -> None:
    desc = result_of(admin.describe_cluster())
    view = cluster.cluster_view()
    assert desc.cluster_id == view["cluster_id"]
    assert sorted(n.id for n in desc.nodes) == [1, 2, 3] and desc.controller.id == 1
    assert {f"{n.host}:{n.port}" for n in desc.nodes} == {kafka_address(cluster, b) for b in (1, 2, 3)}
    [future] = admin.describe_configs([ConfigResource(ResourceType.BROKER, "2")]).values()
    configs = result_of(future)
    assert configs["broker.id"].value == "2" and configs["broker.id"].is_read_only
    assert configs["num.partitions"].value == "1" and configs["log.retention.ms"].value == "604800000"
    assert configs["advertised.listeners"].value == f"PLAINTEXT://{kafka_address(cluster, 2)}"


def test_elect_preferred_leaders_with_confluent_kafka(admin: AdminClient) -> None:
    from confluent_kafka import ElectionType

    name = unique()
    assert result_of(admin.create_topics([NewTopic(name, 2, 2)], operation_timeout=30)[name]) is None
    results = result_of(admin.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition(name, 0),
                                                                     CkTopicPartition(name, 7)]))
    codes = {tp.partition: err.code() for tp, err in results.items()}
    assert codes == {0: ErrorCode.ELECTION_NOT_NEEDED, 7: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


# -- kafka-python 3 -----------------------------------------------------------------------------------------------


def test_kafka_python_admin_client(cluster: Cluster, bootstrap: str) -> None:
    from kafka.admin import ConfigResource as KpConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        name = unique("kp")
        r = client.create_topics([KpNewTopic(name, 2, 1, topic_configs={"retention.ms": "60000"})], raise_errors=False)
        [topic] = r["topics"]
        assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (0, 2, 1)
        assert topic["configs"]["retention.ms"]["value"] == "60000"
        again = client.create_topics([KpNewTopic(name, 2, 1)], raise_errors=False)["topics"][0]
        assert again["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
        validated = client.create_topics([KpNewTopic(unique("kp"), 3, 1)], validate_only=True, raise_errors=False)
        assert validated["topics"][0]["error_code"] == 0

        def modified() -> dict[str, Any]:
            return client.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, name)])["topic"][name]

        assert wait_for(lambda: modified().get("retention.ms"), 30, what="the override described")["value"] == "60000"
        everything = client.describe_configs([KpConfigResource(ConfigResourceType.TOPIC, name)], include_synonyms=True,
                                             config_filter="all")["topic"][name]
        assert everything["retention.ms"]["synonyms"][1] == {"name": "log.retention.ms", "value": "604800000",
                                                             "source": "DEFAULT_CONFIG"}
        client.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "1234"})])
        assert rest_topic(cluster, name)["config_overrides"] == {"retention.ms": 1234}

        described = client.describe_cluster()
        assert sorted(b["broker_id"] for b in described["brokers"]) == [1, 2, 3]
        dirs = client.describe_log_dirs()
        assert {d["broker"] for d in dirs} == {1, 2, 3}
        hosted = [(t["name"], p["partition_index"]) for d in dirs for ld in d["log_dirs"] for t in ld["topics"]
                  if t["name"] == name for p in t["partitions"]]
        assert sorted(hosted) == [(name, 0), (name, 1)]

        missing = unique("kp")
        deleted = client.delete_topics([uuid.UUID(topic["topic_id"]), missing], raise_errors=False)  # by id and name
        assert [(r["name"], r["error_code"]) for r in deleted["topics"]] == [
            (name, 0), (missing, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert rest_topic(cluster, name) == {}
    finally:
        client.close()


# -- over the wire: client quotas, producers, log dirs, versions ---------------------------------------------------


def test_client_quotas_alter_and_describe(cluster: Cluster, raw: KafkaWire) -> None:
    user = unique("user")

    def entry(entity: list[tuple[str, str | None]], *ops: tuple[str, float, bool]) -> dict[str, Any]:
        return {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [{"key": k, "value": v, "remove": rm} for k, v, rm in ops]}

    r = call(raw, 49, 1, validate_only=False, entries=[
        entry([("user", user)], ("producer_byte_rate", 1024.0, False)),
        entry([("user", user), ("client-id", None)], ("consumer_byte_rate", 4096.0, False)),
        entry([("ip", "10.0.0.1")], ("connection_creation_rate", 5.0, False)),
        entry([("user", user)], ("bogus_rate", 5.0, False)),
        entry([("user", user)], ("producer_byte_rate", -3.0, False))])
    assert [int(e.error_code) for e in r.entries] == [0, 0, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_REQUEST,
                                                      ErrorCode.INVALID_REQUEST]
    stored = httpx.get(f"{cluster.rest}/v1/quotas", params={"user": user}, timeout=5).json()["entries"]
    assert {(tuple(sorted(e["entity"].items())), tuple(e["values"].items())) for e in stored} == {
        ((("user", user),), (("producer_byte_rate", 1024.0),)),
        ((("client-id", None), ("user", user)), (("consumer_byte_rate", 4096.0),))}

    def described(components: list[tuple[str, int, str | None]], strict: bool) -> set[tuple[Any, ...]]:
        d = call(raw, 48, 1, strict=strict, components=[{"entity_type": t, "match_type": m, "match": n}
                                                       for t, m, n in components])
        assert d.error_code == 0
        return {(tuple((e.entity_type, e.entity_name) for e in x.entity), tuple((v.key, v.value) for v in x.values))
                for x in d.entries}

    assert described([("user", 0, user)], True) == {((("user", user),), (("producer_byte_rate", 1024.0),))}
    assert described([("user", 0, user), ("client-id", 1, None)], False) == {
        ((("client-id", None), ("user", user)), (("consumer_byte_rate", 4096.0),))}
    bad = call(raw, 48, 0, strict=False, components=[{"entity_type": "user", "match_type": 0, "match": None}])
    assert (int(bad.error_code), bad.entries) == (ErrorCode.INVALID_REQUEST, None)

    checked = call(raw, 49, 0, validate_only=True, entries=[entry([("user", user)], ("producer_byte_rate", 1.0, True))])
    assert checked.entries[0].error_code == 0
    assert described([("user", 0, user)], True)  # validate_only removed nothing
    call(raw, 49, 1, validate_only=False, entries=[entry([("user", user)], ("producer_byte_rate", 0.0, True)),
                                                  entry([("user", user), ("client-id", None)],
                                                        ("consumer_byte_rate", 0.0, True))])
    assert described([("user", 0, user)], False) == set()


def test_describe_producers_and_log_dirs_on_the_leader(cluster: Cluster, admin: AdminClient, bootstrap: str) -> None:
    name = unique()
    assert result_of(admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=30)[name]) is None
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(5):
        producer.produce(name, value=b"v%d" % i, partition=0, timestamp=1_700_000_000_000 + i)
    assert producer.flush(30) == 0
    leader = rest_topic(cluster, name)["partitions"][0]["leader"]
    with KafkaWire(kafka_address(cluster, leader)) as conn:
        r = conn.request(61, 0, {"topics": [{"name": name, "partition_indexes": [0, 3]}]})
        ok, missing = r.topics[0].partitions
        [state] = ok.active_producers
        assert (state.producer_epoch, state.last_sequence, state.last_timestamp) == (0, 4, 1_700_000_000_004)
        assert int(missing.error_code) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        dirs = conn.request(35, 4, {"topics": [{"topic": name, "partitions": [0]}]})
        [d] = dirs.results
        assert d.error_code == 0 and d.topics[0].partitions[0].partition_size > 0 and d.total_bytes > 0
    other = next(b for b in (1, 2, 3) if b != leader)
    with KafkaWire(kafka_address(cluster, other)) as conn:
        r = conn.request(61, 0, {"topics": [{"name": name, "partition_indexes": [0]}]})
        assert int(r.topics[0].partitions[0].error_code) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_api_versions_claim_the_admin_apis(raw: KafkaWire) -> None:
    served = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in call(raw, 18, 3, client_software_name="t",
                                                                                          client_software_version="1").api_keys}
    assert {k: served.get(k) for k in (19, 20, 37, 32, 33, 44, 60, 48, 49, 43, 35, 61)} == {
        19: (2, 7), 20: (1, 6), 37: (0, 3), 32: (1, 4), 33: (0, 2), 44: (0, 1), 60: (0, 1), 48: (0, 1), 49: (0, 1),
        43: (0, 2), 35: (1, 4), 61: (0, 0)}
    assert served.get(21) == (0, 2)  # DeleteRecords


def _produced_rf3(admin: AdminClient, bootstrap: str, prefix: str) -> str:
    """A new topic of one partition on all three brokers, with 100 records written with acks=all."""
    topic = unique(prefix)
    result_of(admin.create_topics([NewTopic(topic, 1, 3)])[topic])
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(100):
        p.produce(topic, value=b"r%d" % i)
    assert p.flush(30) == 0
    return topic


def _delete_records(cluster: Cluster, broker: int, topic: str, offset: int, timeout_ms: int) -> tuple[int, int]:
    """``(error_code, low_watermark)`` of a DeleteRecords v2 of ``topic``-0 sent to ``broker``."""
    with KafkaWire(kafka_address(cluster, broker), timeout=timeout_ms / 1000 + 30) as conn:
        r = conn.request(21, 2, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}],
                                 "timeout": timeout_ms})
    p = r.topics[0].partitions[0]
    return int(p.error_code), int(p.low_watermark)


def test_delete_records_answers_once_every_replica_moved(cluster: Cluster, bootstrap: str, admin: AdminClient) -> None:
    """Kafka's DelayedDeleteRecords: the leader answers only once the low watermark (the smallest log start
    offset over it and its live replicas) reached the offset, so at the answer the followers' logs start
    there already; the low watermark answered is that smallest one."""
    topic = _produced_rf3(admin, bootstrap, "delwait")
    leader = int(rest_topic(cluster, topic)["partitions"][0]["leader"])
    followers = [b for b in (1, 2, 3) if b != leader]
    assert _delete_records(cluster, leader, topic, 60, 30_000) == (0, 60)
    assert [_log_start(cluster, b, topic) for b in followers] == [60, 60]  # moved before the answer
    assert _delete_records(cluster, leader, topic, 40, 30_000) == (0, 60)  # reached already: at once
    assert _delete_records(cluster, leader, topic, -1, 30_000) == (0, 100)  # -1: the high watermark
    assert [_log_start(cluster, b, topic) for b in followers] == [100, 100]


def test_delete_records_times_out_while_a_live_follower_is_paused(cluster: Cluster, bootstrap: str,
                                                                   admin: AdminClient) -> None:
    """A follower paused with SIGSTOP is still registered (alive) until its session times out: it holds the
    low watermark (Kafka counts every replica on a live broker, in the ISR or not: the unit tests show a
    live replica out of the ISR), and DeleteRecords answers REQUEST_TIMED_OUT with the low watermark seen
    right after the leader's own delete (0: the followers had not fetched since). Once the
    paused broker's registration expired it no longer counts (Kafka: only live brokers' replicas) and
    DeleteRecords completes without it; resumed, it takes the new log start offset."""
    import os
    import signal

    topic = _produced_rf3(admin, bootstrap, "delpause")
    leader = int(rest_topic(cluster, topic)["partitions"][0]["leader"])
    paused = next(b for b in (1, 2, 3) if b != leader)
    pid = cluster.proc("broker", paused).pid
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        assert _delete_records(cluster, leader, topic, 60, 1000) == (ErrorCode.REQUEST_TIMED_OUT, 0)
        assert time.monotonic() - started >= 0.9  # waited for the timeout
        assert paused in [b["id"] for b in cluster.cluster_view()["brokers"]]  # alive all along
        assert _log_start(cluster, leader, topic) == 60 and _log_start(cluster, paused, topic) == 0
        wait_for(lambda: paused not in [b["id"] for b in cluster.cluster_view()["brokers"]], 30,
                 what=f"broker {paused}'s registration expired")
        assert _delete_records(cluster, leader, topic, 60, 30_000) == (0, 60)  # without the paused replica
        assert _log_start(cluster, paused, topic) == 0
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: _log_start(cluster, paused, topic) == 60, 60, what="the resumed follower's log start at 60")
    wait_for(lambda: len(cluster.cluster_view()["brokers"]) == 3, 60, what="all brokers registered again")
    wait_for(lambda: sorted(rest_topic(cluster, topic)["partitions"][0]["isr"]) == [1, 2, 3], 60, what="full ISR")


def test_delete_records_moves_every_replica_and_survives_the_leader_killed(cluster: Cluster, bootstrap: str,
                                                                          admin: AdminClient) -> None:
    """DeleteRecords through confluent-kafka: the log start offset moves on the leader and, through the
    fetch responses, on the followers; after the leader is killed (SIGKILL) the new leader starts there
    too. Past the high watermark is OFFSET_OUT_OF_RANGE. (Last in the module: it kills a broker.)"""
    from confluent_kafka import Consumer

    topic = unique("delrec")
    result_of(admin.create_topics([NewTopic(topic, 1, 3)])[topic])
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(100):
        p.produce(topic, value=b"r%d" % i)
        if i % 10 == 9:
            assert p.flush(30) == 0
    assert error_of(admin.delete_records([CkTopicPartition(topic, 0, 1000)])[CkTopicPartition(topic, 0, 1000)]) \
        == ErrorCode.OFFSET_OUT_OF_RANGE
    futures = admin.delete_records([CkTopicPartition(topic, 0, 60)])
    deleted = result_of(next(iter(futures.values())))
    assert deleted.low_watermark == 60
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g")})
    try:
        assert c.get_watermark_offsets(CkTopicPartition(topic, 0), timeout=10) == (60, 100)
        leader = int(rest_topic(cluster, topic)["partitions"][0]["leader"])
        others = [b for b in (1, 2, 3) if b != leader]
        wait_for(lambda: all(_log_start(cluster, b, topic) == 60 for b in others), 30,
                 what="the followers' log start offset at 60")
        cluster.proc("broker", leader).popen.kill()
        wait_for(lambda: int(rest_topic(cluster, topic)["partitions"][0]["leader"]) in others, 60,
                 what="a new leader")

        def earliest() -> Any:
            try:
                c.list_topics(topic, timeout=5)  # librdkafka asks the leader it knows: refresh after the kill
                marks = c.get_watermark_offsets(CkTopicPartition(topic, 0), timeout=5)
            except KafkaException as exc:
                raise AssertionError(str(exc)) from None
            assert marks == (60, 100), marks
            return True

        wait_for(earliest, 60, what="the new leader's watermarks (60, 100)")
    finally:
        c.close()
        cluster.restart("broker", leader)


def _log_start(cluster: Cluster, broker: int, topic: str) -> int:
    import os

    path = os.path.join(cluster.lc.data_dir, f"broker-{broker}", f"{topic}-0", "log-start-offset")
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except FileNotFoundError:
        return 0
