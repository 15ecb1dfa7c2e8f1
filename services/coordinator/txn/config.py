"""Transaction coordinator configs, with Kafka's names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from shared.offsets_topic import partition_for

#: __transaction_state: transaction.state.log.num.partitions
TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_TRANSACTION_STATE_PARTITIONS = 50
#: the producer's transaction.timeout.ms default (a client config; the coordinator only bounds it)
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class TxnConfig:
    #: transaction.max.timeout.ms: the longest transaction.timeout.ms InitProducerId may ask for
    #: (a longer one is refused with INVALID_TRANSACTION_TIMEOUT).
    max_timeout_ms: int = 15 * 60 * 1000
    #: transactional.id.expiration.ms: an id with no open transaction and no update for this long is
    #: deleted (a tombstone).
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    #: transaction.abort.timed.out.transaction.cleanup.interval.ms: how often timed-out transactions are
    #: looked for (``TxnShard.expire_timed_out``).
    abort_timed_out_interval_ms: int = 10_000
    #: transaction.remove.expired.transaction.cleanup.interval.ms: how often expired ids are looked for
    #: (``TxnShard.expire_ids``).
    remove_expired_interval_ms: int = 3600 * 1000
    #: transaction.state.log.num.partitions
    partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS


def partition_for_transactional_id(transactional_id: str, partitions: int = DEFAULT_TRANSACTION_STATE_PARTITIONS) -> int:
    """The ``__transaction_state`` partition of an id: Kafka's ``abs(transactionalId.hashCode) % n``
    (the same hash as a group's ``__consumer_offsets`` partition)."""
    return partition_for(transactional_id, partitions)
