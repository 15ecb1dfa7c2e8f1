"""Everything one ``__transaction_state`` partition holds: the metadata of its transactional ids. Pure.

Decide, then replay. A handler reads the metadata and returns a ``Decision`` (the answer, the
one record to append, the markers to write next); it changes nothing. State changes only in
``replay``, which loading uses too, and the metadata of an id is a function of its latest record
alone -- so live state, loaded state and the state after compaction are the same.

The service layer, per decision: ``begin(d)`` at once (the id is busy: other requests for it are
answered CONCURRENT_TRANSACTIONS, as Kafka's pending state does), append ``d.records`` (fenced,
acks=all), ``replay`` each committed record, answer ``d.error``/``producer_id``/``producer_epoch``,
then, if ``d.markers``: write the markers and append ``complete(d.markers, now)`` -- with the records of
the requests that waited on it (``then``: V2's next transaction's first AddPartitionsToTxn). A failed append
unloads the partition (or calls ``abandon``). After loading, ``unfinished()`` lists the prepared
transactions whose markers must be (re)written.

Transactions V2 (KIP-890 part 2, ``client_version`` 2): every EndTxn bumps the producer epoch
(markers carry the bumped epoch), so an EndTxn of an earlier transaction -- its epoch one lower --
is recognised as a retry only while that transaction is the latest one; once a later one has
started, it is fenced (KAFKA-17754). V1 keeps the epoch. An exhausted epoch moves the producer to
a new producer id when the transaction completes (``next_producer_id``). The producer carries on
with the bumped epoch (or new id) as soon as PrepareCommit/PrepareAbort is written, so its next
transaction's EndTxn may come while the markers are still being written: it is answered
CONCURRENT_TRANSACTIONS, commit or abort, and retried (Kafka 4.x checks the pending CompleteCommit/
CompleteAbort before the epoch, KAFKA-18464/KAFKA-18660), not fenced.

Epochs handed out by InitProducerId: with the producer's own (id, epoch) the epoch is bumped by
one; without (a new producer instance, which fences the old) by two. So in state Empty, epoch - 1
was handed out only to a producer that asked with its own epoch, and a retry of that request is
recognised from the record alone (Kafka keeps ``lastProducerEpoch`` in memory only, which a
coordinator change loses). Aborting an ongoing transaction to fence its producer bumps the epoch
by two for a new producer (InitProducerId: the old one's EndTxn is never a "retry") and by one for
a timeout (in V2 the producer's own abort is then a retry, and it carries on with the new epoch).

Producer ids come from ``allocate_producer_id`` while deciding; an id allocated for a decision
whose write fails is never used, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from services.coordinator.txn.config import TxnConfig
from services.coordinator.txn.decisions import Decision, MarkerPlan, ProducerIdAndEpoch
from services.coordinator.txn.records import NO_PRODUCER_ID, decode_key, decode_value, encode_key, encode_value
from services.coordinator.txn.state import (
    COMPLETED,
    EXPIRABLE,
    MAX_PRODUCER_EPOCH,
    PREPARED,
    TxnMetadata,
    TxnState,
    is_epoch_exhausted,
)
from shared.errors import ErrorCode
from shared.offsets_topic import OFFSETS_TOPIC, partition_for
from shared.types import TopicPartition

S = TxnState
E = ErrorCode


class TxnShard:
    def __init__(self, partition: int, config: TxnConfig, allocate_producer_id: Callable[[], int]) -> None:
        self.partition = partition
        self.config = config
        self.allocate_producer_id = allocate_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        #: ids with a decision being written -> the state it moves towards. Not state: empty after a
        #: load, cleared when the id's record is replayed.
        self.pending: dict[str, TxnState] = {}

    # -- applying ----------------------------------------------------------------------------

    def replay(self, key: bytes, value: bytes | None) -> None:
        """Apply one committed record (live, or while loading). Keys of unknown versions are skipped."""
        txn_id = decode_key(key)
        if txn_id is None:
            return
        v = decode_value(value)
        self.pending.pop(txn_id, None)
        if v is None:
            self.txns.pop(txn_id, None)
        else:
            self.txns[txn_id] = TxnMetadata.from_value(txn_id, v)

    def begin(self, d: Decision) -> None:
        if d.records and d.pending is not None:
            self.pending[d.transactional_id] = d.pending

    def abandon(self, transactional_id: str) -> None:
        """The decision's write failed: the id is free again (its state is what the log says)."""
        self.pending.pop(transactional_id, None)

    def unfinished(self) -> list[MarkerPlan]:
        """Prepared transactions: their markers must be written and their completion appended."""
        return [_markers(m) for m in self._by_id() if m.state in PREPARED]

    # -- requests ----------------------------------------------------------------------------

    def init_producer_id(self, txn_id: str, timeout_ms: int, now_ms: int,
                         expected: ProducerIdAndEpoch | None = None) -> Decision:
        """InitProducerId with a transactional id: a (new) epoch that fences earlier producers."""
        if not txn_id:
            return Decision(txn_id, E.INVALID_REQUEST, "transactional id is empty")
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return Decision(txn_id, E.INVALID_TRANSACTION_TIMEOUT, f"transaction.timeout.ms {timeout_ms} is not in "
                            f"(0, transaction.max.timeout.ms {self.config.max_timeout_ms}]")
        if txn_id in self.pending:
            return _busy(txn_id, self.pending[txn_id])
        m = self.txns.get(txn_id)
        if m is None:
            pid = self.allocate_producer_id()
            return _write(TxnMetadata(txn_id, pid, 0, timeout_ms, S.EMPTY, last_update_ms=now_ms))
        if expected is not None and not _may_be_this_producer(m, expected):
            return Decision(txn_id, E.PRODUCER_FENCED, f"producer {expected} is not the current producer of {txn_id!r}")
        if m.state in PREPARED:
            return _busy(txn_id, m.state)
        if m.state == S.ONGOING:  # abort it first, fencing its producer; the client retries
            return self._fence(m, now_ms, E.CONCURRENT_TRANSACTIONS, 2)
        if expected is None:
            return self._bump(m, 2, timeout_ms, now_ms)
        if _is_init_retry(m, expected):
            return _write(m.transition(S.EMPTY, 0, timeout_ms=timeout_ms, last_update_ms=now_ms))
        if expected == (m.producer_id, m.producer_epoch):
            return self._bump(m, 1, timeout_ms, now_ms)
        return Decision(txn_id, E.PRODUCER_FENCED, f"epoch {expected.epoch} is neither the current epoch "
                        f"{m.producer_epoch} of {txn_id!r} nor the one before it")

    def add_partitions(self, txn_id: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition],
                       now_ms: int, client_version: int = 1) -> Decision:
        """AddPartitionsToTxn (from the client in V1, from the partition leader on produce in V2)."""
        parts = frozenset(partitions)
        m, refused = self._check_producer(txn_id, producer_id, epoch)
        if refused is not None:
            return refused
        assert m is not None
        if txn_id in self.pending:
            return _busy(txn_id, self.pending[txn_id])
        if m.state in PREPARED:
            return _busy(txn_id, m.state)
        if m.state == S.ONGOING and parts <= m.partitions:
            return Decision(txn_id, producer_id=m.producer_id, producer_epoch=m.producer_epoch)
        start = m.start_ms if m.state == S.ONGOING else now_ms
        return _write(m.transition(S.ONGOING, client_version, partitions=m.partitions | parts, start_ms=start,
                                   last_update_ms=now_ms))

    def add_offsets(self, txn_id: str, producer_id: int, epoch: int, group_id: str, now_ms: int,
                    offsets_partitions: int, client_version: int = 1) -> Decision:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition joins the transaction."""
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(group_id, offsets_partitions))
        return self.add_partitions(txn_id, producer_id, epoch, [tp], now_ms, client_version)

    def verify_partitions(self, txn_id: str, producer_id: int, epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn with verifyOnly (KIP-890 part 1): is each partition in the open transaction?
        A partition that is not is TRANSACTION_ABORTABLE. Pending writes are not waited for (the
        partition leader checks again when it appends)."""
        parts = list(partitions)
        m, refused = self._check_producer(txn_id, producer_id, epoch)
        if refused is not None:
            return {tp: refused.error for tp in parts}
        assert m is not None
        if m.state in PREPARED:
            return {tp: E.CONCURRENT_TRANSACTIONS for tp in parts}
        return {tp: E.NONE if tp in m.partitions else E.TRANSACTION_ABORTABLE for tp in parts}

    def end_txn(self, txn_id: str, producer_id: int, epoch: int, commit: bool, now_ms: int,
                client_version: int = 1) -> Decision:
        """EndTxn: prepare the commit or abort (then markers, then ``complete``), or answer a retry."""
        if not txn_id:
            return Decision(txn_id, E.INVALID_REQUEST, "transactional id is empty")
        m = self.txns.get(txn_id)
        if m is None:
            return Decision(txn_id, E.INVALID_PRODUCER_ID_MAPPING, f"no transactional id {txn_id!r}")
        v2 = m.client_version >= 2
        retry_bump = v2 and m.producer_id == producer_id and m.producer_epoch == epoch + 1
        retry_overflow = (v2 and m.state in COMPLETED and m.producer_epoch == 0 and m.producer_id != producer_id
                          and m.previous_producer_id == producer_id and is_epoch_exhausted(epoch))
        # V2, markers still being written: the producer's next transaction ends with what the EndTxn answered
        next_txn = v2 and m.state in PREPARED and (producer_id, epoch) == _continues_with(m)
        if m.producer_id != producer_id and not (retry_overflow or next_txn):
            return Decision(txn_id, E.INVALID_PRODUCER_ID_MAPPING,
                            f"producer id {producer_id} is not {m.producer_id} of {txn_id!r}")
        if not _end_epoch_valid(m, epoch, v2, retry_bump or retry_overflow, next_txn):
            return Decision(txn_id, E.PRODUCER_FENCED, f"epoch {epoch} of {txn_id!r} is fenced: the transaction is "
                            f"{m.state.kafka_name} at epoch {m.producer_epoch}")
        if txn_id in self.pending:
            return _busy(txn_id, self.pending[txn_id])
        retry = retry_bump or retry_overflow
        wanted = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        if m.state == S.ONGOING:
            return self._prepare(m, commit, client_version, now_ms)
        if m.state in PREPARED:
            if next_txn or (m.state == S.PREPARE_COMMIT) == commit:  # next_txn: either result waits
                return _busy(txn_id, m.state)
            return _invalid(m, commit)
        if m.state in COMPLETED:
            if retry or (client_version < 2 and epoch == m.producer_epoch):  # V1 cannot tell a retry apart
                if m.state == wanted:
                    return Decision(txn_id, producer_id=m.producer_id, producer_epoch=m.producer_epoch)
                return _invalid(m, commit)
            if not commit and client_version >= 2:  # V2: abort a transaction that added nothing here
                return self._prepare(m, commit, client_version, now_ms)
            return _invalid(m, commit)
        if m.state == S.EMPTY and not commit and client_version >= 2:
            return self._prepare(m, commit, client_version, now_ms)
        return _invalid(m, commit)

    def complete(self, plan: MarkerPlan, now_ms: int) -> Decision:
        """The markers of ``plan`` are written: CompleteCommit / CompleteAbort (V2: maybe the next producer id)."""
        txn_id = plan.transactional_id
        m = self.txns.get(txn_id)
        if m is None or m.state not in PREPARED or (m.producer_id, m.producer_epoch) != (plan.producer_id,
                                                                                         plan.producer_epoch):
            return Decision(txn_id, E.INVALID_TXN_STATE, f"{txn_id!r} is no longer the transaction of {plan}")
        if txn_id in self.pending:
            return _busy(txn_id, self.pending[txn_id])
        done = S.COMPLETE_COMMIT if m.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        pid, epoch, prev = m.producer_id, m.producer_epoch, m.previous_producer_id
        if m.client_version >= 2 and m.next_producer_id != NO_PRODUCER_ID:
            pid, epoch, prev = m.next_producer_id, 0, m.producer_id
        return _write(m.transition(done, producer_id=pid, producer_epoch=epoch, previous_producer_id=prev,
                                   next_producer_id=NO_PRODUCER_ID, partitions=frozenset(), last_update_ms=now_ms))

    def after(self, d: Decision) -> TxnShard:
        """A scratch shard holding only ``d``'s id, as it will be once ``d``'s records are replayed (this
        shard is not changed). A request that waits on ``d`` is decided on it."""
        s = TxnShard(self.partition, self.config, self.allocate_producer_id)
        if (m := self.txns.get(d.transactional_id)) is not None:
            s.txns[d.transactional_id] = m
        for key, value in d.records:
            s.replay(key, value)
        return s

    def then(self, d: Decision, riders: Sequence[Callable[[TxnShard], Decision]]) -> tuple[Decision, list[Decision | None]]:
        """``d`` with the records of the requests that wait on it, each decided on the state ``d`` and the
        riders before it leave: one decision, appended at once (V2: the next transaction's first
        AddPartitionsToTxn rides on the completion of the one before, one ``acks=all`` append fewer per
        transaction). A rider is taken only if accepted with records and no markers; the others are
        ``None`` in the list, to be decided again once ``d`` is replayed."""
        scratch = self.after(d)
        records, pending, taken = list(d.records), d.pending, []
        for decide in riders:
            r = decide(scratch)
            if r.ok and r.records and r.markers is None and r.transactional_id == d.transactional_id:
                records.extend(r.records)
                pending = r.pending
                scratch = scratch.after(r)
                taken.append(r)
            else:
                taken.append(None)
        return replace(d, records=tuple(records), pending=pending), taken

    # -- timers ------------------------------------------------------------------------------

    def expire_timed_out(self, now_ms: int) -> list[Decision]:
        """Abort every transaction open longer than its timeout, bumping the epoch to fence its producer."""
        return [self._fence(m, now_ms, E.NONE, 1) for m in self._by_id()
                if m.state == S.ONGOING and m.transactional_id not in self.pending
                and m.start_ms + m.timeout_ms < now_ms]

    def expire_ids(self, now_ms: int, expiration_ms: int | None = None) -> list[Decision]:
        """Tombstones for ids with no open transaction and no update for transactional.id.expiration.ms."""
        ttl = self.config.transactional_id_expiration_ms if expiration_ms is None else expiration_ms
        return [Decision(m.transactional_id, records=((encode_key(m.transactional_id), None),), pending=S.DEAD)
                for m in self._by_id()
                if m.state in EXPIRABLE and m.transactional_id not in self.pending
                and m.last_update_ms <= now_ms - ttl]

    # -- helpers -----------------------------------------------------------------------------

    def _by_id(self) -> list[TxnMetadata]:
        """Metadata in transactional-id order: timer decisions do not depend on the order of loading."""
        return [self.txns[k] for k in sorted(self.txns)]

    def _check_producer(self, txn_id: str, producer_id: int, epoch: int) -> tuple[TxnMetadata | None, Decision | None]:
        if not txn_id:
            return None, Decision(txn_id, E.INVALID_REQUEST, "transactional id is empty")
        m = self.txns.get(txn_id)
        if m is None:
            return None, Decision(txn_id, E.INVALID_PRODUCER_ID_MAPPING, f"no transactional id {txn_id!r}")
        if m.producer_id != producer_id:
            return m, Decision(txn_id, E.INVALID_PRODUCER_ID_MAPPING,
                               f"producer id {producer_id} is not {m.producer_id} of {txn_id!r}")
        if m.producer_epoch != epoch:
            return m, Decision(txn_id, E.PRODUCER_FENCED,
                               f"epoch {epoch} is not the current epoch {m.producer_epoch} of {txn_id!r}")
        return m, None

    def _bump(self, m: TxnMetadata, step: int, timeout_ms: int, now_ms: int) -> Decision:
        """Empty with the epoch ``step`` higher, or a new producer id once the epochs run out."""
        pid, epoch, prev = m.producer_id, m.producer_epoch + step, m.previous_producer_id
        if epoch >= MAX_PRODUCER_EPOCH:  # handed-out epochs stay below Short.MaxValue (room for one V2 bump)
            pid, epoch, prev = self.allocate_producer_id(), step - 1, m.producer_id
        return _write(m.transition(S.EMPTY, 0, producer_id=pid, producer_epoch=epoch, previous_producer_id=prev,
                                   next_producer_id=NO_PRODUCER_ID, timeout_ms=timeout_ms, partitions=frozenset(),
                                   start_ms=-1, last_update_ms=now_ms))

    def _prepare(self, m: TxnMetadata, commit: bool, client_version: int, now_ms: int) -> Decision:
        epoch, next_pid = m.producer_epoch, NO_PRODUCER_ID
        if client_version >= 2:
            if is_epoch_exhausted(m.producer_epoch):
                next_pid = self.allocate_producer_id()
            epoch = min(m.producer_epoch + 1, MAX_PRODUCER_EPOCH)
        start = m.start_ms if m.state == S.ONGOING else now_ms  # V2 abort of nothing: it starts now
        new = m.transition(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, client_version, producer_epoch=epoch,
                           next_producer_id=next_pid, start_ms=start, last_update_ms=now_ms)
        answer = (next_pid, 0) if next_pid != NO_PRODUCER_ID else (new.producer_id, epoch)
        return _write(new, answer=answer, markers=_markers(new))

    def _fence(self, m: TxnMetadata, now_ms: int, answer: ErrorCode, step: int) -> Decision:
        """Abort the ongoing transaction with the epoch ``step`` higher: its producer's requests are fenced."""
        epoch = min(m.producer_epoch + step, MAX_PRODUCER_EPOCH)
        new = m.transition(S.PREPARE_ABORT, producer_epoch=epoch, last_update_ms=now_ms)
        d = _write(new, markers=_markers(new), pending=S.PREPARE_EPOCH_FENCE)
        if answer == E.NONE:
            return d
        return replace(d, error=answer, message="aborting the ongoing transaction first", producer_id=-1,
                       producer_epoch=-1)

