"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44) on the Kafka door.

DescribeConfigs answers from this broker's metadata view, as Kafka's brokers answer from their metadata
cache: TOPIC resources list every topic config with its value and source; BROKER resources (this
broker's id; "" is the cluster-wide dynamic defaults, of which Tidelog has none) list the configs the
broker has, all static. Alterations of TOPIC resources are validated here as the controller will
(so ``validate_only`` answers what the real change would) and forwarded to the controller's REST API;
Tidelog's broker configs are set at start, so altering one is refused (``INVALID_CONFIG``). Other
resource types (BROKER_LOGGER, GROUP, CLIENT_METRICS) are ``INVALID_REQUEST``.

ACLs, as Kafka: DESCRIBE_CONFIGS (describe) or ALTER_CONFIGS (alter) on the topic
(``TOPIC_AUTHORIZATION_FAILED``), on the cluster for a BROKER resource (``CLUSTER_AUTHORIZATION_FAILED``),
per resource.
"""

from __future__ import annotations

from typing import Any

from services.broker.kafka import admin_config_rules as rules
from services.broker.kafka.admin_common import (
    ItemError,
    authorize,
    check_topic_name,
    duplicates,
    item_error,
    links,
)
from services.broker.kafka.admin_config_rules import BrokerConfig
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.metadata.types import TopicRecord
from shared.security.acl import AclOperation, ResourceType

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
DESCRIBE_CONFIGS_VERSIONS = (1, 4)
ALTER_CONFIGS_VERSIONS = (0, 2)
INCREMENTAL_ALTER_CONFIGS_VERSIONS = (0, 1)
TOPIC, BROKER = 2, 4  # ConfigResource types
#: How long an alteration waits for this broker's view to show it (a describe through it then sees it).
ALTER_VIEW_WAIT_S = 5.0


def register(apis: KafkaApis) -> None:
    apis.register(DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSIONS, handle_describe_configs)
    apis.register(ALTER_CONFIGS, ALTER_CONFIGS_VERSIONS, handle_alter_configs)
    apis.register(INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS_VERSIONS, handle_incremental_alter_configs)


def broker_configs(apis: KafkaApis) -> list[BrokerConfig]:
    """The configs this broker has, with Kafka's names and defaults."""
    b = apis.broker
    rm = b.rm
    me = rm.view.brokers.get(b.broker_id, {})
    kafka = me.get("kafka")
    c = b.configs
    return [
        BrokerConfig("broker.id", b.broker_id, -1, rules.INT, "this broker's id"),
        BrokerConfig("broker.rack", me.get("rack") or None, None, rules.STRING, "rack of the broker"),
        BrokerConfig("log.dirs", rm.data_dir, None, rules.STRING, "where the broker keeps its partition logs"),
        BrokerConfig("advertised.listeners", f"PLAINTEXT://{kafka}" if kafka else None, None, rules.STRING,
                     "the Kafka listener told to clients"),
        BrokerConfig("auto.create.topics.enable", c.get("auto.create.topics.enable", True), True, rules.BOOLEAN,
                     "Metadata requests create missing topics"),
        BrokerConfig("num.partitions", c.get("num.partitions", 1), 1, rules.INT,
                     "partitions of auto-created topics and of CreateTopics with num_partitions -1"),
        BrokerConfig("default.replication.factor", c.get("default.replication.factor", 1), 1, rules.INT,
                     "replication factor of auto-created topics and of CreateTopics with replication_factor -1"),
        BrokerConfig("replica.lag.time.max.ms", rm.replica_lag_time_max_ms, 30_000, rules.LONG,
                     "a follower not caught up for this long leaves the ISR"),
        BrokerConfig("replica.fetch.wait.max.ms", rm.replica_fetch_wait_max_ms, 500, rules.INT,
                     "longest wait of a follower's fetch"),
        *rules.topic_default_broker_configs(),
    ]


def _broker_resource(apis: KafkaApis, name: str) -> bool:
    """True for this broker's id, False for "" (the cluster-wide defaults); INVALID_REQUEST otherwise."""
    if name == "":
        return False
    if name.strip().lstrip("-").isdigit() and int(name) == apis.broker.broker_id:
        return True
    raise ItemError(ErrorCode.INVALID_REQUEST,
                    f"Unexpected broker id, expected {apis.broker.broker_id} or empty string, but received {name}")


def _topic(apis: KafkaApis, name: str) -> TopicRecord:
    topic = apis.broker.rm.view.topics.get(check_topic_name(name))
    if topic is None:
        raise ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist")
    return topic


def _unsupported(rtype: int) -> ItemError:
    return ItemError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {rtype}: Tidelog has TOPIC (2) and "
                                                "BROKER (4) configs")


