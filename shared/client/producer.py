"""The producer: per-partition batching (batch_size / linger_ms), a sender thread, pipelined produce streams.

``send()`` only appends to the accumulator and returns a future; the sender
thread drains ready batches, encodes them (RecordBatch v2), groups them by
partition leader and writes them on one ``ProduceStream`` per broker with up
to ``max_in_flight_requests_per_connection`` requests outstanding. Retriable
errors refresh metadata and re-enqueue the batch (in order, at the front).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import grpc

from shared.client.client_metrics import ProducerStats
from shared.client.cluster import ClusterClient
from shared.client.futures import FutureRecordMetadata, KafkaTimeoutError, ProduceRequestResult
from shared.client.grpc_calls import forget_traceback
from shared.client.idempotence import IdempotenceState, refusal_proves_unwritten
from shared.client.partitioner import MURMUR2_SEED, StickyPartitioner, murmurhash2
from shared.errors import RETRIABLE, ErrorCode, TidelogError, error_for
from shared.proto import tidelog_pb2 as pb
from shared.proto.produce_wire import encode_produce_request
from shared.records.builder import BatchBuilder, encode_headers
from shared.records.compression import CompressionType
from shared.records.header import HEADER_SIZE
from shared.records.record import Header
from shared.runtime import tune_allocator, tune_gc, tune_switch_interval
from shared.types import TopicPartition

log = logging.getLogger(__name__)

_time = time.time
_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}


@dataclass(eq=False, slots=True)  # identity: batches are looked up in lists
class ProducerBatch:
    tp: TopicPartition
    created: float
    # The records section, encoded by the builder as records are appended (as Kafka's MemoryRecordsBuilder
    # does): the pieces of each record, joined once when the batch closes. Encoding in send() keeps every
    # record's work on the thread that has its objects in cache, and leaves no per-record object for the
    # cyclic GC to track while the batch waits for its acknowledgement.
    records: BatchBuilder = field(default_factory=BatchBuilder)
    size: int = HEADER_SIZE
    attempts: int = 0
    base_sequence: int = -1
    result: ProduceRequestResult = field(init=False)
    encoded: tuple[bytes, bytes] | None = None  # the batch as (header, records section), set when sent
    sealed: bool = False  # drained once: it takes no more records, even when back in the queue for a retry
    maybe_written: bool = False  # an attempt reached the broker and got no definite refusal
    last_error: TidelogError | None = None  # why the last attempt failed, named if the batch then expires

    def __post_init__(self) -> None:
        self.result = ProduceRequestResult(self.tp)

    @property
    def count(self) -> int:
        return self.records.count

    def close(self) -> None:
        """Take no more records and join the records section. Called by ``send()`` with the
        accumulator's lock held, or by the sender on a batch it drained (sealed: send() leaves it).

        ``send()`` closes a batch when the next record does not fit, so the join, and freeing the
        parts, happen on the application's thread, which just touched every part. Done by the
        sender thread on another CPU, the same work cost several times more (cache misses and
        reference counts bouncing between CPUs)."""
        self.sealed = True
        self.records.close()

    def encode(self, compression: CompressionType, *, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, transactional: bool = False) -> tuple[bytes, bytes]:
        """The batch as header and records section; the records are joined only once, and a
        re-sequenced batch gets only a new header."""
        b = self.records
        b.compression = compression
        b.producer_id, b.producer_epoch, b.base_sequence = producer_id, producer_epoch, base_sequence
        b.transactional = transactional
        return b.build_pieces()


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

    def drain_ready(self, now: float, muted: set[TopicPartition],
                    expire_s: float) -> tuple[list[ProducerBatch], list[ProducerBatch], float]:
        """Pop every sendable batch (full, lingered, flushing or closing) and, muted or not, every unsent
        batch created more than ``expire_s`` ago (Kafka's expiredBatches: delivery.timeout.ms bounds the
        time to success or failure, so a batch that waited out its deadline is never sent); also the next
        wake-up delay."""
        out: list[ProducerBatch] = []
        expired: list[ProducerBatch] = []
        next_check = self.linger_s if self.linger_s > 0 else 0.05
        with self.lock:
            for tp, dq in self.batches.items():
                _pop_expired(dq, now, expire_s, expired)
                if not dq or tp in muted:
                    continue
                b = dq[0]
                waited = now - b.created
                if len(dq) > 1 or b.size >= self.batch_size or waited >= self.linger_s or self.flushing or self.closed:
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


@dataclass
class InFlight:
    correlation_id: int
    batches: dict[TopicPartition, ProducerBatch]
    acks: int
    sent_at: float = 0.0


class ProduceConnection:
    """One ProduceStream to a broker, with a reader thread matching responses to requests in order."""

    def __init__(self, producer: Producer, broker_id: int, address: str) -> None:
        self.producer = producer
        self.broker_id = broker_id
        self.address = address
        self.requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.inflight: deque[InFlight] = deque()
        self.slots = threading.Semaphore(producer.max_in_flight)
        self.broken = False
        self.timed_out = False
        self.lock = threading.Lock()
        stub = producer.cluster.reachable_stub(address)
        if stub is None:
            raise TidelogError(f"broker {broker_id} at {address} is not reachable", code=ErrorCode.NETWORK_EXCEPTION)
        self.call = stub.ProduceStreamRaw(self._iter_requests())
        self.reader = threading.Thread(target=self._read, name=f"tidelog-produce-{broker_id}", daemon=True)
        self.reader.start()

    def _iter_requests(self) -> Iterator[bytes]:
        while True:
            req = self.requests.get()
            if req is None:
                return
            yield req

    def send(self, req: bytes, correlation_id: int, batches: dict[TopicPartition, ProducerBatch], acks: int) -> bool:
        """Queue a serialised ProduceRequest; False if the stream is broken."""
        while not self.slots.acquire(timeout=0.1):
            self.check_timeout(time.monotonic())
            if self.broken:
                return False
        with self.lock:
            if self.broken:
                self.slots.release()
                return False
            self.inflight.append(InFlight(correlation_id, batches, acks, time.monotonic()))
        self.requests.put(req)
        return True

    def check_timeout(self, now: float) -> None:
        """Kafka's request.timeout.ms: when the oldest request has waited longer, drop the connection;
        its requests fail as REQUEST_TIMED_OUT and their batches are retried (or expire)."""
        with self.lock:
            late = bool(self.inflight) and now - self.inflight[0].sent_at > self.producer.request_timeout_ms / 1000
            if late and not self.broken and not self.timed_out:
                self.timed_out = True
            else:
                late = False
        if late:
            log.warning("produce request to broker %s got no response within %s ms; reconnecting",
                        self.broker_id, self.producer.request_timeout_ms)
            self.cancel()

    def _read(self) -> None:
        try:
            for resp in self.call:
                with self.lock:
                    entry = self.inflight.popleft()
                if resp.throttle_time_ms > 0:  # over a quota: send this broker nothing for that long
                    self.producer._throttled(self.broker_id, resp.throttle_time_ms)
                self.slots.release()
                self.producer._on_response(entry, resp)
        except grpc.RpcError as exc:
            forget_traceback(exc)
            if exc.code() != grpc.StatusCode.CANCELLED or not self.producer._closing:
                log.debug("produce stream to broker %s failed: %s", self.broker_id, exc.code())
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                self.producer.cluster.forget(self.address)
        finally:
            with self.lock:
                self.broken = True
                pending = list(self.inflight)
                self.inflight.clear()
            error = (TidelogError(f"no response within {self.producer.request_timeout_ms} ms",
                                  code=ErrorCode.REQUEST_TIMED_OUT) if self.timed_out
                     else TidelogError("connection lost", code=ErrorCode.NETWORK_EXCEPTION))
            for entry in pending:
                self.slots.release()
                self.producer._on_failure(entry, error)

    def close(self) -> None:
        self.requests.put(None)

    def cancel(self) -> None:
        self.call.cancel()


class Producer:
    """Kafka-style producer. ``send()`` is thread-safe and returns a future of ``RecordMetadata``."""

    def __init__(
        self,
        bootstrap_servers: str | Iterable[str],
        *,
        acks: str | int = "all",
        linger_ms: float = 5,
        batch_size: int = 16_384,
        compression_type: str | None = None,
        enable_idempotence: bool | None = None,
        retries: int = 2_147_483_647,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_in_flight_requests_per_connection: int = 5,
        max_request_size: int = 1_048_576,
        max_block_ms: int = 60_000,
        buffer_memory: int = 33_554_432,
        client_id: str = "tidelog-producer",
    ) -> None:
        if acks not in _ACKS:
            raise ValueError(f"acks must be 'all', -1, 0 or 1, got {acks!r}")
        if enable_idempotence and _ACKS[acks] != -1:
            raise ValueError("enable_idempotence=True requires acks='all' (as in Kafka)")
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        if delivery_timeout_ms < linger_ms + request_timeout_ms:  # Kafka's ConfigException
            raise ValueError(f"delivery_timeout_ms ({delivery_timeout_ms}) should be equal to or larger than "
                             f"linger_ms + request_timeout_ms ({linger_ms + request_timeout_ms})")
        tune_allocator()
        tune_switch_interval()
        tune_gc()
        self.acks = _ACKS[acks]
        # Kafka's default: idempotence on, unless acks was set to something other than all.
        self.idempotent = self.acks == -1 if enable_idempotence is None else enable_idempotence
        # Producer id, sequence numbers and in-flight counts: one object, one lock (the sender thread and
        # the reader threads all update them).
        self.state = IdempotenceState()
        self.compression = CompressionType.parse(compression_type)
        self.batch_size = batch_size
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self.max_request_size = max(max_request_size, batch_size)
        self.max_block_s = max_block_ms / 1000
        self.client_id = client_id
        self.cluster = ClusterClient(bootstrap_servers, client_id, request_timeout_ms)
        self.accumulator = RecordAccumulator(batch_size, linger_ms / 1000, max(buffer_memory, batch_size))
        self.partitioner = StickyPartitioner()
        self._partition_counts: dict[str, int] = {}
        self._topic_partitions: dict[str, list[TopicPartition]] = {}  # by topic, indexed by partition
        self._connections: dict[int, ProduceConnection] = {}
        self.stats = ProducerStats()
        self._correlation = itertools.count(1)
        self._closing = False
        self._need_refresh = threading.Event()
        self._retry_after: dict[TopicPartition, float] = {}
        self._throttled_until: dict[int, float] = {}  # broker -> end of its last throttle_time_ms (KIP-219)
        self.throttled_responses = 0  # responses that carried a throttle_time_ms (Kafka's produce-throttle-time)
        self.throttle_time_ms_max = 0
        self._sender = threading.Thread(target=self._run, name="tidelog-producer-sender", daemon=True)
        self._sender.start()

    # -- application API ---------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None,
             headers: Sequence[Header] | None = None, timestamp: int | None = None) -> FutureRecordMetadata:
        """Queue a record; the future resolves to its ``RecordMetadata`` once acknowledged (per ``acks``)."""
        if self._closing:
            raise RuntimeError("producer is closed")
        if value is not None and type(value) is not bytes:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise TypeError(f"value must be bytes or None, got {type(value).__name__}")
            value = bytes(value)
        if key is not None and type(key) is not bytes:
            if not isinstance(key, bytes | bytearray | memoryview):
                raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
            key = bytes(key)
        tps = self._topic_partitions.get(topic)
        if tps is None or len(tps) != self._partition_counts.get(topic):
            tps = self._load_topic(topic)
        n = len(tps)
        if partition is None:
            if key is not None:  # Kafka's default partitioner (one partition: skip the hash)
                partition = (murmurhash2(key, MURMUR2_SEED) & 0x7FFFFFFF) % n if n > 1 else 0
            else:
                partition = self.partitioner.partition(topic, None, n)
        elif not 0 <= partition < n:
            tps = self._wait_for_partition(topic, partition)
        tp = tps[partition]
        if timestamp is None:
            timestamp = int(_time() * 1000)
        # An upper bound of the record's size, as Kafka estimates. Headers are encoded here, before the
        # accumulator is touched: bad headers fail this call and nothing else.
        hb = encode_headers(headers) if headers else b"\x00"
        size = 21 + len(hb) + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        acc = self.accumulator
        if acc.buffered > acc.buffer_memory:
            acc.wait_for_space(self.max_block_s)
        # The accumulator's append, inline: this runs once per record.
        with acc.lock:
            batch = acc.open.get(tp)
            new = (batch is None or batch.sealed
                   or (batch.size + size > acc.batch_size and batch.size > HEADER_SIZE))
            if new:
                if batch is not None and not batch.sealed:
                    batch.close()  # full: join it here, where its records are still in this CPU's cache
                batch = acc.new_batch(tp)
            i = batch.records.append(value, key, timestamp, hb if headers else None)
            batch.size += size
            acc.buffered += size
        if new:
            # A new batch (or a full previous one): the sender may be sleeping past this batch's linger.
            acc.wakeup.set()
            if key is None:  # the sticky partition moves on when its batch is full
                self.partitioner.on_new_batch(topic, partition, n)
        return FutureRecordMetadata(batch.result, i, timestamp)

    def _load_topic(self, topic: str) -> list[TopicPartition]:
        n = self._partition_counts.get(topic)
        if n is None:
            n = self._partition_counts[topic] = len(self.cluster.partitions_for(topic, self.max_block_s))
        tps = self._topic_partitions[topic] = [TopicPartition(topic, p) for p in range(n)]
        return tps

    def _wait_for_partition(self, topic: str, partition: int) -> list[TopicPartition]:
        """A partition past the known count: refresh metadata until it shows up (the topic may just have
        grown), up to ``max_block_ms``, as Kafka's producer waits for metadata."""
        if partition < 0:
            raise ValueError(f"partition {partition} out of range for {topic}")
        deadline = time.monotonic() + self.max_block_s
        while True:
            n = len(self.cluster.refresh([topic]).topics.get(topic, {}))
            if partition < n:
                self._partition_counts[topic] = n
                return self._load_topic(topic)
            if time.monotonic() >= deadline:
                raise ValueError(f"partition {partition} out of range for {topic} ({n} partitions after "
                                 f"{self.max_block_s:g} s)")
            time.sleep(0.1)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered and wait for every outstanding send to complete."""
        acc = self.accumulator
        deadline = None if timeout is None else time.monotonic() + timeout
        with acc.lock:
            acc.flushing += 1
        acc.wakeup.set()
        try:
            for r in acc.pending_results():
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
                if not r.wait(remaining):
                    raise KafkaTimeoutError(f"flush did not complete within {timeout}s")
        finally:
            with acc.lock:
                acc.flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        if self._closing:
            return
        try:
            self.flush(timeout)
        finally:
            self._closing = True
            self.accumulator.closed = True
            self.accumulator.wakeup.set()
            self._sender.join(timeout=5)
            for conn in list(self._connections.values()):
                conn.close()
            for conn in list(self._connections.values()):
                conn.reader.join(timeout=2)
                conn.cancel()
            # Free the calls now, not at interpreter exit (see shared.client.grpc_calls).
            self._connections.clear()
            self.cluster.close()

    def metrics(self) -> dict[str, float]:
        """Kafka's producer figures: record-send-rate, batch-size-avg, request-latency-avg (ms), ..."""
        return self.stats.snapshot()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def producer_id(self) -> int:
        return self.state.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.state.producer_epoch

    def partitions_for(self, topic: str) -> list[int]:
        return sorted(self.cluster.partitions_for(topic, self.max_block_s))

    # -- sender thread ------------------------------------------------------------------------------------

    def _run(self) -> None:
        acc = self.accumulator
        while True:
            if self._need_refresh.is_set():
                self._need_refresh.clear()
                try:
                    snap = self.cluster.refresh()
                    for t, parts in snap.topics.items():
                        self._partition_counts[t] = len(parts)
                except TidelogError as exc:
                    log.debug("metadata refresh failed: %s", exc)
                    time.sleep(self.retry_backoff_s)
            for conn in list(self._connections.values()):
                conn.check_timeout(time.monotonic())
            if self.state.reset_needed:
                if not self._take_new_producer_id():  # let every request in flight resolve first, as Kafka does
                    self._expire_waiting()
                    acc.wakeup.wait(0.01)
                    acc.wakeup.clear()
                    continue
            if self.idempotent and not self.state.has_producer_id() and acc.has_unsent():
                if not self._init_producer_id():
                    self._expire_waiting()
                    time.sleep(self.retry_backoff_s)
                    continue
            now = time.monotonic()
            muted = {tp for tp, t in list(self._retry_after.items()) if t > now}
            if self._throttled_until:
                muted |= self._throttled_partitions(now)
            if self.idempotent:  # at most max_in_flight batches per partition (Kafka's limit of 5)
                muted |= self.state.muted(self.max_in_flight)
            batches, expired, wait = acc.drain_ready(now, muted, self.delivery_timeout_s)
            if expired:
                self._fail_expired(expired)
            if batches:
                self._send_batches(batches)
                continue
            if acc.closed and not acc.has_unsent():
                return
            acc.wakeup.wait(wait)
            acc.wakeup.clear()

    def _expire_waiting(self) -> None:
        """Fail the batches that waited unsent past ``delivery_timeout_ms`` (Kafka's expired batches):
        while no broker can hand out a producer id, nothing else would ever complete them."""
        self._fail_expired(self.accumulator.expire(time.monotonic(), self.delivery_timeout_s))

    def _fail_expired(self, batches: list[ProducerBatch]) -> None:
        for batch in batches:
            if self.idempotent:
                self.state.completed(batch, unwritten=not batch.maybe_written)
            cause = f" ({batch.last_error})" if batch.last_error is not None else " waiting to be sent"
            batch.result.complete(-1, -1, KafkaTimeoutError(
                f"{batch.tp}: batch expired after {self.delivery_timeout_s}s{cause}"))
            self.accumulator.done(batch)

    def _throttled(self, broker_id: int, throttle_ms: int) -> None:
        self._throttled_until[broker_id] = time.monotonic() + throttle_ms / 1000
        self.throttled_responses += 1
        self.throttle_time_ms_max = max(self.throttle_time_ms_max, throttle_ms)

    def _throttled_partitions(self, now: float) -> set[TopicPartition]:
        """Partitions led by a broker whose last response asked for a pause (throttle_time_ms)."""
        brokers = {b for b, t in list(self._throttled_until.items()) if t > now}
        if not brokers:
            self._throttled_until.clear()
            return set()
        out = set()
        for tp in list(self.accumulator.batches):
            with contextlib.suppress(TidelogError):
                if self.cluster.leader_for(tp) in brokers:
                    out.add(tp)
        return out

    def _take_new_producer_id(self) -> bool:
        """After a batch failed with an unknown outcome, its sequence numbers can neither be reused (it
        may be written) nor skipped (it may not be, and the broker accepts only the next number): every
        later batch of the partition would be refused. So, as Kafka's idempotent producer does, start
        over with a new producer id once nothing is in flight (see ``IdempotenceState.reset_producer_id``)."""
        old = self.state.producer_id
        if not self.state.reset_producer_id():
            return False
        log.warning("idempotent producer %s: a batch failed with an unknown outcome (it may or may not be written); "
                    "taking a new producer id", old)
        return True

    def _init_producer_id(self) -> bool:
        """Get a producer id for idempotent sends (any broker allocates one)."""
        try:
            snap = self.cluster.snapshot if self.cluster.snapshot.brokers else self.cluster.refresh()
            for address in list(snap.brokers.values()) + self.cluster.bootstrap:
                stub = self.cluster.reachable_stub(address)
                if stub is None:
                    continue
                try:
                    resp = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=5)
                except grpc.RpcError:
                    continue
                if resp.error_code == 0:
                    self.state.set_producer_id(resp.producer_id, resp.producer_epoch)
                    return True
        except TidelogError as exc:
            log.warning("InitProducerId failed: %s", exc)
        return False

    def _release(self, batch: ProducerBatch) -> None:
        if self.idempotent:
            self.state.released(batch.tp)
            self.accumulator.wakeup.set()

    def _retriable(self, batch: ProducerBatch, error: TidelogError) -> bool:
        if error.code in RETRIABLE:
            return True
        # With several batches in flight, a batch behind a failed one arrives out of order: send it
        # again after its predecessor. A batch re-sequenced since it was sent (encoded is None) was
        # refused for its old number. Only the very next expected sequence being refused is fatal.
        return (self.idempotent and error.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                and (batch.encoded is None or not self.state.is_next_expected(batch)))

    def _expire_or_retry(self, batch: ProducerBatch, error: TidelogError, refused: bool = False,
                         sent: bool = True) -> None:
        """Retry ``batch`` or fail it. ``refused``: the error is the broker's answer to this very batch;
        ``sent``: the attempt reached the wire (False when no leader or connection was found).

        A definite refusal (NOT_ENOUGH_REPLICAS, or any non-retriable answer but UNKNOWN_SERVER_ERROR,
        see ``refusal_proves_unwritten``) proves the attempt was not written. Other retriable answers
        may come after the append (REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER from the acks=all wait), and a
        lost connection says nothing: giving those numbers back could make a later batch look like a
        duplicate of a written one, which the broker would acknowledge without writing it."""
        self._release(batch)
        batch.attempts += 1
        batch.last_error = error
        if refused and refusal_proves_unwritten(error.code, error.retriable):
            if error.retriable and self.state.first_refusal(batch.tp, error.code):
                log.warning("%s: the broker refused a batch: %s; retrying for up to delivery_timeout_ms (%d ms)",
                            batch.tp, error, int(self.delivery_timeout_s * 1000))
        elif sent:
            batch.maybe_written = True
        expired = time.monotonic() - batch.created > self.delivery_timeout_s
        if self._retriable(batch, error) and batch.attempts <= self.retries and not expired and not self._closing:
            self._need_refresh.set()
            self._retry_after[batch.tp] = time.monotonic() + self.retry_backoff_s
            self.accumulator.reenqueue(batch)
            return
        if expired:
            error = KafkaTimeoutError(f"{batch.tp}: batch expired after {self.delivery_timeout_s}s ({error})")
        if self.idempotent:
            # Every attempt was refused before the append (or never sent): give the numbers back.
            # Otherwise one attempt may be written, and the producer id must be replaced.
            self.state.completed(batch, unwritten=not batch.maybe_written)
            self.accumulator.wakeup.set()
        batch.result.complete(-1, -1, error)
        self.accumulator.done(batch)

    def _send_batches(self, batches: list[ProducerBatch]) -> None:
        by_broker: dict[int, list[ProducerBatch]] = {}
        for b in batches:
            try:
                leader = self.cluster.leader_for(b.tp)
                if leader < 0 or leader not in self.cluster.snapshot.brokers:
                    raise TidelogError(f"{b.tp} has no leader", code=ErrorCode.LEADER_NOT_AVAILABLE)
            except TidelogError as exc:
                self._expire_or_retry(b, exc, sent=False)
                continue
            by_broker.setdefault(leader, []).append(b)
        for broker_id, group in by_broker.items():
            request_batches: dict[TopicPartition, ProducerBatch] = {}
            payloads: dict[TopicPartition, tuple[bytes, bytes]] = {}
            size = 0
            for b in group:
                payload = self._encoded(b)
                payload_size = len(payload[0]) + len(payload[1])
                if self.idempotent:
                    self.state.sending(b.tp)
                if request_batches and (size + payload_size > self.max_request_size or b.tp in request_batches):
                    self._dispatch(broker_id, request_batches, payloads)
                    request_batches, payloads, size = {}, {}, 0
                request_batches[b.tp] = b
                payloads[b.tp] = payload
                size += payload_size
            if request_batches:
                self._dispatch(broker_id, request_batches, payloads)

    def _encoded(self, b: ProducerBatch) -> tuple[bytes, bytes]:
        """The batch's header and records, encoded on its first send and again after it was re-sequenced."""
        if not self.idempotent:
            if b.encoded is None:
                b.encoded = b.encode(self.compression)
            return b.encoded
        return self.state.encode(b, lambda pid, epoch, seq: b.encode(
            self.compression, producer_id=pid, producer_epoch=epoch, base_sequence=seq))

    def _connection(self, broker_id: int) -> ProduceConnection:
        conn = self._connections.get(broker_id)
        address = self.cluster.snapshot.brokers[broker_id]
        if conn is None or conn.broken or conn.address != address:
            if conn is not None:
                conn.close()
            conn = self._connections[broker_id] = ProduceConnection(self, broker_id, address)
        return conn

    def _dispatch(self, broker_id: int, batches: dict[TopicPartition, ProducerBatch],
                  payloads: dict[TopicPartition, tuple[bytes, bytes]]) -> None:
        by_topic: dict[str, list[tuple[int, tuple[bytes, bytes]]]] = {}
        for tp in batches:
            by_topic.setdefault(tp.topic, []).append((tp.partition, payloads[tp]))
        correlation_id = next(self._correlation)
        req = encode_produce_request(acks=self.acks, timeout_ms=self.request_timeout_ms, client_id=self.client_id,
                                     correlation_id=correlation_id, topics=list(by_topic.items()))
        try:
            sent = self._connection(broker_id).send(req, correlation_id, batches, self.acks)
        except (grpc.RpcError, KeyError, TidelogError) as exc:
            sent = False
            log.debug("cannot reach broker %s: %s", broker_id, exc)
        if sent:
            self.stats.sent(batches.values(), sum(len(h) + len(r) for h, r in payloads.values()))
        if not sent:
            err = TidelogError(f"broker {broker_id} unreachable", code=ErrorCode.NETWORK_EXCEPTION)
            for b in batches.values():
                self._expire_or_retry(b, err, sent=False)
            return
        if self.acks == 0:
            for b in batches.values():
                b.result.complete(-1)
                self.accumulator.done(b)

    # -- responses (reader threads) ------------------------------------------------------------------------

    def _on_response(self, entry: InFlight, resp: pb.ProduceResponse) -> None:
        if entry.acks == 0:
            return
        self.stats.answered(time.monotonic() - entry.sent_at)
        seen: set[TopicPartition] = set()
        for t in resp.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                batch = entry.batches.get(tp)
                if batch is None:
                    continue
                seen.add(tp)
                if p.error_code == 0:
                    self._release(batch)
                    self.state.acknowledged(batch)
                    batch.result.complete(p.base_offset, p.log_append_time_ms)
                    self.accumulator.done(batch)
                else:
                    self._expire_or_retry(batch, error_for(p.error_code, p.error_message), refused=True)
        for tp, batch in entry.batches.items():
            if tp not in seen:
                self._expire_or_retry(batch, TidelogError("no response for partition", code=ErrorCode.NETWORK_EXCEPTION))

    def _on_failure(self, entry: InFlight, error: TidelogError) -> None:
        if entry.acks == 0:
            return
        for batch in entry.batches.values():
            self._expire_or_retry(batch, error)