def _write(new: TxnMetadata, answer: tuple[int, int] | None = None, markers: MarkerPlan | None = None,
           pending: TxnState | None = None) -> Decision:
    pid, epoch = answer if answer is not None else (new.producer_id, new.producer_epoch)
    rec = (encode_key(new.transactional_id), encode_value(new.to_value()))
    return Decision(new.transactional_id, records=(rec,), producer_id=pid, producer_epoch=epoch,
                    pending=pending or new.state, markers=markers)


def _markers(m: TxnMetadata) -> MarkerPlan:
    return MarkerPlan(m.transactional_id, m.producer_id, m.producer_epoch, m.state == S.PREPARE_COMMIT, m.partitions)


def _busy(txn_id: str, state: TxnState) -> Decision:
    return Decision(txn_id, E.CONCURRENT_TRANSACTIONS, f"{txn_id!r} is busy ({state.kafka_name})")


def _invalid(m: TxnMetadata, commit: bool) -> Decision:
    return Decision(m.transactional_id, E.INVALID_TXN_STATE,
                    f"cannot {'commit' if commit else 'abort'}: {m.transactional_id!r} is {m.state.kafka_name}")


def _may_be_this_producer(m: TxnMetadata, expected: ProducerIdAndEpoch) -> bool:
    """Kafka's check of InitProducerId's (id, epoch): the current id, or the id before a rotation
    asked with its exhausted epoch (a retry of the request that rotated)."""
    return expected.producer_id == m.producer_id or (
        expected.producer_id == m.previous_producer_id and is_epoch_exhausted(expected.epoch))


