"""Protobuf parts ↔ domain types, shared by the coordinator's API modules: topic/partition lists,
per-partition error lists, the client host and the message of an error code."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.types import TopicPartition


def to_tps(items: Iterable[Any]) -> set[TopicPartition]:
    return {TopicPartition(t.topic, p) for t in items for p in t.partitions}


def from_tps(tps: Iterable[TopicPartition]) -> list[cpb.TopicPartitions]:
    by: dict[str, list[int]] = {}
    for tp in tps:
        by.setdefault(tp.topic, []).append(tp.partition)
    return [cpb.TopicPartitions(topic=t, partitions=sorted(ps)) for t, ps in sorted(by.items())]


def topic_errors(errors: dict[TopicPartition, int]) -> list[cpb.TopicErrors]:
    by: dict[str, list[cpb.PartitionError]] = {}
    for tp, code in sorted(errors.items()):
        by.setdefault(tp.topic, []).append(cpb.PartitionError(partition=tp.partition, error_code=code))
    return [cpb.TopicErrors(name=t, partitions=ps) for t, ps in sorted(by.items())]


def peer_host(peer: str) -> str:
    """gRPC's ``ipv4:127.0.0.1:5000`` as Kafka shows a client host: ``/127.0.0.1``."""
    kind, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] if kind in ("ipv4", "ipv6") else peer
    return "/" + host.strip("[]") if host else ""


def error_message(code: int, message: str) -> str:
    """``message``, or the code's name when an error comes without one."""
    if message or code == ErrorCode.NONE:
        return message
    try:
        return ErrorCode(code).name
    except ValueError:
        return ""
