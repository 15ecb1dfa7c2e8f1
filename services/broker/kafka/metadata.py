"""Metadata (3), ListOffsets (2) and FindCoordinator (10) on the Kafka door (InitProducerId, 22, is in
``transactions``).

Metadata lists the brokers by their Kafka listeners, topics with their ids (v10+), and creates a
missing topic when the request allows it (v4+; always before) and ``auto.create.topics.enable`` is on
(Kafka's default), with ``num.partitions`` and ``default.replication.factor``: the new topic is
answered ``LEADER_NOT_AVAILABLE`` until its leaders are elected, as Kafka answers. The controller id
given to Kafka clients is the lowest live broker's: any broker forwards admin requests to the active
controller, so a client's "send this to the controller" reaches it.

FindCoordinator answers, for a group, the broker leading the group's ``__consumer_offsets`` partition,
and for a transactional id (key_type 1) the one leading its ``__transaction_state`` partition (any
broker forwards coordinator requests to the coordinator service owning that partition, so which broker
answers only spreads the load as Kafka's placement does). The first lookup of a transactional id asks
the controller to create ``__transaction_state``, as Kafka does.

ACLs (secure clusters), as Kafka's ``KafkaApis``: Metadata lists only the topics the principal may
DESCRIBE (one asked by name or id without it: ``TOPIC_AUTHORIZATION_FAILED``, its existence not disclosed)
and auto-creates a topic only with CREATE on the cluster or on the topic (else ``TOPIC_AUTHORIZATION_FAILED``);
the authorized operations asked for are the principal's. ListOffsets needs DESCRIBE on the topic;
FindCoordinator DESCRIBE on the group (``GROUP_AUTHORIZATION_FAILED``) or the transactional id
(``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``).
"""

from __future__ import annotations

import logging
from typing import Any

from services.broker.api import list_offsets as list_offsets_api
from services.broker.api import metadata as metadata_api
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.metadata_cache import ClusterView
from services.broker.pipeline import RequestContext
from shared.coordinator_lookup import COORDINATOR_TOPICS
from shared.errors import ErrorCode, TidelogError
from shared.kafka.messages import RequestFrame
from shared.offsets_topic import OFFSETS_TOPIC, partition_for
from shared.security.access import CLUSTER, CREATE, DESCRIBE, GROUP, TOPIC, TRANSACTIONAL_ID, Access
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from shared.topic_names import INTERNAL_TOPICS, validate_topic_name
from shared.types import TopicPartition

log = logging.getLogger(__name__)

METADATA, LIST_OFFSETS, FIND_COORDINATOR = 3, 2, 10
METADATA_VERSIONS = (1, 12)
LIST_OFFSETS_VERSIONS = (1, 8)
FIND_COORDINATOR_VERSIONS = (0, 4)

# AclOperation codes (READ 3 ... ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12): all of them without ACLs.
_TOPIC_OPS = (3, 4, 5, 6, 7, 8, 10, 11)
_CLUSTER_OPS = (5, 7, 8, 9, 10, 11, 12)
_TOPIC_OPERATIONS = sum(1 << op for op in _TOPIC_OPS)
_CLUSTER_OPERATIONS = sum(1 << op for op in _CLUSTER_OPS)
_NOT_REQUESTED = -(2**31)
EARLIEST, EARLIEST_LOCAL = -2, -4


def kafka_endpoint(broker: dict[str, Any]) -> tuple[str, int] | None:
    address = broker.get("kafka")
    if not address:
        return None
    host, _, port = str(address).rpartition(":")
    return host, int(port)


def kafka_brokers(view: ClusterView) -> dict[int, tuple[str, int, str | None]]:
    out = {}
    for bid, b in sorted(view.brokers.items()):
        ep = kafka_endpoint(b)
        if ep is not None:
            out[bid] = (ep[0], ep[1], b.get("rack") or None)
    return out


def authorized_operations(access: Access, ctx: RequestContext, rtype: ResourceType, name: str,
                          ops: tuple[int, ...]) -> int:
    """Kafka's ``authorizedOperations`` bit field: the operations of ``ops`` the principal may do."""
    return sum(1 << op for op in ops if access.allowed(ctx, AclOperation(op), rtype, name))