def _is_init_retry(m: TxnMetadata, expected: ProducerIdAndEpoch) -> bool:
    """Did the InitProducerId that wrote this Empty record come from ``expected``? (See the module doc.)"""
    if m.state != S.EMPTY:
        return False
    if m.producer_epoch == 0:  # a rotation asked for with the exhausted epoch
        return expected.producer_id == m.previous_producer_id and is_epoch_exhausted(expected.epoch)
    return expected == (m.producer_id, m.producer_epoch - 1)


def _continues_with(m: TxnMetadata) -> tuple[int, int]:
    """The producer id and epoch that the EndTxn which prepared ``m`` (V2) answered: the bumped epoch,
    or epoch 0 of the next producer id when the epoch ran out."""
    if m.next_producer_id != NO_PRODUCER_ID:
        return m.next_producer_id, 0
    return m.producer_id, m.producer_epoch


def _end_epoch_valid(m: TxnMetadata, epoch: int, v2: bool, retry: bool, next_txn: bool = False) -> bool:
    """Transactions V2: the current epoch, or (prepared / completed) the epoch just before it -- a retry
    of the EndTxn that bumped it. While prepared, the current one is the producer's next transaction
    (``next_txn``, which also covers the next producer id). V1: the current epoch only."""
    if not v2:
        return epoch == m.producer_epoch
    if m.state in PREPARED:
        return retry or next_txn
    if m.state in COMPLETED:
        return retry or epoch == m.producer_epoch
    return epoch == m.producer_epoch
