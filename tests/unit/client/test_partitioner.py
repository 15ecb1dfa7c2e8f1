"""Kafka's default partitioner: murmur2 vectors from Kafka's own tests, kafka-python cross-check, sticky null keys."""

from __future__ import annotations

import os
import random
import struct

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from shared.client.partitioner import StickyPartitioner, murmur2, partition_for_key

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    bytes([ord("a"), ord("b"), ord("c")]): 479470107,
}


def reference_murmur2(data: bytes) -> int:
    """A straight transcription of Kafka's Java Utils.murmur2, independent of the library the client uses."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    n4 = len(data) // 4
    for (k,) in struct.iter_unpack("<I", data[: n4 * 4]):
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[n4 * 4 :]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


@pytest.mark.parametrize("key,expected", KAFKA_VECTORS.items())
def test_murmur2_matches_kafka_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected
    assert reference_murmur2(key) == expected


def test_murmur2_matches_independent_implementations() -> None:
    rng = random.Random(7)
    for n in range(3000):
        key = bytes(rng.getrandbits(8) for _ in range(n % 67))
        assert murmur2(key) == reference_murmur2(key)
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF


def test_key_lands_where_kafka_puts_it() -> None:
    # Kafka: Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions
    for key, h in KAFKA_VECTORS.items():
        for n in (1, 3, 12, 100):
            assert partition_for_key(key, n) == (h & 0x7FFFFFFF) % n
    sp = StickyPartitioner()
    for key in KAFKA_VECTORS:
        assert sp.partition("t", key, 12) == partition_for_key(key, 12)


def test_null_keys_stick_until_the_batch_fills() -> None:
    sp = StickyPartitioner(random.Random(1))
    first = sp.partition("t", None, 6)
    assert all(sp.partition("t", None, 6) == first for _ in range(100))
    sp.on_new_batch("t", first, 6)
    second = sp.partition("t", None, 6)
    assert second != first
    assert sp.partition("t", os.urandom(8), 6) in range(6)
