"""The pure translations of the Kafka admin APIs (services/broker/kafka/admin_*): CreateTopics and
CreatePartitions checks with Kafka's codes, config descriptions and alterations (AlterConfigs,
IncrementalAlterConfigs), Kafka's client-quota filter, ElectLeaders results, and the controller's REST
answers as Kafka codes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from services.broker.kafka.admin_cluster import preferred_result, unclean_result
from services.broker.kafka.admin_common import ItemError
from services.broker.kafka.admin_config_rules import (
    APPEND,
    DEFAULT_CONFIG,
    DELETE,
    DYNAMIC_TOPIC_CONFIG,
    LIST,
    SET,
    STATIC_BROKER_CONFIG,
    SUBTRACT,
    BrokerConfig,
    broker_config_entries,
    checked_changes,
    created_topic_configs,
    incremental_overrides,
    replaced_overrides,
    topic_config_entries,
)
from services.broker.kafka.admin_quotas import ANY, DEFAULT, EXACT, QuotaFilter, rest_alteration
from services.broker.kafka.admin_topics import MAX_PARTITIONS, CreatePlan, check_partition_count, plan_create_topic
from services.broker.kafka.cluster_links import RestResult, rest_error
from services.broker.metadata_cache import ClusterView
from shared.config import TOPIC_CONFIGS
from shared.errors import ErrorCode
from shared.metadata.types import PartitionState, TopicRecord
from shared.types import TopicPartition


def code_of(fn: Callable[..., Any], *args: Any, **kw: Any) -> ErrorCode:
    with pytest.raises(ItemError) as info:
        fn(*args, **kw)
    return info.value.code


# -- CreateTopics / CreatePartitions ------------------------------------------------------------------------

DEFAULTS: dict[str, Any] = {"default_partitions": 3, "default_rf": 2, "live_brokers": 3, "existing": {"taken", "a.b"}}


def plan(name: str | None = "t", partitions: int = -1, rf: int = -1, assignments: int = 0,
         configs: list[tuple[str, str | None]] | None = None, **kw: Any) -> CreatePlan:
    return plan_create_topic(name, partitions, rf, assignments, configs or [], **{**DEFAULTS, **kw})


def test_minus_one_takes_the_brokers_num_partitions_and_default_replication_factor() -> None:
    p = plan(configs=[("retention.ms", "1000"), ("cleanup.policy", "delete, compact")])
    assert (p.name, p.partitions, p.replication_factor) == ("t", 3, 2)
    assert p.configs == {"retention.ms": "1000", "cleanup.policy": "compact,delete"}
    assert (plan(partitions=5, rf=1).partitions, plan(partitions=5, rf=1).replication_factor) == (5, 1)


@pytest.mark.parametrize("kw, code", [
    ({"name": "bad name!"}, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ({"name": ""}, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ({"name": "x" * 250}, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ({"name": None}, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ({"name": "__consumer_offsets"}, ErrorCode.INVALID_TOPIC_EXCEPTION),
    ({"name": "a_b"}, ErrorCode.INVALID_TOPIC_EXCEPTION),  # collides with a.b
    ({"name": "taken"}, ErrorCode.TOPIC_ALREADY_EXISTS),
    ({"partitions": 0}, ErrorCode.INVALID_PARTITIONS),
    ({"partitions": -2}, ErrorCode.INVALID_PARTITIONS),
    ({"partitions": MAX_PARTITIONS + 1}, ErrorCode.INVALID_PARTITIONS),
    ({"rf": 0}, ErrorCode.INVALID_REPLICATION_FACTOR),
    ({"rf": -5}, ErrorCode.INVALID_REPLICATION_FACTOR),
    ({"rf": 4}, ErrorCode.INVALID_REPLICATION_FACTOR),
    ({"default_rf": 4}, ErrorCode.INVALID_REPLICATION_FACTOR),
    ({"assignments": 2}, ErrorCode.INVALID_REQUEST),
    ({"assignments": 2, "partitions": 2}, ErrorCode.INVALID_REQUEST),
    ({"configs": [("no.such.config", "1")]}, ErrorCode.INVALID_CONFIG),
    ({"configs": [("retention.ms", "soon")]}, ErrorCode.INVALID_CONFIG),
    ({"configs": [("retention.ms", None)]}, ErrorCode.INVALID_CONFIG),
    ({"configs": [("min.insync.replicas", "3")]}, ErrorCode.INVALID_CONFIG),  # above the replication factor 2
])
def test_create_topic_refusals_carry_kafkas_codes(kw: dict[str, object], code: ErrorCode) -> None:
    assert code_of(plan, **kw) == code


def test_create_partitions_counts() -> None:
    check_partition_count("t", 3, 5, 2, 3)
    assert code_of(check_partition_count, "t", 3, 2, 2, 3) == ErrorCode.INVALID_PARTITIONS
    assert code_of(check_partition_count, "t", 3, 3, 2, 3) == ErrorCode.INVALID_PARTITIONS
    assert code_of(check_partition_count, "t", 3, MAX_PARTITIONS + 1, 1, 3) == ErrorCode.INVALID_PARTITIONS
    assert code_of(check_partition_count, "t", 3, 4, 3, 2) == ErrorCode.INVALID_REPLICATION_FACTOR


# -- DescribeConfigs -----------------------------------------------------------------------------------------


def test_topic_configs_list_every_config_with_its_source_type_and_synonyms() -> None:
    entries = {e["name"]: e for e in topic_config_entries({"retention.ms": 1000, "cleanup.policy": "delete,compact"},
                                                          synonyms=True, documentation=True)}
    assert set(entries) == set(TOPIC_CONFIGS)
    r = entries["retention.ms"]
    assert (r["value"], r["config_source"], r["read_only"], r["is_sensitive"]) == ("1000", DYNAMIC_TOPIC_CONFIG, False,
                                                                                  False)
    assert r["synonyms"] == [{"name": "retention.ms", "value": "1000", "source": DYNAMIC_TOPIC_CONFIG},
                             {"name": "log.retention.ms", "value": "604800000", "source": DEFAULT_CONFIG}]
    assert entries["cleanup.policy"]["value"] == "compact,delete" and entries["cleanup.policy"]["config_type"] == LIST
    s = entries["segment.bytes"]
    assert (s["value"], s["config_source"]) == ("1073741824", DEFAULT_CONFIG)
    assert s["synonyms"] == [{"name": "log.segment.bytes", "value": "1073741824", "source": DEFAULT_CONFIG}]
    assert entries["unclean.leader.election.enable"]["value"] == "false"
    assert entries["retention.ms"]["documentation"]


def test_describe_only_the_keys_asked_without_synonyms_unless_asked() -> None:
    entries = topic_config_entries({}, ["retention.ms", "no.such"])
    assert [(e["name"], e["synonyms"], e["documentation"]) for e in entries] == [("retention.ms", [], None)]
    assert len(created_topic_configs({"retention.ms": "5"})) == len(TOPIC_CONFIGS)


def test_broker_configs_are_read_only_and_static_when_not_kafkas_default() -> None:
    configs = [BrokerConfig("num.partitions", 4, 1, 3, "doc"), BrokerConfig("auto.create.topics.enable", True, True, 1,
                                                                            "doc"),
               BrokerConfig("broker.rack", None, None, 2, "doc")]
    entries = {e["name"]: e for e in broker_config_entries(configs, synonyms=True)}
    assert entries["num.partitions"]["config_source"] == STATIC_BROKER_CONFIG
    assert entries["num.partitions"]["synonyms"] == [{"name": "num.partitions", "value": "4",
                                                      "source": STATIC_BROKER_CONFIG}]
    assert (entries["auto.create.topics.enable"]["value"], entries["auto.create.topics.enable"]["config_source"]) == (
        "true", DEFAULT_CONFIG)
    assert entries["broker.rack"]["value"] is None
    assert all(e["read_only"] for e in entries.values())


# -- AlterConfigs / IncrementalAlterConfigs -------------------------------------------------------------------


def test_legacy_alter_replaces_every_override() -> None:
    new = replaced_overrides([("retention.ms", "5000")])
    assert checked_changes({"segment.ms": 100, "retention.ms": 1}, new, 1) == {"segment.ms": None, "retention.ms": "5000"}
    assert checked_changes({"retention.ms": 5000}, new, 1) == {}  # the same value: nothing to change
    assert code_of(replaced_overrides, [("retention.ms", "1"), ("retention.ms", "2")]) == ErrorCode.INVALID_REQUEST
    assert code_of(replaced_overrides, [("retention.ms", None)]) == ErrorCode.INVALID_REQUEST


def test_incremental_set_delete_append_subtract() -> None:
    current = {"retention.ms": 1000, "segment.ms": 60000}
    new = incremental_overrides(current, [("retention.ms", DELETE, None), ("segment.bytes", SET, "1048576"),
                                          ("cleanup.policy", APPEND, "compact")])
    assert new == {"segment.ms": 60000, "segment.bytes": "1048576", "cleanup.policy": "delete,compact"}
    assert checked_changes(current, new, 1) == {"retention.ms": None, "segment.bytes": "1048576",
                                                "cleanup.policy": "compact,delete"}
    after = incremental_overrides({"cleanup.policy": "compact,delete"}, [("cleanup.policy", SUBTRACT, "delete")])
    assert after == {"cleanup.policy": "compact"}
    assert incremental_overrides({}, [("cleanup.policy", APPEND, "delete")]) == {"cleanup.policy": "delete"}
    assert incremental_overrides({}, [("retention.ms", DELETE, None)]) == {}  # deleting what is not set is fine


@pytest.mark.parametrize("ops, code", [
    ([("segment.ms", APPEND, "1")], ErrorCode.INVALID_CONFIG),  # not a list config
    ([("segment.ms", SUBTRACT, "1")], ErrorCode.INVALID_CONFIG),
    ([("no.such", SET, "1")], ErrorCode.INVALID_CONFIG),
    ([("no.such", DELETE, None)], ErrorCode.INVALID_CONFIG),
    ([("retention.ms", SET, None)], ErrorCode.INVALID_REQUEST),
    ([("retention.ms", 7, "1")], ErrorCode.INVALID_REQUEST),
    ([("retention.ms", SET, "1"), ("retention.ms", DELETE, None)], ErrorCode.INVALID_REQUEST),
])
def test_incremental_refusals(ops: list[tuple[str, int, str | None]], code: ErrorCode) -> None:
    assert code_of(incremental_overrides, {}, ops) == code


def test_new_overrides_are_checked_as_the_controller_does() -> None:
    assert code_of(checked_changes, {}, {"retention.ms": "x"}, 1) == ErrorCode.INVALID_CONFIG
    assert code_of(checked_changes, {}, {"cleanup.policy": ""}, 1) == ErrorCode.INVALID_CONFIG  # subtracted to nothing
    assert code_of(checked_changes, {}, {"min.insync.replicas": "2"}, 1) == ErrorCode.INVALID_CONFIG
    assert checked_changes({}, {"min.insync.replicas": "2"}, 3) == {"min.insync.replicas": "2"}


# -- client quotas ------------------------------------------------------------------------------------------------

ALICE = {"user": "alice"}
ALICE_APP = {"user": "alice", "client-id": "app"}
DEFAULT_USER = {"user": None}
APP = {"client-id": "app"}


def matching(components: list[tuple[str, int, str | None]], strict: bool) -> list[dict[str, str | None]]:
    flt = QuotaFilter.parse(components, strict)
    return [e for e in (ALICE, ALICE_APP, DEFAULT_USER, APP) if flt.matches(e)]


def test_kafkas_quota_filter() -> None:
    assert matching([], False) == [ALICE, ALICE_APP, DEFAULT_USER, APP]
    assert matching([], True) == []
    assert matching([("user", EXACT, "alice")], False) == [ALICE, ALICE_APP]
    assert matching([("user", EXACT, "alice")], True) == [ALICE]
    assert matching([("user", ANY, None)], True) == [ALICE, DEFAULT_USER]  # any name, the default included
    assert matching([("user", DEFAULT, None)], False) == [DEFAULT_USER]
    assert matching([("user", ANY, None), ("client-id", EXACT, "app")], True) == [ALICE_APP]
    assert matching([("ip", ANY, None)], False) == []  # Tidelog holds no ip quotas


@pytest.mark.parametrize("components", [
    [("user", EXACT, None)], [("user", DEFAULT, "x")], [("user", ANY, "x")], [("user", 5, None)],
    [("group", ANY, None)], [("user", ANY, None), ("user", EXACT, "a")],
])
def test_bad_quota_filters_are_invalid_requests(components: list[tuple[str, int, str | None]]) -> None:
    assert code_of(QuotaFilter.parse, components, False) == ErrorCode.INVALID_REQUEST


def test_quota_alterations_become_rest_entries_or_invalid_requests() -> None:
    entry = rest_alteration([("user", "alice"), ("client-id", None)],
                            [("producer_byte_rate", 1024.0, False), ("request_percentage", 0.0, True)])
    assert entry == {"entity": {"user": "alice", "client-id": None},
                     "ops": [{"key": "producer_byte_rate", "value": 1024.0}, {"key": "request_percentage", "remove": True}]}
    assert rest_alteration([("user", "bob")], []) is None
    for entity, ops in [([("ip", "1.2.3.4")], [("connection_creation_rate", 1.0, False)]),
                        ([], [("producer_byte_rate", 1.0, False)]),
                        ([("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0, False)]),
                        ([("user", "a")], [("bogus", 1.0, False)]),
                        ([("user", "a")], [("producer_byte_rate", -1.0, False)]),
                        ([("user", "a")], [("producer_byte_rate", float("nan"), False)]),
                        ([("user", "a")], [("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)])]:
        assert code_of(rest_alteration, entity, ops) == ErrorCode.INVALID_REQUEST, (entity, ops)


# -- ElectLeaders -----------------------------------------------------------------------------------------------


def test_election_results() -> None:
    view = ClusterView(brokers={1: {}, 2: {}}, topics={"t": TopicRecord("t", "id", {0: [1, 2], 1: [2, 1], 2: [1, 2]})},
                       partitions={TopicPartition("t", 0): PartitionState(1, 3, [1, 2]),
                                   TopicPartition("t", 1): PartitionState(1, 3, [1]),
                                   TopicPartition("t", 2): PartitionState(-1, 3, [])})
    t0, t1, t2 = (TopicPartition("t", p) for p in range(3))
    assert preferred_result(view, t1, True)[0] == ErrorCode.NONE
    assert preferred_result(view, t0, False)[0] == ErrorCode.ELECTION_NOT_NEEDED
    assert preferred_result(view, t1, False)[0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert unclean_result(view, t0)[0] == ErrorCode.ELECTION_NOT_NEEDED
    assert unclean_result(view, t2)[0] == ErrorCode.INVALID_REQUEST


def test_rest_answers_become_kafka_codes() -> None:
    assert rest_error(201, {"topic_id": "x"}).ok
    assert rest_error(400, {"error": "INVALID_CONFIG", "message": "bad"}) == RestResult(ErrorCode.INVALID_CONFIG, "bad")
    assert rest_error(404, {"error": "NOT_FOUND", "message": "no route"}).error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert rest_error(400, {"error": "INVALID_REQUEST", "details": []}).error == ErrorCode.INVALID_REQUEST
    assert rest_error(503, None).error == ErrorCode.NOT_CONTROLLER  # retriable: clients ask again
    assert rest_error(500, "oops").error == ErrorCode.UNKNOWN_SERVER_ERROR
