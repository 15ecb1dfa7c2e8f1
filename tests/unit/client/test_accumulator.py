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


def test_retries_go_one_at_a_time_oldest_first_and_new_batches_wait_behind_them() -> None:
    """A CI run lost a send to OUT_OF_ORDER_SEQUENCE_NUMBER after a leader kill: while the oldest batch
    kept being refused by a stale leader, the batches pipelined behind it were written past it, more
    than the broker's 5 cached ones, so its own retry could no longer be recognised as a duplicate.
    As Kafka's producer does, a retry goes out only as its partition's oldest unfinished batch."""
    from shared.client.idempotence import IdempotenceState

    state = IdempotenceState()
    state.set_producer_id(1, 0)
    acc = _accumulator((TP, 1.0), (TP, 1.0), (TP, 1.0))
    first = acc.drain_ready(now=1.1, muted=set(), expire_s=60, out_of_turn=state.out_of_turn)[0]
    second = acc.drain_ready(now=1.1, muted=set(), expire_s=60, out_of_turn=state.out_of_turn)[0]
    a, b = first[0], second[0]
    for x in (a, b):
        state.encode(x, lambda pid, epoch, seq: (b"h", b"r"))
        state.sending(TP)
    # Both attempts fail (the leader died); both come back, and a new batch waits behind them.
    for x in (b, a):
        state.released(TP)
        acc.reenqueue(x)
    assert list(acc.batches[TP])[:2] == [a, b]
    ready, _, _ = acc.drain_ready(now=1.2, muted=set(), expire_s=60, out_of_turn=state.out_of_turn)
    assert ready == [a]
    state.sending(TP)
    # While a is out again, b (a retry, not the oldest) and the new batch behind it wait.
    for _ in range(3):
        assert acc.drain_ready(now=1.3, muted=set(), expire_s=60, out_of_turn=state.out_of_turn)[0] == []
    state.released(TP)
    state.acknowledged(a)
    assert acc.drain_ready(now=1.4, muted=set(), expire_s=60, out_of_turn=state.out_of_turn)[0] == [b]
    state.sending(TP)
    state.released(TP)
    state.acknowledged(b)
    ready, _, _ = acc.drain_ready(now=1.5, muted=set(), expire_s=60, out_of_turn=state.out_of_turn)
    assert len(ready) == 1 and ready[0].base_sequence == -1  # the new batch, numbered on its first send
