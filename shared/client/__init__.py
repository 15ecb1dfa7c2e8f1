"""Tidelog's Python client: ``Producer``, ``Consumer``, ``Admin`` (synchronous, thread-based).

Usable from scripts and from Spark workers; talks gRPC to brokers and REST to controllers.
"""

from shared.client.admin import Admin
from shared.client.consumer import Consumer, ConsumerRecord, ConsumerRecords
from shared.client.futures import FutureRecordMetadata, RecordMetadata
from shared.client.partitioner import murmur2, partition_for_key
from shared.client.producer import Producer
from shared.types import TopicPartition

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerRecord",
    "ConsumerRecords",
    "FutureRecordMetadata",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "murmur2",
    "partition_for_key",
]
