"""Tidelog's Python client: ``Producer``, ``Consumer``, ``Admin`` (synchronous, thread-based).

Usable from scripts and from Spark workers; talks gRPC to brokers and REST to controllers.

The names below are imported when first used (PEP 562), so a process that needs one submodule (a
service importing ``shared.client.cleaner_status``, say) does not pay for the whole client at start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.client.admin import Admin
    from shared.client.consumer import Consumer, ConsumerRecord, ConsumerRecords
    from shared.client.futures import FutureRecordMetadata, RecordMetadata
    from shared.client.partitioner import murmur2, partition_for_key
    from shared.client.producer import Producer
    from shared.client.tables import read_arrow, write_arrow
    from shared.client.transactions import (
        ConsumerGroupMetadata,
        FatalTransactionError,
        IllegalTransactionStateError,
        RetriableTransactionError,
        TransactionAbortableError,
        TransactionError,
    )
    from shared.types import TopicPartition

_WHERE = {
    "Admin": "shared.client.admin",
    "Consumer": "shared.client.consumer",
    "ConsumerRecord": "shared.client.consumer",
    "ConsumerRecords": "shared.client.consumer",
    "FutureRecordMetadata": "shared.client.futures",
    "RecordMetadata": "shared.client.futures",
    "murmur2": "shared.client.partitioner",
    "partition_for_key": "shared.client.partitioner",
    "Producer": "shared.client.producer",
    "ConsumerGroupMetadata": "shared.client.transactions",
    "FatalTransactionError": "shared.client.transactions",
    "IllegalTransactionStateError": "shared.client.transactions",
    "RetriableTransactionError": "shared.client.transactions",
    "TransactionAbortableError": "shared.client.transactions",
    "TransactionError": "shared.client.transactions",
    "TopicPartition": "shared.types",
    "read_arrow": "shared.client.tables",
    "write_arrow": "shared.client.tables",
}

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
    "read_arrow",
    "write_arrow",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'shared.client' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