# -- DescribeConfigs -------------------------------------------------------------------------------


async def handle_describe_configs(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                  conn: Connection) -> Reply:
    body = req.body
    synonyms = bool(body.include_synonyms)
    documentation = bool(getattr(body, "include_documentation", False))
    results = []
    for r in body.resources:
        rtype, name = int(r.resource_type), r.resource_name
        keys = list(r.configuration_keys) if r.configuration_keys else None  # null or empty: every config
        try:
            _authorize(apis, ctx, AclOperation.DESCRIBE_CONFIGS, rtype, name)
            if rtype == TOPIC:
                configs = rules.topic_config_entries(_topic(apis, name).configs, keys, synonyms=synonyms,
                                                     documentation=documentation)
            elif rtype == BROKER:
                configs = (rules.broker_config_entries(broker_configs(apis), keys, synonyms=synonyms,
                                                       documentation=documentation)
                           if _broker_resource(apis, name) else [])
            else:
                raise _unsupported(rtype)
            results.append({"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": name,
                            "configs": configs})
        except Exception as exc:
            err = item_error(exc, f"describe configs of {name!r}")
            results.append({"error_code": int(err.code), "error_message": err.message, "resource_type": rtype,
                            "resource_name": name, "configs": []})
    return {"results": results}, 0


# -- AlterConfigs and IncrementalAlterConfigs ---------------------------------------------------------------


async def handle_alter_configs(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    def new_overrides(topic: TopicRecord, r: Any) -> dict[str, Any]:
        return rules.replaced_overrides((c.name, c.value) for c in r.configs)

    return await _alter(apis, ctx, req.body, new_overrides)


async def handle_incremental_alter_configs(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                           conn: Connection) -> Reply:
    def new_overrides(topic: TopicRecord, r: Any) -> dict[str, Any]:
        return rules.incremental_overrides(topic.configs, ((c.name, int(c.config_operation), c.value)
                                                           for c in r.configs))

    return await _alter(apis, ctx, req.body, new_overrides)


def _authorize(apis: KafkaApis, ctx: RequestContext, op: AclOperation, rtype: int, name: str) -> None:
    """ACLs for one config resource: the topic's, or the cluster's for a broker resource."""
    if rtype == TOPIC:
        authorize(apis, ctx, op, ResourceType.TOPIC, name or "")
    elif rtype == BROKER:
        authorize(apis, ctx, op, ResourceType.CLUSTER)


async def _alter(apis: KafkaApis, ctx: RequestContext, body: Any, new_overrides: Any) -> Reply:
    validate_only = bool(body.validate_only)
    repeated = duplicates([(int(r.resource_type), r.resource_name) for r in body.resources])
    responses = []
    for r in body.resources:
        rtype, name = int(r.resource_type), r.resource_name
        try:
            if (rtype, name) in repeated:
                raise ItemError(ErrorCode.INVALID_REQUEST, f"Resource {name!r} of type {rtype} is named more than "
                                                           "once in the request")
            _authorize(apis, ctx, AclOperation.ALTER_CONFIGS, rtype, name)
            if rtype == TOPIC:
                await _alter_topic(apis, _topic(apis, name), r, new_overrides, validate_only)
            elif rtype == BROKER:
                _broker_resource(apis, name)
                if r.configs:
                    raise ItemError(ErrorCode.INVALID_CONFIG, "Cannot update these configs dynamically: "
                                    f"{sorted({c.name for c in r.configs})} (Tidelog's broker configs are set at start)")
            else:
                raise _unsupported(rtype)
            responses.append({"error_code": 0, "error_message": None, "resource_type": rtype, "resource_name": name})
        except Exception as exc:
            err = item_error(exc, f"alter configs of {name!r}")
            responses.append({"error_code": int(err.code), "error_message": err.message, "resource_type": rtype,
                              "resource_name": name})
    return {"responses": responses}, 0


async def _alter_topic(apis: KafkaApis, topic: TopicRecord, r: Any, new_overrides: Any, validate_only: bool) -> None:
    rf = len(topic.assignment[0]) if topic.assignment else 1
    changes = rules.checked_changes(topic.configs, new_overrides(topic, r), rf)
    if validate_only or not changes:
        return
    link = links(apis)
    result = await link.alter_topic_configs(topic.name, changes)
    if not result.ok:
        raise ItemError(result.error, result.message or result.error.name)
    overrides = result.body.get("config_overrides") if isinstance(result.body, dict) else None

    def shown() -> bool:
        t = apis.broker.rm.view.topics.get(topic.name)
        return t is None or t.configs == overrides

    await link.wait_for_view(shown, ALTER_VIEW_WAIT_S)
