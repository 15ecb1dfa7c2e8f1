"""The ``__transaction_state`` topic, and which of its partitions holds a transactional id: Kafka's
``abs(transactionalId.hashCode()) % n`` (the same hash as groups, ``shared.offsets_topic``). Pure.

Kafka's broker defaults: ``transaction.state.log.num.partitions`` 50,
``transaction.state.log.replication.factor`` 3 (the broker count if smaller here, as for
``__consumer_offsets``), ``transaction.state.log.min.isr`` 2 and ``transaction.state.log.segment.bytes``
100 MiB, ``cleanup.policy=compact``. Tidelog refuses ``min.insync.replicas`` above the replication
factor (``shared.config.check_min_insync_replicas``), so on a one-broker cluster it is 1.
"""

from __future__ import annotations

from typing import Any

from shared.offsets_topic import offsets_replication_factor, partition_for

TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_TRANSACTION_STATE_PARTITIONS = 50  # transaction.state.log.num.partitions
DEFAULT_TRANSACTION_STATE_REPLICATION_FACTOR = 3  # transaction.state.log.replication.factor
DEFAULT_TRANSACTION_STATE_MIN_ISR = 2  # transaction.state.log.min.isr
DEFAULT_TRANSACTION_STATE_SEGMENT_BYTES = 100 * 1024 * 1024  # transaction.state.log.segment.bytes

#: FindCoordinator's key_type (Kafka's CoordinatorType): GROUP 0, TRANSACTION 1.
COORDINATOR_TYPE_GROUP = 0
COORDINATOR_TYPE_TRANSACTION = 1


def txn_partition_for(transactional_id: str, partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS) -> int:
    """The ``__transaction_state`` partition of ``transactional_id``, exactly as Kafka computes it
    (``TransactionStateManager.partitionFor``: ``Utils.abs(hashCode) % n``)."""
    return partition_for(transactional_id, partitions)


def txn_replication_factor(brokers: int, configured: int = DEFAULT_TRANSACTION_STATE_REPLICATION_FACTOR) -> int:
    """transaction.state.log.replication.factor, or the broker count if smaller."""
    return offsets_replication_factor(brokers, configured)


def txn_topic_configs(replication_factor: int, min_isr: int = DEFAULT_TRANSACTION_STATE_MIN_ISR,
                      segment_bytes: int = DEFAULT_TRANSACTION_STATE_SEGMENT_BYTES) -> dict[str, Any]:
    """Topic configs of __transaction_state, as Kafka sets them (``min.insync.replicas`` bounded by the
    replication factor, see the module doc)."""
    return {"cleanup.policy": "compact", "min.insync.replicas": max(1, min(min_isr, replication_factor)),
            "segment.bytes": segment_bytes}
