"""The accumulator never hands out a batch that waited out ``delivery_timeout_ms`` (Kafka's expiredBatches).

A batch put back for a retry can wait long (the metadata refresh may stall on a paused broker). Sent
after its deadline it could be acknowledged by a new leader long after its caller was owed an answer,
so the sender fails it instead, whether its partition is muted or not."""

from __future__ import annotations

from shared.client.accumulator import RecordAccumulator
from shared.types import TopicPartition

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def _accumulator(*created: tuple[TopicPartition, float]) -> RecordAccumulator:
    acc = RecordAccumulator(batch_size=16384, linger_s=0.0)
    for tp, at in created:
        with acc.lock:
            acc.new_batch(tp).created = at
    return acc


def test_a_batch_past_its_delivery_timeout_is_expired_not_sent() -> None:
    acc = _accumulator((TP, 0.0), (OTHER, 1.5))
    ready, expired, _ = acc.drain_ready(now=2.0, muted=set(), expire_s=1.2)
    assert [b.tp for b in expired] == [TP]
    assert [b.tp for b in ready] == [OTHER]
    assert expired[0].sealed
    assert not acc.has_unsent()


def test_a_muted_partition_still_expires_and_its_younger_batches_stay_queued() -> None:
    acc = _accumulator((TP, 0.0), (TP, 1.9))
    ready, expired, _ = acc.drain_ready(now=2.0, muted={TP}, expire_s=1.2)
    assert ready == [] and len(expired) == 1 and expired[0].created == 0.0
    assert [b.created for b in acc.batches[TP]] == [1.9]


def test_a_retry_back_at_the_head_expires_on_its_first_creation_time() -> None:
    acc = _accumulator((TP, 0.0))
    ready, expired, _ = acc.drain_ready(now=0.1, muted=set(), expire_s=1.2)
    assert len(ready) == 1 and expired == []
    acc.reenqueue(ready[0])  # the attempt timed out; the batch waits for its retry
    ready, expired, _ = acc.drain_ready(now=1.3, muted=set(), expire_s=1.2)
    assert ready == [] and len(expired) == 1


def test_a_held_partition_is_asked_as_it_is_drained_and_waits() -> None:
    acc = _accumulator((TP, 1.0), (OTHER, 1.0))
    asked: list[TopicPartition] = []

    def held(tp: TopicPartition) -> bool:
        asked.append(tp)
        return tp == OTHER

    ready, expired, _ = acc.drain_ready(now=1.1, muted=set(), expire_s=1.2, held=held)
    assert [b.tp for b in ready] == [TP] and expired == [] and sorted(asked) == [TP, OTHER]
    assert [b.tp for b in acc.batches[OTHER]] == [OTHER]
