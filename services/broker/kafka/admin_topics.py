"""CreateTopics (19), DeleteTopics (20) and CreatePartitions (37) on the Kafka door.

Each topic of a request is checked here first, with Kafka's codes and messages (``plan_create_topic``
is the pure part: names, ``num_partitions`` / ``replication_factor`` -1 meaning the broker's
``num.partitions`` / ``default.replication.factor``, configs), so ``validate_only`` answers exactly
what the real request would; then it is forwarded to the active controller's REST API. The answer
waits, at most the request's ``timeout``, until this broker's metadata view shows the change (Kafka's
brokers waited for the change to reach their metadata too); the change is made either way.

Manual replica assignments are refused (``INVALID_REQUEST``): the controller's REST API places
replicas itself (round-robin, rack-aware). Internal topics (``__consumer_offsets``,
``__transaction_state``) are Tidelog's own: creating, deleting or growing one is refused.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from services.broker.kafka.admin_common import (
    ItemError,
    allowed,
    authorize,
    check_topic_name,
    duplicates,
    item_error,
    links,
    timeout_s,
)
from services.broker.kafka.admin_config_rules import config_string, created_topic_configs
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.pipeline import RequestContext
from shared.config import check_min_insync_replicas, validate_topic_configs
from shared.errors import ErrorCode, InvalidConfigError
from shared.kafka.messages import RequestFrame
from shared.security.access import ALTER, CLUSTER, CREATE, DELETE, TOPIC
from shared.topic_names import INTERNAL_TOPICS, find_collision
from shared.types import TopicPartition

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
CREATE_TOPICS_VERSIONS = (2, 7)
DELETE_TOPICS_VERSIONS = (1, 6)
CREATE_PARTITIONS_VERSIONS = (0, 3)
#: The controller's partition limit (services.controller.topics.MAX_PARTITIONS), checked here so that
#: validate_only refuses what the controller would.
MAX_PARTITIONS = 10_000


def register(apis: KafkaApis) -> None:
    apis.register(CREATE_TOPICS, CREATE_TOPICS_VERSIONS, handle_create_topics)
    apis.register(DELETE_TOPICS, DELETE_TOPICS_VERSIONS, handle_delete_topics)
    apis.register(CREATE_PARTITIONS, CREATE_PARTITIONS_VERSIONS, handle_create_partitions)


@dataclass(frozen=True)
class CreatePlan:
    """A topic to create, as checked: its partitions, replication factor and config overrides."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


def plan_create_topic(name: str | None, num_partitions: int, replication_factor: int, assignments: int,
                      configs: Iterable[tuple[str, str | None]], *, default_partitions: int, default_rf: int,
                      live_brokers: int, existing: Collection[str]) -> CreatePlan:
    """Check one CreateTopics entry as Kafka does; raise ``ItemError`` with Kafka's code and message."""
    name = check_topic_name(name)
    if name in INTERNAL_TOPICS:
        raise ItemError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"{name} is an internal topic managed by Tidelog")
    if name in existing:
        raise ItemError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    if clash := find_collision(name, list(existing)):
        raise ItemError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"Topic '{name}' collides with existing topic '{clash}' ('.' and '_' are equivalent)")
    if assignments:
        if num_partitions != -1 or replication_factor != -1:
            raise ItemError(ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and "
                                                       "replicasAssignments were set. Both cannot be used at the same time.")
        raise ItemError(ErrorCode.INVALID_REQUEST, "Manual replica assignments are not supported by Tidelog: "
                                                   "give num_partitions and replication_factor instead")
    partitions = default_partitions if num_partitions == -1 else num_partitions
    if partitions <= 0:
        raise ItemError(ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
    if partitions > MAX_PARTITIONS:
        raise ItemError(ErrorCode.INVALID_PARTITIONS, f"Number of partitions {partitions} is above Tidelog's "
                                                      f"limit of {MAX_PARTITIONS}.")
    rf = default_rf if replication_factor == -1 else replication_factor
    if rf <= 0:
        raise ItemError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        "Replication factor must be larger than 0, or -1 to use the default value.")
    if rf > live_brokers:
        raise ItemError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} "
                        f"cannot be reached because only {live_brokers} broker(s) are registered.")
    given = list(configs)
    if nulls := sorted({n for n, v in given if v is None}):
        raise ItemError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {','.join(nulls)}")
    try:
        parsed = validate_topic_configs({n: v for n, v in given})
        check_min_insync_replicas(parsed, rf)
    except InvalidConfigError as exc:
        raise ItemError(ErrorCode.INVALID_CONFIG, exc.args[0]) from None
    return CreatePlan(name, partitions, rf, {n: config_string(v) or "" for n, v in parsed.items()})


