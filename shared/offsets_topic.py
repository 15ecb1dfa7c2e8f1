"""The ``__consumer_offsets`` topic, and which of its partitions holds a group: Kafka's ``abs(groupId.hashCode()) % n``.

Java's ``String.hashCode`` is ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units in
32-bit two's-complement arithmetic, and Kafka's ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0
(plain ``Math.abs`` would leave it negative). Pure.
"""

from __future__ import annotations

import functools

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()`` as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that ``Integer.MIN_VALUE`` gives 0. (Not the
    producer partitioner's ``toPositive``, ``n & 0x7fffffff``, which differs for negative n.)"""
    return 0 if n == -(1 << 31) else abs(n)


@functools.lru_cache(maxsize=65_536)  # asked on every request for a group
def partition_for(group_id: str, partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition of ``group_id``, exactly as Kafka computes it."""
    return kafka_abs(java_string_hash(group_id)) % partitions


def offsets_replication_factor(brokers: int, configured: int = 3) -> int:
    """offsets.topic.replication.factor (3), or the broker count if smaller."""
    return max(1, min(configured, brokers))


#: Topic configs of __consumer_offsets, as Kafka sets them.
OFFSETS_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": 104857600}


def locate(group_id: str, partitions: int, owners: dict[int, dict[str, object]]) -> tuple[int, dict[str, object] | None]:
    """The group's partition and the ownership record (``{"owner", "address"}``) of its coordinator,
    None while no instance owns it. ``owners`` maps partition -> the value of its ownership key."""
    p = partition_for(group_id, partitions)
    return p, owners.get(p)
