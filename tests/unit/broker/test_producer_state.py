"""The leader's idempotent-producer window (services/broker/producer_state.py), pure: duplicates of the
last five batches are recognised with their original offsets, gaps and older epochs are refused, and the
state rebuilt from batch headers (followers, recovery) answers the same."""

from __future__ import annotations

import pytest

from services.broker.producer_state import (
    MAX_CACHED_BATCHES,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
)
from shared.records import BatchHeader, encode_batch


def header(seq: int, count: int = 2, pid: int = 7, epoch: int = 0, base_offset: int = 0) -> BatchHeader:
    raw = encode_batch([(1, None, b"v", None)] * count, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       base_offset=base_offset)
    return BatchHeader.parse(raw)


def append(state: ProducerStateManager, h: BatchHeader, first_offset: int) -> None:
    assert state.check(h) is None
    state.update(h, first_offset, first_offset + h.records_count - 1)


def test_a_new_producer_starts_at_sequence_zero() -> None:
    state = ProducerStateManager()
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(4))
    append(state, header(0), 0)


def test_duplicates_within_the_window_are_acknowledged_with_their_original_offsets() -> None:
    state = ProducerStateManager()
    for i in range(MAX_CACHED_BATCHES + 2):  # 7 batches of 2 records: sequences 0..13, offsets 100..
        append(state, header(2 * i), 100 + 2 * i)
    dup = state.check(header(2 * 6))
    assert dup is not None and (dup.first_offset, dup.last_offset) == (112, 113)
    dup = state.check(header(2 * 2))  # the oldest batch still in the window of five
    assert dup is not None and dup.first_offset == 104
    with pytest.raises(OutOfOrderSequenceError):  # fell out of the window: neither next nor a known duplicate
        state.check(header(2 * 1))


def test_a_gap_is_out_of_order_and_the_next_sequence_is_accepted() -> None:
    state = ProducerStateManager()
    append(state, header(0), 0)
    with pytest.raises(OutOfOrderSequenceError, match="expected sequence 2, got 3"):
        state.check(header(3))
    append(state, header(2), 2)


def test_epochs_fence_older_producers_and_a_new_epoch_restarts_at_zero() -> None:
    state = ProducerStateManager()
    append(state, header(0, epoch=1), 0)
    with pytest.raises(InvalidProducerEpochError):
        state.check(header(2, epoch=0))
    with pytest.raises(OutOfOrderSequenceError):
        state.check(header(6, epoch=2))
    append(state, header(0, epoch=2), 2)


def test_sequences_wrap_after_int_max() -> None:
    state = ProducerStateManager()
    append(state, header(0), 0)
    last = header(2**31 - 2, count=1)
    state.update(last, 1, 1)
    assert state.check(header(2**31 - 1, count=1)) is None
    state.update(header(2**31 - 1, count=1), 2, 2)
    assert state.check(header(0, count=1)) is None  # wraps to 0


def test_rebuilt_state_recognises_the_same_duplicates() -> None:
    headers = [header(2 * i, base_offset=10 * i) for i in range(3)]
    state = ProducerStateManager()
    state.rebuild(headers)
    dup = state.check(header(2))
    assert dup is not None and dup.first_offset == 10
    assert state.check(header(6)) is None
    assert state.check(header(0, pid=-1)) is None  # not idempotent: no check