def _led(apis: KafkaApis, name: str, partitions: int) -> bool:
    """This broker's view has ``name`` with ``partitions`` partitions, each with a leader."""
    view = apis.broker.rm.view
    topic = view.topics.get(name)
    if topic is None or len(topic.assignment) < partitions:
        return False
    for p in topic.assignment:
        st = view.partitions.get(TopicPartition(name, p))
        if st is None or st.leader < 0:
            return False
    return True


# -- CreateTopics -------------------------------------------------------------------------------------


async def handle_create_topics(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    body = req.body
    validate_only = bool(body.validate_only)
    repeated = duplicates([t.name for t in body.topics])
    view = apis.broker.rm.view
    existing = set(view.topics)
    c = apis.broker.configs
    cluster_create = allowed(apis, ctx, CREATE, CLUSTER)

    async def one(t: Any) -> dict[str, Any]:
        try:
            if t.name in repeated:
                raise ItemError(ErrorCode.INVALID_REQUEST, f"Topic '{t.name}' is named more than once in the request")
            if not cluster_create:  # Kafka: CREATE on the cluster, or on the topic
                authorize(apis, ctx, CREATE, TOPIC, t.name or "")
            plan = plan_create_topic(t.name, int(t.num_partitions), int(t.replication_factor), len(t.assignments),
                                     ((x.name, x.value) for x in t.configs),
                                     default_partitions=int(c.get("num.partitions", 1)),
                                     default_rf=int(c.get("default.replication.factor", 1)),
                                     live_brokers=len(view.brokers), existing=existing)
            topic_id = None
            if not validate_only:
                result = await links(apis).create_topic(plan.name, plan.partitions, plan.replication_factor,
                                                        plan.configs)
                if not result.ok:
                    raise ItemError(result.error, result.message or result.error.name)
                topic_id = _uuid((result.body or {}).get("topic_id"))
            return {"name": plan.name, "topic_id": topic_id, "error_code": 0, "error_message": None,
                    "num_partitions": plan.partitions, "replication_factor": plan.replication_factor,
                    "configs": created_topic_configs(plan.configs)}
        except Exception as exc:
            err = item_error(exc, f"create topic {t.name!r}")
            return {"name": t.name, "topic_id": None, "error_code": int(err.code), "error_message": err.message,
                    "num_partitions": -1, "replication_factor": -1, "configs": []}

    results = list(await asyncio.gather(*(one(t) for t in body.topics)))
    created = [(r["name"], r["num_partitions"]) for r in results if r["error_code"] == 0 and not validate_only]
    if created and apis.broker.links is not None:
        await apis.broker.links.wait_for_view(lambda: all(_led(apis, n, p) for n, p in created),
                                              timeout_s(body.timeout))
    return {"topics": results}, 0


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


# -- DeleteTopics --------------------------------------------------------------------------------------


async def handle_delete_topics(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    body = req.body
    by_id = req.api.version >= 6
    asked: list[tuple[str | None, uuid.UUID | None]] = (
        [(t.name, t.topic_id if t.topic_id is not None and t.topic_id.int else None) for t in body.topics]
        if by_id else [(n, None) for n in body.topic_names])
    repeated = duplicates([n if i is None else i for n, i in asked])
    view = apis.broker.rm.view
    ids = {t.topic_id: name for name, t in view.topics.items()}

    async def one(name: str | None, topic_id: uuid.UUID | None) -> dict[str, Any]:
        try:
            if (name if topic_id is None else topic_id) in repeated:
                raise ItemError(ErrorCode.INVALID_REQUEST, f"Topic {name or topic_id} is named more than once")
            if name is not None and topic_id is not None:
                raise ItemError(ErrorCode.INVALID_REQUEST, "Give a topic name or a topic id, not both")
            if topic_id is not None:
                name = ids.get(topic_id.hex)
                if name is None:
                    raise ItemError(ErrorCode.UNKNOWN_TOPIC_ID, f"Topic id {topic_id} does not exist")
            if name is None:
                raise ItemError(ErrorCode.INVALID_REQUEST, "Give a topic name or a topic id")
            authorize(apis, ctx, DELETE, TOPIC, name)
            try:
                check_topic_name(name)
            except ItemError:
                raise ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist") from None
            if name in INTERNAL_TOPICS:
                raise ItemError(ErrorCode.POLICY_VIOLATION, f"{name} is an internal topic managed by Tidelog")
            result = await links(apis).delete_topic(name)
            if not result.ok:
                raise ItemError(result.error, result.message or result.error.name)
            known = view.topics.get(name)
            return {"name": name, "topic_id": _uuid(known.topic_id) if known else topic_id, "error_code": 0,
                    "error_message": None}
        except Exception as exc:
            err = item_error(exc, f"delete topic {name or topic_id!r}")
            return {"name": name, "topic_id": topic_id, "error_code": int(err.code), "error_message": err.message}

    results = list(await asyncio.gather(*(one(n, i) for n, i in asked)))
    deleted = [r["name"] for r in results if r["error_code"] == 0]
    if deleted and apis.broker.links is not None:
        await apis.broker.links.wait_for_view(lambda: not any(n in apis.broker.rm.view.topics for n in deleted),
                                              timeout_s(body.timeout))
    return {"responses": results}, 0


# -- CreatePartitions ----------------------------------------------------------------------------------


def check_partition_count(name: str, current: int, count: int, replication_factor: int, live_brokers: int) -> None:
    """A CreatePartitions entry as Kafka checks it (``INVALID_PARTITIONS``, ``INVALID_REPLICATION_FACTOR``)."""
    if count < current:
        raise ItemError(ErrorCode.INVALID_PARTITIONS,
                        f"Topic currently has {current} partitions, which is higher than the requested {count}.")
    if count == current:
        raise ItemError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
    if count > MAX_PARTITIONS:
        raise ItemError(ErrorCode.INVALID_PARTITIONS, f"Number of partitions {count} is above Tidelog's limit of "
                                                      f"{MAX_PARTITIONS}.")
    if replication_factor > live_brokers:
        raise ItemError(ErrorCode.INVALID_REPLICATION_FACTOR,
                        f"Unable to replicate the new partitions of {name} {replication_factor} time(s): only "
                        f"{live_brokers} broker(s) are registered.")


async def handle_create_partitions(apis: KafkaApis, req: RequestFrame, ctx: RequestContext,
                                   conn: Connection) -> Reply:
    body = req.body
    validate_only = bool(body.validate_only)
    repeated = duplicates([t.name for t in body.topics])
    view = apis.broker.rm.view

    async def one(t: Any) -> dict[str, Any]:
        try:
            if t.name in repeated:
                raise ItemError(ErrorCode.INVALID_REQUEST, f"Topic '{t.name}' is named more than once in the request")
            authorize(apis, ctx, ALTER, TOPIC, t.name or "")
            topic = view.topics.get(check_topic_name(t.name))
            if topic is None:
                raise ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{t.name}' does not exist.")
            if t.name in INTERNAL_TOPICS:
                raise ItemError(ErrorCode.POLICY_VIOLATION, f"{t.name} is an internal topic managed by Tidelog: its "
                                                            "partition count is fixed")
            if t.assignments is not None:
                raise ItemError(ErrorCode.INVALID_REQUEST, "Manual replica assignments are not supported by Tidelog: "
                                                           "leave assignments null")
            rf = len(topic.assignment[0]) if topic.assignment else 1
            check_partition_count(t.name, len(topic.assignment), int(t.count), rf, len(view.brokers))
            if not validate_only:
                result = await links(apis).add_partitions(t.name, int(t.count))
                if not result.ok:
                    raise ItemError(result.error, result.message or result.error.name)
            return {"name": t.name, "error_code": 0, "error_message": None}
        except Exception as exc:
            err = item_error(exc, f"create partitions of {t.name!r}")
            return {"name": t.name, "error_code": int(err.code), "error_message": err.message}

    results = list(await asyncio.gather(*(one(t) for t in body.topics)))
    grown = [(t.name, int(t.count)) for t, r in zip(body.topics, results) if r["error_code"] == 0]
    if grown and not validate_only and apis.broker.links is not None:
        await apis.broker.links.wait_for_view(lambda: all(_led(apis, n, c) for n, c in grown),
                                              timeout_s(body.timeout))
    return {"results": results}, 0
