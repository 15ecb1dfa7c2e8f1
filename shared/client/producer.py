"""The producer: ``Producer``, the public API (Kafka's ``KafkaProducer``).

``send()`` only appends to the accumulator (inline: it runs once per record) and returns a future; the
sender thread drains ready batches, encodes them (RecordBatch v2), groups them by partition leader and
writes them on one ``ProduceStream`` per broker with up to ``max_in_flight_requests_per_connection``
requests outstanding. Retriable errors refresh metadata and re-enqueue the batch (in order, at the front).

The parts, one module each:
- ``shared.client.producer_batch``: ``ProducerBatch``, one partition's batch of records;
- ``shared.client.accumulator``: ``RecordAccumulator``, the per-partition queues of batches;
- ``shared.client.sender``: ``Sender``, the sender thread (drain, encode, send, handle answers);
- ``shared.client.produce_connection``: ``ProduceConnection``, one pipelined stream to a broker;
- ``shared.client.retry_policy``: ``RetryPolicy``, retries, backoff and delivery timeout;
- ``shared.client.idempotence``: ``IdempotenceState``, producer id, epoch and sequence numbers (the
  sender knows it only as ``ProducerState``);
- ``shared.client.transactions``: ``TransactionManager``, which takes ``IdempotenceState``'s place for a
  producer with a ``transactional_id`` (``init_transactions``, ``begin_transaction``,
  ``send_offsets_to_transaction``, ``commit_transaction``, ``abort_transaction``; errors classified as
  KIP-1050 does: see that module).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from shared.client.accumulator import RecordAccumulator
from shared.client.client_metrics import ProducerStats
from shared.client.cluster import ClusterClient
from shared.client.futures import FutureRecordMetadata, KafkaTimeoutError, new_future
from shared.client.idempotence import IdempotenceState
from shared.client.partitioner import MURMUR2_SEED, StickyPartitioner, murmurhash2
from shared.client.produce_connection import InFlight, ProduceConnection
from shared.client.producer_batch import ProducerBatch, record_too_large
from shared.client.retry_policy import RetryPolicy
from shared.client.security import client_security
from shared.client.sender import Sender
from shared.client.transactions import (
    ConsumerGroupMetadata,
    IllegalTransactionStateError,
    TransactionHandle,
    TransactionManager,
    TxnState,
)
from shared.records.builder import COMPILED_DELTA_LIMIT, compiled_append, encode_headers
from shared.records.compression import CompressionType
from shared.records.header import HEADER_SIZE
from shared.records.record import Header
from shared.records.varint import MINUS_ONE, ZIGZAG, encode_zigzag
from shared.runtime import tune_allocator, tune_gc, tune_switch_interval
from shared.types import TopicPartition

_IN_TRANSACTION = TxnState.IN_TRANSACTION

if TYPE_CHECKING:
    from shared.client.send_batch import FutureRecordBatch

# Names that lived here before the split, for code that imports them from this module.
__all__ = ["InFlight", "ProduceConnection", "Producer", "ProducerBatch", "RecordAccumulator"]

_time_ns = time.time_ns  # now in ms as time_ns() // 1_000_000: a third cheaper than int(time() * 1000)
_ZERO = ZIGZAG[0]
_ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}


class _SenderSetting:
    """A producer setting read by the sender thread (``owner="sender"``) or its retry policy
    (``owner="retry"``) while it runs. Stored there alone, so that setting it on the producer (as tests
    do with ``delivery_timeout_s``) still takes effect, as when the producer held it."""

    def __init__(self, owner: str, *, writable: bool = True) -> None:
        self.owner = owner
        self.writable = writable
        self.name = ""

    def __set_name__(self, cls: type, name: str) -> None:
        self.name = name

    def _target(self, producer: Producer) -> object:
        sender = producer._sender
        return sender.retry if self.owner == "retry" else sender

    def __get__(self, producer: Producer | None, cls: type | None = None) -> Any:
        if producer is None:
            return self
        return getattr(self._target(producer), self.name)

    def __set__(self, producer: Producer, value: object) -> None:
        if not self.writable:
            raise AttributeError(f"{self.name} is fixed when the producer is created")
        setattr(self._target(producer), self.name, value)


class Producer:
    """Kafka-style producer. ``send()`` is thread-safe and returns a future of ``RecordMetadata``."""

    # Settings the sender and the retry policy own (none is read by send()).
    acks = _SenderSetting("sender")
    idempotent = _SenderSetting("sender", writable=False)  # the retry policy holds it too
    compression = _SenderSetting("sender")
    max_in_flight = _SenderSetting("sender")
    max_request_size = _SenderSetting("sender")
    request_timeout_ms = _SenderSetting("sender")
    client_id = _SenderSetting("sender")
    retries = _SenderSetting("retry")
    retry_backoff_s = _SenderSetting("retry")
    delivery_timeout_s = _SenderSetting("retry")

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
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        transaction_version: int = 2,
        security_protocol: str = "PLAINTEXT",
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
    ) -> None:
        if acks not in _ACKS:
            raise ValueError(f"acks must be 'all', -1, 0 or 1, got {acks!r}")
        if transactional_id:  # Kafka: a transactional id implies idempotence, which requires acks=all
            if enable_idempotence is False:
                raise ValueError("a transactional_id requires idempotence (enable_idempotence must not be False)")
            if _ACKS[acks] != -1:
                raise ValueError("a transactional_id requires acks='all' (as in Kafka)")
            enable_idempotence = True
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
        acks = _ACKS[acks]
        # Kafka's default: idempotence on, unless acks was set to something other than all.
        idempotent = acks == -1 if enable_idempotence is None else enable_idempotence
        # Producer id, sequence numbers and in-flight counts: one object, one lock (the sender thread and
        # the reader threads all update them). The sender and the retry policy know it as a
        # ``ProducerState``: a transaction manager will take its place there.
        self.batch_size = batch_size
        self.max_block_s = max_block_ms / 1000
        # kafka-python's security settings (PLAINTEXT: None, the plain channels as always)
        security = client_security(security_protocol, sasl_mechanism, sasl_plain_username, sasl_plain_password,
                                   ssl_cafile, ssl_certfile, ssl_keyfile)
        self.cluster = ClusterClient(bootstrap_servers, client_id, request_timeout_ms, security=security)
        self._txn: TransactionManager | None = None
        if transactional_id:
            self._txn = TransactionManager(
                self.cluster, transactional_id, transaction_timeout_ms=transaction_timeout_ms,
                transaction_version=transaction_version, max_block_s=self.max_block_s,
                retry_backoff_s=retry_backoff_ms / 1000)
        self.state: IdempotenceState = self._txn if self._txn is not None else IdempotenceState()
        self.accumulator = RecordAccumulator(batch_size, linger_ms / 1000, max(buffer_memory, batch_size))
        self.partitioner = StickyPartitioner()
        self._partition_counts: dict[str, int] = {}
        self._topic_partitions: dict[str, list[TopicPartition]] = {}  # by topic, indexed by partition
        self.stats = ProducerStats()
        self._closing = False
        retry = RetryPolicy(retries=retries, retry_backoff_s=retry_backoff_ms / 1000,
                            delivery_timeout_s=delivery_timeout_ms / 1000, idempotent=idempotent, state=self.state)
        self._sender = Sender(
            cluster=self.cluster, accumulator=self.accumulator, state=self.state, retry=retry, stats=self.stats,
            partition_counts=self._partition_counts, acks=acks, idempotent=idempotent,
            compression=CompressionType.parse(compression_type), max_in_flight=max_in_flight_requests_per_connection,
            max_request_size=max(max_request_size, batch_size), request_timeout_ms=request_timeout_ms,
            client_id=client_id, transactional_id=transactional_id, transaction_version=transaction_version)
        self._sender.start()

    # -- application API ---------------------------------------------------------------------------

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int | None = None,
             headers: Sequence[Header] | None = None, timestamp: int | None = None) -> FutureRecordMetadata:
        """Queue a record; the future resolves to its ``RecordMetadata`` once acknowledged (per ``acks``).

        The hot path (see ``scripts/bench/send_micro.py``): a record without headers appended to an open
        batch is encoded here, inline (the builder's ``append`` is called for the first record of a
        batch, for headers and for the cleaner's gapped batches), every varint from the table; the topic's
        partitions come from one dict lookup."""
        if self._closing:
            raise RuntimeError("producer is closed")
        if value is None:
            vlen = 0
        else:
            if type(value) is not bytes:
                if not isinstance(value, bytes | bytearray | memoryview):
                    raise TypeError(f"value must be bytes or None, got {type(value).__name__}")
                value = bytes(value)
            vlen = len(value)
        if key is None:
            klen = 0
        else:
            if type(key) is not bytes:
                if not isinstance(key, bytes | bytearray | memoryview):
                    raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
                key = bytes(key)
            klen = len(key)
        tps = self._topic_partitions.get(topic)
        if tps is None or len(tps) != self._partition_counts.get(topic):
            tps = self._load_topic(topic)
        n = len(tps)
        if partition is None:
            if key is None:
                partition = self.partitioner.partition(topic, None, n)
            else:  # Kafka's default partitioner (one partition: skip the hash)
                partition = (murmurhash2(key, MURMUR2_SEED) & 0x7FFFFFFF) % n if n > 1 else 0
        elif not 0 <= partition < n:
            tps = self._wait_for_partition(topic, partition)
        tp = tps[partition]
        txn = self._txn
        # outside a transaction: IllegalTransactionStateError (V1: add the partition); not called per record
        # once the partition is in the open transaction (it would return at once: a call per record cost 8 %)
        if txn is not None and (txn.state is not _IN_TRANSACTION or tp not in txn.partitions):
            txn.maybe_add_partition(tp)
        if timestamp is None:
            timestamp = _time_ns() // 1_000_000
        elif timestamp < 0:  # Kafka's ProducerRecord refuses it
            raise ValueError(f"Invalid timestamp: {timestamp}. Timestamp should always be non-negative or null.")
        # An upper bound of the record's size, as Kafka estimates. Headers are encoded here, before the
        # accumulator is touched: bad headers fail this call and nothing else.
        if headers:
            hb = encode_headers(headers)
            size = 21 + len(hb) + klen + vlen
        else:
            hb = None
            size = 22 + klen + vlen
        acc = self.accumulator
        if size > acc.batch_size and size > self._sender.max_request_size:
            raise record_too_large(size, self._sender.max_request_size)
        if acc.buffered > acc.buffer_memory:
            acc.wait_for_space(self.max_block_s)
        # The accumulator's append, inline: this runs once per record. The lock is taken by hand: a
        # `with` block looks up and calls __enter__/__exit__, ~0.2 µs more per record here (py-spy: a
        # quarter of send()'s own time sat on the `with` line).
        lock = acc.lock
        lock.acquire()
        try:
            batch = acc.open.get(tp)
            new = (batch is None or batch.sealed
                   or (batch.size + size > acc.batch_size and batch.size > HEADER_SIZE))
            if new:
                if batch is not None and not batch.sealed:
                    batch.close()  # full: join it here, where its records are still in this CPU's cache
                batch = acc.new_batch(tp)
            b = batch.records
            i = b.count
            if i and hb is None and not b.gapped:  # BatchBuilder.append's plain case, inline
                td = timestamp - b.base_ts
                if timestamp > b.max_ts:
                    b.max_ts = timestamp
                # the compiled encoder where built (the same bytes: key and value are exactly bytes here)
                if compiled_append is None or not -COMPILED_DELTA_LIMIT < td < COMPILED_DELTA_LIMIT or not compiled_append(
                        b.parts, i, td, key, value, _ZERO):
                    tdb = ZIGZAG[td] if 0 <= td < 65536 else encode_zigzag(td)
                    odb = ZIGZAG[i] if i < 65536 else encode_zigzag(i)
                    vb = MINUS_ONE if value is None else ZIGZAG[vlen] if vlen < 65536 else encode_zigzag(vlen)
                    kb = MINUS_ONE if key is None else ZIGZAG[klen] if klen < 65536 else encode_zigzag(klen)
                    body_len = 2 + len(tdb) + len(odb) + len(kb) + klen + len(vb) + vlen
                    b.parts.extend((ZIGZAG[body_len] if body_len < 65536 else encode_zigzag(body_len), _ZERO, tdb,
                                    odb, kb, key or b"", vb, value or b"", _ZERO))
                b.count = i + 1
            else:
                i = b.append(value, key, timestamp, hb)
            batch.size += size
            acc.buffered += size
        finally:
            lock.release()
        if new:
            # A new batch (or a full previous one): the sender may be sleeping past this batch's linger.
            acc.wakeup.set()
            if key is None:  # the sticky partition moves on when its batch is full
                self.partitioner.on_new_batch(topic, partition, n)
        return new_future(batch.result, i, timestamp)

    def send_batch(self, topic: str, values: Any, keys: Any = None, headers: Any = None, partition: Any = None,
                   timestamps: Any = None) -> list[FutureRecordBatch]:
        """Queue a column of records (Arrow binary/string arrays, Arrow PyCapsule columns such as a Polars
        Series, numpy arrays or lists; ``keys``, ``headers``, ``partition`` and ``timestamps`` per row, or
        None) as vectorised record batches: the same bytes, partitions, batches, sequence numbers and
        transaction as ``send()`` of each row. One
        ``FutureRecordBatch`` per record batch (resolving to ``RecordBatchMetadata``: topic, partition,
        base offset, record count, timestamp; ``future.rows`` are its input rows in offset order).
        See ``shared.client.send_batch``."""
        from shared.client.send_batch import send_batch  # numpy and pyarrow: imported on first use

        return send_batch(self, topic, values, keys, headers, partition, timestamps)

    # -- transactions (see shared.client.transactions) ------------------------------------------------

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalTransactionStateError("transactional method called on a producer without transactional_id")
        if self._closing:
            raise RuntimeError("producer is closed")
        return self._txn

    def init_transactions(self) -> None:
        """Register the transactional id: fences earlier producers with it and completes or aborts their
        open transaction. Call once, before the first ``begin_transaction()``."""
        self._transactions().init_transactions()

    def begin_transaction(self) -> None:
        self._transactions().begin_transaction()

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int],
                                    group_metadata: ConsumerGroupMetadata) -> None:
        """Commit the consumer's ``offsets`` (the next offsets to read) with this transaction;
        ``group_metadata`` is ``consumer.group_metadata()`` (a zombie member's commit is refused)."""
        self._transactions().send_offsets_to_transaction(offsets, group_metadata)

    def commit_transaction(self) -> None:
        """Flush, then commit. ``TransactionAbortableError``: call ``abort_transaction()``."""
        self._transactions().commit_transaction(self.flush)

    def abort_transaction(self) -> None:
        """Drop the records not yet sent, wait for those in flight, then abort."""
        self._transactions().abort_transaction(self._sender.abort_unsent, self.flush)

    def transaction_handle(self) -> TransactionHandle:
        """Flush, then the open transaction's (transactional id, producer id, epoch, transaction version),
        for another process to end it with EndTxn instead of ``commit_transaction()`` (a two-phase commit:
        the Spark sink's tasks hand theirs to the driver). ``TransactionAbortableError``: a batch failed."""
        return self._transactions().handle(self.flush)

    @property
    def transaction_state(self) -> str | None:
        """The transaction manager's state (Kafka's names), None for a producer without transactions."""
        return None if self._txn is None else self._txn.state.name

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
            self._sender.close()
            if self._txn is not None:
                self._txn.close()
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

    @property
    def throttled_responses(self) -> int:
        """Responses that carried a throttle_time_ms (Kafka's produce-throttle-time)."""
        return self._sender.throttled_responses

    @property
    def throttle_time_ms_max(self) -> int:
        return self._sender.throttle_time_ms_max
