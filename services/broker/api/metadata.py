"""Metadata, for both doors: the live brokers and, per topic asked (every topic when None), its id and
its partitions' leader, leader epoch, replicas, ISR and offline replicas, from this broker's view of
the cluster. A partition whose leader is not a live broker is LEADER_NOT_AVAILABLE; an unknown topic
UNKNOWN_TOPIC_OR_PARTITION. Each door adds what is its own (gRPC: the controller's addresses; Kafka:
listeners, topic auto-creation, authorized operations).

ACLs, as Kafka's ``handleTopicMetadataRequest``: asked for every topic, only those the principal may
DESCRIBE are listed; a topic asked by name without DESCRIBE is answered ``TOPIC_AUTHORIZATION_FAILED``
whether it exists or not (its existence is not disclosed). Addresses: a caller without a client certificate
(a SCRAM user on the client port) is given each service's ``client_address`` (the TLS client port) when its
registration has one; certificate holders (services, the admin) the internal ``address`` they came in by."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.broker.api import BrokerApi
from shared.errors import ErrorCode
from shared.request_context import RequestContext
from shared.security.access import DESCRIBE, TOPIC
from shared.security.transport import client_facing
from shared.topic_names import INTERNAL_TOPICS
from shared.types import TopicPartition


@dataclass(slots=True)
class BrokerNode:
    id: int
    address: str  # gRPC host:port
    kafka: str  # Kafka listener host:port ("" without one)
    rack: str | None


@dataclass(slots=True)
class PartitionInfo:
    partition: int
    error: ErrorCode
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]


@dataclass(slots=True)
class TopicInfo:
    name: str
    error: ErrorCode
    topic_id: str = ""
    internal: bool = False
    partitions: list[PartitionInfo] = field(default_factory=list)


@dataclass(slots=True)
class ClusterSnapshot:
    cluster_id: str
    brokers: list[BrokerNode]
    controller: dict[str, Any] | None
    controller_epoch: int
    topics: list[TopicInfo]


def address_for(ctx: RequestContext | None, reg: dict[str, Any]) -> str:
    """The address of a registration to give this caller (see the module's doc)."""
    if ctx is None or ctx.cert_subject or not reg.get("client_address"):
        return str(reg.get("address", ""))
    return client_facing(reg)


def describe(b: BrokerApi, names: list[str] | None, ctx: RequestContext | None = None) -> ClusterSnapshot:
    view = b.rm.view
    brokers = [BrokerNode(bid, address_for(ctx, d), str(d.get("kafka") or ""), d.get("rack") or None)
               for bid, d in sorted(view.brokers.items())]
    controller = view.controller
    if controller and ctx is not None and controller.get("client_address") and not ctx.cert_subject:
        controller = {**controller, "address": client_facing(controller)}
    access = b.pipeline.access
    asking = ctx if access.enabled else None  # who ACLs are decided for (None: no ACLs)
    topics = []
    for name in sorted(view.topics) if names is None else names:
        if asking is not None and not access.allowed(asking, DESCRIBE, TOPIC, name):
            if names is not None:
                access.denied(asking, DESCRIBE, TOPIC, name)
                topics.append(TopicInfo(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        topic = view.topics.get(name)
        if topic is None:
            topics.append(TopicInfo(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        info = TopicInfo(name, ErrorCode.NONE, topic.topic_id, name in INTERNAL_TOPICS)
        for p, replicas in sorted(topic.assignment.items()):
            st = view.partitions.get(TopicPartition(name, p))
            leader = st.leader if st else -1
            err = ErrorCode.NONE if leader >= 0 and leader in view.brokers else ErrorCode.LEADER_NOT_AVAILABLE
            info.partitions.append(PartitionInfo(
                p, err, leader, st.leader_epoch if st else -1, list(replicas), list(st.isr) if st else [],
                [r for r in replicas if r not in view.brokers]))
        topics.append(info)
    return ClusterSnapshot(view.cluster_id, brokers, controller, view.controller_epoch, topics)
