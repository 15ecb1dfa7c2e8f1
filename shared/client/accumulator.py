"""The record accumulator (Kafka's ``RecordAccumulator``): per-partition queues of ``ProducerBatch``.

The application's threads append (``Producer.send`` does the append inline, holding ``lock``); the
sender thread drains the batches that are ready, expires the ones that waited out
``delivery_timeout_ms`` and puts failed ones back for a retry. ``buffer_memory`` bounds the bytes not
yet acknowledged. No network, no producer ids: must not import the sender, the connection or the producer.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from shared.client.futures import KafkaTimeoutError, ProduceRequestResult
from shared.client.producer_batch import ProducerBatch
from shared.records.header import HEADER_SIZE
from shared.types import TopicPartition


def _pop_expired(dq: deque[ProducerBatch], now: float, timeout_s: float, out: list[ProducerBatch]) -> None:
    """Move the batches at the head of ``dq`` created more than ``timeout_s`` ago to ``out``, sealed."""
    while dq and now - dq[0].created > timeout_s:
        b = dq.popleft()
        b.sealed = True
        out.append(b)


class RecordAccumulator:
    """Per-partition queues of batches. ``Producer.send`` appends to a partition's open batch
    holding ``lock`` for a few operations; the sender is woken through ``wakeup`` only when a
    batch fills or a flush starts."""

    def __init__(self, batch_size: int, linger_s: float, buffer_memory: int = 32 * 1024 * 1024) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.buffer_memory = buffer_memory
        self.buffered = 0
        self.space = threading.Condition(threading.Lock())
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.open: dict[TopicPartition, ProducerBatch] = {}  # each partition's newest batch (maybe sealed)
        self.lock = threading.Lock()
        self.wakeup = threading.Event()
        self.incomplete: set[ProduceRequestResult] = set()
        self.flushing = 0
        self.closed = False

    def new_batch(self, tp: TopicPartition) -> ProducerBatch:
        """Open a new batch for ``tp`` (with ``lock`` held). ``Producer.send`` appends to it inline."""
        batch = ProducerBatch(tp, time.monotonic())
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = deque()
        dq.append(batch)
        self.open[tp] = batch
        self.incomplete.add(batch.result)
        return batch

    def wait_for_space(self, timeout_s: float) -> None:
        """Block while more than ``buffer_memory`` bytes are unacknowledged (Kafka's buffer.memory)."""
        if self.buffered <= self.buffer_memory:
            return
        deadline = time.monotonic() + timeout_s
        self.wakeup.set()
        with self.space:
            while self.buffered > self.buffer_memory:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(f"buffer_memory ({self.buffer_memory} bytes) still full after {timeout_s}s")
                self.space.wait(remaining)

    def drain_ready(self, now: float, muted: set[TopicPartition], expire_s: float,
                    held: Callable[[TopicPartition], bool] | None = None,
                    out_of_turn: Callable[[ProducerBatch], bool] | None = None,
                    ) -> tuple[list[ProducerBatch], list[ProducerBatch], float]:
        """Pop every sendable batch (full, lingered, flushing or closing) and, muted or not, every unsent
        batch created more than ``expire_s`` ago (Kafka's expiredBatches: delivery.timeout.ms bounds the
        time to success or failure, so a batch that waited out its deadline is never sent); also the next
        wake-up delay. ``out_of_turn(head)``: must a partition's head batch (a retry) wait for an older
        one to finish first?"""
        out: list[ProducerBatch] = []
        expired: list[ProducerBatch] = []
        next_check = self.linger_s if self.linger_s > 0 else 0.05
        with self.lock:
            for tp, dq in self.batches.items():
                _pop_expired(dq, now, expire_s, expired)
                if not dq or tp in muted or (held is not None and held(tp)):
                    continue
                b = dq[0]
                if out_of_turn is not None and out_of_turn(b):
                    continue
                waited = now - b.created
                # A sealed batch takes no more records (send_batch's, or one back for a retry): no linger.
                if (len(dq) > 1 or b.sealed or b.size >= self.batch_size or waited >= self.linger_s or self.flushing
                        or self.closed):
                    b.sealed = True
                    out.append(dq.popleft())
                else:
                    next_check = min(next_check, self.linger_s - waited)
        return out, expired, max(next_check, 0.0005)

    def expire(self, now: float, timeout_s: float) -> list[ProducerBatch]:
        """Pop the unsent batches created more than ``timeout_s`` ago (sealed: nothing more joins them)."""
        out: list[ProducerBatch] = []
        with self.lock:
            for dq in self.batches.values():
                _pop_expired(dq, now, timeout_s, out)
        return out

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a batch back for a retry: before every unsent batch, and in sequence order among retries."""
        with self.lock:
            dq = self.batches.setdefault(batch.tp, deque())
            i = 0
            while i < len(dq) and 0 <= dq[i].base_sequence < batch.base_sequence:
                i += 1
            dq.insert(i, batch)
        self.wakeup.set()

    def done(self, batch: ProducerBatch) -> None:
        with self.lock:
            self.incomplete.discard(batch.result)
            if self.open.get(batch.tp) is batch:
                del self.open[batch.tp]
            self.buffered -= batch.size - HEADER_SIZE
        with self.space:
            self.space.notify_all()

    def pending_results(self) -> list[ProduceRequestResult]:
        with self.lock:
            return list(self.incomplete)

    def has_unsent(self) -> bool:
        with self.lock:
            return any(self.batches.values())
