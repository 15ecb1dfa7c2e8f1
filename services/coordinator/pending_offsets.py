"""Transactions' offset commits awaiting their transaction's outcome (TxnOffsetCommit, KIP-447). Pure.

Kafka writes a transaction's offset commits into ``__consumer_offsets`` as OffsetCommit records of a
transactional batch and keeps them *pending* (``OffsetMetadataManager.pendingTransactionalOffsets``,
by producer id) until the transaction's COMMIT or ABORT marker reaches the partition. Tidelog's
coordinators are not brokers: the group coordinator writes each pending commit as a record of its own
(``records.PENDING_TXN_OFFSET``, keyed by group, partition and producer id) through its fenced writer,
and the transaction coordinator, once its PrepareCommit/PrepareAbort is durable, completes them by an
RPC (CompleteTxnOffsets): committed, the pending offsets become committed offsets (OffsetCommit
records, Kafka's layout) and the pending records are tombstoned; aborted, only tombstoned.

This module holds the pending commits of one ``__consumer_offsets`` partition, as Kafka's two maps
(by producer id; the producer ids with commits pending per group), changed only by ``replay`` of the
pending records, and decides what a completion writes. What is not kept here: who may commit (the
shard checks the group's generation, KIP-447), and whether the producer's transaction includes this
partition (KIP-890's verification, asked of the transaction coordinator before deciding).

Which transaction a completion is for: the transaction coordinator completes with the producer
epoch of its markers. Transactions V1 keep the epoch, so a transaction's commits carry the marker's
epoch; V2 (KIP-890) bumps it at every EndTxn, so they carry a lower one, and a commit at the marker's
epoch belongs to the *next* transaction -- a delayed completion of the previous one must not touch it
(KAFKA-17754's case, here for offsets). A commit at a higher epoch than the completion's is a later
transaction's in either version. So a completion at epoch M takes the commits at epoch < M, and in V1
also those at M.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from services.coordinator import records as r
from services.coordinator.record_builder import Rec, RecordBuilder
from shared.types import TopicPartition

#: a pending commit's place: (group id, partition)
Slot = tuple[str, TopicPartition]


@dataclass(frozen=True)
class TxnOffsetCommit:
    tp: TopicPartition
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


def completes(pending_epoch: int, marker_epoch: int, transaction_version: int) -> bool:
    """Whether a completion at ``marker_epoch`` is the outcome of a commit made at ``pending_epoch``
    (see the module's docstring)."""
    if transaction_version >= 2:
        return pending_epoch < marker_epoch
    return pending_epoch <= marker_epoch


class PendingOffsets:
    def __init__(self, builder: RecordBuilder) -> None:
        self.builder = builder
        #: producer id -> (group, partition) -> its pending commit
        self.by_producer: dict[int, dict[Slot, r.PendingOffsetValue]] = {}
        #: group id -> producer ids with commits pending in it (Kafka's openTransactionsByGroup)
        self.by_group: dict[str, set[int]] = {}

    # -- views --------------------------------------------------------------------------------------

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any((group_id, tp) in self.by_producer[pid] for pid in self.by_group.get(group_id, ()))

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        return {tp for pid in self.by_group.get(group_id, ()) for (g, tp) in self.by_producer[pid] if g == group_id}

    def producer_epoch(self, producer_id: int) -> int | None:
        """The highest epoch of the producer's pending commits here (None: none pending)."""
        pending = self.by_producer.get(producer_id)
        return max(v.producer_epoch for v in pending.values()) if pending else None

    def groups(self) -> set[str]:
        return set(self.by_group)

    # -- decisions ----------------------------------------------------------------------------------

    def commit(self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int,
               c: TxnOffsetCommit, now_ms: int) -> Rec:
        """The record of one pending commit (a newer one of the same producer and partition replaces it)."""
        value = r.PendingOffsetValue(producer_epoch, transactional_id,
                                     r.OffsetValue(c.offset, c.leader_epoch, c.metadata, now_ms))
        return self.builder.pending_offset(group_id, c.tp, producer_id, value)

    def complete(self, producer_id: int, producer_epoch: int, committed: bool, transaction_version: int,
                 committed_offsets: dict[str, dict[TopicPartition, r.OffsetValue]],
                 group_id: str | None = None) -> list[Rec]:
        """The records completing the producer's transaction at marker epoch ``producer_epoch`` (of
        ``group_id`` only, or of every group of the partition): committed, each pending offset becomes
        the committed one -- unless a plain OffsetCommit of the partition is newer (Kafka keeps the most
        recent commit, there by log position, here by commit time) -- and every pending record is
        tombstoned. Nothing pending (an unknown producer, a retry): no records."""
        recs: list[Rec] = []
        for (gid, tp), v in sorted(self.by_producer.get(producer_id, {}).items(), key=_slot_order):
            if group_id is not None and gid != group_id:
                continue
            if not completes(v.producer_epoch, producer_epoch, transaction_version):
                continue
            if committed:
                current = committed_offsets.get(gid, {}).get(tp)
                if current is None or current.commit_timestamp <= v.offset.commit_timestamp:
                    recs.append(self.builder.offset(gid, tp, v.offset))
            recs.append(self.builder.pending_offset(gid, tp, producer_id, None))
        return recs

    def tombstones(self, group_id: str, tps: Iterable[TopicPartition] | None = None) -> list[Rec]:
        """Tombstones of the group's pending commits (of ``tps``, or all): a deleted group or offset."""
        wanted = None if tps is None else set(tps)
        return [self.builder.pending_offset(gid, tp, pid, None)
                for pid in sorted(self.by_group.get(group_id, ()))
                for (gid, tp) in sorted(self.by_producer[pid], key=_slot_key)
                if gid == group_id and (wanted is None or tp in wanted)]

    # -- replay -------------------------------------------------------------------------------------

    def replay(self, group_id: str, tp: TopicPartition, producer_id: int, value: r.PendingOffsetValue | None) -> None:
        slot = (group_id, tp)
        if value is not None:
            self.by_producer.setdefault(producer_id, {})[slot] = value
            self.by_group.setdefault(group_id, set()).add(producer_id)
            return
        pending = self.by_producer.get(producer_id)
        if pending is None or pending.pop(slot, None) is None:
            return
        if not pending:
            del self.by_producer[producer_id]
        if not any(g == group_id for g, _ in pending):
            pids = self.by_group[group_id]
            pids.discard(producer_id)
            if not pids:
                del self.by_group[group_id]

    def dump(self) -> dict[int, list[tuple[str, str, int, r.PendingOffsetValue]]]:
        return {pid: sorted((g, tp.topic, tp.partition, v) for (g, tp), v in pending.items())
                for pid, pending in sorted(self.by_producer.items())}


def _slot_key(slot: Slot) -> tuple[str, str, int]:
    gid, tp = slot
    return gid, tp.topic, tp.partition


def _slot_order(item: tuple[Slot, object]) -> tuple[str, str, int]:
    return _slot_key(item[0])
