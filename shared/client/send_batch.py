"""``Producer.send_batch``: a column of records at a time (Arrow arrays or anything speaking the Arrow
PyCapsule interface, such as a Polars Series; numpy arrays or lists).

The rows are partitioned as ``Producer.send`` would partition them one by one: an explicit partition
(one for all rows, or one per row, None / -1 meaning "not given"), else Kafka's murmur2 of the key
(computed for the whole key column in numpy), else the sticky partition for rows with a null key (which
moves on after each batch, as it does when ``send()`` fills a batch). Each partition's rows are cut
into batches where ``send()`` would close one (``batch.size``), encoded vectorised
(``shared.records.columnar_encode``) and queued in the accumulator as closed batches, behind whatever
``send()`` queued for the partition before: the sender then treats them as any other batch (producer
id, epoch and sequence numbers assigned at its first send, compression, one CRC-32C per batch,
retries, ``max.request.size`` per request). A transactional producer's rows join the open
transaction, as ``send()``'s do.

The call returns one ``FutureRecordBatch`` per record batch, in the order queued; it resolves to a
``RecordBatchMetadata`` (topic, partition, base offset, record count, timestamp). ``future.rows`` holds
the batch's input row numbers, in offset order: row ``future.rows[i]`` has offset ``base_offset + i``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa

from shared.client.futures import ProduceRequestResult, RecordMetadata, ResultFuture
from shared.client.producer_batch import ProducerBatch, record_too_large
from shared.records.columnar_encode import (
    Column,
    arrow_input,
    as_binary_column,
    encode_header_column,
    encode_sections,
    lengths_of,
    murmur2_partitions,
    row_indices,
    section_builder,
    size_estimates,
    split_batches,
)
from shared.records.header import HEADER_SIZE
from shared.types import TopicPartition

if TYPE_CHECKING:
    from shared.client.producer import Producer


class RecordBatchMetadata(NamedTuple):
    """One record batch's acknowledgement: its records have offsets ``base_offset .. base_offset +
    record_count - 1``; ``timestamp`` is the broker's append time (LogAppendTime topics) or the batch's
    largest record timestamp. ``base_offset`` is -1 with acks=0."""

    topic: str
    partition: int
    base_offset: int
    record_count: int
    timestamp: int


class FutureRecordBatch(ResultFuture[RecordBatchMetadata]):
    """The future of one record batch ``send_batch`` queued: ``get()`` gives ``RecordBatchMetadata`` or
    raises the batch's error. ``rows``: the input row numbers of its records, in offset order."""

    __slots__ = ("rows", "record_count", "_max_timestamp")

    def __init__(self, result: ProduceRequestResult, rows: np.ndarray, max_timestamp: int) -> None:
        self._result = result
        self.rows = rows
        self.record_count = len(rows)
        self._max_timestamp = max_timestamp

    @property
    def topic_partition(self) -> TopicPartition:
        return self._result.tp

    def _value(self) -> RecordBatchMetadata:
        r = self._result
        if r.error is not None:
            raise r.error
        ts = r.log_append_time if r.log_append_time >= 0 else self._max_timestamp
        return RecordBatchMetadata(r.tp.topic, r.tp.partition, r.base_offset if r.base_offset >= 0 else -1,
                                   self.record_count, ts)

    def record_metadata(self, i: int, timestamp: int = -1) -> RecordMetadata:
        """The ``RecordMetadata`` of the batch's ``i``-th record (after ``get()``)."""
        md = self.get()
        return RecordMetadata(md.topic, md.partition, md.base_offset + i if md.base_offset >= 0 else -1,
                              md.timestamp if timestamp < 0 else timestamp)


