"""The internal topics whose partitions the coordinator owns, loads, writes and times: one
``PartitionKind`` each (``__consumer_offsets`` for groups, ``__transaction_state`` for transactions).

The runtime (``runtime.py``) treats every kind alike: partition ``p`` of each kind is owned on its
own etcd key (so partition 3 of the two topics are two ownerships, balanced by the same rule,
``ownership.plan``, per kind), taken over with a producer-epoch bump and a fencing marker, loaded by
replaying the partition into a fresh shard, and timed. What differs per kind is here: the topic,
the etcd keys, the marker record and the shard. A shard is what the runtime calls:

    replay(key, value)  a committed record (loading, or live once written)
    loaded(now_ms)      loading reached the marker; serving starts
    expire(now_ms)      the records its timers want written (may be empty)

Imports nothing of the group logic's internals beyond building the group shard.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from services.coordinator.config import GroupConfig
from services.coordinator.record_builder import Rec
from services.coordinator.shard import GroupShard
from services.coordinator.writer import MARKER_KEY
from shared.metadata.keys import Keys
from shared.offsets_topic import OFFSETS_TOPIC, partition_for
from shared.txn_topic import TRANSACTION_STATE_TOPIC, txn_partition_for

GROUPS = "groups"
TRANSACTIONS = "transactions"

#: ConsumerGroupMetadataKey (version 3) with an empty group id: names no group.
GROUP_MARKER_KEY = MARKER_KEY
#: TransactionLogKey (version 0) with an empty transactional id: names no transactional id (Kafka
#: refuses an empty transactional.id), so replaying the marker, a tombstone, changes nothing.
TXN_MARKER_KEY = b"\x00\x00\x00\x00"


class CoordinatorShard(Protocol):
    def replay(self, key: bytes, value: bytes | None) -> None: ...

    def loaded(self, now_ms: int) -> None: ...

    def expire(self, now_ms: int) -> list[Rec]: ...


@dataclass(frozen=True)
class PartitionKind:
    #: GROUPS or TRANSACTIONS: names the kind in logs, the runtime's tables and error messages
    name: str
    topic: str
    #: what a key names, for error messages ("group", "transactional id")
    key_name: str
    #: key (group id, transactional id) -> partition, given the topic's partition count
    partition_for: Callable[[str, int], int]
    owner_key: Callable[[Keys, int], bytes]
    owners_prefix: Callable[[Keys], bytes]
    producer_key: Callable[[Keys, int], bytes]
    #: the key of the fencing marker each new owner writes first (its value is null)
    marker_key: bytes
    #: partition -> a fresh shard (a ``CoordinatorShard``)
    new_shard: Callable[[int], Any]
    #: the shard follows topic metadata: ``set_topics(view.topics) -> records`` at load and on changes
    follows_topics: bool = False
    #: called with (shard, records) once records returned by ``expire`` are committed
    expiry_written: Callable[[Any, list[Rec]], None] | None = None
    #: awaited with the PartitionRuntime once it is loaded and served (e.g. to finish work the log
    #: says was under way); an exception releases the partition
    on_loaded: Callable[[Any], Awaitable[None]] | None = None
    #: the controller creates the topic only once asked (``Keys.internal_topic_request``), as Kafka
    #: creates ``__transaction_state`` on the first FindCoordinator for a transactional id
    created_on_request: bool = False


def groups_kind(config: GroupConfig) -> PartitionKind:
    """``__consumer_offsets``: groups and their committed offsets (``GroupShard``)."""
    return PartitionKind(
        name=GROUPS, topic=OFFSETS_TOPIC, key_name="group", partition_for=partition_for,
        owner_key=Keys.offsets_owner, owners_prefix=Keys.offsets_owners_prefix, producer_key=Keys.offsets_producer,
        marker_key=GROUP_MARKER_KEY, new_shard=lambda p: GroupShard(p, config), follows_topics=True,
        expiry_written=lambda shard, recs: shard.apply_offsets(recs))


def transactions_kind(new_shard: Callable[[int], Any],
                      expiry_written: Callable[[Any, list[Rec]], None] | None = None,
                      on_loaded: Callable[[Any], Awaitable[None]] | None = None) -> PartitionKind:
    """``__transaction_state``: transactional ids, with the shard ``new_shard`` builds per partition."""
    return PartitionKind(
        name=TRANSACTIONS, topic=TRANSACTION_STATE_TOPIC, key_name="transactional id", partition_for=txn_partition_for,
        owner_key=Keys.txn_owner, owners_prefix=Keys.txn_owners_prefix, producer_key=Keys.txn_producer,
        marker_key=TXN_MARKER_KEY, new_shard=new_shard, expiry_written=expiry_written, on_loaded=on_loaded,
        created_on_request=True)


class LatestValueShard:
    """The stand-in shard of ``__transaction_state`` until the transaction state machine is plugged in
    (``services/coordinator/txn``): keeps the latest value of every key, has no timers."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.values: dict[bytes, bytes] = {}
        self.replayed = 0
        self.loaded_at_ms: int | None = None

    def replay(self, key: bytes, value: bytes | None) -> None:
        self.replayed += 1
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = value

    def loaded(self, now_ms: int) -> None:
        self.loaded_at_ms = now_ms

    def expire(self, now_ms: int) -> list[Rec]:
        return []
