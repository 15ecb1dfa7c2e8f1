"""A partition's view of transactions (services/broker/txn_state.py) and the aborted-transaction index
(services/broker/log/txn_index.py): Kafka's rules, without processes."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.broker.log.txn_index import ENTRY_SIZE, TxnIndex, collect_aborted, decode, encode, index_path
from services.broker.txn_state import AbortedTxn, TxnState
from shared.errors import ErrorCode


def test_open_transaction_holds_the_lso_until_its_marker_is_replicated() -> None:
    s = TxnState()
    s.on_data(7, 0, 10, transactional=True)
    s.on_data(7, 0, 11, transactional=True)  # a second batch does not move the first offset
    assert s.last_stable_offset(high_watermark=12) == 10
    done, aborted = s.on_marker(7, 0, 12, commit=True, coordinator_epoch=0)
    assert (done.first_offset, done.last_offset, done.aborted, aborted) == (10, 12, False, None)
    assert s.last_stable_offset(12) == 10  # marker at 12 not below the high watermark yet
    s.on_high_watermark(13)
    assert s.last_stable_offset(13) == 13
    assert s.first_unstable_offset() is None


def test_abort_index_entry_takes_the_next_open_transactions_first_offset_as_lso() -> None:
    s = TxnState()
    s.on_data(1, 0, 0, transactional=True)
    s.on_data(2, 0, 1, transactional=True)
    _, aborted = s.on_marker(1, 0, 2, commit=False, coordinator_epoch=3)
    assert aborted == AbortedTxn(1, 0, 2, 1)  # producer 2's transaction from offset 1 is still open
    _, aborted = s.on_marker(2, 0, 3, commit=False, coordinator_epoch=3)
    assert aborted == AbortedTxn(2, 1, 3, 4)  # none open: marker + 1


def test_idempotent_batch_inside_an_open_transaction_is_invalid_txn_state() -> None:
    s = TxnState()
    s.on_data(5, 2, 0, transactional=True)
    assert s.check_data(5, 2, transactional=False)[0] == ErrorCode.INVALID_TXN_STATE
    assert s.check_data(5, 2, transactional=True)[0] == ErrorCode.NONE
    assert s.check_data(5, 1, transactional=True)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert s.check_data(6, 0, transactional=False)[0] == ErrorCode.NONE  # another producer


def test_a_deposed_coordinators_marker_is_fenced() -> None:
    s = TxnState()
    s.on_data(9, 4, 0, transactional=True)
    s.on_marker(9, 4, 1, commit=True, coordinator_epoch=5)
    assert s.check_marker(9, 4, coordinator_epoch=4)[0] == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert s.check_marker(9, 3, coordinator_epoch=5)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
    assert s.check_marker(9, 5, coordinator_epoch=5)[0] == ErrorCode.NONE  # KIP-890: the epoch may be bumped


def test_marker_without_open_transaction_indexes_nothing() -> None:
    s = TxnState()
    done, aborted = s.on_marker(3, 0, 0, commit=False, coordinator_epoch=0)
    assert aborted is None and done.first_offset == 0


def test_truncation_forgets_transactions_opened_past_the_cut() -> None:
    s = TxnState()
    s.on_data(1, 0, 0, transactional=True)
    s.on_data(2, 0, 5, transactional=True)
    s.truncate_to(5)
    assert s.open_transactions() == [(1, 0)]
    assert not s.in_transaction(2)


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["data", "commit", "abort"])), max_size=60))
def test_lso_never_passes_an_open_transaction_or_the_high_watermark(ops: list[tuple[int, str]]) -> None:
    s = TxnState()
    offset = 0
    for pid, op in ops:
        if op == "data":
            s.on_data(pid, 0, offset, transactional=True)
        else:
            s.on_marker(pid, 0, offset, commit=op == "commit", coordinator_epoch=0)
        offset += 1
        hw = offset // 2
        s.on_high_watermark(hw)
        lso = s.last_stable_offset(hw)
        assert lso <= hw
        for _pid, first in s.open_transactions():
            assert lso <= first


def test_index_entries_use_kafkas_34_byte_layout() -> None:
    e = AbortedTxn(producer_id=0x0102, first_offset=3, last_offset=9, last_stable_offset=10)
    raw = encode([e])
    assert len(raw) == ENTRY_SIZE == 34
    assert raw == struct.pack(">hqqqq", 0, 0x0102, 3, 9, 10)
    assert decode(raw + raw[:10]) == [e]  # a torn tail is not an entry
    with pytest.raises(ValueError, match="version"):
        decode(struct.pack(">hqqqq", 1, 1, 1, 1, 1))


def test_index_file_survives_reopen_and_cuts_a_torn_tail(tmp_path: os.PathLike[str]) -> None:
    path = index_path(str(tmp_path), 100)
    assert path.endswith("00000000000000000100.txnindex")
    idx = TxnIndex(path)
    idx.append(AbortedTxn(1, 100, 105, 106))
    idx.append(AbortedTxn(2, 101, 107, 108))
    with pytest.raises(ValueError):
        idx.append(AbortedTxn(3, 102, 107, 108))  # markers only move forward
    with open(path, "ab") as f:
        f.write(b"\x00" * 7)
    again = TxnIndex(path)
    assert again.entries == idx.entries
    assert os.path.getsize(path) == 2 * ENTRY_SIZE
    again.truncate_to(107)
    assert [e.producer_id for e in TxnIndex(path).entries] == [1]


def test_collect_aborted_is_kafkas_overlap_rule(tmp_path: os.PathLike[str]) -> None:
    a = TxnIndex(index_path(str(tmp_path), 0))
    a.append(AbortedTxn(1, 0, 4, 5))
    a.append(AbortedTxn(2, 3, 9, 10))
    b = TxnIndex(index_path(str(tmp_path), 10))
    b.append(AbortedTxn(3, 12, 14, 15))
    b.append(AbortedTxn(4, 20, 22, 23))
    # fetch [5, 13): txn 1 ended before 5, txn 2 overlaps, txn 3 starts at 12 < 13, and its LSO 15 >= 13 stops
    assert [e.producer_id for e in collect_aborted([a, b], 5, 13)] == [2, 3]
    assert [e.producer_id for e in collect_aborted([a, b], 0, 4)] == [1]


def _batch(base: int, pid: int, *, transactional: bool = True, marker: int | None = None) -> tuple[object, int | None]:
    from shared.records.builder import build_control_batch, encode_batch
    from shared.records.header import BatchHeader

    if marker is not None:
        raw = build_control_batch(marker, pid, 0, 0)
    else:
        raw = encode_batch([(0, None, b"v", ())], producer_id=pid, producer_epoch=0, base_sequence=0,
                           transactional=transactional)
    return BatchHeader.parse(bytes(_with_base(raw, base)), 0), marker


def _with_base(raw: bytes, base: int) -> bytearray:
    from shared.records.header import set_base_offset

    buf = bytearray(raw)
    set_base_offset(buf, 0, base, 0)
    return buf


def test_read_committed_filter_skips_aborted_batches_until_their_marker() -> None:
    from shared.records.read_committed import AbortedFilter
    from shared.records.record import CONTROL_ABORT, CONTROL_COMMIT

    f = AbortedFilter([(1, 0)])  # producer 1's transaction from offset 0 was aborted
    steps = [_batch(0, 1), _batch(1, 2), _batch(2, 1), _batch(3, 2, marker=CONTROL_COMMIT),
             _batch(4, 1, marker=CONTROL_ABORT), _batch(5, 1), _batch(6, 3, transactional=False)]
    kept = [h.base_offset for h, m in steps if f.keep(h, m)]  # type: ignore[attr-defined]
    assert kept == [1, 5, 6]  # producer 1's later transaction (offset 5) was not aborted


def test_recovery_rebuilds_open_transactions_and_the_abort_index_from_the_log(tmp_path: os.PathLike[str]) -> None:
    from services.broker.log import PartitionLog
    from services.broker.log.producer_snapshot import read_snapshot, restore_producer_state, write_snapshot
    from shared.records.builder import build_control_batch, encode_batch
    from shared.records.record import CONTROL_ABORT

    log = PartitionLog(str(tmp_path))

    def data(base: int, pid: int, seq: int) -> bytes:
        return encode_batch([(0, None, b"v", ())], base_offset=base, producer_id=pid, producer_epoch=0,
                            base_sequence=seq, transactional=True)

    def marker(base: int, pid: int, kind: int) -> bytes:
        return bytes(_with_base(build_control_batch(kind, pid, 0, 0, coordinator_epoch=7), base))

    log.append_as_follower(data(0, 1, 0))
    log.append_as_follower(data(1, 2, 0))
    log.append_as_follower(marker(2, 1, CONTROL_ABORT))  # producer 1 aborts; producer 2 stays open
    assert not log.aborted_transactions(0, 3)  # a follower append indexes nothing by itself
    state = restore_producer_state(log)
    assert state.txn.open_transactions() == [(2, 1)]
    assert log.aborted_transactions(0, 3) == [AbortedTxn(1, 0, 2, 1)]
    assert state.txn.check_marker(1, 0, coordinator_epoch=6)[0] == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    # snapshot v2 keeps the open transaction and the coordinator epoch
    write_snapshot(str(tmp_path), 3, state)
    loaded = read_snapshot(str(tmp_path), 3)
    assert loaded is not None and loaded.txn.rows() == state.txn.rows()
    assert restore_producer_state(log).txn.open_transactions() == [(2, 1)]


def test_a_newer_epochs_batch_does_not_join_the_open_transaction_without_verification() -> None:
    """Transactions V2: EndTxn answers before the markers are written, so the next transaction's first batch
    (epoch + 1) may arrive while the previous one is still open here; it must not be folded into it."""
    s = TxnState()
    s.on_data(4, 1, 0, transactional=True)
    assert s.may_open(4, 1)
    assert not s.may_open(4, 2)
    s.on_marker(4, 2, 1, commit=True, coordinator_epoch=0)
    assert not s.may_open(4, 2)
    s.verified(4, 2)
    assert s.may_open(4, 2)


@pytest.mark.parametrize("checkpoint", ["at the log end", "behind it"])
def test_a_restarted_leader_with_a_current_checkpoint_has_its_replayed_transactions_stable(
        tmp_path: os.PathLike[str], checkpoint: str) -> None:
    """Recovery replays the markers of completed transactions; those below the high watermark are stable.
    With the high-watermark checkpoint already at the log end, the high watermark never moves after the
    restart, and a read_committed reader stalled at the first replayed transaction (CI, 4 December)."""
    import asyncio

    from services.broker.log import PartitionLog
    from services.broker.partition import Partition
    from shared.records.builder import build_control_batch, encode_batch
    from shared.records.record import CONTROL_COMMIT
    from shared.types import TopicPartition

    log = PartitionLog(str(tmp_path))
    log.append_as_follower(encode_batch([(0, None, b"v", ())], base_offset=0, producer_id=1, producer_epoch=0,
                                        base_sequence=0, transactional=True))
    log.append_as_follower(bytes(_with_base(build_control_batch(CONTROL_COMMIT, 1, 0, 0, coordinator_epoch=7), 1)))
    log.append_as_follower(encode_batch([(0, None, b"plain", ())], base_offset=2))
    end = log.log_end_offset
    assert end == 3

    async def restarted() -> Partition:  # a Partition holds asyncio objects: built inside a running loop
        p = Partition(TopicPartition("t", 0), log, 1, clock=lambda: 0,
                      high_watermark=end if checkpoint == "at the log end" else 1)
        p.update_state(1, 1, [1], [1], 1, 1)  # the sole replica, leader again
        return p

    p = asyncio.run(restarted())
    assert p.high_watermark == end
    assert p.last_stable_offset == end


def test_a_follower_truncated_then_leader_has_its_replayed_transactions_stable(tmp_path: os.PathLike[str]) -> None:
    """The same after a follower's truncation, which rebuilds the producer state from the log."""
    import asyncio

    from services.broker.log import PartitionLog
    from services.broker.partition import Partition
    from shared.records.builder import build_control_batch, encode_batch
    from shared.records.record import CONTROL_COMMIT
    from shared.types import TopicPartition

    log = PartitionLog(str(tmp_path))
    log.append_as_follower(encode_batch([(0, None, b"v", ())], base_offset=0, producer_id=1, producer_epoch=0,
                                        base_sequence=0, transactional=True))
    log.append_as_follower(bytes(_with_base(build_control_batch(CONTROL_COMMIT, 1, 0, 0, coordinator_epoch=7), 1)))
    log.append_as_follower(encode_batch([(0, None, b"divergent", ())], base_offset=2))

    async def truncated_then_leader() -> Partition:
        p = Partition(TopicPartition("t", 0), log, 1, clock=lambda: 0, high_watermark=2)
        p.update_state(2, 1, [1, 2], [1, 2], 1, 1)  # a follower of broker 2
        p.truncate_to(2)
        p.update_state(1, 2, [1], [1, 2], 2, 1)  # then leader, alone in the ISR: the high watermark stays
        return p

    p = asyncio.run(truncated_then_leader())
    assert (p.high_watermark, p.last_stable_offset) == (2, 2)
