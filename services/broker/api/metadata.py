"""Metadata, for both doors: the live brokers and, per topic asked (every topic when None), its id and
its partitions' leader, leader epoch, replicas, ISR and offline replicas, from this broker's view of
the cluster. A partition whose leader is not a live broker is LEADER_NOT_AVAILABLE; an unknown topic
UNKNOWN_TOPIC_OR_PARTITION. Each door adds what is its own (gRPC: the controller's addresses; Kafka:
listeners, topic auto-creation, authorized operations)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.broker.api import BrokerApi
from shared.errors import ErrorCode
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


def describe(b: BrokerApi, names: list[str] | None) -> ClusterSnapshot:
    view = b.rm.view
    brokers = [BrokerNode(bid, str(d.get("address", "")), str(d.get("kafka") or ""), d.get("rack") or None)
               for bid, d in sorted(view.brokers.items())]
    topics = []
    for name in sorted(view.topics) if names is None else names:
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
    return ClusterSnapshot(view.cluster_id, brokers, view.controller, view.controller_epoch, topics)
