"""Tidelog's Python client: ``Producer``, ``Consumer``, ``Admin`` (synchronous, thread-based).

Usable from scripts and from Spark workers; talks gRPC to brokers and REST to controllers.
"""

from shared.client.admin import Admin
from shared.client.consumer import Consumer, ConsumerRecord, ConsumerRecords
from shared.client.futures import FutureRecordMetadata, RecordMetadata
from shared.client.partitioner import murmur2, partition_for_key
from shared.client.producer import Producer
from shared.client.transactions import (
    ConsumerGroupMetadata,
    FatalTransactionError,
    IllegalTransactionStateError,
    RetriableTransactionError,
    TransactionAbortableError,
    TransactionError,
)
from shared.types import TopicPartition

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "ConsumerRecords",
    "FatalTransactionError",
    "FutureRecordMetadata",
    "IllegalTransactionStateError",
    "Producer",
    "RecordMetadata",
    "RetriableTransactionError",
    "TopicPartition",
    "TransactionAbortableError",
    "TransactionError",
    "murmur2",
    "partition_for_key",
]
