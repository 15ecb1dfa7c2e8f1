"""The producer's delivery state (``IdempotenceState``): in-flight accounting under concurrent threads,
sequence numbers given back after a definite refusal, producer-id reset only once nothing is in flight."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

import pytest

from shared.client.idempotence import IdempotenceState, refusal_proves_unwritten
from shared.errors import RETRIABLE, ErrorCode
from shared.types import TopicPartition

TP = TopicPartition("t", 0)


@dataclass(eq=False)
class FakeBatch:
    tp: TopicPartition
    count: int
    base_sequence: int = -1
    encoded: tuple[bytes, bytes] | None = None


def _encoder(pid: int, epoch: int, seq: int) -> tuple[bytes, bytes]:
    return (f"{pid}/{epoch}/{seq}".encode(), b"")


@pytest.fixture
def tiny_switch_interval():
    """Switch threads as often as CPython allows, so that unguarded read-modify-writes interleave."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_in_flight_counts_survive_concurrent_senders_and_readers(tiny_switch_interval) -> None:
    """The sender counts a batch out while reader threads count others back in, on the same partition.
    A lost update leaves the count above zero for good: the partition stays muted and never sends again.
    (The producer's former unguarded ``d[tp] = d.get(tp, 0) ± 1`` lost updates in this very pattern.)"""
    state = IdempotenceState()
    rounds, readers = 20_000, 4
    returned = threading.Semaphore(0)
    start = threading.Barrier(readers + 1)

    def sender() -> None:
        start.wait()
        for _ in range(rounds * readers):
            state.sending(TP)
            returned.release()

    def reader() -> None:
        start.wait()
        for _ in range(rounds):
            returned.acquire()
            state.released(TP)

    threads = [threading.Thread(target=sender)] + [threading.Thread(target=reader) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state.in_flight(TP) == 0
    assert state.muted(max_in_flight=1) == set()
    assert not state.any_in_flight()


def test_sequences_stay_dense_when_refusals_race_with_new_sends(tiny_switch_interval) -> None:
    """The sender numbers new batches while a reader gives a refused batch's numbers back: every batch
    still alive ends with distinct, dense sequence numbers and the next number follows the last."""
    state = IdempotenceState()
    state.set_producer_id(7, 0)
    first = [FakeBatch(TP, 3) for _ in range(200)]
    for b in first:
        state.encode(b, _encoder)
    refused = first[::2]
    later = [FakeBatch(TP, 2) for _ in range(300)]

    def sender() -> None:
        for b in later:
            state.encode(b, _encoder)

    def reader() -> None:
        for b in refused:
            state.completed(b, unwritten=True)

    threads = [threading.Thread(target=sender), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alive = [b for b in first if b not in refused] + later
    for b in alive:  # re-sequenced batches are numbered again on their next send
        state.encode(b, _encoder)
    spans = sorted((b.base_sequence, b.base_sequence + b.count) for b in alive)
    assert spans[0][0] == 0
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert state.next_sequence(TP) == spans[-1][1]


def test_a_refused_batch_gives_its_numbers_back() -> None:
    state = IdempotenceState()
    a, b, c = FakeBatch(TP, 5), FakeBatch(TP, 5), FakeBatch(TP, 5)
    for x in (a, b, c):
        state.encode(x, _encoder)
    assert [x.base_sequence for x in (a, b, c)] == [0, 5, 10]
    state.completed(a, unwritten=True)
    assert [b.base_sequence, c.base_sequence] == [0, 5]
    assert b.encoded is None and c.encoded is None  # encoded again before their next send
    assert state.next_sequence(TP) == 10
    assert not state.reset_needed


def test_unknown_outcome_resets_the_producer_id_only_when_nothing_is_in_flight() -> None:
    state = IdempotenceState()
    state.set_producer_id(7, 0)
    a, b = FakeBatch(TP, 1), FakeBatch(TP, 1)
    for x in (a, b):
        state.encode(x, _encoder)
        state.sending(TP)
    state.released(TP)
    state.completed(a, unwritten=False)  # e.g. the connection was lost: it may be written
    assert state.reset_needed
    assert not state.reset_producer_id()  # b is still in flight
    assert state.producer_id == 7
    state.released(TP)
    assert state.reset_producer_id()
    assert (state.producer_id, b.base_sequence, b.encoded) == (-1, -1, None)
    assert state.next_sequence(TP) == 0 and not state.reset_needed


def test_acknowledgement_moves_the_expected_sequence() -> None:
    state = IdempotenceState()
    a, b = FakeBatch(TP, 4), FakeBatch(TP, 4)
    state.encode(a, _encoder)
    state.encode(b, _encoder)
    assert state.is_next_expected(a) and not state.is_next_expected(b)
    state.acknowledged(a)
    assert state.is_next_expected(b)


def test_first_refusal_is_reported_once_per_partition_and_code_until_an_ack() -> None:
    state = IdempotenceState()
    assert state.first_refusal(TP, ErrorCode.NOT_ENOUGH_REPLICAS)
    assert not state.first_refusal(TP, ErrorCode.NOT_ENOUGH_REPLICAS)
    assert state.first_refusal(TopicPartition("t", 1), ErrorCode.NOT_ENOUGH_REPLICAS)
    state.acknowledged(FakeBatch(TP, 1))
    assert state.first_refusal(TP, ErrorCode.NOT_ENOUGH_REPLICAS)


@pytest.mark.parametrize(("code", "unwritten"), [
    (ErrorCode.NOT_ENOUGH_REPLICAS, True),  # checked before the append
    (ErrorCode.MESSAGE_TOO_LARGE, True),
    (ErrorCode.CORRUPT_MESSAGE, True),
    (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, False),
    (ErrorCode.REQUEST_TIMED_OUT, False),  # also the acks=all wait, after the append
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, False),  # idem, when leadership moved during the wait
    (ErrorCode.NETWORK_EXCEPTION, False),
    (ErrorCode.UNKNOWN_SERVER_ERROR, False),
])
def test_which_refusals_prove_the_batch_unwritten(code: ErrorCode, unwritten: bool) -> None:
    assert refusal_proves_unwritten(code, code in RETRIABLE) is unwritten
