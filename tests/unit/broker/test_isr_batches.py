"""The broker's queue of ISR proposals (services/broker/isr_batches.py), pure: one pending proposal per
partition, batches of at most ``max_batch`` oldest first, one batch in flight at a time."""

from __future__ import annotations

import pytest

from services.broker.isr_batches import IsrChangeQueue, IsrProposal
from shared.types import TopicPartition


def prop(p: int, isr: tuple[int, ...] = (1, 2)) -> IsrProposal:
    return IsrProposal(TopicPartition("t", p), 3, 7, isr)


def test_batches_are_oldest_first_bounded_and_one_at_a_time() -> None:
    q = IsrChangeQueue(max_batch=2)
    for p in range(5):
        assert q.propose(prop(p))
    first = q.next_batch()
    assert [x.tp.partition for x in first] == [0, 1]
    assert q.next_batch() == []  # one request in flight
    assert q.propose(prop(5))  # others still queue meanwhile
    assert q.complete() == first
    assert [x.tp.partition for x in q.next_batch()] == [2, 3]
    q.complete()
    assert [x.tp.partition for x in q.next_batch()] == [4, 5]
    q.complete()
    assert q.next_batch() == [] and q.queued == 0 and q.in_flight == 0


def test_a_partition_has_at_most_one_pending_proposal() -> None:
    q = IsrChangeQueue()
    assert q.propose(prop(0))
    assert not q.propose(prop(0, (1,)))  # queued: the second is ignored
    assert q.busy(TopicPartition("t", 0))
    [sent] = q.next_batch()
    assert sent.new_isr == (1, 2)
    assert not q.propose(prop(0, (1,)))  # in flight: still ignored
    q.complete([TopicPartition("t", 0)])
    assert not q.busy(TopicPartition("t", 0))
    assert q.propose(prop(0, (1,)))


def test_partial_completion() -> None:
    q = IsrChangeQueue()
    q.propose(prop(0))
    q.propose(prop(1))
    q.next_batch()
    assert [x.tp.partition for x in q.complete([TopicPartition("t", 1), TopicPartition("t", 9)])] == [1]
    assert q.busy(TopicPartition("t", 0)) and q.in_flight == 1
    assert q.queued == 0


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError):
        IsrChangeQueue(max_batch=0)