async def handle_metadata(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    body = req.body
    view = apis.broker.rm.view
    access = apis.pipeline.access
    allow_create = bool(getattr(body, "allow_auto_topic_creation", True))
    want_topic_ops = bool(getattr(body, "include_topic_authorized_operations", False))
    topic_ops = _TOPIC_OPERATIONS if want_topic_ops else _NOT_REQUESTED
    ids = {t.topic_id: name for name, t in view.topics.items()}
    unknown_ids = []
    by_id: dict[str, Any] = {}  # topic names asked by id -> the id
    names: list[str] | None = None
    if body.topics is not None:
        names = []
        for t in body.topics:
            name = t.name
            if name is None and getattr(t, "topic_id", None) is not None:
                name = ids.get(t.topic_id.hex)
                if name is None:
                    unknown_ids.append(t.topic_id)
                    continue
                by_id[name] = t.topic_id
            names.append(name)
    snap = metadata_api.describe(apis.broker, names, ctx)
    brokers = {b.id: b for b in snap.brokers if b.kafka}
    topics = [{"error_code": int(ErrorCode.UNKNOWN_TOPIC_ID), "name": None, "topic_id": i, "partitions": [],
               "topic_authorized_operations": topic_ops} for i in unknown_ids]
    for t in snap.topics:
        if access.enabled and want_topic_ops:
            topic_ops = authorized_operations(access, ctx, TOPIC, t.name, _TOPIC_OPS)
        if t.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            topics.append({"error_code": int(t.error), "name": None if t.name in by_id else t.name,
                           **({"topic_id": by_id[t.name]} if t.name in by_id else {}), "partitions": [],
                           "is_internal": False, "topic_authorized_operations": topic_ops})
            continue
        if t.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            code = await _missing_topic(apis, t.name, allow_create, ctx)
            topics.append({"error_code": int(code), "name": t.name, "partitions": [], "is_internal": False,
                           "topic_authorized_operations": topic_ops})
            continue
        topics.append({"error_code": int(t.error), "name": t.name, "topic_id": t.topic_id, "is_internal": t.internal,
                       "topic_authorized_operations": topic_ops, "partitions": [
                           {"error_code": int(p.error or (0 if p.leader in brokers else ErrorCode.LEADER_NOT_AVAILABLE)),
                            "partition_index": p.partition, "leader_id": p.leader, "leader_epoch": p.leader_epoch,
                            "replica_nodes": p.replicas, "isr_nodes": p.isr, "offline_replicas": p.offline}
                           for p in t.partitions]})
    return {
        "brokers": [{"node_id": b.id, "host": b.kafka.rpartition(":")[0], "port": int(b.kafka.rpartition(":")[2]),
                     "rack": b.rack} for b in brokers.values()],
        "cluster_id": snap.cluster_id or None,
        "controller_id": min(brokers) if brokers else -1,
        "topics": topics,
        "cluster_authorized_operations": _cluster_operations(access, ctx, body),
    }, 0


def _cluster_operations(access: Access, ctx: RequestContext, body: Any) -> int:
    if not getattr(body, "include_cluster_authorized_operations", False):
        return _NOT_REQUESTED
    if not access.enabled:
        return _CLUSTER_OPERATIONS
    return authorized_operations(access, ctx, CLUSTER, CLUSTER_NAME, _CLUSTER_OPS)


async def _missing_topic(apis: KafkaApis, name: str, allow_create: bool,
                         ctx: RequestContext | None = None) -> ErrorCode:
    """A topic that does not exist: auto-created when the request allows it (Kafka's answer meanwhile:
    LEADER_NOT_AVAILABLE), else UNKNOWN_TOPIC_OR_PARTITION; an invalid name INVALID_TOPIC_EXCEPTION.
    With ACLs, creating needs CREATE on the cluster or the topic (TOPIC_AUTHORIZATION_FAILED)."""
    try:
        validate_topic_name(name)
    except TidelogError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if allow_create and apis.broker.configs.get("auto.create.topics.enable", True) and \
            name not in INTERNAL_TOPICS and apis.broker.links is not None:
        access = apis.pipeline.access
        if access.enabled and ctx is not None and not access.allowed(ctx, CREATE, CLUSTER, CLUSTER_NAME) and \
                not access.check(ctx, CREATE, TOPIC, name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return ErrorCode(await apis.broker.links.auto_create_topic(name))
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def handle_list_offsets(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    # read_committed (isolation_level 1): latest is the last stable offset.
    # -4 (earliest local, v8+: KIP-405) is the log start offset: every segment is local here.
    queries = [list_offsets_api.OffsetQuery(TopicPartition(t.name, int(p.partition_index)),
                                            EARLIEST if int(p.timestamp) == EARLIEST_LOCAL else int(p.timestamp),
                                            int(getattr(p, "current_leader_epoch", -1)))
               for t in req.body.topics for p in t.partitions]
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for a in list_offsets_api.list_offsets(apis.broker, queries,
                                           isolation_level=int(getattr(req.body, "isolation_level", 0)), ctx=ctx):
        by_topic.setdefault(a.tp.topic, []).append({
            "partition_index": a.tp.partition, "error_code": int(a.error), "timestamp": a.timestamp,
            "offset": a.offset, "leader_epoch": a.leader_epoch})
    return {"topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}, 0


def coordinator_node(apis: KafkaApis, group_id: str, topic_name: str = OFFSETS_TOPIC) -> int:
    """The broker Kafka clients are sent to for ``group_id`` (a transactional id with ``topic_name``
    __transaction_state): the leader of its partition when it has a Kafka listener, else this broker
    (every broker forwards coordinator requests)."""
    view = apis.broker.rm.view
    topic = view.topics.get(topic_name)
    if topic is None:
        return apis.broker.broker_id
    st = view.partitions.get(TopicPartition(topic_name, partition_for(group_id, len(topic.assignment))))
    return st.leader if st is not None and st.leader in kafka_brokers(view) else apis.broker.broker_id


def _coordinator(apis: KafkaApis, key: str, key_type: int) -> dict[str, Any]:
    view = apis.broker.rm.view
    none = {"key": key, "node_id": -1, "host": "", "port": -1}
    name = COORDINATOR_TOPICS.get(key_type)
    if name is None:
        return {**none, "error_code": int(ErrorCode.INVALID_REQUEST),
                "error_message": f"unknown coordinator type {key_type}"}
    topic = view.topics.get(name)
    if topic is None:
        if name != OFFSETS_TOPIC and apis.broker.request_internal_topic is not None:
            apis.broker.request_internal_topic(name)  # Kafka creates __transaction_state on this first lookup
        return {**none, "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "error_message": f"{name} does not exist yet"}
    owners = apis.broker.coordinator_owners() if name == OFFSETS_TOPIC else apis.broker.txn_coordinator_owners()
    p = partition_for(key, len(topic.assignment))
    if owners.get(p) is None:
        return {**none, "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                "error_message": f"no coordinator owns {name} partition {p} yet"}
    brokers = kafka_brokers(view)
    node = coordinator_node(apis, key, name)
    if node not in brokers:
        return {**none, "error_code": int(ErrorCode.COORDINATOR_NOT_AVAILABLE), "error_message": "no broker listens"}
    host, port, _ = brokers[node]
    return {"key": key, "node_id": node, "host": host, "port": port, "error_code": 0, "error_message": None}


def _authorized_coordinator(apis: KafkaApis, ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    access = apis.pipeline.access
    if access.enabled and key_type in COORDINATOR_TOPICS:
        rtype = GROUP if COORDINATOR_TOPICS[key_type] == OFFSETS_TOPIC else TRANSACTIONAL_ID
        if not access.allowed(ctx, DESCRIBE, rtype, key):
            exc = access.denied(ctx, DESCRIBE, rtype, key)
            return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": int(exc.code),
                    "error_message": exc.code.name}
    return _coordinator(apis, key, key_type)


async def handle_find_coordinator(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    body = req.body
    key_type = int(getattr(body, "key_type", 0))
    if req.api.version >= 4:
        return {"coordinators": [_authorized_coordinator(apis, ctx, k, key_type) for k in body.coordinator_keys]}, 0
    return _authorized_coordinator(apis, ctx, body.key, key_type), 0