def _timestamps(timestamps: Any, n: int) -> np.ndarray:
    now = int(time.time() * 1000)
    if timestamps is None:
        return np.full(n, now, dtype=np.int64)
    if isinstance(timestamps, int | np.integer):
        return np.full(n, int(timestamps), dtype=np.int64)
    timestamps = arrow_input(timestamps)
    if not isinstance(timestamps, pa.Array | np.ndarray):  # a list, a pandas Series: as Arrow reads it
        try:
            timestamps = pa.array(timestamps, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(f"timestamps must be times or int milliseconds: {exc}") from None
    if isinstance(timestamps, np.ndarray) and timestamps.dtype.kind == "f":
        timestamps = pa.array(timestamps, from_pandas=True)
    if isinstance(timestamps, pa.Array) and pa.types.is_floating(timestamps.type):
        try:  # whole milliseconds only (pandas gives floats for ints with a None)
            timestamps = timestamps.cast(pa.int64())
        except pa.ArrowInvalid:
            raise ValueError("timestamps must be whole milliseconds") from None
    if isinstance(timestamps, pa.Array):
        if pa.types.is_timestamp(timestamps.type):  # finer than milliseconds: cut to them
            timestamps = timestamps.cast(pa.timestamp("ms", timestamps.type.tz), safe=False)
        ts = np.asarray(timestamps.cast(pa.int64()).fill_null(now).to_numpy(zero_copy_only=False))
    elif isinstance(timestamps, np.ndarray) and timestamps.dtype.kind == "M":
        ts = timestamps.astype("datetime64[ms]").astype(np.int64)
    else:
        ts = np.asarray(timestamps, dtype=np.int64)
    if ts.ndim != 1 or len(ts) != n:
        raise ValueError(f"timestamps has {len(ts)} rows, values {n}")
    if n and ts.min() < 0:  # Kafka's ProducerRecord refuses it
        raise ValueError(f"Invalid timestamp: {int(ts.min())}. Timestamp should always be non-negative or null.")
    return ts.astype(np.int64, copy=False)


def _partitions_given(partition: Any, n: int) -> np.ndarray | int | None:
    """None (none given), one partition for every row, or one per row (-1: not given)."""
    if partition is None:
        return None
    if isinstance(partition, int | np.integer):
        return int(partition)
    partition = arrow_input(partition)
    if isinstance(partition, pa.Array) and pa.types.is_null(partition.type):  # all None (pandas): none given
        return None
    if isinstance(partition, pa.Array):
        p = np.asarray(partition.fill_null(-1).cast(pa.int64()).to_numpy(zero_copy_only=False))
    else:
        p = np.asarray([-1 if x is None else x for x in partition] if not isinstance(partition, np.ndarray)
                       else partition, dtype=np.int64)
    if p.ndim != 1 or len(p) != n:
        raise ValueError(f"partition has {len(p)} rows, values {n}")
    if (p < -1).any():
        raise ValueError(f"partition {int(p.min())} out of range")
    return p.astype(np.int64, copy=False)


def send_batch(producer: Producer, topic: str, values: Column, keys: Column | None = None,
               headers: Column | None = None, partition: Any = None, timestamps: Any = None) -> list[FutureRecordBatch]:
    """See the module docstring and ``Producer.send_batch``."""
    if producer._closing:
        raise RuntimeError("producer is closed")
    v = as_binary_column(values, "values")
    n = len(v)
    k = as_binary_column(keys, "keys") if keys is not None else None
    if k is not None and len(k) != n:
        raise ValueError(f"keys has {len(k)} rows, values {n}")
    if k is not None and k.null_count == n:
        k = None
    h, hlen = encode_header_column(headers, n) if headers is not None else (None, np.ones(n, dtype=np.int64))
    ts = _timestamps(timestamps, n)
    given = _partitions_given(partition, n)
    if n == 0:
        return []
    vlen = lengths_of(v)
    klen = lengths_of(k) if k is not None else np.full(n, -1, dtype=np.int64)
    est = size_estimates(klen, vlen, hlen)
    max_request_size = producer._sender.max_request_size
    too_big = np.flatnonzero(est > max_request_size)
    if len(too_big):
        raise record_too_large(int(est[too_big[0]]), max_request_size)

    tps = producer._topic_partitions.get(topic)
    if tps is None or len(tps) != producer._partition_counts.get(topic):
        tps = producer._load_topic(topic)
    num = len(tps)
    top = int(given.max()) if isinstance(given, np.ndarray) else given
    if top is not None and top >= num:
        tps = producer._wait_for_partition(topic, top)
        num = len(tps)
    if isinstance(given, int):
        if given < 0:
            raise ValueError(f"partition {given} out of range for {topic}")
        parts = np.full(n, given, dtype=np.int64)
    else:
        parts = given.copy() if given is not None else np.full(n, -1, dtype=np.int64)
        if k is not None:
            todo = parts < 0
            if todo.any():
                hashed = murmur2_partitions(k, num)  # -1 for null keys
                parts[todo] = hashed[todo]
    batch_size = producer.accumulator.batch_size
    sticky = np.flatnonzero(parts < 0)  # null keys, no partition: the sticky partitioner, batch by batch
    if len(sticky):
        runs = split_batches(est[sticky], batch_size)
        ends = np.append(runs[1:], len(sticky))
        for s, e in zip(runs.tolist(), ends.tolist(), strict=True):
            p = producer.partitioner.partition(topic, None, num)
            parts[sticky[s:e]] = p
            producer.partitioner.on_new_batch(topic, p, num)

    # Group the rows by partition (stable: each partition's rows keep their order).
    if num == 1 or (parts == parts[0]).all():
        groups = [(int(parts[0]), np.arange(n, dtype=np.int64))]
    else:
        order = np.argsort(parts, kind="stable")
        sp = parts[order]
        cuts = np.flatnonzero(np.diff(sp)) + 1
        groups = [(int(sp[idx[0]]), order[idx[0]:idx[-1] + 1]) for idx in np.split(np.arange(n), cuts)]
    txn = producer._txn
    if txn is not None:  # every partition joins the transaction before anything is queued
        for p, _ in groups:
            txn.maybe_add_partition(tps[p])

    futures: list[FutureRecordBatch] = []
    compression = producer._sender.compression
    for p, rows in groups:
        tp = tps[p]
        whole = len(rows) == n
        gv = v if whole else v.take(row_indices(rows))
        gk = k if k is None or whole else k.take(row_indices(rows))
        gh = h if h is None or whole else h.take(row_indices(rows))
        gts = ts if whole else ts[rows]
        starts = split_batches(est if whole else est[rows], batch_size)
        sections = encode_sections(gv, gk, gts, starts, gh, value_lengths=vlen if whole else vlen[rows],
                                   key_lengths=None if k is None else (klen if whole else klen[rows]),
                                   header_lengths=hlen if whole else hlen[rows])
        ends = np.append(starts[1:], len(rows))
        now = time.monotonic()
        batches = []
        for sec, s, e in zip(sections, starts.tolist(), ends.tolist(), strict=True):
            b = ProducerBatch(tp, now, records=section_builder(sec, compression))
            b.size = HEADER_SIZE + len(sec.body)
            b.sealed = True
            batches.append(b)
            futures.append(FutureRecordBatch(b.result, rows[s:e], sec.max_timestamp))
        _enqueue(producer, tp, batches)
    return futures


def _enqueue(producer: Producer, tp: TopicPartition, batches: list[ProducerBatch]) -> None:
    """Queue closed batches for ``tp`` behind what ``send()`` queued before (its open batch is closed:
    later records go into a new batch, after these)."""
    acc = producer.accumulator
    for b in batches:
        if acc.buffered > acc.buffer_memory:
            acc.wait_for_space(producer.max_block_s)
        with acc.lock:
            last = acc.open.get(tp)
            if last is not None and not last.sealed:
                last.close()
            dq = acc.batches.get(tp)
            if dq is None:
                dq = acc.batches[tp] = deque()
            dq.append(b)
            acc.open[tp] = b
            acc.incomplete.add(b.result)
            acc.buffered += b.size - HEADER_SIZE
        acc.wakeup.set()
