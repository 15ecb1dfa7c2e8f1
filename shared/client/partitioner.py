"""Kafka's default partitioner: murmur2 of the key, sticky partitions for null keys."""

from __future__ import annotations

import random
import struct

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


_WORDS = [struct.Struct(f"<{i}I") for i in range(65)]


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), as a signed 32-bit int."""
    length = len(data)
    h = 0x9747B28C ^ length
    n4 = length >> 2
    if n4:
        words = (_WORDS[n4] if n4 <= 64 else struct.Struct(f"<{n4}I")).unpack_from(data)
        for k in words:
            k = (k * _M) & _MASK
            h = (((h * _M) & _MASK) ^ (((k ^ (k >> 24)) * _M) & _MASK))
    rest = length & 3
    if rest:
        tail = n4 << 2
        if rest == 3:
            h ^= data[tail + 2] << 16
        if rest >= 2:
            h ^= data[tail + 1] << 8
        h = ((h ^ data[tail]) * _M) & _MASK
    h = ((h ^ (h >> 13)) * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Null keys stick to one partition until its batch is sent (KIP-480), then move on."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._current: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is not None:
            return to_positive(murmur2(key)) % num_partitions
        p = self._current.get(topic)
        if p is None or p >= num_partitions:
            p = self._rng.randrange(num_partitions)
            self._current[topic] = p
        return p

    def on_new_batch(self, topic: str, previous: int, num_partitions: int) -> None:
        """Called when the sticky partition's batch filled up: pick another partition."""
        if self._current.get(topic) != previous or num_partitions <= 1:
            return
        choices = [p for p in range(num_partitions) if p != previous]
        self._current[topic] = self._rng.choice(choices)
