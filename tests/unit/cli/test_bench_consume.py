"""``bench consume`` counts the key and value bytes of every record it polls, null keys and values as 0."""

from __future__ import annotations

from shared.cli.bench import consumed_bytes
from shared.client import ConsumerRecords, TopicPartition
from shared.client.consumer import record_class


def test_consumed_bytes_adds_keys_and_values_of_every_partition_and_skips_nulls() -> None:
    a, b = record_class("t", 0, 0), record_class("t", 1, 0)
    batch = ConsumerRecords({
        TopicPartition("t", 0): [a(0, 1, b"k1", b"vvv", ()), a(1, 1, None, b"vv", ()), a(2, 1, b"key", None, ())],
        TopicPartition("t", 1): [b(7, 1, None, None, ()), b(8, 1, b"", b"x" * 1024, ())],
    })
    assert consumed_bytes(batch) == (2 + 3) + 2 + 3 + 0 + 1024
    assert consumed_bytes(ConsumerRecords({})) == 0
